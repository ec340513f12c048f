#!/usr/bin/env python3
"""Summary of the H200 benchmark: salvo against llama.cpp (CUDA) on the same GGUF files.

Reads WORK/bench_<stem>.json (`salvo bench --device cuda --verify --json`) and
WORK/llama_<stem>.json (llama-bench -o json, scripts/gpu_llamacpp.sh), plus the achievable HBM
bandwidth (bench/hbm_bandwidth.cu), and prints pp512 / tg128 for both engines with ratios, salvo's
weight GB/s as a share of that bandwidth, and the k-row verification cost against one row.
  python3 bench/gpu_compare.py WORK HBM_GBPS STEM...
"""

import json
import os
import sys


def llama_figures(path):
    """{'pp512': tok/s, 'tg128': tok/s} from llama-bench's JSON (absent or failed: {})."""
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return {}
    out = {}
    for r in json.load(open(path)):
        test = f"pp{r['n_prompt']}" if r.get("n_gen", 0) == 0 else f"tg{r['n_gen']}"
        out[test] = r["avg_ts"]
    return out


def ratio(a, b):
    return f"{a / b:.2f}" if a and b else "-"


def main():
    work, hbm, stems = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
    print(f"achievable HBM read bandwidth: {hbm:.0f} GB/s\n")
    print("| model | llama.cpp pp512 | salvo pp512 | ratio | llama.cpp tg128 | salvo tg128 | ratio "
          "| salvo GB/s | % of HBM | v16/v1 | v64/v1 |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for stem in stems:
        b = json.load(open(f"{work}/bench_{stem}.json"))
        s = {x["test"]: x["tps_mean"] for x in b["results"]}
        # stem@variant: salvo with SALVO_CUDA_MATMUL=variant, against the same llama.cpp run.
        ll = llama_figures(f"{work}/llama_{stem.split('@')[0]}.json")
        v = {x["rows"]: x["ratio_to_1"] for x in b.get("verify", [])}
        gbps = b["weight_gbps"]
        print(f"| {stem} | {ll.get('pp512', 0):.0f} | {s.get('pp512', 0):.0f} | "
              f"{ratio(s.get('pp512'), ll.get('pp512'))} | {ll.get('tg128', 0):.1f} | "
              f"{s.get('tg128', 0):.1f} | {ratio(s.get('tg128'), ll.get('tg128'))} | {gbps:.0f} | "
              f"{100 * gbps / hbm:.0f}% | {v.get(16, 0):.2f} | {v.get(64, 0):.2f} |")
    print()
    for stem in stems:
        b = json.load(open(f"{work}/bench_{stem}.json"))
        if b.get("verify"):
            # greedy passes return argmax ids; top: each row's 256 largest logits (sampling);
            # logits: every logit copied to the host.
            for key, label in (("ms", "greedy"), ("ms_top", "top-256"), ("ms_logits", "logits")):
                one = b["verify"][0].get(key) or 0
                if not one:
                    continue
                print(f"{stem} verify ({label}) ms by rows: " +
                      ", ".join(f"{x['rows']}: {x[key]:.3f} ({x[key] / one:.2f}x)" for x in b["verify"]))


if __name__ == "__main__":
    main()
