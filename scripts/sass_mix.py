#!/usr/bin/env python3
"""The SASS instruction mix of each kernel of a CUDA object or binary, without a GPU.

A kernel change that cannot run here can still be read: how many instructions of each kind a
kernel holds (HMMA, PRMT, HFMA2, LDG, STL for spills...), and, given two objects, how each
kernel's mix moved (e.g. main's matmul_half.cu.o against a branch's). cuobjdump is not part of
nvcc's Debian install; NVIDIA's `nvidia-cuda-cuobjdump` and `nvidia-cuda-nvdisasm` wheels carry
it and the nvdisasm it runs, and this script downloads them into build/deps/cuobjdump on first
use (or takes --cuobjdump PATH, with nvdisasm beside it or on PATH).
Counts are static (each instruction of the kernel's code once), not executed counts.
  python3 scripts/sass_mix.py OBJ [OBJ2] [--filter REGEX] [--ops HMMA,PRMT,...]
"""

import argparse
import collections
import os
import pathlib
import re
import shutil
import subprocess
import sys
import zipfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEFAULT_OPS = "HMMA,PRMT,HFMA2,HADD2,HMUL2,LOP3,LDG,LDS,STL,LDL,BAR"


def find_cuobjdump(given):
    """Path to cuobjdump: --cuobjdump, PATH, build/deps, or NVIDIA's wheel downloaded there."""
    if given:
        return given
    on_path = shutil.which("cuobjdump")
    if on_path:
        return on_path
    deps = ROOT / "build" / "deps" / "cuobjdump"
    found = sorted(deps.glob("**/bin/cuobjdump"))
    if not found:
        deps.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                        "--only-binary=:all:", "-d", str(deps), "nvidia-cuda-cuobjdump~=13.0",
                        "nvidia-cuda-nvdisasm~=13.0"], check=True)  # nvcc 13's cubins
        for wheel in deps.glob("*.whl"):
            with zipfile.ZipFile(wheel) as z:
                z.extractall(deps)
        found = sorted(deps.glob("**/bin/cuobjdump"))
        if not found:
            raise SystemExit("error: the nvidia-cuda-cuobjdump wheel held no bin/cuobjdump")
    for tool in found[-1].parent.iterdir():
        tool.chmod(0o755)
    return str(found[-1])


def demangle(names):
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True)
    short = []
    for line in out.stdout.splitlines():
        line = re.sub(r"^void ", "", line)
        line = line.replace("(anonymous namespace)::", "")
        line = re.sub(r"\b[A-Za-z_]\w*::", "", line)
        short.append(line)
    return short


def mixes(cuobjdump, path):
    """{kernel name: Counter of opcodes (without modifiers)} of the object at path."""
    env = dict(os.environ)
    env["PATH"] = str(pathlib.Path(cuobjdump).parent) + os.pathsep + env.get("PATH", "")
    sass = subprocess.run([cuobjdump, "-sass", path], capture_output=True, text=True, env=env)
    if sass.returncode != 0:
        raise SystemExit(f"error: cuobjdump -sass {path}: {sass.stderr.strip()}")
    kernels = {}
    for part in re.split(r"\n\s*Function : ", sass.stdout)[1:]:
        name = part.split("\n", 1)[0].strip()
        ops = re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", part)
        kernels[name] = collections.Counter(ops)
    return dict(zip(demangle(list(kernels)), kernels.values()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("objects", nargs="+", help="one object, or two to compare (second - first)")
    ap.add_argument("--filter", default="", help="only kernels whose name matches this regex")
    ap.add_argument("--ops", default=DEFAULT_OPS, help="opcodes to show, comma-separated")
    ap.add_argument("--cuobjdump", default="", help="cuobjdump to use")
    args = ap.parse_args()
    if len(args.objects) > 2:
        raise SystemExit("error: give one object or two")
    tool = find_cuobjdump(args.cuobjdump)
    runs = [mixes(tool, o) for o in args.objects]
    ops = [o for o in args.ops.split(",") if o]
    names = [n for n in runs[0] if re.search(args.filter, n)]
    if len(runs) == 2:
        names = [n for n in names if n in runs[1]]
        missing = [n for n in runs[1] if re.search(args.filter, n) and n not in runs[0]]
    print(f"{'kernel':70s} {'total':>7s} " + " ".join(f"{o:>6s}" for o in ops))
    for n in names:
        first = runs[0][n]
        if len(runs) == 1:
            row = [sum(first.values())] + [first[o] for o in ops]
            print(f"{n[:70]:70s} {row[0]:7d} " + " ".join(f"{v:6d}" for v in row[1:]))
        else:
            second = runs[1][n]
            row = [sum(second.values()) - sum(first.values())] + [second[o] - first[o] for o in ops]
            print(f"{n[:70]:70s} {row[0]:+7d} " + " ".join(f"{v:+6d}" for v in row[1:]))
    if len(runs) == 2 and missing:
        print(f"only in {args.objects[1]}: " + ", ".join(m[:60] for m in missing))


if __name__ == "__main__":
    main()
