"""tools/compare/compare.py against two real engines on SmolLM2-135M: `salvo serve` and llama.cpp's
OpenAI server (llama-cpp-python), the independent reference. Two prompts, one repetition, 32 tokens:
the table must hold both engines with sane figures, and both must have generated text."""

import json
import math
import subprocess
import sys

from conftest import REPO_ROOT, model_path_or_skip, salvo_bin_or_skip
from serve_helpers import require_modules, salvo_serve_bin, servers

COMPARE = REPO_ROOT / "tools" / "compare" / "compare.py"
MAX_TOKENS = 32


def test_compare_salvo_against_llama_cpp(tmp_path):
    salvo_bin = salvo_serve_bin()
    model = model_path_or_skip("smollm2-135m")
    require_modules("openai", "llama_cpp", "fastapi", "uvicorn", "sse_starlette",
                    "starlette_context", "pydantic_settings")
    out_json = tmp_path / "compare.json"
    # Matched: both engines on 2 threads, 2048-token context.
    with servers.start_salvo(salvo_bin, model, ctx=2048, extra=["--threads", "2"]) as salvo, \
            servers.start_llama_cpp(model, threads=2, ctx=2048) as llama:
        proc = subprocess.run(
            [sys.executable, str(COMPARE), "--endpoint", f"salvo={salvo.url}",
             "--endpoint", f"llama.cpp={llama.url}/v1", "--baseline", "llama.cpp",
             "--limit", "2", "--reps", "1", "--max-tokens", str(MAX_TOKENS),
             "--json-out", str(out_json)],
            capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    table = proc.stdout
    rows = {line.split("|")[1].strip(): line for line in table.splitlines()
            if line.startswith("| salvo ") or line.startswith("| llama.cpp ")}
    assert set(rows) == {"salvo", "llama.cpp"}, table
    assert rows["llama.cpp"].count("1.00x") == 3, table  # the baseline against itself

    doc = json.loads(out_json.read_text())
    overall = {row["endpoint"]: row for row in doc["summary"]["overall"]}
    for name, row in overall.items():
        assert row["failed"] == 0 and row["requests"] == 2, (name, row)
        assert row["ttft_ms"] > 0 and row["total_s"] > 0 and row["decode_tps"] > 0, (name, row)
        for ratio in ("ttft_speedup", "decode_speedup", "total_speedup"):
            # Same model, same machine: neither engine is 50x the other.
            assert math.isfinite(row[ratio]) and 0.02 < row[ratio] < 50, (name, ratio, row)
    assert overall["llama.cpp"]["decode_speedup"] == 1.0

    for r in doc["requests"]:
        assert "error" not in r, r
        assert r["text"].strip(), f"{r['endpoint']} produced no text for {r['prompt']}"
        assert 0 < r["completion_tokens"] <= MAX_TOKENS, r
        assert r["ttft_s"] <= r["total_s"], r
    # salvo reports its token count and tokens per forward pass in the usage chunk.
    for r in doc["requests"]:
        if r["endpoint"] == "salvo":
            assert r["tokens_from"] == "usage", r
            assert r["tokens_per_pass"] is not None and r["tokens_per_pass"] >= 1.0, r


def test_compare_rejects_unreachable_endpoint_and_bad_prompts(tmp_path):
    require_modules("openai")
    port = servers.free_port()  # nothing listens there
    proc = subprocess.run([sys.executable, str(COMPARE), "--endpoint", f"x=http://127.0.0.1:{port}"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "endpoint 'x'" in proc.stderr and "unreachable" in proc.stderr, proc.stderr

    bad = tmp_path / "prompts.jsonl"
    bad.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n{"messages": "hi"}\n')
    proc = subprocess.run([sys.executable, str(COMPARE), "--endpoint", "x=http://127.0.0.1:1",
                           "--prompts", str(bad)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert f"{bad}, line 2" in proc.stderr and "messages" in proc.stderr, proc.stderr


def test_salvo_compare_runs_the_script():
    require_modules("openai")
    port = servers.free_port()
    proc = subprocess.run([salvo_bin_or_skip(), "compare", "--endpoint",
                           f"x=http://127.0.0.1:{port}", "--reps", "1"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "unreachable" in proc.stderr, proc.stderr
    proc = subprocess.run([salvo_bin_or_skip(), "compare", "--help"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and "--endpoint" in proc.stdout and "--baseline" in proc.stdout
