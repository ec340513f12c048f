"""Renders training prompts with salvo's chat template and tokenizer; writes token ids as JSON.

  python3 train/dflash/make_data.py --model qwen2.5-coder-1.5b --n 20000 --heldout 320 \
      --weights 0.32,0.2,0.24,0.24 --bench ../shared/bench/prompts.jsonl --out data.json.gz
The GPU machine then needs no tokenizer: it reads {"prompts": [{"cat", "ids", "split"}], ...},
gzipped when the name ends in .gz. split is "train", "heldout" (prompts from source groups that
no training prompt uses: prompts.py) or "bench" (--bench: the benchmark's prompts, evaluation
only, never trained on; train.py reports bench_tau). Prompts containing a benchmark prompt's text
are never generated. Prompts longer than --max-tokens are dropped.
"""

import argparse
import concurrent.futures
import gzip
import json
import os
import subprocess
import tempfile
import time

from prompts import make_prompts
from sources import gather

SENTINEL = "\u2063SALVO-DFLASH-MESSAGE\u2063"


def render(salvo, model, msg):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump([{"role": "user", "content": msg}], f)
        path = f.name
    try:
        r = subprocess.run([salvo, "template", "--model", model, "--messages", path],
                           capture_output=True, text=True, check=True)
    finally:
        os.unlink(path)
    return r.stdout


def render_all(salvo, model, msgs):
    """One salvo call per message is slow for 20000 prompts; a single user turn renders as
    prefix + message + suffix, which is checked on a few real renders before it is used."""
    pre, _, post = render(salvo, model, SENTINEL).partition(SENTINEL)
    probe = msgs[:: max(1, len(msgs) // 6)][:6]
    if post and all(render(salvo, model, m) == pre + m + post for m in probe):
        return [pre + m + post for m in msgs]
    print("chat template is not prefix + message + suffix: rendering every prompt")
    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        return list(ex.map(lambda m: render(salvo, model, m), msgs))


def load_sources(cache):
    if cache and os.path.exists(cache):
        return json.load(open(cache))
    t = time.time()
    src = gather()
    print(f"sources in {time.time() - t:.0f}s: " + ", ".join(f"{k} {len(v)}" for k, v in src.items()))
    if cache:
        json.dump(src, open(cache, "w"))
    return src


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--n", type=int, default=20000, help="training prompts")
    ap.add_argument("--heldout", type=int, default=320, help="held-out prompts (from held-out source groups)")
    ap.add_argument("--weights", default="0.25,0.25,0.25,0.25", help="shares of code,math,chat,edit")
    ap.add_argument("--max-tokens", type=int, default=512, help="longer prompts are dropped")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--salvo", default=os.environ.get("SALVO_BIN", "build/release/salvo"))
    ap.add_argument("--sources-cache", help="JSON cache of sources.gather() (the scan takes a minute)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--bench", help="benchmark prompts (JSONL) to add for evaluation only")
    args = ap.parse_args()
    weights = [float(x) for x in args.weights.split(",")]
    if len(weights) != 4 or min(weights) < 0 or sum(weights) <= 0:
        raise SystemExit("error: --weights needs four non-negative shares (code,math,chat,edit)")
    bench = []
    if args.bench:
        for line in open(args.bench):
            if line.strip():
                r = json.loads(line)
                bench.append({"cat": r["category"], "msg": r["messages"][-1]["content"], "split": "bench"})
    ps = make_prompts(args.n, args.seed, args.heldout, weights, [b["msg"] for b in bench],
                      load_sources(args.sources_cache))
    ps += bench  # last, so that they are never confused with training prompts
    texts = render_all(args.salvo, args.model, [p["msg"] for p in ps])
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for t in texts:
            f.write(json.dumps(t) + "\n")
        path = f.name
    r = subprocess.run([args.salvo, "tokenize", "-m", args.model, "--jsonl", path, "--no-special"],
                       capture_output=True, text=True, check=True)
    os.unlink(path)
    ids = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    assert len(ids) == len(ps), (len(ids), len(ps))
    out, dropped = [], 0
    for p, i in zip(ps, ids):
        if len(i) > args.max_tokens and p["split"] != "bench":
            dropped += 1
            continue
        out.append({"cat": p["cat"], "split": p["split"], "ids": i})
    data = {"model": args.model, "seed": args.seed, "prompts": out}
    opener = gzip.open if args.out.endswith(".gz") else open
    with opener(args.out, "wt") as f:
        json.dump(data, f, separators=(",", ":"))
    lens = sorted(len(p["ids"]) for p in out)
    count = {}
    for p in out:
        count[f"{p['split']}/{p['cat']}"] = count.get(f"{p['split']}/{p['cat']}", 0) + 1
    print(f"{len(out)} prompts ({dropped} over {args.max_tokens} tokens dropped), tokens mean "
          f"{sum(lens) / len(lens):.0f} median {lens[len(lens) // 2]} p95 {lens[int(len(lens) * 0.95)]} -> "
          f"{args.out} ({os.path.getsize(args.out) / 1e6:.1f} MB)\n{json.dumps(dict(sorted(count.items())))}")


if __name__ == "__main__":
    main()
