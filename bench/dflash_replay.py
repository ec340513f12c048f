#!/usr/bin/env python3
"""Offline replay of DFlash tree construction (a study tool, not a test).

In greedy decoding the text does not depend on the trees, so the tokens a pass that a tree
policy reaches can be found without the target: tests/tools/dflash_replay_dump writes what the
drafter proposes at every position of known texts (each depth's K best candidates, their
log-probabilities and the adapter's scores for every candidate parent), and this script builds
the trees from them as src/speculative/dflash_tree.cc and dflash_drafter.cc do, walks each tree
against the text, and moves to the next root as a real run would.

  build/release/salvo run --model M --prompts-file P --json --temperature 0 -n 192 ... > texts.jsonl
  python3 bench/dflash_replay.py sequences texts.jsonl > seqs.txt
  build/release/tests/dflash_replay_dump M DRAFTER seqs.txt dump.bin 16
  python3 bench/dflash_replay.py replay dump.bin texts.jsonl --prompts ../shared/bench/prompts.jsonl \
      --budgets 7 16 32 64 [--tree adapter|best|chain] [--boost 2.0] [--joined -1.0] ...

Prints tokens a pass (the median over each category's texts, as bench_spec reports) per budget.
"""
from __future__ import annotations

import argparse
import heapq
import json
import math
import statistics
import sys

import numpy as np


def read_texts(path):
    texts = []
    for line in open(path):
        line = line.strip()
        if line.startswith("{"):
            r = json.loads(line)
            texts.append((list(r["prompt_tokens"]), list(r["tokens"]), r))
    return texts


def cmd_sequences(args):
    for prompt, answer, _ in read_texts(args.texts):
        print(len(prompt), *prompt, *answer)


def read_dump(path):
    raw = np.fromfile(path, dtype=np.int32)
    D, K, has_adapter, budget = (int(x) for x in raw[:4])
    h = 4  # a position's [text, p, root, depth reached in the engine's tree]
    rec = h + 2 * D * K + D * K * K
    body = raw[4:]
    n = body.size // rec
    body = body[: n * rec].reshape(n, rec)
    head = body[:, :h]
    toks = body[:, h:h + D * K].reshape(n, D, K)
    lps = body[:, h + D * K:h + 2 * D * K].copy().view(np.float32).reshape(n, D, K)
    ad = body[:, h + 2 * D * K:].copy().view(np.float32).reshape(n, D, K, K)
    return D, K, bool(has_adapter), budget, head, toks, lps, ad


class Ngrams:
    """The context's n-grams (NgramIndex, which holds 3 and 4): n-gram -> end indices, ascending."""

    def __init__(self, ids):
        self.ids = ids
        self.ends = {}
        for n in range(1, 9):
            for e in range(n - 1, len(ids)):
                self.ends.setdefault(tuple(ids[e - n + 1:e + 1]), []).append(e)

    def next_tokens(self, p, path, max_n=4, min_n=3, max_occ=32, with_n=False):
        """context_next: the context is ids[:p + 1]. with_n: also the n-gram length matched."""
        n_ctx = p + 1
        have = min(max_n, n_ctx + len(path))
        seq = list(self.ids[max(0, n_ctx - have):n_ctx]) + list(path)
        suffix = seq[-have:]
        last = n_ctx - 1
        out = []
        for n in range(have, min_n - 1, -1):
            if out:
                break
            ends = self.ends.get(tuple(suffix[have - n:]))
            if not ends:
                continue
            looked = 0
            for e in reversed(ends):
                if e >= last:
                    continue
                if looked >= max_occ:
                    break
                looked += 1
                t = self.ids[e + 1]
                if t not in out:
                    out.append(t)
            if out and with_n:
                return out, n
        return (out, 0) if with_n else out


def sort_best_first(tokens, lps):
    order = sorted(range(len(tokens)), key=lambda i: -lps[i])  # stable
    return [tokens[i] for i in order], [lps[i] for i in order]


def width_for(cfg, budget):
    """Candidates a depth: --width, else DflashDrafter's (the adapter's top_k, WIDE_CANDIDATES for
    adapter trees of LARGE_TREE nodes or more, at most 8 siblings for best-first trees)."""
    if cfg.width is not None:
        return cfg.width
    if cfg.tree == "adapter":
        return WIDE_CANDIDATES if budget >= LARGE_TREE else ADAPTER_TOP_K
    return min(budget, ADAPTER_TOP_K)


