#!/usr/bin/env python3
"""Where a CUDA kernel's warps wait, per SASS instruction, from an Nsight Compute report.

On the GPU machine:
  ncu --section SourceCounters --section WarpStateStats -k regex:half_kernel \
      --launch-skip 28 --launch-count 4 -o prof salvo bench --device cuda --model M -p 0 -n 4
  ncu -i prof.ncu-rep --page source --csv --print-source sass > src.csv
  scripts/ncu_source_summary.py src.csv
prints, per profiled kernel, the share of stall samples by opcode and the instructions with the
most samples and their stall reasons (long_sb: a global load's result; barrier: __syncthreads).
"""
import collections
import csv
import io
import sys


def kernels(text):
    """Yields (kernel name, CSV rows) for each kernel in ncu's source page."""
    name, lines = None, []
    for line in text.splitlines():
        if line.startswith('"Kernel Name"'):
            if lines:
                yield name, list(csv.reader(io.StringIO("\n".join(lines))))
            name, lines = next(csv.reader([line]))[1], []
        elif line.strip():
            lines.append(line)
    if lines:
        yield name, list(csv.reader(io.StringIO("\n".join(lines))))


def summarise(name, rows, top):
    header = rows[0]
    if "Source" not in header or "Warp Stall Sampling (All Samples)" not in header:
        print(f"{name}: no source counters (profile with --section SourceCounters)")
        return
    src = header.index("Source")
    samples = header.index("Warp Stall Sampling (All Samples)")
    reasons = [(i, h[len("stall_"):]) for i, h in enumerate(header) if h.startswith("stall_")]
    data = []
    for r in rows[1:]:
        try:
            data.append((float(r[samples].replace(",", "") or 0), r))
        except (ValueError, IndexError):
            continue
    total = sum(v for v, _ in data) or 1.0
    by_op = collections.Counter()
    for v, r in data:
        op = r[src].strip()
        if op.startswith("@"):  # a predicate guard: the opcode follows it
            op = op.split(None, 1)[-1]
        by_op[op.split(" ")[0].split(".")[0]] += v
    print(f"== {name}\n{len(data)} instructions, {total:.0f} stall samples")
    print("by opcode: " + ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in by_op.most_common(12)))
    for v, r in sorted(data, key=lambda x: -x[0])[:top]:
        why = " ".join(f"{h}={r[i]}" for i, h in reasons if i < len(r) and r[i] not in ("", "0"))
        print(f"{v:7.0f} {100 * v / total:5.1f}%  {r[src].strip()[:60]:60}  {why[:120]}")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 25
    seen = set()  # ncu lists a kernel's table more than once
    with open(sys.argv[1], errors="replace") as f:
        for name, rows in kernels(f.read()):
            key = (name, len(rows), tuple(rows[1]) if len(rows) > 1 else ())
            if rows and key not in seen:
                seen.add(key)
                summarise(name, rows, top)


if __name__ == "__main__":
    main()
