#!/usr/bin/env python3
"""Two salvo set-ups against each other on the same prompts (a benchmark, not a test): two
drafter directories (or one drafter with and without a file, e.g. token_ranks.safetensors), or two
salvo binaries (a policy change) with one drafter, in one speculation mode.

bench_spec.py compares speculation modes; this compares set-ups within one. Every prompt runs
once per set-up per repetition, in a fresh process, the two alternating which goes first, so the
pairs are run seconds apart on a machine whose speed drifts. Prints tokens a pass, the median
draft time a pass and the median decode tok/s per set-up, per category the median of B / A
decode tok/s and the passes, the total decode time of each, and whether both gave the same tokens
(they must, at temperature 0).

  python3 bench/ab_runs.py A_DIR B_DIR [--salvo-a BIN] [--salvo-b BIN] [--per-category 3]
      [--reps 2] [--max-tokens 128] [--threads 2] [--model qwen2.5-coder-1.5b] [SALVO_RUN_ARGS...]

SALVO_RUN_ARGS default to `--spec dflash --spec-tree adapter --spec-budget 3`.
"""

import argparse
import json
import statistics
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--prompts", default=str(ROOT.parent / "shared" / "bench" / "prompts.jsonl"))
    ap.add_argument("--per-category", type=int, default=3)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--salvo-a", default=str(ROOT / "build" / "release" / "salvo"))
    ap.add_argument("--salvo-b", default=str(ROOT / "build" / "release" / "salvo"))
    args, extra = ap.parse_known_args()  # the rest go to salvo run
    spec = [a for a in extra if a != "--"] or ["--spec", "dflash", "--spec-tree", "adapter", "--spec-budget", "3"]
    model = args.model if args.model.endswith(".gguf") else str(ROOT / "models" / f"{args.model}.gguf")
    by_cat = {}
    for line in open(args.prompts):
        if line.strip():
            p = json.loads(line)
            by_cat.setdefault(p["category"], []).append(p)
    prompts = [p for ps in by_cat.values() for p in ps[:args.per_category]]
    dirs = {"A": args.a, "B": args.b}
    bins = {"A": args.salvo_a, "B": args.salvo_b}
    runs = {k: {} for k in dirs}
    with tempfile.TemporaryDirectory() as tmp:
        pf = Path(tmp) / "prompt.jsonl"
        for rep in range(args.reps):
            for p in prompts:
                pf.write_text(json.dumps({"prompt": p["messages"][0]["content"]}) + "\n")
                for k in (("A", "B") if rep % 2 == 0 else ("B", "A")):
                    cmd = [bins[k], "run", "--model", model, "--drafter", dirs[k], "--prompts-file", str(pf),
                           "--json", "--temperature", "0", "-n", str(args.max_tokens), "-t", str(args.threads), *spec]
                    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
                    r = [json.loads(x) for x in out.splitlines() if x.startswith("{")][0]
                    runs[k].setdefault(p["id"], []).append(r)
    for k, d in dirs.items():
        rs = [r for v in runs[k].values() for r in v]
        print(f"{k} {bins[k]} {d}: {sum(r['n_generated'] for r in rs) / sum(r['forward_passes'] for r in rs):.3f} "
              f"tokens a pass, draft {statistics.median(r['draft_ms'] / r['forward_passes'] for r in rs):.2f} ms a pass "
              f"(median), decode {statistics.median(r['decode_tps'] for r in rs):.1f} tok/s (median), "
              f"{sum(r['n_generated'] / r['decode_tps'] for r in rs):.1f} s decoding in all")
    for cat, ps in by_cat.items():
        ids = [p["id"] for p in ps[:args.per_category]]
        pairs = [(a, b) for i in ids for a, b in zip(runs["A"][i], runs["B"][i])]
        print(f"  {cat}: B / A decode tok/s median {statistics.median(b['decode_tps'] / a['decode_tps'] for a, b in pairs):.3f}, "
              f"passes {sum(a['forward_passes'] for a, _ in pairs)} / {sum(b['forward_passes'] for _, b in pairs)}")
    pairs = [(a, b) for i in runs["A"] for a, b in zip(runs["A"][i], runs["B"][i])]
    print(f"B / A decode tok/s: median {statistics.median(b['decode_tps'] / a['decode_tps'] for a, b in pairs):.3f} "
          f"over {len(pairs)} pairs; same tokens: {all(a['tokens'] == b['tokens'] for a, b in pairs)}")

if __name__ == "__main__":
    main()
