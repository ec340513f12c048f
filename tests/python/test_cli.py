"""The salvo command line as a user meets it: streamed text with statistics, --json figures,
bench and info tables, and one-line errors with a non-zero exit for wrong flags and bad files."""

import json
import os
import subprocess

import pytest

from conftest import model_path_or_skip, salvo_bin_or_skip


def salvo(*args, timeout=300):
    return subprocess.run([salvo_bin_or_skip(), *args], capture_output=True, text=True,
                          timeout=timeout)


def one_line_error(proc):
    assert proc.returncode != 0, proc.stdout
    lines = [l for l in proc.stderr.strip().splitlines() if l.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("salvo: "), proc.stderr
    return lines[0]


def test_run_streams_text_then_statistics():
    path = model_path_or_skip("smollm2-135m")
    proc = salvo("run", "--model", path, "-m", "Name three colors.", "--max-tokens", "16",
                 "--temperature", "0", "--seed", "1")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip(), "no text was streamed"
    for figure in ("time to first token", "prefill", "decode", "tokens per forward pass",
                   "peak memory"):
        assert figure in proc.stderr, proc.stderr


def test_run_json_has_text_tokens_and_figures():
    path = model_path_or_skip("smollm2-135m")
    proc = salvo("run", "--model", path, "-m", "Count to five:", "--raw", "--max-tokens", "12",
                 "--temperature", "0", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    for key in ("text", "tokens", "prompt_tokens", "ttft_ms", "prefill_tps", "decode_tps",
                "tokens_per_pass", "peak_rss_mb", "peak_device_mb", "finish_reason"):
        assert key in out, key
    assert 0 < len(out["tokens"]) <= 12
    assert out["tokens_per_pass"] >= 1.0
    assert out["peak_rss_mb"] > 0
    assert out["peak_device_mb"] == 0  # the CPU backend holds no accelerator memory


def test_auto_drafts_with_what_is_named_before_what_is_found():
    # smollm2-135m has a DFlash drafter in drafters/; a named --draft-model (the model itself:
    # same vocabulary) takes its place under --spec auto, and --drafter takes precedence again.
    path = model_path_or_skip("smollm2-135m")
    base = ("run", "--model", path, "-m", "Count to five:", "--raw", "--max-tokens", "8",
            "--temperature", "0", "--json")
    found = json.loads(salvo(*base).stdout)
    assert found["drafter"].endswith("smollm2-135m") and found["draft_model"] == "", found
    named = json.loads(salvo(*base, "--draft-model", path).stdout)
    assert named["drafter"] == "" and named["draft_model"] != "", named
    both = json.loads(salvo(*base, "--draft-model", path, "--drafter", found["drafter"]).stdout)
    assert both["drafter"] == found["drafter"], both
    assert found["tokens"] == named["tokens"] == both["tokens"]
    # The statistics line names what drafted (auto may also have drafted nothing at all).
    proc = salvo(*base[:-1], "--draft-model", path)
    assert proc.returncode == 0, proc.stderr
    spec_lines = [l for l in proc.stderr.splitlines() if "speculation" in l]
    assert all("(draft model " in l for l in spec_lines), proc.stderr
    proc = salvo(*base[:-1], "--spec", "ngram")
    assert "speculation (n-gram lookup)" in proc.stderr, proc.stderr


def test_same_seed_same_text_at_temperature():
    path = model_path_or_skip("smollm2-135m")
    args = ("run", "--model", path, "-m", "Once upon a time", "--raw", "--max-tokens", "24",
            "--temperature", "1.0", "--seed", "42", "--json")
    a, b = json.loads(salvo(*args).stdout), json.loads(salvo(*args).stdout)
    assert a["tokens"] == b["tokens"]


def test_bench_prints_markdown_table_and_json():
    path = model_path_or_skip("smollm2-135m")
    proc = salvo("bench", "--model", path, "-p", "32", "-n", "8", "-r", "2")
    assert proc.returncode == 0, proc.stderr
    assert "| pp32 |" in proc.stdout.replace("  ", " ") or "pp32" in proc.stdout
    assert "tg8" in proc.stdout and "±" in proc.stdout
    out = json.loads(salvo("bench", "--model", path, "-p", "16", "-n", "4", "-r", "1",
                           "--json").stdout)
    assert [r["test"] for r in out["results"]] == ["pp16", "tg4"]


def test_bench_verify_times_k_row_passes_at_a_given_context():
    path = model_path_or_skip("smollm2-135m")
    out = json.loads(salvo("bench", "--model", path, "-p", "0", "-n", "0", "-r", "1", "--verify",
                           "--verify-rows", "1,4", "--verify-context", "48", "--json").stdout)
    assert [v["rows"] for v in out["verify"]] == [1, 4]
    assert all(v["ms"] > 0 for v in out["verify"]) and out["verify"][0]["ratio_to_1"] == 1.0


def test_info_names_architecture_and_template():
    path = model_path_or_skip("gemma3-270m")
    proc = salvo("info", path)
    assert proc.returncode == 0, proc.stderr
    assert "gemma3" in proc.stdout


@pytest.mark.parametrize("args, expected", [
    (("run",), "--model"),
    (("run", "--model", "smollm2-135m"), "prompt"),
    (("run", "--model", "/nonexistent/model.gguf", "-m", "hi"), "neither a file nor a known name"),
    (("run", "--model", "smollm2-135m", "-m", "hi", "--temperature", "-1"), "temperature"),
    (("run", "--model", "smollm2-135m", "-m", "hi", "--top-p", "7"), "top-p"),
    (("run", "--model", "smollm2-135m", "-m", "hi", "--no-such-flag"), "no-such-flag"),
    (("bench", "--model", "smollm2-135m", "-r", "0"), "repetitions"),
    (("bench", "--model", "smollm2-135m", "--verify", "--verify-context", "0"), "verify-context"),
    (("run", "--model", "smollm2-135m", "-m", "hi", "--device", "gpu"), "--device"),
    (("pull", "no-such-model"), "unknown model"),
    (("frobnicate",), "frobnicate"),
])
def test_wrong_usage_is_one_line_error(args, expected):
    line = one_line_error(salvo(*args))
    assert expected in line, line


def test_device_cuda_runs_or_says_why_not():
    # Without nvcc at build time (the stub) or without a GPU, --device cuda is a one-line error
    # that points back to the CPU; with both it generates like the CPU backend.
    path = model_path_or_skip("smollm2-135m")
    proc = salvo("run", "--model", path, "-m", "hi", "--raw", "-n", "2", "--device", "cuda")
    if proc.returncode != 0:
        line = one_line_error(proc)
        assert "CUDA" in line and "--device cpu" in line, line
    else:
        assert "decode" in proc.stderr + proc.stdout


def test_corrupt_and_truncated_model_files(tmp_path):
    path = model_path_or_skip("smollm2-135m")
    with open(path, "rb") as f:
        head = f.read(1 << 16)
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(head)
    line = one_line_error(salvo("run", "--model", str(truncated), "-m", "hi"))
    assert "truncated.gguf" in line
    garbage = tmp_path / "garbage.gguf"
    garbage.write_bytes(b"NOTGGUF" + os.urandom(4096))
    line = one_line_error(salvo("info", str(garbage)))
    assert "magic" in line.lower() or "gguf" in line.lower()


def test_prompt_longer_than_context_is_refused():
    path = model_path_or_skip("smollm2-135m")
    line = one_line_error(salvo("run", "--model", path, "-m", "word " * 200, "--raw",
                                "--ctx", "64", "--max-tokens", "4"))
    assert "context" in line
