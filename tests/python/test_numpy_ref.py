"""Validates the NumPy reference itself against llama.cpp before salvo is judged by it.

llama.cpp rounds activations to int8 blocks before every quantized matmul, stores K/V (and converts Q and
the attention probabilities) to f16 and evaluates GELU from an f16 table; the reference does none of that
(float64 activations). Small models amplify those roundings: on SmolLM2-135M two runs of the reference
that differ only by ggml-style rounding (emulate_ggml=True) already differ by ~4% of the logit range.
So the bounds below are noise bounds, not modelling slack; a modelling error (wrong RoPE mode, missing
norm, wrong window) shows up as correlations < 0.99 and top-1 agreement far below 80%.

Measured on the prompt below (24-25 tokens), reference vs llama-cpp-python 0.3.36 (f16 KV, 2 threads):
see BOUNDS; the numbers are printed with -s.
"""

import time

import numpy as np
import pytest

import numpy_ref
from conftest import MODEL_NAMES, llama_tokenize, model_path_or_skip, open_llama

PROMPT = "The quick brown fox jumps over the lazy dog. def fibonacci(n): return n if n < 2 else"

# llama.cpp's tokenization of PROMPT (BOS added where the GGUF asks for it). test_logits.py feeds these ids
# to salvo so that it does not depend on salvo's tokenizer; test_prompt_tokens keeps them honest.
PROMPT_TOKENS = {
    "smollm2-135m": [504, 2365, 6354, 16438, 27003, 690, 260, 23790, 2767, 30, 753, 3987, 46477, 24, 94, 727,
                     1003, 304, 585, 304, 2067, 216, 34, 1745],
    "gemma3-270m": [2, 818, 3823, 8864, 37423, 38167, 1024, 506, 31770, 4799, 236761, 1096, 10779, 78113,
                    236769, 236749, 1473, 994, 538, 768, 538, 655, 236743, 236778, 1663],
    "qwen2.5-coder-0.5b": [785, 3974, 13876, 38835, 34208, 916, 279, 15678, 5562, 13, 707, 75698, 1445, 1648,
                           470, 308, 421, 308, 366, 220, 17, 770],
    "qwen2.5-coder-1.5b": [785, 3974, 13876, 38835, 34208, 916, 279, 15678, 5562, 13, 707, 75698, 1445, 1648,
                           470, 308, 421, 308, 366, 220, 17, 770],
}

# Per model: (min top-1 agreement, min per-position correlation, max per-position |err| / logit range).
# Measured (reference vs llama.cpp):      top1   min_corr  max_rel_err  top-1 flip gaps
#   smollm2-135m        (24 tokens)       1.000  0.99817   0.0401       -
#   gemma3-270m         (25 tokens)       0.880  0.99633   0.0632       0.155 0.348 0.026
#   qwen2.5-coder-0.5b  (22 tokens)       0.955  0.99896   0.0248       0.034
#   qwen2.5-coder-1.5b  (positions 1..21) 1.000  0.99921   0.0173       -
# Bounds leave about 1.5-2x headroom on the error terms.
BOUNDS = {
    "smollm2-135m": (0.90, 0.995, 0.07),
    "gemma3-270m": (0.80, 0.990, 0.10),
    "qwen2.5-coder-0.5b": (0.90, 0.997, 0.04),
    "qwen2.5-coder-1.5b": (0.90, 0.997, 0.04),
}
# Positions excluded from the bounds. Qwen2.5-1.5B's first token carries massive activations (attention
# sink); int8 block rounding of those rows moves llama.cpp's position-0 logits far from exact arithmetic
# (measured corr 0.784, max_rel_err 0.355), while the reference with ggml rounding emulated
# (emulate_ggml=True) matches llama.cpp there at corr 0.99986 / max_rel_err 0.0059. That is a property of
# int8 engines, not of the reference, so position 0 is not judged for this model.
FIRST_JUDGED_POSITION = {"qwen2.5-coder-1.5b": 1}
# A top-1 disagreement is only acceptable as a near tie in the reference's own logits.
MAX_TOP1_GAP = 0.5


def llama_logits(path: str, tokens: list[int]) -> np.ndarray:
    llm = open_llama(path, logits_all=True, n_ctx=max(64, len(tokens)), n_batch=max(64, len(tokens)))
    llm.eval(tokens)
    out = np.array(llm.scores[: len(tokens)], dtype=np.float32)
    llm.close() if hasattr(llm, "close") else None
    return out


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_prompt_tokens(name):
    path = model_path_or_skip(name)
    assert llama_tokenize(path, PROMPT) == PROMPT_TOKENS[name]


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_reference_matches_llama_cpp(name):
    path = model_path_or_skip(name)
    tokens = PROMPT_TOKENS[name]

    t0 = time.time()
    want = llama_logits(path, tokens)
    t1 = time.time()
    got = numpy_ref.forward(path, tokens)
    t2 = time.time()
    first = FIRST_JUDGED_POSITION.get(name, 0)
    d = numpy_ref.compare_logits(got[first:], want[first:])
    print(f"\n[{name}] n={len(tokens)} llama.cpp {t1 - t0:.1f}s numpy {t2 - t1:.1f}s :: {d}")

    min_top1, min_corr, max_rel = BOUNDS[name]
    assert d.top1_agreement >= min_top1, d
    assert d.min_corr >= min_corr, d
    assert d.max_rel_err <= max_rel, d
    assert all(g < MAX_TOP1_GAP for g in d.top1_mismatch_gaps), d
