#!/usr/bin/env python3
"""Upper bounds on tokens per pass for any lookup drafter (a benchmark aid, not a test).

At temperature 0 the text is fixed, so how far a draft could be accepted at each pass depends only
on the text. For the greedy outputs in a bench_spec.py --json-out file (the `none` runs) this
prints, per category, two bounds at a given depth cap and no node budget:

  copy   the best single earlier occurrence of the last token: the longest run of the answer that
         some earlier continuation in the prompt or the text so far reproduces (what any
         prompt-lookup / suffix drafter proposing one chain per occurrence can reach);
  graph  every step follows a bigram seen before (in the context or earlier in the same draft):
         no drafter built from the context's own transitions, trees of any size, can do better;

next to the measured tokens per pass of the ngram runs in the same file, when present. If a
target above the bound is asked of n-gram drafting on some prompts, the drafter is not the limit.

Usage: bench/ngram_bound.py RESULTS.json [--depth 16]
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics


def passes(prompt: list[int], gen: list[int], depth: int, accept_run) -> int:
    """Forward passes to emit `gen`: each pass emits the accepted run plus one token."""
    i, n = 0, 0
    while i < len(gen):
        ctx = prompt + gen[: i + 1]
        n += 1
        i += accept_run(ctx, gen[i + 1 : i + 1 + depth]) + 1
    return n


def copy_run(ctx: list[int], truth: list[int]) -> int:
    last, best = len(ctx) - 1, 0
    for e in range(last):
        if ctx[e] != ctx[last]:
            continue
        k = 0
        while k < len(truth) and e + 1 + k <= last and ctx[e + 1 + k] == truth[k]:
            k += 1
        best = max(best, k)
    return best


def graph_run(ctx: list[int], truth: list[int]) -> int:
    seen = set(zip(ctx, ctx[1:]))
    prev, k = ctx[-1], 0
    for t in truth:
        if (prev, t) not in seen:
            break
        seen.add((prev, t))
        prev, k = t, k + 1
    return k


def first(r):
    return r[0] if isinstance(r, list) else r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results")
    ap.add_argument("--depth", type=int, default=16)
    args = ap.parse_args()
    salvo = json.load(open(args.results))["salvo"]
    rows = collections.defaultdict(lambda: collections.defaultdict(list))
    for pid, r in salvo["none"].items():
        r = first(r)
        cat = pid.rsplit("-", 1)[0]
        prompt, gen = r["prompt_tokens"], r["tokens"]
        for name, run in (("copy", copy_run), ("graph", graph_run)):
            rows[cat][name].append(len(gen) / passes(prompt, gen, args.depth, run))
        if "ngram" in salvo and pid in salvo["ngram"]:
            rows[cat]["ngram"].append(first(salvo["ngram"][pid])["tokens_per_pass"])
    print(f"tokens per pass, median over prompts (depth cap {args.depth}, no node budget)\n")
    print("| category | n | ngram measured | copy bound | graph bound |")
    print("|---|---|---|---|---|")
    for cat, r in rows.items():
        med = {k: statistics.median(v) if v else None for k, v in r.items()}
        fmt = lambda x: "-" if x is None else f"{x:.2f}"  # noqa: E731
        print(f"| {cat} | {len(r['copy'])} | {fmt(med.get('ngram'))} | {fmt(med['copy'])} | "
              f"{fmt(med['graph'])} |")


if __name__ == "__main__":
    main()
