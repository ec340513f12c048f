"""scripts/trace_summary.py on a hand-made kernel timeline (bench/kernel_trace.cc's format): the
step time, each kind of launch's own time (the overlap of a programmatic dependent launch with
the kernel before it not counted twice), the idle time, and the kernels outside graphs."""

import subprocess
import sys

from conftest import REPO_ROOT

SUMMARY = REPO_ROOT / "scripts" / "trace_summary.py"
NS = "salvo::cuda::(anonymous namespace)::"


def trace_lines():
    """Three launches of a 4-node graph, 30 us apart; two matmul nodes share a kind."""
    lines = ["0 900 7 0 0 10 1 1 128 30 void repack(char*)"]  # before the graphs
    t = 1000
    for _ in range(3):
        lines += [
            f"{t} {t + 5000} 7 3 1 1 1 1 256 32 void {NS}rms_norm<float>(float const*, int)",
            # Starts 2 us before the norm ends (PDL): 10 us of its own.
            f"{t + 3000} {t + 15000} 7 3 2 2368 1 1 128 128 "
            f"void {NS}half_kernel<{NS}FmtQ4K, 1, false>({NS}HalfGroup)",
            f"{t + 15000} {t + 19000} 7 3 4 2368 1 1 128 128 "
            f"void {NS}half_kernel<{NS}FmtQ4K, 1, false>({NS}HalfGroup)",
            f"{t + 20500} {t + 22000} 7 3 3 1 1 5 1024 40 void argmax(float const*, int*)",
        ]
        t += 30000
    return lines


def test_trace_summary(tmp_path):
    trace = tmp_path / "trace.txt"
    trace.write_text("\n".join(trace_lines()) + "\nshort line\n")
    out = subprocess.run([sys.executable, str(SUMMARY), str(trace)], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    assert "13 kernels, 1 graphs" in out, out
    assert "graph 3: 3 launches, 4 kernels a launch, step 30.0 us" in out, out
    assert "busy 20.5 us, idle 9.5 us" in out, out
    rows = {line.split(None, 8)[-1]: line.split() for line in out.splitlines()
            if line.startswith("  ") and line.split()[0][0].isdigit()}
    # us/step, share, nodes a launch, us each, span us, grid
    assert rows["half_kernel<FmtQ4K, 1, false>"][:6] == ["14.0", "46.7%", "2", "7.00", "8.00",
                                                          "2368x1x1"]
    assert rows["rms_norm<float>"][:3] == ["5.0", "16.7%", "1"]
    assert rows["argmax"][:6] == ["1.5", "5.0%", "1", "1.50", "1.50", "1x1x5"]
    assert "0.9 us      1x  repack" in out, out


def test_trace_summary_empty(tmp_path):
    trace = tmp_path / "trace.txt"
    trace.write_text("")
    proc = subprocess.run([sys.executable, str(SUMMARY), str(trace)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode != 0 and "no kernels" in proc.stderr