def build_tree(cfg, rec, p, ngrams, budget):
    """best_first_tree with dflash_drafter's scorer. Returns nodes: (token, parent, depth)."""
    toks, lps, ad = rec
    D = toks.shape[0]
    W = width_for(cfg, budget)
    max_depth = min(D, budget, cfg.max_depth)
    f32 = np.float32

    def scorer(depth, parent_token, path):
        t = [int(x) for x in toks[depth - 1, :W] if x >= 0]
        lp = [float(x) for x in lps[depth - 1, :len(t)]]
        if cfg.tree == "best":
            return t, lp
        scored = True
        if depth > 1:
            prev = [int(x) for x in toks[depth - 2, :W]]
            scored = parent_token in prev
        if scored:
            i = 0 if depth == 1 else prev.index(parent_token)
            s = ad[depth - 1, i, :len(t)].astype(np.float32)
            mass = sum(math.exp(x) for x in lp)
            log_mass = f32(math.log(max(mass, 1e-30)))
            mx = float(s.max())
            log_z = f32(mx + math.log(sum(math.exp(float(x) - mx) for x in s)))
            lp = [float(f32(f32(s[j] - log_z) + log_mass)) for j in range(len(t))]
            t, lp = sort_best_first(t, lp)
        if cfg.boost is not None:
            nxt, n = ngrams.next_tokens(p, path, cfg.max_n, cfg.min_n, with_n=True)
            boost = cfg.boost + cfg.boost_per_n * (n - cfg.min_n)
            if nxt:
                t, lp = list(t), list(lp)
                for tok in nxt[:cfg.max_next]:
                    if tok in t:
                        j = t.index(tok)
                        lp[j] = min(0.0, lp[j] + boost)
                    else:
                        t.append(tok)
                        lp.append(cfg.joined)
                t, lp = sort_best_first(t, lp)
        return t, lp

    if cfg.tree == "chain":
        return [(int(toks[d, 0]), d - 1, d + 1) for d in range(min(budget, max_depth))]
    nodes = []  # (token, parent, depth, score, children(t, lp), path)
    root_t, root_lp = scorer(1, -1, [])
    heap = []
    if root_t:
        heapq.heappush(heap, (-root_lp[0], -1, 0))
    while len(nodes) < budget and heap:
        negs, parent, rank = heapq.heappop(heap)
        sib_t, sib_lp = (root_t, root_lp) if parent < 0 else nodes[parent][4]
        token = sib_t[rank]
        depth = 1 if parent < 0 else nodes[parent][2] + 1
        pscore = 0.0 if parent < 0 else nodes[parent][3]
        if rank + 1 < len(sib_t):
            heapq.heappush(heap, (-(pscore + sib_lp[rank + 1]), parent, rank + 1))
        path = ([] if parent < 0 else nodes[parent][5]) + [token]
        score = -negs
        children = ([], [])
        index = len(nodes)
        if depth < max_depth:
            children = scorer(depth + 1, token, path)
            if children[0]:
                heapq.heappush(heap, (-(score + children[1][0]), index, 0))
        nodes.append((token, parent, depth, score, children, path))
    return [(n[0], n[1], n[2]) for n in nodes]


def path_taken(nodes, ids, p):
    """The nodes (grow-order indices) the text after position p runs down, from the root."""
    kids = {}
    for i, (_, parent, _) in enumerate(nodes):
        kids.setdefault(parent, []).append(i)
    at, path = -1, []
    while p + len(path) + 1 < len(ids):
        nxt = [i for i in kids.get(at, []) if nodes[i][0] == ids[p + len(path) + 1]]
        if not nxt:
            break
        at = nxt[0]
        path.append(at)
    return path


def accepted(nodes, ids, p):
    return len(path_taken(nodes, ids, p))


def cmd_check(args):
    """The replay's trees against the engine's at every position of a dump written with BUDGET."""
    D, K, has_adapter, budget, head, toks, lps, ad = read_dump(args.dump)
    if budget <= 0:
        sys.exit("the dump has no engine trees: write it with a BUDGET")
    texts = read_texts(args.texts)
    ngrams = [Ngrams(prompt + answer) for prompt, answer, _ in texts]
    same = 0
    for i, h in enumerate(head):
        ti, p, engine_depth = int(h[0]), int(h[1]), int(h[3])
        prompt, answer, _ = texts[ti]
        ids = prompt + answer
        nodes = build_tree(args, (toks[i], lps[i], ad[i]), p, ngrams[ti], budget)
        mine = accepted(nodes, ids, p)
        same += mine == engine_depth
        if mine != engine_depth and args.verbose:
            print(f"text {ti} position {p}: replay {mine}, engine {engine_depth}")
    print(f"{same} of {len(head)} positions reach the same depth as the engine's trees "
          f"(budget {budget})")
    sys.exit(0 if same == len(head) else 1)


