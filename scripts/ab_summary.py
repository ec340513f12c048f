#!/usr/bin/env python3
"""Summarises a GPU kit's logs (scripts/gpu_kit_run.sh): the tests' exit codes and NMSE lines,
then per model a table of the A/B forms' `salvo bench --json` results (tg128, pp512 and the k-row
passes, each run), then bench_spec's per-category tables.

  scripts/ab_summary.py LOG_DIR
"""
import glob
import json
import os
import re
import sys
from collections import defaultdict


def tests(log_dir):
    for path in sorted(glob.glob(os.path.join(log_dir, "*.log"))):
        name = os.path.basename(path)[:-4]
        if not name.startswith(("ops_", "model_", "dflash_")):
            continue
        text = open(path, errors="replace").read()
        rc = re.findall(r"^rc (\d+)", text, re.M)
        nmse = re.findall(r"NMSE ([0-9.e-]+)", text)
        failed = "FAILED" in text
        print(f"{name}: rc {rc[-1] if rc else '?'}{' FAILED' if failed else ''}"
              f"{' NMSE ' + ' '.join(nmse[:6]) if nmse else ''}")


def sweeps(log_dir):
    runs = defaultdict(list)  # (model, form) -> [(rep, result)]
    for path in sorted(glob.glob(os.path.join(log_dir, "ab_*.json"))):
        m = re.match(r"ab_(.+?)_(.+)_(\d+)\.json$", os.path.basename(path))
        if not m:
            continue
        try:
            runs[(m.group(1), m.group(2))].append((int(m.group(3)), json.load(open(path))))
        except (ValueError, OSError):
            runs[(m.group(1), m.group(2))].append((int(m.group(3)), None))
    rows = (1, 2, 4, 8, 16, 32, 64)
    for model in sorted({k[0] for k in runs}):
        print(f"\n{model}: tg128 tok/s | pp512 tok/s | k-row pass ms " + " ".join(map(str, rows)))
        for (mod, form), reps in sorted(runs.items()):
            if mod != model:
                continue
            for rep, d in sorted(reps, key=lambda x: x[0]):
                if d is None:
                    print(f"  {form:12} {rep}: unreadable (still running?)")
                    continue
                tg = [r["tps_mean"] for r in d["results"] if r["test"].startswith("tg")]
                pp = [r["tps_mean"] for r in d["results"] if r["test"].startswith("pp")]
                v = {x["rows"]: x["ms"] for x in d.get("verify", [])}
                print(f"  {form:12} {rep}: {tg[0] if tg else 0:7.1f} | {pp[0] if pp else 0:7.0f} | "
                      + " ".join(f"{v[k]:.3f}" if k in v else "-" for k in rows))


def spec(log_dir):
    for path in sorted(glob.glob(os.path.join(log_dir, "spec_*.log"))):
        lines = [l for l in open(path, errors="replace").read().splitlines()
                 if l.startswith("| ") and re.match(r"\| (code|math|chat|grounded) ", l)]
        print(f"\n{os.path.basename(path)[:-4]}:")
        for l in lines:
            print("  " + l)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    tests(sys.argv[1])
    sweeps(sys.argv[1])
    spec(sys.argv[1])


if __name__ == "__main__":
    main()
