"""How a run spends its time: the order and batches of generation, and the drafter's minutes under
train.py --total-minutes.

No torch here, so the tests run it on any machine (tests/python/test_dflash_budget.py).
"""

import math
import random


def generation_order(lens, chunk, seed):
    """Prompt indices by length (lens[i]: prompt i's tokens), so a batch's rows share a length.
    chunk > 0: in random chunks of `chunk` prompts, each by length, so that a deadline that stops
    generation leaves a random subset undone rather than the longest prompts."""
    by_len = lambda idx: sorted(idx, key=lambda i: (lens[i], i))
    if chunk <= 0:
        return by_len(range(len(lens)))
    idx = list(range(len(lens)))
    random.Random(seed).shuffle(idx)
    return [i for c in range(0, len(idx), chunk) for i in by_len(idx[c:c + chunk])]


def generation_batches(order, lens, batch, tokens, max_new):
    """The batches of `order` (generation_order's), as [start, end) into it: at most `batch` rows
    and, when tokens > 0, at most `tokens` KV positions (rows x (longest prompt + max_new)) and
    tokens/4 prefill positions (rows x longest prompt), so long prompts get fewer rows. A batch
    ends where the lengths drop (the next chunk's short prompts go with each other)."""
    out, s = [], 0
    while s < len(order):
        e = s + 1
        while e < len(order) and e - s < batch:
            P = lens[order[e]]
            if P < lens[order[e - 1]]:
                break
            if tokens and ((e - s + 1) * (P + max_new) > tokens or (e - s + 1) * P > tokens // 4):
                break
            e += 1
        out.append((s, e))
        s = e
    return out


def budget_minutes(total, reserve, minutes, adapter_minutes, elapsed_s, shard_s, n_shards, passes,
                   shards_per_pass=False):
    """--total-minutes: the drafter's and the adapter's minutes (train_phase's caps) from what
    `total` has left after `elapsed_s` (loading, generation, the first shard's features, `shard_s`
    of them). The other shards' features are loaded once each (every pass with --shards-per-pass)
    and cost what the first did; `reserve` is kept for the adapter, the evaluation and the export:
    the adapter gets all but half a minute of it (the evaluation's trees run in a pool since
    session 54: ~15 s), a third at least. `minutes` and `adapter_minutes`, where above 0, cap these too. The
    drafter gets half a minute at least. Returns (drafter, adapter, left): left below 0.5 means the
    run ends past `total`."""
    loads = max(0, math.ceil(passes) * n_shards - 1) if shards_per_pass else n_shards - 1
    left = total - elapsed_s / 60 - loads * shard_s / 60 - reserve
    cap = lambda given, budget: min(given, budget) if given > 0 else budget
    return cap(minutes, max(0.5, left)), cap(adapter_minutes, max(reserve / 3, reserve - 0.5)), left


def schedule_fraction(step, total, busy, stall, budget_s):
    """The cosine schedule's fraction: of the planned steps, or of the stepping budget (budget_s
    seconds, 0: none) when time runs out first. `stall` is the part of `busy` that went to steps
    which took seconds (torch.compile's first shapes: ~50 s in session 50's run), so the schedule
    runs over the time that steps, and its deadline stays where the budget put it."""
    frac = step / total
    if budget_s > 0:
        frac = 1.0 if busy >= budget_s else max(frac, (busy - stall) / (budget_s - stall))
    return frac
