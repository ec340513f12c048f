"""Runs the GGUF fuzzer under ASan/UBSan for a bounded time (scripts/run_fuzz.sh 45)."""
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import missing

REPO = Path(__file__).resolve().parents[2]


def test_gguf_fuzzer_finds_nothing():
    if shutil.which("clang++") is None:
        missing("clang++ not found (libFuzzer needs clang)")
    out = subprocess.run([str(REPO / "scripts" / "run_fuzz.sh"), "45"], cwd=REPO,
                         capture_output=True, text=True, timeout=1200)
    log = (out.stdout + out.stderr)[-6000:]
    assert out.returncode == 0, log
    assert "Done" in log, log
