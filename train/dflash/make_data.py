"""Renders training prompts with salvo's chat template and tokenizer; writes token ids as JSON.

  python3 train/dflash/make_data.py --model smollm2-135m --n 2000 --out data.json
The GPU machine then needs no tokenizer: it reads {"prompts": [{"cat", "ids"}], ...}.
--bench FILE adds the benchmark's prompts (../shared/bench/prompts.jsonl) marked "split": "bench":
train.py never trains on them and reports the drafter's tau on them apart (bench_tau), since
held-out prompts from the training templates only measure in-distribution acceptance.
"""

import argparse
import concurrent.futures
import json
import os
import subprocess
import tempfile

from prompts import make_prompts


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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--salvo", default=os.environ.get("SALVO_BIN", "build/release/salvo"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--bench", help="benchmark prompts (JSONL) to add for evaluation only")
    args = ap.parse_args()
    pairs = make_prompts(args.n, args.seed)
    bench = []
    if args.bench:
        for line in open(args.bench):
            if line.strip():
                r = json.loads(line)
                bench.append((r["category"], r["messages"][-1]["content"]))
    # Unique messages only: duplicates would leak between the train and held-out splits.
    seen, uniq = {m for _, m in bench}, []
    for cat, msg in pairs:
        if msg not in seen:
            seen.add(msg)
            uniq.append((cat, msg))
    n_train = len(uniq)
    uniq += bench  # last, so that they are never confused with training prompts
    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        texts = list(ex.map(lambda p: render(args.salvo, args.model, p[1]), uniq))
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for t in texts:
            f.write(json.dumps(t) + "\n")
        path = f.name
    r = subprocess.run([args.salvo, "tokenize", "-m", args.model, "--jsonl", path, "--no-special"],
                       capture_output=True, text=True, check=True)
    os.unlink(path)
    ids = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    assert len(ids) == len(uniq), (len(ids), len(uniq))
    data = {"model": args.model, "seed": args.seed,
            "prompts": [{"cat": c, "ids": i, **({"split": "bench"} if k >= n_train else {})}
                        for k, ((c, _), i) in enumerate(zip(uniq, ids))]}
    with open(args.out, "w") as f:
        json.dump(data, f)
    print(f"{len(ids)} prompts, mean {sum(map(len, ids)) / len(ids):.1f} tokens -> {args.out}")


if __name__ == "__main__":
    main()
