#!/usr/bin/env python3
"""Summarises a GPU kit's logs (scripts/gpu_kit_run.sh): the tests' exit codes and NMSE lines,
then per model a table of the A/B forms' `salvo bench --json` results (tg128, pp512 and the k-row
passes, each run), then bench_spec's per-category tables and the SALVO_SPEC_TRACE medians.

  scripts/ab_summary.py LOG_DIR
"""
import csv
import glob
import statistics
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


def llama(log_dir):
    """llama-bench's JSON (gpu_kit.sh --llama): llama.cpp's tok/s on the window's models."""
    for path in sorted(glob.glob(os.path.join(log_dir, "llama_*.json"))):
        try:
            runs = json.load(open(path))
        except (ValueError, OSError):
            print(f"{os.path.basename(path)}: unreadable")
            continue
        for r in runs:
            test = f"pp{r['n_prompt']}" if r.get("n_gen", 0) == 0 else f"tg{r['n_gen']}"
            print(f"llama.cpp {os.path.basename(r.get('model_filename', path))} {test}: "
                  f"{r['avg_ts']:.1f} +- {r.get('stddev_ts', 0):.1f} tok/s")


def json64(log_dir):
    """KIT_SWEEP's 64-node adapter runs: median tokens a pass per category (prompts.jsonl order)."""
    prompts = os.path.join(os.path.dirname(os.path.abspath(log_dir)), "prompts.jsonl")
    cats = [json.loads(l)["category"] for l in open(prompts)] if os.path.exists(prompts) else []
    for path in sorted(glob.glob(os.path.join(log_dir, "json64_*.jsonl"))):
        rows = [json.loads(l) for l in open(path, errors="replace") if l.startswith("{")]
        by = defaultdict(list)
        for i, r in enumerate(rows):
            by[cats[i] if i < len(cats) else "all"].append(r["tokens_per_pass"])
        print(f"{os.path.basename(path)}: {len(rows)} texts, median tokens a pass " +
              ", ".join(f"{c} {statistics.median(v):.2f}" for c, v in sorted(by.items())))


def spec(log_dir):
    for path in sorted(glob.glob(os.path.join(log_dir, "spec_*.log")) +
                       glob.glob(os.path.join(log_dir, "sweep_*.log"))):
        lines = [l for l in open(path, errors="replace").read().splitlines()
                 if l.startswith("| ") and re.match(r"\| (code|math|chat|grounded) ", l)]
        print(f"\n{os.path.basename(path)[:-4]}:")
        for l in lines:
            print("  " + l)


def traces(log_dir):
    """Median verification pass and draft (ms) and tokens a pass of each SALVO_SPEC_TRACE log."""
    for path in sorted(glob.glob(os.path.join(log_dir, "trace_*.log"))):
        p = [re.search(r"pass ([\d.]+) ms draft ([\d.]+) ms accepted (\d+)", l)
             for l in open(path, errors="replace") if "warm-up" not in l]
        p = [m for m in p if m]
        name = os.path.basename(path)[:-4]
        if not p:
            print(f"{name}: no passes (still running?)")
            continue
        med = lambda xs: sorted(xs)[len(xs) // 2]
        print(f"{name}: {len(p)} passes, median pass {med([float(m[1]) for m in p]):.3f} ms, "
              f"draft {med([float(m[2]) for m in p]):.3f} ms, "
              f"{sum(int(m[3]) + 1 for m in p) / len(p):.2f} tokens a pass")


def texts(log_dir):
    """Whether every form's SALVO_SPEC_TRACE run emitted the same text as the first one's."""
    paths = sorted(glob.glob(os.path.join(log_dir, "text_*.jsonl")))
    if not paths:
        return
    first = open(paths[0], errors="replace").read()
    differ = [os.path.basename(p) for p in paths[1:] if open(p, errors="replace").read() != first]
    print(f"texts: {len(paths)} runs, " +
          (f"differ from {os.path.basename(paths[0])}: {' '.join(differ)}" if differ else "all the same"))


def profiles(log_dir):
    """Each ncu profile's kernels by name: launches and total us (KIT_PROF=1 forms)."""
    for path in sorted(glob.glob(os.path.join(log_dir, "prof_*.csv"))):
        by = defaultdict(lambda: [0, 0.0])
        for l in open(path, errors="replace"):
            f = [x.strip('"') for x in l.rstrip().split('","')]
            if len(f) > 14 and f[-3] == "gpu__time_duration.sum":
                try:
                    t = float(f[-1].replace(",", ""))
                except ValueError:
                    continue
                k = by[f[4].split("(")[0]]
                k[0] += 1
                k[1] += t * {"nsecond": 1e-3, "ns": 1e-3, "msecond": 1e3, "ms": 1e3}.get(f[-2], 1.0)
        print(f"\n{os.path.basename(path)[:-4]}: kernel, launches, total us")
        for name, (n, t) in sorted(by.items(), key=lambda x: -x[1][1])[:25]:
            print(f"  {name[:60]:60} {n:5d} {t:10.1f}")


def ncu_details(log_dir):
    """KIT_NCU=1: per kHalf launch of the 1-, 8- and 16-row passes, its grid, time, DRAM / L2 / L1
    throughput (% of peak), L1 hit rate, achieved occupancy, registers, cycles an issue and the
    three largest stall reasons (warps an issue)."""
    want = [("Duration", "us"), ("DRAM Throughput", "dram%"), ("L2 Cache Throughput", "l2%"),
            ("L1/TEX Cache Throughput", "l1%"), ("L1/TEX Hit Rate", "l1hit"),
            ("Achieved Occupancy", "occ%"), ("Registers Per Thread", "regs"),
            ("Warp Cycles Per Issued Instruction", "cyc/iss")]
    for path in sorted(glob.glob(os.path.join(log_dir, "ncu_*.csv"))):
        launches = {}
        lines = [l for l in open(path, errors="replace") if l.startswith('"')]
        for r in csv.DictReader(lines):
            if not r["ID"].isdigit():
                continue
            d = launches.setdefault(r["ID"], {"grid": r["Grid Size"], "block": r["Block Size"],
                                              "stalls": {}})
            name, unit = r["Metric Name"], r["Metric Unit"]
            value = (r["Metric Value"] or "").replace(",", "")
            try:
                v = float(value)
            except ValueError:
                continue
            if name.startswith("smsp__average_warps_issue_stalled_"):
                d["stalls"][name[len("smsp__average_warps_issue_stalled_"):].split("_per_")[0]] = v
            elif name == "Duration":
                d[name] = v * {"nsecond": 1e-3, "ns": 1e-3, "msecond": 1e3, "ms": 1e3}.get(unit, 1.0)
            else:
                d[name] = v
        print(f"\n{os.path.basename(path)[:-4]}: grid block " + " ".join(k for _, k in want) + " stalls")
        for d in launches.values():
            top = sorted(d["stalls"].items(), key=lambda x: -x[1])[:3]
            print(f"  {d['grid']:>12} {d['block']:>11} " +
                  " ".join(f"{d.get(n, float('nan')):7.1f}" for n, _ in want) + "  " +
                  " ".join(f"{k} {v:.1f}" for k, v in top))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    tests(sys.argv[1])
    sweeps(sys.argv[1])
    llama(sys.argv[1])
    json64(sys.argv[1])
    spec(sys.argv[1])
    traces(sys.argv[1])
    texts(sys.argv[1])
    profiles(sys.argv[1])
    ncu_details(sys.argv[1])


if __name__ == "__main__":
    main()
