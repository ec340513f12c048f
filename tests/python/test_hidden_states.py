"""Target hidden states (TokenBatch.hidden_layers): what a DFlash drafter is fed.

`salvo logits --hidden-layers L,.. --hidden-out F` writes the outputs of those blocks (the residual
stream after block l, before the final norm) for every position. Checked here:
  - against the independent NumPy forward's block outputs (numpy_ref.hidden_states), per position by
    correlation and relative error (salvo rounds activations to int8 blocks, the reference does not);
  - the last block's output, put through the final RMSNorm, the int8 rounding of the LM head's input
    and the LM head in NumPy, reproduces salvo's own logits (the hidden path and the logits path see
    the same numbers);
  - row invariance: the hidden states are bit-identical whether the prompt runs in one pass or in
    chunks of 3 rows behind a committed prefix.
"""

import os
import subprocess
import tempfile

import numpy as np
import pytest

import numpy_ref
from conftest import model_path_or_skip, salvo_bin_or_skip
from test_numpy_ref import PROMPT_TOKENS


def run_hidden(salvo, path, tokens, layers, chunk=0):
    with tempfile.TemporaryDirectory() as tmp:
        out, hid = os.path.join(tmp, "logits.f32"), os.path.join(tmp, "hidden.f32")
        cmd = [salvo, "logits", "--model", path, "--tokens", ",".join(map(str, tokens)), "--out", out,
               "--hidden-layers", ",".join(map(str, layers)), "--hidden-out", hid, "--chunk", str(chunk)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr}"
        return np.fromfile(out, dtype="<f4"), np.fromfile(hid, dtype="<f4")


@pytest.mark.parametrize("name", ["smollm2-135m", "gemma3-270m"])
def test_hidden_states_match_reference(name):
    salvo = salvo_bin_or_skip()
    path = model_path_or_skip(name)
    cfg = numpy_ref.load_config(path)
    tokens = PROMPT_TOKENS[name][:16]
    layers = [1, cfg.n_layer // 2, cfg.n_layer - 1]
    logits, hidden = run_hidden(salvo, path, tokens, layers)
    n = len(tokens)
    logits = logits.reshape(n, cfg.n_vocab)
    hidden = hidden.reshape(n, len(layers), cfg.n_embd)
    _, want = numpy_ref.hidden_states(path, tokens, layers)
    want = want.reshape(n, len(layers), cfg.n_embd)
    # Position 0 (the attention sink) has huge activations in a few channels; every position counts.
    for j, layer in enumerate(layers):
        for pos in range(n):
            g, w = hidden[pos, j].astype(np.float64), want[pos, j].astype(np.float64)
            corr = np.corrcoef(g, w)[0, 1]
            rel = np.linalg.norm(g - w) / np.linalg.norm(w)
            assert corr > 0.995 and rel < 0.1, (layer, pos, corr, rel)

    # Last block -> final norm -> LM head (NumPy, float64) = salvo's logits.
    W = numpy_ref._weights_for(os.path.abspath(path))
    x = hidden[:, -1].astype(np.float64)
    x = numpy_ref.rms_norm(x, W.get("output_norm.weight"), cfg.rms_eps)
    head = "output.weight" if W.has("output.weight") else "token_embd.weight"
    if cfg.arch == "gemma3":
        head = "token_embd.weight"
    # salvo rounds the LM head's input to int8 blocks as ggml does: emulate that rounding, so the
    # comparison sees only float summation order.
    x = numpy_ref._emulate_act(x, W.tensors[head].tensor_type)
    recomputed = W.matmul_t(x, head)
    d = numpy_ref.compare_logits(logits, recomputed)
    assert d.top1_agreement == 1.0 and d.min_corr > 0.99999 and d.max_rel_err < 1e-3, d


def test_hidden_states_qwen_drafter_layers():
    """The blocks Qwen2.5-Coder-1.5B's DFlash drafter reads (2, 13, 24) at every position, and the
    last block from position 1 on. Position 0 is the attention sink: ~3500 in channel 408 after
    block 25, cancelled by blocks 26-27 through int8-rounded MLP inputs, so there salvo's last two
    blocks differ from exact arithmetic (block 27: NMSE 0.89), as llama.cpp's position-0 logits do
    (test_numpy_ref skips them)."""
    salvo = salvo_bin_or_skip()
    path = model_path_or_skip("qwen2.5-coder-1.5b")
    cfg = numpy_ref.load_config(path)
    tokens = PROMPT_TOKENS["qwen2.5-coder-1.5b"][:16]
    layers = [2, 13, 24, cfg.n_layer - 1]
    _, hidden = run_hidden(salvo, path, tokens, layers)
    n = len(tokens)
    hidden = hidden.reshape(n, len(layers), cfg.n_embd)
    _, want = numpy_ref.hidden_states(path, tokens, layers)
    want = want.reshape(n, len(layers), cfg.n_embd)
    for j, layer in enumerate(layers):
        for pos in range(1 if layer == cfg.n_layer - 1 else 0, n):
            g, w = hidden[pos, j].astype(np.float64), want[pos, j].astype(np.float64)
            corr = np.corrcoef(g, w)[0, 1]
            rel = np.linalg.norm(g - w) / np.linalg.norm(w)
            assert corr > 0.995 and rel < 0.1, (layer, pos, corr, rel)


def test_hidden_states_row_invariant():
    salvo = salvo_bin_or_skip()
    path = model_path_or_skip("smollm2-135m")
    tokens = PROMPT_TOKENS["smollm2-135m"][:20]
    layers = [2, 15, 29]
    logits_a, hidden_a = run_hidden(salvo, path, tokens, layers)
    logits_b, hidden_b = run_hidden(salvo, path, tokens, layers, chunk=3)
    assert hidden_a.size == len(tokens) * len(layers) * 576
    assert np.array_equal(hidden_a, hidden_b)
    assert np.array_equal(logits_a, logits_b)


def test_hidden_layer_out_of_range_is_an_error():
    salvo = salvo_bin_or_skip()
    path = model_path_or_skip("smollm2-135m")
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run([salvo, "logits", "--model", path, "--tokens", "1,2", "--out",
                               os.path.join(tmp, "l"), "--hidden-layers", "30", "--hidden-out",
                               os.path.join(tmp, "h")], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "layer 30" in proc.stderr, proc.stderr
