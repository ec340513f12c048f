"""DFlash drafters for tests: a random-drafter writer and an independent NumPy forward pass.

The format and the forward pass are those of the salvo DFlash spec, version 1 (see
src/speculative/dflash_model.h). The forward here is written from the spec in float64 and shares no
code with salvo; the target's embedding rows and LM head come from the GGUF through numpy_ref (the
`gguf` package's dequantizer).

  write_random_drafter(dir, model_path, ...) -> config dict   (config.json + model.safetensors)
  write_inputs(path, features, root, adapter_prev)             (the reference.safetensors inputs)
  forward(dir, model_path, features, root) -> (logits [B-1, n_vocab], y [B, n_embd])
  adapter_logits(dir, model_path, y, prev) -> [B-1, n_vocab]
"""

from __future__ import annotations

import json
import os

import numpy as np
from gguf import GGMLQuantizationType
from gguf import quants as gguf_quants
from safetensors.numpy import load_file, save_file

import numpy_ref


def _quantize_i8(w: np.ndarray):
    """Symmetric per-row int8: scale = max|W[r,:]| / 127."""
    scale = np.abs(w).max(axis=1) / 127.0
    scale[scale == 0] = 1.0
    q = np.clip(np.rint(w / scale[:, None]), -127, 127).astype(np.int8)
    return q, scale.astype(np.float32)