def cmd_orders(args):
    """Per text, a line of one field per answer position: the grow order (DraftTree::order) of
    each node on the path the text takes down that position's tree of --budget nodes ('-': none),
    so a policy simulation can ask what any smaller budget would have yielded at any position."""
    D, K, has_adapter, _, head, toks, lps, ad = read_dump(args.dump)
    texts = read_texts(args.texts)
    where = {(int(h[0]), int(h[1])): i for i, h in enumerate(head)}  # (text, p) -> record
    for ti, (prompt, answer, _) in enumerate(texts):
        ids = prompt + answer
        ng = Ngrams(ids)
        fields = []
        for p in range(len(prompt), len(ids) - 1):
            i = where.get((ti, p))
            if i is None:
                break
            nodes = build_tree(args, (toks[i], lps[i], ad[i]), p, ng, args.budget)
            path = path_taken(nodes, ids, p)
            fields.append(",".join(map(str, path)) if path else "-")
        print(" ".join(fields))


# DflashDrafter's constants: by default (SpecOptions::kVocabByTree) trees under LARGE_TREE nodes
# draft ids below FREQUENT_IDS, larger ones every id; large adapter trees take WIDE_CANDIDATES a
# depth, small ones the adapter's top_k (8 for the shipped drafters).
FREQUENT_IDS = 65536
LARGE_TREE = 48
WIDE_CANDIDATES = 16
ADAPTER_TOP_K = 8


def below_vocab(toks, lps, ad, n_vocab, ranks=None):
    """The candidates a drafter whose head stops at n_vocab ids would have had (--spec-vocab, 65536
    by default): each depth's ids >= n_vocab are dropped, the rest move up (the slots left at the
    end are empty), and the adapter's scores follow their parents and candidates. The logprobs
    keep the whole vocabulary's normalisation (the head over a prefix renormalises by the mass
    it holds, mostly close to 1 for a BPE vocabulary whose common tokens come first)."""
    n, D, K = toks.shape
    allowed = None
    if ranks is not None:  # the n_vocab best-ranked ids instead of the ids below n_vocab
        allowed = np.zeros(max(int(ranks.max()), int(toks.max())) + 1, dtype=bool)
        allowed[ranks[:n_vocab]] = True
    t2 = np.full_like(toks, -1)
    l2 = np.full_like(lps, -1e30)
    a2 = np.zeros_like(ad)
    for i in range(n):
        kept_above = [0]  # the root's index in the adapter's parent axis
        for d in range(D):
            kept = [j for j in range(K) if 0 <= toks[i, d, j] and
                    (allowed[toks[i, d, j]] if allowed is not None else toks[i, d, j] < n_vocab)]
            t2[i, d, :len(kept)] = toks[i, d, kept]
            l2[i, d, :len(kept)] = lps[i, d, kept]
            parents = kept_above if d > 0 else list(range(K))
            for pi, src in enumerate(parents):
                a2[i, d, pi, :len(kept)] = ad[i, d, src, kept]
            kept_above = kept
    return t2, l2, a2


