#!/usr/bin/env python3
"""Where a decode step's time goes on the GPU, from a kernel timeline (bench/kernel_trace.cc).

For each CUDA graph of the trace (a decode or a k-row verification pass; the graphs with the most
launches first): its launches, the median time from one launch's first kernel to the next's, and
per kind of launch (kernel, grid, block) the nodes a launch holds and their median time a launch.
A kernel's own time starts when the kernel before it on its stream ended, if later than its own
start: with programmatic dependent launch a kernel starts (and waits) while the one before runs,
so the own times of a launch add up to its busy time, and the step time less that sum is the time
the GPU ran nothing of it (host gaps, graph launches).
  python3 scripts/trace_summary.py TRACE [--graphs N]
"""

import argparse
import re
import statistics
from collections import defaultdict


def short_name(name):
    """`void a::(anonymous namespace)::k<a::F, 1>(a::G)` -> `k<F, 1>`."""
    name = re.sub(r"^void ", "", name)
    depth = 0
    for i in range(len(name) - 1, -1, -1):  # cut the parameter list: the last top-level '('
        c = name[i]
        if c == ")":
            depth += 1
        elif c == "(":
            depth -= 1
            if depth == 0:
                if i > 0 and not name[:i].endswith("anonymous namespace"):
                    name = name[:i]
                break
    name = name.replace("(anonymous namespace)::", "")
    name = re.sub(r"\b[A-Za-z_]\w*::", "", name)
    return name if len(name) <= 70 else name[:67] + "..."


def grid_text(grid):
    """(2368, 1, 1) -> '2368x1x1'."""
    return "x".join(str(d) for d in grid)


def read_trace(path):
    rows = []
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split(" ", 10)
            if len(parts) < 11:
                continue
            start, end, stream, graph, node, gx, gy, gz, bx, regs = (int(p) for p in parts[:10])
            rows.append(dict(start=start, end=end, stream=stream, graph=graph, node=node,
                             grid=(gx, gy, gz), block=bx, regs=regs, name=short_name(parts[10])))
    rows.sort(key=lambda r: r["start"])
    last_end = defaultdict(int)
    for r in rows:
        begin = max(r["start"], last_end[r["stream"]])
        r["own"] = max(0, r["end"] - begin)
        last_end[r["stream"]] = max(last_end[r["stream"]], r["end"])
    return rows


def graph_report(graph, rows):
    """The lines for one graph's launches."""
    by_node = defaultdict(list)
    for r in rows:
        by_node[r["node"]].append(r)
    launches = max(len(v) for v in by_node.values())
    first_node = rows[0]["node"]
    starts = [r["start"] for r in by_node[first_node]]
    step = statistics.median([b - a for a, b in zip(starts, starts[1:])]) if len(starts) > 1 else 0
    kinds = defaultdict(lambda: [0, 0.0, 0.0, 0])  # nodes, own, duration, regs
    for node_rows in by_node.values():
        r0 = node_rows[0]
        k = kinds[(r0["name"], r0["grid"], r0["block"])]
        k[0] += 1
        k[1] += statistics.median(r["own"] for r in node_rows)
        k[2] += statistics.median(r["end"] - r["start"] for r in node_rows)
        k[3] = r0["regs"]
    busy = sum(k[1] for k in kinds.values())
    out = [f"graph {graph}: {launches} launches, {len(by_node)} kernels a launch, "
           f"step {step / 1e3:.1f} us (median, first kernel to first kernel), "
           f"busy {busy / 1e3:.1f} us, idle {max(0.0, step - busy) / 1e3:.1f} us"]
    out.append(f"  {'us/step':>8} {'share':>6} {'n':>4} {'us each':>8} {'span us':>8} "
               f"{'grid':>14} {'block':>5} {'regs':>4}  kernel")
    for (name, grid, block), (n, own, dur, regs) in sorted(kinds.items(), key=lambda kv: -kv[1][1]):
        share = own / step if step else 0.0
        out.append(f"  {own / 1e3:8.1f} {100 * share:5.1f}% {n:4d} {own / n / 1e3:8.2f} "
                   f"{dur / n / 1e3:8.2f} {grid_text(grid):>14} {block:5d} {regs:4d}  {name}")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--graphs", type=int, default=4, help="the graphs with the most launches")
    args = ap.parse_args()
    rows = read_trace(args.trace)
    if not rows:
        raise SystemExit(f"trace_summary: no kernels in {args.trace}")
    graphs = defaultdict(list)
    for r in rows:
        if r["graph"]:
            graphs[r["graph"]].append(r)
    order = sorted(graphs, key=lambda g: -len(graphs[g]) / len({r["node"] for r in graphs[g]}))
    print(f"{len(rows)} kernels, {len(graphs)} graphs, "
          f"{(rows[-1]['end'] - rows[0]['start']) / 1e6:.1f} ms from first to last")
    for g in order[:args.graphs]:
        print("\n".join(graph_report(g, graphs[g])))
    loose = defaultdict(lambda: [0, 0])
    for r in rows:
        if not r["graph"]:
            loose[r["name"]][0] += 1
            loose[r["name"]][1] += r["own"]
    if loose:
        print("outside graphs (own time, all launches):")
        for name, (n, own) in sorted(loose.items(), key=lambda kv: -kv[1][1])[:12]:
            print(f"  {own / 1e3:10.1f} us {n:6d}x  {name}")


if __name__ == "__main__":
    main()
