"""Independent NumPy forward pass for the GGUF architectures salvo supports.

This is the golden reference that salvo's logits are compared with. It shares no code with salvo: the
GGUF file is read with the `gguf` package, weights are dequantized with `gguf.quants.dequantize`, and
the forward pass is written from the model papers / HF transformers / llama.cpp graph definitions.

Numerics: weights are dequantized to float32 (exact for every block format: d * q with an f16 scale);
every activation, matmul, norm, softmax and RoPE is computed in float64. The reference therefore has no
activation quantization and no f16 KV cache, unlike llama.cpp and salvo, which both round activations to
int8 blocks and (llama.cpp) store K/V as f16. Differences against them are those roundings, not ours.

Architectures:
  llama   (SmolLM2)  RMSNorm, RoPE NORM mode (adjacent pairs: llama.cpp's converter permutes Q/K rows so
                     the HF half-split rotation becomes an adjacent-pair one), GQA, SwiGLU.
  qwen2   (Qwen2.5)  as llama plus Q/K/V biases, RoPE NEOX mode (pairs (i, i + n_rot/2)).
  gemma3             embeddings * sqrt(n_embd); RMSNorm weights used as stored (the GGUF converter already
                     added Gemma's +1); per-head RMSNorm on Q and K; post-attention and post-FFN norms;
                     GELU(tanh) gated FFN; attention scale 1/sqrt(key_length); sliding-window attention on
                     layers where (il + 1) % 6 != 0 (key visible iff q_pos - k_pos < window) with RoPE
                     base 10000, global layers use gemma3.rope.freq_base; RoPE NEOX; no final softcap
                     unless the file declares gemma3.final_logit_softcapping.

Public API:
  forward(model_path, tokens) -> float32 [n_tokens, n_vocab]   (causal, positions 0..n-1)
  hidden_states(model_path, tokens, layers) -> (logits, float32 [n_tokens, len(layers) * n_embd])
  load_config(model_path) -> Config
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import os
from typing import Sequence

import numpy as np
import gguf
from gguf.quants import dequantize

# Bump when the reference arithmetic changes, so cached results are recomputed.
REFERENCE_VERSION = 1

SUPPORTED_ARCHS = ("llama", "qwen2", "gemma3")

# Dequantized float32 weights are kept in memory across calls for models whose float32 size is below
# this many bytes (SmolLM2, Gemma3-270M, Qwen2.5-0.5B); larger models are dequantized layer by layer.
_WEIGHT_CACHE_LIMIT_BYTES = int(float(os.environ.get("SALVO_NUMPY_REF_CACHE_GB", "3")) * (1 << 30))


@dataclasses.dataclass(frozen=True)
class Config:
    arch: str
    n_layer: int
    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim_k: int
    head_dim_v: int
    n_rot: int
    n_vocab: int
    rms_eps: float
    rope_base: float
    rope_neox: bool
    # gemma3 only
    rope_base_local: float = 10000.0
    sliding_window: int = 0
    swa_period: int = 0  # layer il uses the sliding window when (il + 1) % swa_period != 0
    attn_scale: float = 0.0
    final_softcap: float = 0.0
    rope_scale_global: float = 1.0  # linear position scaling for global layers (1 = none)

    def is_sliding(self, il: int) -> bool:
        return self.swa_period > 0 and (il + 1) % self.swa_period != 0


def _field(reader: gguf.GGUFReader, key: str, default=None):
    f = reader.fields.get(key)
    if f is None:
        if default is None:
            raise KeyError(f"GGUF metadata key {key!r} missing")
        return default
    return f.contents()


def _config_from_reader(reader: gguf.GGUFReader) -> Config:
    arch = _field(reader, "general.architecture")
    if arch not in SUPPORTED_ARCHS:
        raise ValueError(f"numpy_ref: unsupported architecture {arch!r}")
    a = arch
    n_embd = int(_field(reader, f"{a}.embedding_length"))
    n_head = int(_field(reader, f"{a}.attention.head_count"))
    n_head_kv = int(_field(reader, f"{a}.attention.head_count_kv", n_head))
    head_dim_k = int(_field(reader, f"{a}.attention.key_length", n_embd // n_head))
    head_dim_v = int(_field(reader, f"{a}.attention.value_length", n_embd // n_head))
    n_rot = int(_field(reader, f"{a}.rope.dimension_count", head_dim_k))
    tensors = {t.name: t for t in reader.tensors}
    n_vocab = int(tensors["token_embd.weight"].shape[1])
    kw = dict(
        arch=arch,
        n_layer=int(_field(reader, f"{a}.block_count")),
        n_embd=n_embd,
        n_ff=int(_field(reader, f"{a}.feed_forward_length")),
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim_k=head_dim_k,
        head_dim_v=head_dim_v,
        n_rot=n_rot,
        n_vocab=n_vocab,
        rms_eps=float(_field(reader, f"{a}.attention.layer_norm_rms_epsilon")),
        rope_base=float(_field(reader, f"{a}.rope.freq_base", 10000.0)),
        rope_neox=arch in ("qwen2", "gemma3"),
    )
    if arch == "gemma3":
        window = int(_field(reader, "gemma3.attention.sliding_window", 0))
        scaling_type = _field(reader, "gemma3.rope.scaling.type", "none")
        scale = 1.0
        if scaling_type == "linear":
            scale = 1.0 / float(_field(reader, "gemma3.rope.scaling.factor", 1.0))
        elif scaling_type not in ("none",):
            raise ValueError(f"numpy_ref: gemma3 rope scaling {scaling_type!r} not implemented")
        kw.update(
            sliding_window=window,
            swa_period=6 if window > 0 else 0,
            rope_base_local=10000.0,
            # Gemma 3 (all sizes but 27B) scales queries by 1/sqrt(head_dim) == query_pre_attn_scalar.
            attn_scale=1.0 / math.sqrt(head_dim_k),
            final_softcap=float(_field(reader, "gemma3.final_logit_softcapping", 0.0)),
            rope_scale_global=scale,
        )
    else:
        kw.update(attn_scale=1.0 / math.sqrt(head_dim_k))
    return Config(**kw)


def load_config(model_path: str) -> Config:
    return _weights_for(os.path.abspath(model_path)).config


class _Weights:
    """Lazy dequantizer over one GGUF file; optionally memoizes float32 tensors."""

    def __init__(self, model_path: str):
        # Parsing metadata is slow for big vocabularies (~10 s for 262k tokens): do it once per file.
        self.reader = gguf.GGUFReader(model_path)
        self.tensors = {t.name: t for t in self.reader.tensors}
        self.config = _config_from_reader(self.reader)
        f32_bytes = sum(int(np.prod([int(d) for d in t.shape])) * 4 for t in self.reader.tensors)
        self.memoize = f32_bytes <= _WEIGHT_CACHE_LIMIT_BYTES
        self._cache: dict[str, np.ndarray] = {}

    def has(self, name: str) -> bool:
        return name in self.tensors

    def get(self, name: str) -> np.ndarray:
        """Float32 array in row-major math layout: a matrix is [n_out, n_in], a vector [n]."""
        if name in self._cache:
            return self._cache[name]
        t = self.tensors[name]
        w = np.ascontiguousarray(dequantize(t.data, t.tensor_type), dtype=np.float32)
        w = w.reshape([int(d) for d in reversed(t.shape)])
        if self.memoize:
            self._cache[name] = w
        return w

    def rows(self, name: str, ids: Sequence[int]) -> np.ndarray:
        """Dequantize only the given rows (embedding lookup) -> float32 [len(ids), n_cols]."""
        t = self.tensors[name]
        ids = np.asarray(ids, dtype=np.int64)
        if name in self._cache:
            return self._cache[name][ids]
        return np.asarray(dequantize(t.data[ids], t.tensor_type), dtype=np.float32).reshape(len(ids), -1)

    def matmul_t(self, x: np.ndarray, name: str, chunk_rows: int = 16384) -> np.ndarray:
        """x [n, n_in] float64 @ W^T -> [n, n_out] float64, streaming W in row chunks (large heads)."""
        t = self.tensors[name]
        n_out = int(t.shape[-1]) if len(t.shape) > 1 else 1
        if name in self._cache or n_out <= chunk_rows:
            return x @ self.get(name).astype(np.float64).T
        out = np.empty((x.shape[0], n_out), dtype=np.float64)
        for r0 in range(0, n_out, chunk_rows):
            r1 = min(n_out, r0 + chunk_rows)
            w = np.asarray(dequantize(t.data[r0:r1], t.tensor_type), dtype=np.float64).reshape(r1 - r0, -1)
            out[:, r0:r1] = x @ w.T
        return out


@functools.lru_cache(maxsize=4)
def _weights_for(model_path: str) -> _Weights:
    return _Weights(model_path)


# ---------------------------------------------------------------------------------------------------
# ops (float64)


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """Normalizes over the last axis; w broadcasts over it."""
    ms = np.mean(x * x, axis=-1, keepdims=True)
    return x / np.sqrt(ms + eps) * w.astype(np.float64)


def rope(x: np.ndarray, positions: np.ndarray, n_rot: int, base: float, neox: bool,
         pos_scale: float = 1.0) -> np.ndarray:
    """x [n_tokens, n_heads, head_dim]; rotates the first n_rot dims of each head.

    theta_i = pos * base^(-2i/n_rot), i in [0, n_rot/2).
    NORM mode rotates (x[2i], x[2i+1]); NEOX mode rotates (x[i], x[i + n_rot/2]).
    """
    half = n_rot // 2
    inv_freq = base ** (-np.arange(half, dtype=np.float64) * 2.0 / n_rot)  # [half]
    theta = (positions.astype(np.float64) * pos_scale)[:, None] * inv_freq[None, :]  # [n, half]
    cos = np.cos(theta)[:, None, :]
    sin = np.sin(theta)[:, None, :]
    out = x.copy()
    if neox:
        a, b = x[..., :half], x[..., half:n_rot]
        out[..., :half] = a * cos - b * sin
        out[..., half:n_rot] = a * sin + b * cos
    else:
        a, b = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
        out[..., 0:n_rot:2] = a * cos - b * sin
        out[..., 1:n_rot:2] = a * sin + b * cos
    return out


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float, window: int = 0,
              emulate: bool = False) -> np.ndarray:
    """q [n, n_head, dk], k [n, n_head_kv, dk], v [n, n_head_kv, dv] -> [n, n_head * dv].

    Causal; with window > 0 a key at position j is visible to query i iff 0 <= i - j < window.
    Query head h reads KV head h // (n_head / n_head_kv) (GQA).
    """
    n, n_head, _ = q.shape
    n_head_kv = k.shape[1]
    group = n_head // n_head_kv
    i = np.arange(n)[:, None]
    j = np.arange(n)[None, :]
    visible = j <= i
    if window > 0:
        visible &= (i - j) < window
    out = np.empty((n, n_head, v.shape[2]), dtype=np.float64)
    for h in range(n_head):
        kh = k[:, h // group, :]
        vh = v[:, h // group, :]
        s = (q[:, h, :] @ kh.T) * scale  # [n, n]
        s = np.where(visible, s, -np.inf)
        s -= s.max(axis=-1, keepdims=True)
        p = np.exp(s)
        p /= p.sum(axis=-1, keepdims=True)
        if emulate:  # ggml's f16 KV cache: KQ and KQV dot products run on f16 operands
            p = _f16(p)
        out[:, h, :] = p @ vh
    return out.reshape(n, -1)


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


# ---------------------------------------------------------------------------------------------------
# ggml emulation (diagnostic only): reproduces llama.cpp's CPU roundings so that a small residual against
# llama.cpp shows the remaining difference is rounding, not a modelling error. Never used for goldens.

_Q = gguf.GGMLQuantizationType
_ACT_Q8_0 = {_Q.Q4_0, _Q.Q5_0, _Q.Q8_0}
_ACT_Q8_1 = {_Q.Q4_1, _Q.Q5_1}
_ACT_Q8_K = {_Q.Q2_K, _Q.Q3_K, _Q.Q4_K, _Q.Q5_K, _Q.Q6_K}


def _f16(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float16).astype(np.float64)


def _quant_act_q8_32(x: np.ndarray) -> np.ndarray:
    """ggml q8_0 / q8_1 activation rounding: blocks of 32, d = amax/127 stored as f16."""
    xb = x.astype(np.float32).reshape(x.shape[0], -1, 32)
    d = np.abs(xb).max(axis=-1, keepdims=True) / 127.0
    inv = np.where(d > 0, 1.0 / np.where(d > 0, d, 1.0), 0.0)
    q = np.round(xb * inv)
    return (q * d.astype(np.float16).astype(np.float32)).astype(np.float64).reshape(x.shape)


def _quant_act_q8_k(x: np.ndarray) -> np.ndarray:
    """ggml q8_K activation rounding: blocks of 256, iscale = -128/max (signed extreme), f32 scale."""
    xb = x.astype(np.float32).reshape(x.shape[0], -1, 256)
    idx = np.abs(xb).argmax(axis=-1)[..., None]
    mx = np.take_along_axis(xb, idx, axis=-1)
    iscale = np.where(mx != 0, -128.0 / np.where(mx != 0, mx, 1.0), 0.0).astype(np.float32)
    q = np.minimum(127.0, np.round(iscale * xb))
    d = np.where(iscale != 0, 1.0 / np.where(iscale != 0, iscale, 1.0), 0.0).astype(np.float32)
    return (q * d).astype(np.float64).reshape(x.shape)


def _emulate_act(x: np.ndarray, wtype) -> np.ndarray:
    if wtype in _ACT_Q8_0 or wtype in _ACT_Q8_1:
        return _quant_act_q8_32(x)
    if wtype in _ACT_Q8_K:
        return _quant_act_q8_k(x)
    if wtype in (_Q.F16, _Q.BF16):
        return _f16(x)
    return x


# ---------------------------------------------------------------------------------------------------
# forward


def _linear(W: _Weights, x: np.ndarray, name: str, bias: bool = False, emulate: bool = False) -> np.ndarray:
    if emulate:
        x = _emulate_act(x, W.tensors[name + ".weight"].tensor_type)
    y = W.matmul_t(x, name + ".weight")
    if bias and W.has(name + ".bias"):
        y = y + W.get(name + ".bias").astype(np.float64)
    return y


def _forward(model_path: str, tokens: tuple[int, ...], emulate: bool = False,
             capture: tuple[int, ...] = ()):
    """Logits [n, n_vocab]; with `capture`, also the outputs of those blocks [n, k * n_embd]."""
    W = _weights_for(model_path)
    cfg = W.config
    n = len(tokens)
    if n == 0:
        raise ValueError("numpy_ref.forward: empty token list")
    if max(tokens) >= cfg.n_vocab or min(tokens) < 0:
        raise ValueError("numpy_ref.forward: token id out of range")
    pos = np.arange(n)
    gemma = cfg.arch == "gemma3"

    x = W.rows("token_embd.weight", tokens).astype(np.float64)  # [n, n_embd]
    if gemma:
        x *= math.sqrt(cfg.n_embd)

    captured = {}
    for il in range(cfg.n_layer):
        p = f"blk.{il}."
        h = rms_norm(x, W.get(p + "attn_norm.weight"), cfg.rms_eps)
        q = _linear(W, h, p + "attn_q", bias=True, emulate=emulate).reshape(n, cfg.n_head, cfg.head_dim_k)
        k = _linear(W, h, p + "attn_k", bias=True, emulate=emulate).reshape(n, cfg.n_head_kv, cfg.head_dim_k)
        v = _linear(W, h, p + "attn_v", bias=True, emulate=emulate).reshape(n, cfg.n_head_kv, cfg.head_dim_v)
        window = 0
        base, pos_scale = cfg.rope_base, 1.0
        if gemma:
            q = rms_norm(q, W.get(p + "attn_q_norm.weight"), cfg.rms_eps)
            k = rms_norm(k, W.get(p + "attn_k_norm.weight"), cfg.rms_eps)
            if cfg.is_sliding(il):
                window, base = cfg.sliding_window, cfg.rope_base_local
            else:
                pos_scale = cfg.rope_scale_global
        q = rope(q, pos, cfg.n_rot, base, cfg.rope_neox, pos_scale)
        k = rope(k, pos, cfg.n_rot, base, cfg.rope_neox, pos_scale)
        if emulate:
            q, k, v = _f16(q * cfg.attn_scale) / cfg.attn_scale, _f16(k), _f16(v)
        attn = attention(q, k, v, cfg.attn_scale, window, emulate)  # [n, n_head * dv]
        attn = _linear(W, attn, p + "attn_output", emulate=emulate)
        if gemma:
            attn = rms_norm(attn, W.get(p + "post_attention_norm.weight"), cfg.rms_eps)
        x = x + attn

        h = rms_norm(x, W.get(p + "ffn_norm.weight"), cfg.rms_eps)
        gate = _linear(W, h, p + "ffn_gate", emulate=emulate)
        up = _linear(W, h, p + "ffn_up", emulate=emulate)
        if gemma:  # ggml evaluates GELU from an f16 lookup table
            act = _f16(gelu_tanh(_f16(gate))) if emulate else gelu_tanh(gate)
        else:
            act = silu(gate)
        ffn = _linear(W, act * up, p + "ffn_down", emulate=emulate)
        if gemma:
            ffn = rms_norm(ffn, W.get(p + "post_ffw_norm.weight"), cfg.rms_eps)
        x = x + ffn
        if il in capture:
            captured[il] = x.copy()

    x = rms_norm(x, W.get("output_norm.weight"), cfg.rms_eps)
    head = "output.weight" if W.has("output.weight") else "token_embd.weight"
    if emulate:
        x = _emulate_act(x, W.tensors[head].tensor_type)
    logits = W.matmul_t(x, head)
    if cfg.final_softcap > 0:
        logits = cfg.final_softcap * np.tanh(logits / cfg.final_softcap)
    if capture:
        hidden = np.concatenate([captured[il] for il in capture], axis=1)
        return logits.astype(np.float32), hidden.astype(np.float32)
    return logits.astype(np.float32)


def _disk_cache_path(model_path: str, tokens: tuple[int, ...], emulate: bool) -> str | None:
    """Where a result is kept between test processes (SALVO_BUILD_DIR, set by ctest), so the
    reference runs once per (model file, tokens) even when several test files need it."""
    base = os.environ.get("SALVO_BUILD_DIR")
    if not base:
        return None
    st = os.stat(model_path)
    key = hashlib.sha256(repr((model_path, st.st_size, st.st_mtime_ns, tokens, emulate,
                               REFERENCE_VERSION)).encode()).hexdigest()[:24]
    return os.path.join(base, "numpy_ref_cache", key + ".npy")


@functools.lru_cache(maxsize=16)
def _forward_cached(model_path: str, tokens: tuple[int, ...], emulate: bool) -> np.ndarray:
    cache = _disk_cache_path(model_path, tokens, emulate)
    if cache and os.path.exists(cache):
        out = np.load(cache)
    else:
        out = _forward(model_path, tokens, emulate)
        if cache:
            os.makedirs(os.path.dirname(cache), exist_ok=True)
            np.save(cache + ".tmp.npy", out)
            os.replace(cache + ".tmp.npy", cache)
    out.setflags(write=False)
    return out


def hidden_states(model_path: str, tokens: Sequence[int], layers: Sequence[int]):
    """(logits [n, n_vocab], outputs of blocks `layers` [n, len(layers) * n_embd]) at positions
    0..n-1: the residual stream after each listed block, before the final norm (not memoized)."""
    return _forward(os.path.abspath(model_path), tuple(int(t) for t in tokens), False,
                    tuple(int(l) for l in layers))


def forward(model_path: str, tokens: Sequence[int], emulate_ggml: bool = False) -> np.ndarray:
    """Logits float32 [n_tokens, n_vocab] for `tokens` at positions 0..n-1 (results are memoized).

    emulate_ggml=True reproduces llama.cpp CPU roundings (int8 activation blocks per weight type, f16
    K/V/Q and attention probabilities, f16 GELU table); it is a diagnostic for the reference itself.
    """
    return _forward_cached(os.path.abspath(model_path), tuple(int(t) for t in tokens), bool(emulate_ggml))


@dataclasses.dataclass
class LogitsDiff:
    """How far `got` [n, vocab] is from `want` [n, vocab], per position then worst case."""

    top1_agreement: float  # fraction of positions whose argmax matches
    min_corr: float  # worst per-position Pearson correlation
    max_rel_err: float  # worst per-position max|got - want| / (max(want) - min(want))
    max_abs_err: float
    top1_mismatch_gaps: list  # for mismatched positions: want[want_top1] - want[got_top1] (>= 0)

    def __str__(self) -> str:
        return (f"top1 {self.top1_agreement:.3f} min_corr {self.min_corr:.5f} "
                f"max_rel_err {self.max_rel_err:.4f} max_abs_err {self.max_abs_err:.3f} "
                f"mismatch_gaps {[round(g, 3) for g in self.top1_mismatch_gaps]}")


def compare_logits(got: np.ndarray, want: np.ndarray) -> LogitsDiff:
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    g1, w1 = got.argmax(-1), want.argmax(-1)
    rng = want.max(-1) - want.min(-1)
    err = np.abs(got - want).max(-1)
    corr = [np.corrcoef(got[i], want[i])[0, 1] for i in range(len(got))]
    gaps = [float(want[i, w1[i]] - want[i, g1[i]]) for i in range(len(got)) if g1[i] != w1[i]]
    return LogitsDiff(float(np.mean(g1 == w1)), float(np.min(corr)), float(np.max(err / rng)),
                      float(err.max()), gaps)


if __name__ == "__main__":
    import sys
    import time

    path = sys.argv[1]
    toks = [int(t) for t in sys.argv[2].split(",")] if len(sys.argv) > 2 else [1, 2, 3, 4]
    t0 = time.time()
    lg = forward(path, toks)
    print(load_config(path))
    print("shape", lg.shape, "argmax", lg.argmax(-1).tolist(), f"{time.time() - t0:.1f}s")
