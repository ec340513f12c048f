"""A short run of bench/load_test.py against `salvo serve` on SmolLM2-135M: 8 concurrent streaming
clients for 15 s (more clients than slots, so requests also wait in the queue). Every request must
succeed, and the server must shut down cleanly on SIGTERM afterwards. The 2-minute, 32-client run is
`bench/load_test.py --salvo build/release/salvo --model smollm2-135m`."""

import json
import subprocess
import sys

from conftest import REPO_ROOT, model_path_or_skip
from serve_helpers import require_modules, salvo_serve_bin

LOAD_TEST = REPO_ROOT / "bench" / "load_test.py"


def test_load_short_has_no_failures():
    salvo_bin = salvo_serve_bin()
    model = model_path_or_skip("smollm2-135m")
    require_modules("openai")
    proc = subprocess.run(
        [sys.executable, str(LOAD_TEST), "--salvo", salvo_bin, "--model", model, "--parallel", "4",
         "--ctx", "2048", "--clients", "8", "--duration", "15", "--max-tokens", "32", "--json"],
        capture_output=True, text=True, timeout=180)
    assert proc.stdout.strip(), proc.stderr
    res = json.loads(proc.stdout)
    assert res["failed"] == 0, res["errors"][:5]
    assert proc.returncode == 0, proc.stderr
    assert res["requests"] >= 8, res
    assert res["completion_tokens"] > 0 and res["completion_tps"] > 0, res
    assert res["latency_p50_s"] <= res["latency_p99_s"], res
    assert res["rss"] is not None and res["rss"]["samples"] >= 4, res
    assert res["server_exit"] == 0, res.get("server_log_tail")