def write_random_drafter(out_dir: str, model_path: str, target_name: str, *, target_layers=None,
                         block_size=8, n_layer=2, n_head=None, n_head_kv=None, head_dim=64, n_ff=None,
                         adapter_hidden=64, adapter_top_k=8, seed=0, rope_base=10000.0,
                         weight_scale=1.0) -> dict:
    """A drafter of random weights for `model_path`'s target. Most matrices are I8 with scales (as
    shipped); one is F16 and one BF16-sized F32, vectors F32 with one F16, so every dtype is read."""
    cfg_t = numpy_ref.load_config(model_path)
    rng = np.random.default_rng(seed)
    n_embd = cfg_t.n_embd
    n_head = n_head or max(1, n_embd // head_dim)
    n_head_kv = n_head_kv or max(1, n_head // 3 if n_head % 3 == 0 else n_head)
    n_ff = n_ff or 2 * n_embd
    if target_layers is None:
        target_layers = [1, cfg_t.n_layer // 2, cfg_t.n_layer - 2]
    k = len(target_layers)
    config = {
        "format": "salvo-dflash", "version": 1,
        "target": {"name": target_name, "arch": cfg_t.arch, "n_embd": n_embd, "n_vocab": cfg_t.n_vocab,
                   "n_layer": cfg_t.n_layer, "sha256": ""},
        "target_layers": list(target_layers), "block_size": block_size,
        "n_layer": n_layer, "n_embd": n_embd, "n_head": n_head, "n_head_kv": n_head_kv,
        "head_dim": head_dim, "n_ff": n_ff, "rope_base": rope_base, "rms_eps": 1e-6,
        "adapter": {"n_hidden": adapter_hidden, "top_k": adapter_top_k} if adapter_hidden else None,
    }
    tensors = {}

    def mat(name, rows, cols, dtype="i8"):
        w = (rng.standard_normal((rows, cols)) * weight_scale / np.sqrt(cols)).astype(np.float32)
        if dtype == "i8":
            tensors[name], tensors[name + ".scale"] = _quantize_i8(w)
        elif dtype == "f16":
            tensors[name] = w.astype(np.float16)
        else:
            tensors[name] = w

    def vec(name, n, dtype=np.float32):
        tensors[name] = (1.0 + 0.1 * rng.standard_normal(n)).astype(dtype)

    mat("fc.weight", n_embd, k * n_embd)
    vec("hidden_norm.weight", n_embd)
    tensors["mask_embd"] = (0.05 * rng.standard_normal(n_embd)).astype(np.float32)
    for i in range(n_layer):
        p = f"layers.{i}."
        vec(p + "attn_norm.weight", n_embd)
        mat(p + "q.weight", n_head * head_dim, n_embd, "f16" if i == 0 else "i8")
        mat(p + "k.weight", n_head_kv * head_dim, n_embd)
        mat(p + "v.weight", n_head_kv * head_dim, n_embd)
        mat(p + "o.weight", n_embd, n_head * head_dim, "f32" if i == 0 else "i8")
        vec(p + "q_norm.weight", head_dim, np.float16 if i == 0 else np.float32)
        vec(p + "k_norm.weight", head_dim)
        vec(p + "ffn_norm.weight", n_embd)
        mat(p + "gate.weight", n_ff, n_embd)
        mat(p + "up.weight", n_ff, n_embd)
        mat(p + "down.weight", n_embd, n_ff)
    vec("output_norm.weight", n_embd)
    if adapter_hidden:
        mat("adapter.a_h.weight", adapter_hidden, n_embd)
        mat("adapter.a_e.weight", adapter_hidden, n_embd)
        mat("adapter.b.weight", n_embd, adapter_hidden)
    os.makedirs(out_dir, exist_ok=True)
    save_file(tensors, os.path.join(out_dir, "model.safetensors"))
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    return config


def write_inputs(path: str, features: np.ndarray, root: int, adapter_prev=None):
    tensors = {"features": np.ascontiguousarray(features, dtype=np.float32),
               "root": np.array([root], dtype=np.int32)}
    if adapter_prev is not None:
        tensors["adapter_prev"] = np.asarray(adapter_prev, dtype=np.int32)
    save_file(tensors, path)


# The matrices salvo's CPU forward multiplies by in Q8_0 (the adapter's stay float).
_LAYER_MATRICES = {"q.weight", "k.weight", "v.weight", "o.weight", "gate.weight", "up.weight", "down.weight"}


def _is_q8_matrix(name: str) -> bool:
    return name == "fc.weight" or (name.startswith("layers.") and name.split(".", 2)[2] in _LAYER_MATRICES)


def _q8_0(w: np.ndarray) -> np.ndarray:
    """w as F16 (salvo's loaded form), then through the gguf package's Q8_0 quantizer and back."""
    w16 = w.astype(np.float16).astype(np.float32)
    return gguf_quants.dequantize(gguf_quants.quantize(w16, GGMLQuantizationType.Q8_0),
                                  GGMLQuantizationType.Q8_0).astype(np.float64)


def _load(drafter_dir: str, q8: bool = False):
    """q8: the layer matrices rounded as salvo's CPU forward holds them (Q8_0 copies): a drafter
    with large random weights then differs from the float forward by more than the rounding of
    the activations, which is all a test should see."""
    with open(os.path.join(drafter_dir, "config.json")) as f:
        cfg = json.load(f)
    raw = load_file(os.path.join(drafter_dir, "model.safetensors"))
    weights = {}
    for name, t in raw.items():
        if name.endswith(".scale"):
            continue
        w = t.astype(np.float64)
        if t.dtype == np.int8:
            w = w * raw[name + ".scale"].astype(np.float64)[:, None]
        if q8 and _is_q8_matrix(name):
            w = _q8_0(w)
        weights[name] = w
    return cfg, weights


def _rms(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def _rope_neox(x, positions, base):
    """x [n, heads, d]: rotate halves, theta_i = base^(-2i/d), as HF rotate_half."""
    d = x.shape[-1]
    inv = base ** (-np.arange(0, d // 2, dtype=np.float64) * 2 / d)
    ang = positions[:, None].astype(np.float64) * inv[None, :]  # [n, d/2]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return np.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)


def _target(model_path):
    W = numpy_ref._weights_for(os.path.abspath(model_path))
    head = "output.weight" if W.has("output.weight") else "token_embd.weight"
    return W, head


def _q8_rows(a: np.ndarray) -> np.ndarray:
    """Activation rows as an int8 matmul sees them: Q8_0 blocks of 32 (the gguf package's quantizer)."""
    return gguf_quants.dequantize(gguf_quants.quantize(a.astype(np.float32), GGMLQuantizationType.Q8_0),
                                  GGMLQuantizationType.Q8_0).astype(np.float64)


def forward(drafter_dir: str, model_path: str, features: np.ndarray, root: int, q8: bool = False,
            block: int = 0):
    """q8: the drafter's matrices and their inputs rounded to Q8_0 as salvo's CPU forward rounds
    them (the products themselves stay float64). block: the block's rows (0: the drafter's
    block_size; a shorter block is the root and fewer MASK rows)."""
    cfg, w = _load(drafter_dir, q8)
    W, head = _target(model_path)
    eps, B, hd = cfg["rms_eps"], block or cfg["block_size"], cfg["head_dim"]
    nh, nkv = cfg["n_head"], cfg["n_head_kv"]
    T = features.shape[0]

    def mm(a, name):
        return (_q8_rows(a) if q8 else a) @ w[name].T

    c = _rms(mm(features.astype(np.float64), "fc.weight"), w["hidden_norm.weight"], eps)
    x = np.empty((B, cfg["n_embd"]))
    x[0] = W.rows("token_embd.weight", [root])[0]
    x[1:] = w["mask_embd"]
    ctx_pos, blk_pos = np.arange(T), T + np.arange(B)
    for i in range(cfg["n_layer"]):
        p = f"layers.{i}."
        kc = _rms(mm(c, p + "k.weight").reshape(T, nkv, hd), w[p + "k_norm.weight"], eps)
        kc = _rope_neox(kc, ctx_pos, cfg["rope_base"])
        vc = mm(c, p + "v.weight").reshape(T, nkv, hd)
        h = _rms(x, w[p + "attn_norm.weight"], eps)
        q = _rope_neox(_rms(mm(h, p + "q.weight").reshape(B, nh, hd), w[p + "q_norm.weight"], eps),
                       blk_pos, cfg["rope_base"])
        kb = _rope_neox(_rms(mm(h, p + "k.weight").reshape(B, nkv, hd), w[p + "k_norm.weight"], eps),
                        blk_pos, cfg["rope_base"])
        vb = mm(h, p + "v.weight").reshape(B, nkv, hd)
        keys, values = np.concatenate([kc, kb]), np.concatenate([vc, vb])  # [T + B, nkv, hd]
        attn = np.empty((B, nh, hd))
        for head_i in range(nh):
            g = head_i // (nh // nkv)
            s = q[:, head_i] @ keys[:, g].T / np.sqrt(hd)  # [B, T + B], no mask
            s = np.exp(s - s.max(axis=1, keepdims=True))
            attn[:, head_i] = (s / s.sum(axis=1, keepdims=True)) @ values[:, g]
        x = x + mm(attn.reshape(B, nh * hd), p + "o.weight")
        h = _rms(x, w[p + "ffn_norm.weight"], eps)
        gate, up = mm(h, p + "gate.weight"), mm(h, p + "up.weight")
        x = x + mm(gate / (1 + np.exp(-gate)) * up, p + "down.weight")
    y = _rms(x, w["output_norm.weight"], eps)
    logits = W.matmul_t(y[1:], head)
    return logits, y


def adapter_logits(drafter_dir: str, model_path: str, y: np.ndarray, prev) -> np.ndarray:
    """u = y + b silu(a_h y + a_e E(prev)); logits = LM head(u). y: [n, n_embd] (rows 1..B-1)."""
    _, w = _load(drafter_dir)
    W, head = _target(model_path)
    e = W.rows("token_embd.weight", list(prev)).astype(np.float64)
    a = y @ w["adapter.a_h.weight"].T + e @ w["adapter.a_e.weight"].T
    u = y + (a / (1 + np.exp(-a))) @ w["adapter.b.weight"].T
    return W.matmul_t(u, head)
