"""Held-out acceptance of a drafter against the target's own greedy output (= the data).

tau = 1 + accepted draft tokens per target pass. Chain: the greedy draft, accepted = matching prefix.
Trees: best-first over path log-probabilities with top_k children per node, budgets of 8/16/32/64
nodes; accepted = deepest tree node on the data's path. Without adapter a node's children are scored
by the depth's marginal log-probs; with it the top_k marginal candidates are rescored given the
node's token (adapted logits, renormalized over the top_k and scaled to the marginal top_k mass).
"""

import heapq
import multiprocessing
import os

import torch

from features import compute_features

BUDGETS = (8, 16, 32, 64)


def best_first(lp_fn, labels, depth_max, k, budget):
    """Pops nodes best-first; returns the deepest on-path node depth after each of `budget` pops."""
    heap = [(-lp_fn(1, -1, c), 1, c, True, lp_fn(1, -1, c)) for c in range(k)]
    heapq.heapify(heap)
    best, out = 0, []
    cand_tok = lp_fn.tokens
    while len(out) < budget and heap:
        neg, dep, c, parent_on, score = heapq.heappop(heap)
        on = parent_on and cand_tok[dep - 1][c] == labels[dep - 1]
        if on:
            best = max(best, dep)
        out.append(best)
        if dep < depth_max:
            for c2 in range(k):
                s2 = score + lp_fn(dep + 1, c, c2)
                heapq.heappush(heap, (-s2, dep + 1, c2, on, s2))
    while len(out) < budget:
        out.append(best)
    return out


class Table:
    def __init__(self, tokens, lp, alp=None):
        self.tokens, self.lp, self.alp = tokens, lp, alp

    def __call__(self, dep, parent_c, c):
        if self.alp is None:
            return self.lp[dep - 1][c]
        return self.alp[dep - 1][max(parent_c, 0)][c]


def anchor_results(job):
    """Per anchor of one sequence: the draft tokens each builder gets accepted. Pure Python on
    lists, so that a pool of processes can share the work."""
    ttok_l, tlp_l, alp_l, labels_all, B, k = job
    acc = []
    for a, lab in enumerate(labels_all):
        n = 0
        while n < B - 1 and ttok_l[a][n][0] == lab[n]:
            n += 1
        got = {"chain": n}
        for name, tab in (("", Table(ttok_l[a], tlp_l[a])), ("_adapter", Table(ttok_l[a], tlp_l[a], alp_l[a]))):
            res = best_first(tab, lab, B - 1, k, max(BUDGETS))
            for b in BUDGETS:
                got[f"tree{b}{name}"] = res[b - 1]
        acc.append(got)
    return acc


_JOBS = []  # the pool's input: forked workers read it from the parent's memory, nothing is pickled


def _job(i):
    return anchor_results(_JOBS[i])


def pooled(jobs, workers=16, timeout=120):
    """anchor_results of every job, in forked processes where cores are free. The trees are pure
    Python: most of session 54's 70 s of evaluation ran on one core of sixteen. The workers are
    forked from a process that holds CUDA and torch's threads: should one hang on a lock taken
    at the fork, the pool is ended after `timeout` seconds (one process takes ~50) and one
    process does the work, so a window's run still ends."""
    n = min(len(jobs), os.cpu_count() or 1, workers)
    if n > 1 and "fork" in multiprocessing.get_all_start_methods():
        global _JOBS
        _JOBS = jobs
        try:
            with multiprocessing.get_context("fork").Pool(n) as pool:  # its exit terminates the workers
                return pool.map_async(_job, range(len(jobs)), chunksize=max(1, len(jobs) // (4 * n))).get(timeout)
        except Exception as e:  # noqa: BLE001 -- the pool is an optimisation: one core still does it
            print(f"evaluate: the pool failed ({type(e).__name__}: {e}); one process", flush=True)
        finally:
            _JOBS = []
    return [anchor_results(job) for job in jobs]


@torch.no_grad()
def evaluate(tg, d, cfg, seqs, plens, cats, layers, dev, stride=3, k=8, walk=False):
    """Mean tau per category and builder over anchors every `stride` positions of the generated
    part. With walk (stride 1): tau as decoding sees it, a walk from the prompt's end that jumps
    past what each pass accepts, so only the positions a decoder visits count (those after a
    rejection are harder than the average anchor, so this is the lower, truer figure)."""
    B = cfg["block_size"]
    stride = 1 if walk else stride
    stats = {}
    embd, lm_head = tg.embd.float(), tg.lm_head.float()
    keys = ["chain"] + [f"tree{b}" for b in BUDGETS] + [f"tree{b}_adapter" for b in BUDGETS]
    jobs = []  # per sequence: its category and anchor_results' input
    for s, P, cat in zip(seqs, plens, cats):
        anchors = list(range(P, len(s) - B + 1, stride))
        if not anchors:
            continue
        f = compute_features(tg, [s], layers, 1, dev).float()
        ids = torch.tensor([s], device=dev)
        a_t = torch.tensor([anchors], device=dev)
        d32 = d.float()
        y = d32.train_forward(f, ids, a_t, embd)[0]  # [A,B,E]
        h = y[:, 1:]
        logits = h @ lm_head.T
        lp = torch.log_softmax(logits, -1)
        tlp, ttok = lp.topk(k, -1)  # [A,B-1,k]
        # adapter: prevs per depth: root for depth 1, the depth-1 candidates for deeper ones
        roots = ids[0, a_t[0]]
        prev = torch.cat([roots[:, None, None].expand(-1, 1, k), ttok[:, :-1]], 1)  # [A,B-1,k]
        u = d32.adapt(h[:, :, None], embd[prev])  # [A,B-1,k,E]
        cand = lm_head[ttok]  # [A,B-1,k,E]
        al = torch.einsum("adpe,adce->adpc", u, cand)
        mass = torch.logsumexp(tlp, -1)[:, :, None, None]
        alp = torch.log_softmax(al, -1) + mass
        labels_all = [s[p + 1:p + B] for p in anchors]
        jobs.append((cat, (ttok.tolist(), tlp.tolist(), alp.tolist(), labels_all, B, k)))
    for (cat, _), acc in zip(jobs, pooled([job for _, job in jobs])):
        st = stats.setdefault(cat, {"n": 0, **{key: 0.0 for key in keys},
                                    **({"passes_" + key: 0 for key in keys} if walk else {})})
        if not walk:
            st["n"] += len(acc)
            for got in acc:
                for key in keys:
                    st[key] += 1 + got[key]
            continue
        # per builder: passes and tokens of the walk (tau = tokens / passes, pooled over sequences)
        st["n"] += 1
        for key in keys:
            a = 0
            while a < len(acc):
                st[key] += 1 + acc[a][key]
                st["passes_" + key] += 1
                a += 1 + acc[a][key]
    total = {"n": 0}
    for cat, st in stats.items():
        n = st["n"]
        for key in keys:
            total[key] = total.get(key, 0.0) + st[key]
            if walk:
                total["passes_" + key] = total.get("passes_" + key, 0) + st["passes_" + key]
                st[key] = round(st[key] / st.pop("passes_" + key), 3)
            else:
                st[key] = round(st[key] / n, 3)
        total["n"] += n
    for key in keys if total["n"] else ():  # no sequence long enough for an anchor: nothing to pool
        total[key] = round(total[key] / (total.pop("passes_" + key) if walk else total["n"]), 3)
    stats["all"] = total
    return stats
