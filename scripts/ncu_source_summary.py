#!/usr/bin/env python3
"""Where a CUDA kernel's warps wait, per SASS instruction, from an Nsight Compute report.

On the GPU machine:
  ncu --section SourceCounters --section WarpStateStats -k regex:half_kernel \
      --launch-skip 28 --launch-count 4 -o prof salvo bench --device cuda --model M -p 0 -n 4
  ncu -i prof.ncu-rep --page source --csv --print-source sass > src.csv
  scripts/ncu_source_summary.py src.csv
prints, per profiled kernel, the share of stall samples by opcode and the instructions with the
most samples (offset into the kernel) and their stall reasons (long_sb: a global load's result;
barrier: __syncthreads). With `--lines DISASM REGEX` (`cuobjdump -xelf all salvo`, then
`nvdisasm -g THE.cubin > DISASM`, of a build with -lineinfo; REGEX names the profiled kernel's
mangled name) each of those instructions also names its source line:
  scripts/ncu_source_summary.py src.csv 20 --lines DISASM attention_kernelILb1ELi1ELb0E
"""
import collections
import csv
import io
import os
import re
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
    # The instruction's address, printed as an offset into the kernel (a -lineinfo build's
    # `nvdisasm -g` of the same cubin names its source line: --lines below).
    addr = next((i for i, h in enumerate(header) if "Address" in h), None)
    samples = header.index("Warp Stall Sampling (All Samples)")
    reasons = [(i, h[len("stall_"):]) for i, h in enumerate(header) if h.startswith("stall_")]
    data = []
    for r in rows[1:]:
        try:
            data.append((float(r[samples].replace(",", "") or 0), r))
        except (ValueError, IndexError):
            continue
    total = sum(v for v, _ in data) or 1.0

    def offset(r):
        try:
            return int(r[addr], 16)
        except (TypeError, ValueError, IndexError):
            return None

    offsets = [o for o in (offset(r) for _, r in data) if o is not None]
    base = min(offsets) if offsets else 0
    by_op = collections.Counter()
    for v, r in data:
        op = r[src].strip()
        if op.startswith("@"):  # a predicate guard: the opcode follows it
            op = op.split(None, 1)[-1]
        by_op[op.split(" ")[0].split(".")[0]] += v
    print(f"== {name}\n{len(data)} instructions, {total:.0f} stall samples")
    print("by opcode: " + ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in by_op.most_common(12)))
    if LINES:  # the samples by source line (an inlined helper's line, not its caller's)
        by_line = collections.Counter()
        for v, r in data:
            o = offset(r)
            by_line[LINES.get(o - base, "?") if o is not None else "?"] += v
        print("by line: " + ", ".join(f"{k} {100 * v / total:.1f}%"
                                      for k, v in by_line.most_common(12)))
    for v, r in sorted(data, key=lambda x: -x[0])[:top]:
        why = " ".join(f"{h}={r[i]}" for i, h in reasons if i < len(r) and r[i] not in ("", "0"))
        o = offset(r)
        at = f"+{o - base:05x}" if o is not None else ""
        line = f"  {LINES.get(o - base, '')}" if o is not None and LINES else ""
        print(f"{v:7.0f} {100 * v / total:5.1f}% {at} {r[src].strip()[:60]:60}  {why[:120]}{line}")


LINES = {}  # offset into the kernel -> "file:line" (--lines)


def read_lines(path, fun):
    """Offsets to source lines of the function matching `fun` in `nvdisasm -g THE.cubin`'s
    listing (of a -lineinfo build)."""
    line, lines, keep = "", {}, False
    with open(path, errors="replace") as f:
        for text in f:
            m = re.search(r"\.text\.([A-Za-z0-9_$.]+)", text)
            if m:  # a function's section: the offsets start again
                keep, line = re.search(fun, m.group(1)) is not None, ""
                continue
            if not keep:
                continue
            m = re.search(r'//## File "([^"]+)", line (\d+)', text)
            if m:
                line = f"{os.path.basename(m.group(1))}:{m.group(2)}"
                continue
            m = re.search(r"/\*([0-9a-f]{4,})\*/", text)
            if m and line:
                lines[int(m.group(1), 16)] = line
    return lines


def main():
    args = sys.argv[1:]
    if "--lines" in args:
        i = args.index("--lines")
        LINES.update(read_lines(args[i + 1], args[i + 2]))
        del args[i:i + 3]
    if not args:
        sys.exit(__doc__)
    top = int(args[1]) if len(args) > 1 else 25
    seen = set()  # ncu lists a kernel's table more than once
    with open(args[0], errors="replace") as f:
        for name, rows in kernels(f.read()):
            key = (name, len(rows), tuple(rows[1]) if len(rows) > 1 else ())
            if rows and key not in seen:
                seen.add(key)
                summarise(name, rows, top)


if __name__ == "__main__":
    main()
