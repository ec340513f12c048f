"""salvo's logits against the independent NumPy reference (numpy_ref.py).

Runs `$SALVO_BIN logits --model PATH --tokens 1,2,3 --out FILE`, which writes raw little-endian float32
[n_tokens, n_vocab] for a full causal pass from position 0. The token ids are llama.cpp's tokenization of
a fixed prompt (test_numpy_ref.PROMPT_TOKENS), so this test does not depend on salvo's tokenizer.

salvo, like llama.cpp, rounds activations to int8 blocks before quantized matmuls, so the bounds are the
noise bounds measured for llama.cpp against the same reference (test_numpy_ref.BOUNDS), loosened by
1.25x on the error terms: salvo must be about as close to exact arithmetic as llama.cpp is.
"""

import os
import subprocess
import tempfile
import time

import numpy as np
import pytest

import numpy_ref
from conftest import MODEL_NAMES, model_path_or_skip, salvo_bin_or_skip
from test_numpy_ref import BOUNDS, FIRST_JUDGED_POSITION, MAX_TOP1_GAP, PROMPT_TOKENS

LOOSEN = 1.25


def salvo_logits(salvo: str, path: str, tokens: list[int], n_vocab: int) -> np.ndarray:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "logits.f32")
        cmd = [salvo, "logits", "--model", path, "--tokens", ",".join(map(str, tokens)), "--out", out]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"{' '.join(cmd)}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        raw = np.fromfile(out, dtype="<f4")
    assert raw.size == len(tokens) * n_vocab, (
        f"salvo wrote {raw.size} floats, expected {len(tokens)} x {n_vocab}")
    return raw.reshape(len(tokens), n_vocab)


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_salvo_logits_match_reference(name):
    salvo = salvo_bin_or_skip()
    path = model_path_or_skip(name)
    tokens = PROMPT_TOKENS[name]
    n_vocab = numpy_ref.load_config(path).n_vocab

    t0 = time.time()
    got = salvo_logits(salvo, path, tokens, n_vocab)
    t1 = time.time()
    want = numpy_ref.forward(path, tokens)
    t2 = time.time()
    first = FIRST_JUDGED_POSITION.get(name, 0)  # see test_numpy_ref: int8 rounding of sink tokens
    d = numpy_ref.compare_logits(got[first:], want[first:])
    print(f"\n[{name}] salvo {t1 - t0:.1f}s numpy {t2 - t1:.1f}s :: {d}")

    assert np.isfinite(got).all(), "salvo produced non-finite logits"
    min_top1, min_corr, max_rel = BOUNDS[name]
    assert d.top1_agreement >= min_top1, d
    assert d.min_corr >= 1.0 - (1.0 - min_corr) * LOOSEN, d
    assert d.max_rel_err <= max_rel * LOOSEN, d
    assert all(g < MAX_TOP1_GAP for g in d.top1_mismatch_gaps), d
