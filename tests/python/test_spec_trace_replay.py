"""SALVO_SPEC_TRACE=1 holds everything --spec auto's policy was told and asked: replayed through a
fresh SpecPolicy (tests/tools/spec_trace_replay), every pass's size comes out as the run chose it,
across new texts, with the shipped SmolLM2 DFlash drafter (budget trees) and with n-gram drafting
(per-depth trees). That is what lets a GPU window's trace be studied, and a changed policy be
tried on it, without the GPU. A broken trace is refused with the line that broke it.
"""

import json
import os
import subprocess

import pytest

from conftest import model_path_or_skip, salvo_bin_or_skip, tool_path_or_skip

PROMPTS = [
    "Write a Python function that reverses a list.",
    "What is 17 times 23?",
    "Rewrite this sentence in the passive voice: the cat chased the mouse.",
]


def traced_run(tmp_path, drafter):
    """--spec auto on the three prompts; drafter "dflash": the shipped drafter found by the
    model's name, "ngram": the same model under a name no drafter has (auto then drafts n-grams).
    """
    model = model_path_or_skip("smollm2-135m")
    if drafter == "ngram":
        renamed = tmp_path / "no-drafter-model.gguf"
        renamed.symlink_to(model)
        model = str(renamed)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))
    env = dict(os.environ, SALVO_SPEC_TRACE="1")
    env.pop("SALVO_DRAFTERS", None)
    proc = subprocess.run(
        [salvo_bin_or_skip(), "run", "--model", model, "--prompts-file", str(prompts), "--json",
         "--max-tokens", "48", "--temperature", "0", "--threads", "2"],
        capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    trace = tmp_path / "trace.txt"
    trace.write_text(proc.stderr)
    return trace, proc.stderr


@pytest.mark.parametrize("drafter", ["dflash", "ngram"])
def test_replay_chooses_every_size_as_the_run_did(tmp_path, drafter):
    trace, text = traced_run(tmp_path, drafter)
    budget_trees = 1 if drafter == "dflash" else 0
    assert f"spec trace: policy adaptive 1 budget-trees {budget_trees}" in text
    assert text.count("spec trace: new text") == len(PROMPTS) - 1
    passes = text.count("spec trace: rows ")
    assert passes > 30
    proc = subprocess.run([tool_path_or_skip("spec_trace_replay"), str(trace)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert f"{passes} passes, {passes} chosen as in the run, 0 differ" in proc.stdout


def test_broken_trace_is_refused_with_its_line(tmp_path):
    trace, _ = traced_run(tmp_path, "dflash")
    lines = trace.read_text().splitlines()
    first_pass = next(i for i, line in enumerate(lines) if "spec trace: rows " in line)
    broken = tmp_path / "broken.txt"
    broken.write_text("\n".join(lines[:first_pass] + ["spec trace: rows 3 depth x"]) + "\n")
    proc = subprocess.run([tool_path_or_skip("spec_trace_replay"), str(broken)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert f"line {first_pass + 1}: bad pass line" in proc.stderr
    missing_file = subprocess.run([tool_path_or_skip("spec_trace_replay"), str(tmp_path / "none.txt")],
                                  capture_output=True, text=True, timeout=60)
    assert missing_file.returncode == 2 and "cannot read" in missing_file.stderr
