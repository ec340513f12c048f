"""scripts/sass_mix.py on two objects nvcc builds here: each kernel's instruction counts from the
real cuobjdump (NVIDIA's wheel, which the script fetches on first use), and the change between
the objects where one kernel's multiply-add became a multiply and an add."""

import os
import shutil
import subprocess
import sys

import pytest

from conftest import REPO_ROOT

MIX = REPO_ROOT / "scripts" / "sass_mix.py"
# Where CMake's CUDA detection also looks when nvcc is not on PATH.
NVCC = shutil.which("nvcc") or next(
    (p for p in ["/usr/local/cuda/bin/nvcc"] if os.access(p, os.X_OK)), None)
KERNELS = """
__global__ void axpy(float a, const float* x, float* y) {{ y[threadIdx.x] = {expr}; }}
__global__ void scale(float a, float* y) {{ y[threadIdx.x] *= a; }}
"""


def build(tmp_path, name, expr):
    src = tmp_path / f"{name}.cu"
    src.write_text(KERNELS.format(expr=expr))
    obj = tmp_path / f"{name}.o"
    subprocess.run([NVCC, "-c", "-O3", "-arch=sm_90", "-o", str(obj), str(src)], check=True,
                   timeout=300)
    return obj


def mix(*args):
    return subprocess.run([sys.executable, str(MIX), *map(str, args), "--ops", "FFMA,FMUL,FADD"],
                          capture_output=True, text=True, timeout=600, check=True).stdout


def rows(out):
    """{kernel: [total, FFMA, FMUL, FADD]} from the table."""
    table = {}
    for line in out.splitlines()[1:]:
        name, _, counts = line.rpartition(")")
        table[name + ")"] = [int(v) for v in counts.split()]
    return table


@pytest.mark.skipif(NVCC is None, reason="needs nvcc (CI has it)")
def test_sass_mix(tmp_path):
    fused = build(tmp_path, "fused", "a * x[threadIdx.x] + y[threadIdx.x]")
    # __fmul_rn / __fadd_rn keep the multiply and the add apart (no contraction into an FFMA).
    split = build(tmp_path, "split", "__fadd_rn(__fmul_rn(a, x[threadIdx.x]), y[threadIdx.x])")
    one = rows(mix(fused))
    assert set(one) == {"axpy(float, float const*, float*)", "scale(float, float*)"}, one
    assert one["axpy(float, float const*, float*)"][1:] == [1, 0, 0]
    assert one["scale(float, float*)"][1:] == [0, 1, 0]
    change = rows(mix(fused, split, "--filter", "axpy"))
    assert list(change) == ["axpy(float, float const*, float*)"], change
    assert change["axpy(float, float const*, float*)"][1:] == [-1, 1, 1]
