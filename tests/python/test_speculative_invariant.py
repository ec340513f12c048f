"""The speculative invariant: with the same seed, speculative decoding emits exactly the tokens
plain decoding emits, whatever the drafter proposes.

Each configuration (model, sampling, speculation mode) runs every prompt in one salvo process
through --prompts-file, and the token ids are compared prompt by prompt with --spec none. Besides
the n-gram drafter, hidden testing drafters attack the verifier and the KV commit: random trees
(mixing plausible and random tokens, sometimes empty), always-wrong tokens (the deepest chain plus
the widest fan-out the budget allows) and maximal-depth chains.

A failure here means a row's logits depend on its batch (a kernel that is not row invariant,
attention seeing the wrong rows, K/V committed from the wrong rows) or the sampler saw a
different history; the assertion message names the first diverging token.

Draft-model drafting is covered twice: smollm2-135m drafting for itself at every sampling (the
draft then agrees with the target nearly always at T=0, so long accepted paths and deep commits
get exercised; at T>0 the target's samples often leave the draft's greedy path), and
qwen2.5-coder-0.5b drafting for qwen2.5-coder-1.5b (the pair the product uses) at T=0 on a few
prompts. A mismatched vocabulary must be refused with an error naming the difference.

DFlash drafting (--spec dflash) runs on smollm2-135m with the trained drafter when
drafters/smollm2-135m/ exists, else with a random drafter (dflash_ref.py), at every sampling and
with each tree builder (best-first, adapter, chain). A random drafter's drafts are rejected almost
always, so that run checks that drafting, feeding the drafter hidden states and committing leave the
text alone; the trained one also gets paths accepted.

Cost: every configuration runs 20 prompts x 16 generated tokens in one process (the 1.5B pair:
the first 4 prompts; adversarial drafters: every third prompt). Measured on a 2-core machine
shared with ~10 other busy processes: the draft-model and adversarial tests took 41 min wall,
14 min of CPU (24 prompts then); an idle 2-core machine needs a fraction of that. Environment:
  SALVO_SPEC_PROMPTS=N  the first N prompts (default 20 of 24)
  SALVO_SPEC_TOKENS=N   tokens generated per prompt (default 16)
  SALVO_SPEC_LARGE=1    add qwen2.5-coder-1.5b to every n-gram / adversarial configuration
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import tempfile

import pytest

from conftest import model_path_or_skip, salvo_bin_or_skip

PROMPTS = [
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n\ndef factorial(n):\n",
    "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,",
    "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. The quick brown",
    "for i in range(10):\n    print(i)\nfor j in range(10):\n    print(j)\nfor k in range(10):\n",
    "<ul>\n  <li>apple</li>\n  <li>banana</li>\n  <li>cherry</li>\n  <li>",
    "SELECT id, name FROM users WHERE id = 1;\nSELECT id, name FROM users WHERE id = 2;\nSELECT",
    "a b c d e f g h i j k l m n o p",
    "Monday, Tuesday, Wednesday, Thursday,",
    '{"name": "Alice", "age": 30},\n{"name": "Bob", "age": 25},\n{"name": "',
    "int add(int a, int b) { return a + b; }\nint sub(int a, int b) { return a - b; }\nint mul(",
    "Once upon a time, there was a",
    "The capital of France is Paris. The capital of Germany is Berlin. The capital of Italy is",
    "import numpy as np\nimport pandas as pd\nimport",
    "x = 1\ny = 2\nz = 3\nw =",
    "Q: What is 2 + 2?\nA: 4\nQ: What is 3 + 3?\nA: 6\nQ: What is 4 + 4?\nA:",
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n\nclass Vector:\n    def __init__(self, x, y):\n",
    "red green blue red green blue red green",
    "To be, or not to be, that is the question:",
    '#include <stdio.h>\n\nint main(void) {\n    printf("hello\\n");\n    printf("world\\n");\n',
    "The list of prime numbers: 2, 3, 5, 7, 11, 13,",
    "Hello hello hello hello hello",
    "def is_even(n):\n    return n % 2 == 0\n\ndef is_odd(n):\n",
    "Write a haiku about the sea.",
    "0x00, 0x01, 0x02, 0x03, 0x04,",
]

# 20 prompts by default: the minimum, within CI's time budget.
PROMPTS = PROMPTS[:int(os.environ.get("SALVO_SPEC_PROMPTS", "20"))]

MODELS = ["smollm2-135m", "qwen2.5-coder-0.5b", "gemma3-270m"]
if os.environ.get("SALVO_SPEC_LARGE") == "1":
    MODELS.append("qwen2.5-coder-1.5b")

# name -> extra flags. The 0.7 configuration adds a repetition penalty so the verifier's history
# (committed tokens + the accepted path so far) is part of what must match.
SAMPLINGS = {
    "greedy": ["--temperature", "0"],
    "t0.7": ["--temperature", "0.7", "--repeat-penalty", "1.1"],
    "t1.0": ["--temperature", "1.0"],
}
MAX_TOKENS = int(os.environ.get("SALVO_SPEC_TOKENS", "16"))
SEED = 1234
# Adversarial drafters run on a third of the prompts, each with one sampling, to keep the file
# fast; their plain baselines are the n-gram test's runs.
ADVERSARIAL_MODES = ["random", "wrong", "deep"]
ADVERSARIAL_STRIDE = 3


@functools.lru_cache(maxsize=None)
def generate(model: str, sampling: str, spec: str, prompts: tuple[str, ...],
             extra: tuple[str, ...] = ()) -> list[dict]:
    """One salvo process for every prompt of a configuration; one result object per prompt."""
    salvo = salvo_bin_or_skip()
    path = model_path_or_skip(model)
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for p in prompts:
            f.write(json.dumps({"prompt": p}) + "\n")
        prompts_file = f.name
    try:
        cmd = [salvo, "run", "--model", path, "--prompts-file", prompts_file, "--raw", "--json",
               "--max-tokens", str(MAX_TOKENS), "--seed", str(SEED), "--threads", "2",
               "--ctx", "512", "--spec", spec, *SAMPLINGS[sampling], *extra]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    finally:
        os.unlink(prompts_file)
    assert proc.returncode == 0, f"{' '.join(cmd)}\nstderr:\n{proc.stderr}"
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    assert len(results) == len(prompts)
    return results


def assert_same_tokens(plain: list[dict], spec: list[dict], prompts, label: str) -> None:
    for i, (a, b, prompt) in enumerate(zip(plain, spec, prompts)):
        if a["tokens"] == b["tokens"]:
            continue
        first = next((k for k, (x, y) in enumerate(zip(a["tokens"], b["tokens"])) if x != y),
                     min(len(a["tokens"]), len(b["tokens"])))
        pytest.fail(f"{label}: prompt {i} {prompt!r} diverges at generated token {first}\n"
                    f"plain: {a['tokens']}\nspec:  {b['tokens']}\n"
                    f"plain text: {a['text']!r}\nspec text:  {b['text']!r}")


@pytest.mark.parametrize("sampling", list(SAMPLINGS))
@pytest.mark.parametrize("model", MODELS)
def test_ngram_equals_plain(model, sampling):
    prompts = tuple(PROMPTS)
    plain = generate(model, sampling, "none", prompts)
    spec = generate(model, sampling, "ngram", prompts)
    assert_same_tokens(plain, spec, prompts, f"{model} {sampling} ngram")
    # Otherwise the comparison would be vacuous: drafts must actually get accepted.
    assert sum(r["accepted_draft_tokens"] for r in spec) > 0
    assert all(r["forward_passes"] <= p["forward_passes"] for r, p in zip(spec, plain))
    assert all(p["drafted_nodes"] == 0 for p in plain)


@pytest.mark.parametrize("model", MODELS)
def test_auto_policy_equals_plain(model):
    # The adaptive policy switches drafting on and off between passes; the text must not notice.
    prompts = tuple(PROMPTS)
    plain = generate(model, "greedy", "none", prompts)
    auto = generate(model, "greedy", "auto", prompts)
    assert_same_tokens(plain, auto, prompts, f"{model} greedy auto")


# (target, draft model, samplings, number of prompts).
DRAFT_PAIRS = [
    ("smollm2-135m", "smollm2-135m", list(SAMPLINGS), len(PROMPTS)),
    ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b", ["greedy"], 4),
]


@pytest.mark.parametrize("target, draft, sampling", [
    (target, draft, sampling) for target, draft, samplings, _ in DRAFT_PAIRS
    for sampling in samplings
])
def test_draft_model_equals_plain(target, draft, sampling):
    n_prompts = next(n for t, d, _, n in DRAFT_PAIRS if (t, d) == (target, draft))
    prompts = tuple(PROMPTS[:n_prompts])
    plain = generate(target, sampling, "none", tuple(PROMPTS))[:n_prompts] \
        if target in MODELS else generate(target, sampling, "none", prompts)
    spec = generate(target, sampling, "draft", prompts, ("--draft-model", model_path_or_skip(draft)))
    assert_same_tokens(plain, spec, prompts, f"{target} {sampling} drafted by {draft}")
    assert sum(r["accepted_draft_tokens"] for r in spec) > 0
    if sampling == "greedy":
        # The draft model agrees with the target most of the time on these prompts.
        assert sum(r["n_generated"] for r in spec) > 1.5 * sum(r["forward_passes"] for r in spec)


def test_auto_with_draft_model_equals_plain():
    # --draft-model under --spec auto: the policy sizes the draft model's trees and switches
    # drafting on and off.
    prompts = tuple(PROMPTS)
    plain = generate("smollm2-135m", "greedy", "none", prompts)
    auto = generate("smollm2-135m", "greedy", "auto", prompts,
                    ("--draft-model", model_path_or_skip("smollm2-135m")))
    assert_same_tokens(plain, auto, prompts, "smollm2-135m greedy auto with a draft model")


def test_draft_model_with_another_vocabulary_is_refused():
    proc = subprocess.run([salvo_bin_or_skip(), "run", "--model", model_path_or_skip("smollm2-135m"),
                           "--draft-model", model_path_or_skip("gemma3-270m"), "--spec", "draft",
                           "-m", "x", "-n", "1"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "cannot draft for" in proc.stderr and "vocabulary sizes differ" in proc.stderr, \
        proc.stderr


@pytest.mark.parametrize("mode", ADVERSARIAL_MODES)
@pytest.mark.parametrize("model", MODELS)
def test_adversarial_drafters_equal_plain(model, mode):
    # Rotate the sampling over (model, mode) pairs: every drafter meets every sampling somewhere.
    names = list(SAMPLINGS)
    sampling = names[(MODELS.index(model) + ADVERSARIAL_MODES.index(mode)) % len(names)]
    plain = generate(model, sampling, "none", tuple(PROMPTS))[::ADVERSARIAL_STRIDE]
    prompts = tuple(PROMPTS[::ADVERSARIAL_STRIDE])
    spec = generate(model, sampling, mode, prompts, ("--spec-budget", "24", "--spec-depth", "12"))
    assert_same_tokens(plain, spec, prompts, f"{model} {sampling} {mode}")


def test_stop_string_cuts_an_accepted_path_where_plain_decoding_stops():
    # A stop string inside a repetitive continuation usually lands mid-path: the rest of the
    # accepted tokens must be dropped.
    prompts = tuple(PROMPTS[1:3])
    extra = ("--stop", "7,", "--stop", "lazy")
    plain = generate("smollm2-135m", "greedy", "none", prompts, extra)
    spec = generate("smollm2-135m", "greedy", "ngram", prompts, extra)
    assert_same_tokens(plain, spec, prompts, "stop strings")
    for a, b in zip(plain, spec):
        assert a["text"] == b["text"] and a["finish_reason"] == b["finish_reason"]


@functools.lru_cache(maxsize=None)
def dflash_drafter() -> tuple[str, bool]:
    """(drafter directory for smollm2-135m, whether it is a trained one)."""
    trained = os.path.join(os.path.dirname(__file__), "..", "..", "drafters", "smollm2-135m")
    if os.path.exists(os.path.join(trained, "config.json")):
        return os.path.abspath(trained), True
    import dflash_ref
    out = tempfile.mkdtemp(prefix="salvo_dflash_")
    dflash_ref.write_random_drafter(out, model_path_or_skip("smollm2-135m"), "smollm2-135m",
                                    block_size=8, seed=3)
    return out, False


# Every sampling meets a tree builder; the adversarial stride of prompts keeps it near a minute.
DFLASH_CONFIGS = [("greedy", "best"), ("t0.7", "adapter"), ("t1.0", "chain")]


@pytest.mark.parametrize("sampling, tree", DFLASH_CONFIGS)
def test_dflash_equals_plain(sampling, tree):
    drafter, trained = dflash_drafter()
    plain = generate("smollm2-135m", sampling, "none", tuple(PROMPTS))[::ADVERSARIAL_STRIDE]
    prompts = tuple(PROMPTS[::ADVERSARIAL_STRIDE])
    spec = generate("smollm2-135m", sampling, "dflash", prompts,
                    ("--drafter", drafter, "--spec-tree", tree, "--spec-budget", "8"))
    assert_same_tokens(plain, spec, prompts, f"smollm2-135m {sampling} dflash {tree}")
    # Drafting must really have happened, or the comparison would be vacuous.
    assert sum(r["drafted_nodes"] for r in spec) > 0
    if trained:
        assert sum(r["accepted_draft_tokens"] for r in spec) > 0


def test_whole_vocabulary_dflash_trees_equal_plain():
    """Trees of 48 nodes or more draft every id (smaller ones only ids below 65536, which
    SmolLM2's 49,152 never reach): Qwen2.5-Coder-1.5B (151,936 ids) with its shipped drafter and
    64-node trees, greedy."""
    drafter = os.path.join(os.path.dirname(__file__), "..", "..", "drafters", "qwen2.5-coder-1.5b")
    prompts = tuple(PROMPTS[:3])
    plain = generate("qwen2.5-coder-1.5b", "greedy", "none", prompts)
    spec = generate("qwen2.5-coder-1.5b", "greedy", "dflash", prompts,
                    ("--drafter", os.path.abspath(drafter), "--spec-tree", "adapter",
                     "--spec-budget", "64"))
    assert_same_tokens(plain, spec, prompts, "qwen2.5-coder-1.5b greedy dflash 64 nodes")
    assert all(r["spec_vocab"] == -1 for r in spec)  # the default: the vocabulary by tree size
    assert sum(r["accepted_draft_tokens"] for r in spec) > 0


@pytest.mark.parametrize("flags, message", [
    (["--spec", "eagle"], "unknown speculation mode 'eagle'"),
    (["--spec-budget", "-1"], "--spec-budget"),
    (["--spec-depth", "1000"], "--spec-depth"),
    (["--spec-vocab", "-1"], "--spec-vocab"),
    (["--spec", "draft"], "--spec draft needs a draft model"),
    (["--spec-tree", "wide"], "unknown speculation tree 'wide'"),
])
def test_bad_speculation_flags_are_rejected(flags, message):
    proc = subprocess.run([salvo_bin_or_skip(), "run", "--model", "none.gguf", "-m", "x", *flags],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert message in proc.stderr + proc.stdout