def cmd_replay(args):
    D, K, has_adapter, _, head, toks, lps, ad = read_dump(args.dump)
    whole, frequent = (toks, lps, ad), None
    texts = read_texts(args.texts)
    cats = []
    if args.prompts:
        cats = [json.loads(line)["category"] for line in open(args.prompts) if line.strip()]
    where = {(int(h[0]), int(h[1])): i for i, h in enumerate(head)}  # (text, p) -> record
    results = {}
    ends = {b: {"outside": 0, "inside": 0} for b in args.budgets}
    for budget in args.budgets:
        per_cat = {}
        small = args.vocab > 0 or (args.vocab < 0 and budget < LARGE_TREE)
        if small and frequent is None:
            ranks = np.load(args.ranks) if args.ranks else None
            frequent = below_vocab(*whole, args.vocab if args.vocab > 0 else FREQUENT_IDS, ranks)
        toks, lps, ad = frequent if small else whole
        for ti, (prompt, answer, r) in enumerate(texts):
            if args.only and (ti >= len(cats) or cats[ti] not in args.only):
                continue
            ids = prompt + answer
            ng = Ngrams(ids)
            p = len(prompt)  # the first drafted root: the first answer token
            passes, made = 1, 1  # the prefill's pass gives the first answer token
            while p + 1 < len(ids):
                i = where.get((ti, p))
                if i is None:
                    break
                nodes = build_tree(args, (toks[i], lps[i], ad[i]), p, ng, budget)
                a = accepted(nodes, ids, p)
                if p + a + 2 < len(ids) and a < D and budget > a:
                    # Why the pass ended: the next token was not among its depth's candidates
                    # (only a better drafter helps), or it was and the tree left it out.
                    width = width_for(args, budget)
                    out_of_reach = ids[p + a + 2] not in [int(x) for x in toks[i][a][:width]]
                    ends[budget]["outside" if out_of_reach else "inside"] += 1
                passes += 1
                made += a + 1
                p += a + 1
            made = min(made, len(answer))
            cat = cats[ti] if ti < len(cats) else "all"
            per_cat.setdefault(cat, []).append(made / passes)
        results[budget] = per_cat
    cat_names = sorted({c for v in results.values() for c in v})
    print("budget " + " ".join(f"{c:>9}" for c in cat_names) + "   (median tokens a pass; mean)")
    for budget, per_cat in results.items():
        cells = [f"{statistics.median(per_cat[c]):9.3f}" if c in per_cat else " " * 9
                 for c in cat_names]
        means = [f"{statistics.mean(per_cat[c]):.3f}" for c in cat_names if c in per_cat]
        print(f"{budget:6d} " + " ".join(cells) + "   " + " ".join(means))
    print("passes that stop short, by where the text's next token was: outside its depth's "
          "candidates / among them")
    for budget, e in ends.items():
        n = max(1, e["outside"] + e["inside"])
        print(f"{budget:6d}   {e['outside'] / n:.0%} / {e['inside'] / n:.0%} of {n}")
    if args.per_text:
        for budget, per_cat in results.items():
            for c, v in per_cat.items():
                print(budget, c, " ".join(f"{x:.3f}" for x in v))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sequences", help="texts.jsonl -> the dump tool's SEQUENCES lines")
    s.add_argument("texts")
    r = sub.add_parser("replay", help="tokens a pass of a tree policy over a dump")
    c = sub.add_parser("check", help="the replay's trees against the engine's (exit 1: differ)")
    o = sub.add_parser("orders", help="per position, the grow orders of the path the text takes")
    for q in (r, c, o):
        q.add_argument("--tree", choices=["adapter", "best", "chain"], default="adapter")
        q.add_argument("--width", type=int, default=None,
                       help="candidates a depth (default: the engine's, 8 or 16 from 48 nodes)")
        q.add_argument("--max-depth", type=int, default=15)
        q.add_argument("--boost", type=float, default=2.0, help="context boost; --no-boost: off")
        q.add_argument("--no-boost", dest="boost", action="store_const", const=None)
        q.add_argument("--joined", type=float, default=-1.0)
        q.add_argument("--boost-per-n", type=float, default=0.0, help="more boost a matched token")
        q.add_argument("--max-n", type=int, default=4)
        q.add_argument("--min-n", type=int, default=3)
        q.add_argument("--max-next", type=int, default=1 << 30)
    o.add_argument("dump")
    o.add_argument("texts")
    o.add_argument("--budget", type=int, default=15)
    c.add_argument("dump")
    c.add_argument("texts")
    c.add_argument("-v", "--verbose", action="store_true")
    r.add_argument("dump")
    r.add_argument("texts")
    r.add_argument("--prompts", help="prompts.jsonl, for the categories (same order as texts)")
    r.add_argument("--only", nargs="*", help="categories to replay")
    r.add_argument("--budgets", type=int, nargs="+", default=[7, 16, 32, 64])
    r.add_argument("--per-text", action="store_true")
    r.add_argument("--vocab", type=int, default=0,
                   help="the draft vocabulary: ids below N (--spec-vocab N), 0 every id (as "
                   "dumped), -1 the engine's default (65536 under 48 nodes, then every id)")
    r.add_argument("--ranks", help=".npy of token ids, most frequent first: --vocab N keeps the "
                   "first N of them instead of the ids below N (a ranked draft vocabulary)")
    args = ap.parse_args()
    {"sequences": cmd_sequences, "replay": cmd_replay, "check": cmd_check,
     "orders": cmd_orders}[args.cmd](args)


if __name__ == "__main__":
    main()
