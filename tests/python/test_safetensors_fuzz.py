"""Runs the safetensors fuzzer under ASan/UBSan for a bounded time (scripts/run_fuzz.sh 20 safetensors)."""
import shutil
import subprocess
from pathlib import Path

from conftest import missing

REPO = Path(__file__).resolve().parents[2]


def test_safetensors_fuzzer_finds_nothing():
    if shutil.which("clang++") is None:
        missing("clang++ not found (libFuzzer needs clang)")
    out = subprocess.run([str(REPO / "scripts" / "run_fuzz.sh"), "20", "safetensors"], cwd=REPO,
                         capture_output=True, text=True, timeout=1200)
    log = (out.stdout + out.stderr)[-6000:]
    assert out.returncode == 0, log
    assert "Done" in log, log
