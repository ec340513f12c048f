"""The DFlash block drafter of dflash_spec.md (version 1) in PyTorch, plus its I8 export format.

Two forwards: `train_forward` runs many blocks per sequence in one pass with an explicit mask (block a
sees context t < anchor_a and its own B rows); `reference_forward` is the spec's single-block pass in
float32, written plainly, used for reference.safetensors and to cross-check the batched one.
"""

import math

import numpy as np
import torch
import torch.nn.functional as F

from target import rms, rope_neox, rope_tables


class Drafter(torch.nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        E, k = cfg["n_embd"], len(cfg["target_layers"]) * cfg["target"]["n_embd"]
        H, Hk, D, ff = cfg["n_head"], cfg["n_head_kv"], cfg["head_dim"], cfg["n_ff"]
        lin = lambda o, i: torch.nn.Parameter(torch.randn(o, i) / math.sqrt(i))
        one = lambda n: torch.nn.Parameter(torch.ones(n))
        p = {"fc.weight": lin(E, k), "hidden_norm.weight": one(E),
             "mask_embd": torch.nn.Parameter(torch.randn(E) * 0.02), "output_norm.weight": one(E)}
        for i in range(cfg["n_layer"]):
            q = f"layers.{i}."
            p.update({q + "attn_norm.weight": one(E), q + "q.weight": lin(H * D, E), q + "k.weight": lin(Hk * D, E),
                      q + "v.weight": lin(Hk * D, E), q + "o.weight": lin(E, H * D) * 0.5,
                      q + "q_norm.weight": one(D), q + "k_norm.weight": one(D), q + "ffn_norm.weight": one(E),
                      q + "gate.weight": lin(ff, E), q + "up.weight": lin(ff, E), q + "down.weight": lin(E, ff) * 0.5})
        self.p = torch.nn.ParameterDict({n.replace(".", "__"): v if isinstance(v, torch.nn.Parameter)
                                         else torch.nn.Parameter(v) for n, v in p.items()})
        if cfg.get("adapter"):
            nh = cfg["adapter"]["n_hidden"]
            self.a = torch.nn.ParameterDict({"a_h": lin(nh, E), "a_e": lin(nh, E),
                                             "b": torch.nn.Parameter(torch.zeros(E, nh))})
        else:
            self.a = None

    def w(self, name):
        return self.p[name.replace(".", "__")]

    def context(self, feats):
        """feats [..., T, kE] -> c [..., T, E]."""
        c = self.cfg
        return rms(feats @ self.w("fc.weight").T.to(feats.dtype), self.w("hidden_norm.weight"), c["rms_eps"])

    def _qk(self, x, W, nw, n, cos, sin):
        c = self.cfg
        y = (x @ W.T).unflatten(-1, (n, c["head_dim"]))
        return rope_neox(rms(y, nw, c["rms_eps"]), cos, sin)

    def train_forward(self, feats, ids, anchors, embd):
        """feats [N,T,kE], ids [N,T] long, anchors [N,A] long (positions p of the roots; context
        t < p), embd [V,E] the target embedding. Returns y [N, A, B, E] (after output_norm)."""
        c = self.cfg
        N, T, _ = feats.shape
        A, B = anchors.shape[1], c["block_size"]
        H, Hk, D = c["n_head"], c["n_head_kv"], c["head_dim"]
        dev = feats.device
        ctx = self.context(feats)
        roots = torch.gather(ids, 1, anchors)  # [N,A]
        x = self.w("mask_embd").expand(N, A, B, -1).clone()
        x[:, :, 0] = embd[roots].to(x.dtype)
        x = x.reshape(N, A * B, -1)
        bpos = (anchors[:, :, None] + torch.arange(B, device=dev)).reshape(N, A * B)
        cpos = torch.arange(T, device=dev).expand(N, T)
        bcos, bsin = rope_tables(bpos, D, c["rope_base"], dev)
        ccos, csin = rope_tables(cpos, D, c["rope_base"], dev)
        # mask [N, A*B, T + A*B]: context keys t < anchor, block keys of the same block
        cm = cpos[:, None, :] < anchors.repeat_interleave(B, 1)[:, :, None]
        blk = torch.arange(A, device=dev).repeat_interleave(B)
        bm = (blk[:, None] == blk[None, :]).expand(N, -1, -1)
        mask = torch.cat([cm, bm], 2)[:, None]
        for i in range(c["n_layer"]):
            q = f"layers.{i}."
            h = rms(x, self.w(q + "attn_norm.weight"), c["rms_eps"])
            qq = self._qk(h, self.w(q + "q.weight"), self.w(q + "q_norm.weight"), H, bcos, bsin)
            kb = self._qk(h, self.w(q + "k.weight"), self.w(q + "k_norm.weight"), Hk, bcos, bsin)
            vb = (h @ self.w(q + "v.weight").T).unflatten(-1, (Hk, D))
            kc = self._qk(ctx, self.w(q + "k.weight"), self.w(q + "k_norm.weight"), Hk, ccos, csin)
            vc = (ctx @ self.w(q + "v.weight").T).unflatten(-1, (Hk, D))
            K = torch.cat([kc, kb], 1).transpose(1, 2)
            V = torch.cat([vc, vb], 1).transpose(1, 2).to(K.dtype)
            a = F.scaled_dot_product_attention(qq.transpose(1, 2).to(K.dtype), K, V, attn_mask=mask, enable_gqa=True)
            x = x + a.transpose(1, 2).flatten(2).to(x.dtype) @ self.w(q + "o.weight").T
            h = rms(x, self.w(q + "ffn_norm.weight"), c["rms_eps"])
            x = x + (F.silu(h @ self.w(q + "gate.weight").T) * (h @ self.w(q + "up.weight").T)) @ self.w(q + "down.weight").T
        y = rms(x, self.w("output_norm.weight"), c["rms_eps"])
        return y.reshape(N, A, B, -1)

    def adapt(self, y, prev_e):
        """u = y + b @ silu(a_h @ y + a_e @ E(prev))."""
        return y + F.silu(y @ self.a["a_h"].T + prev_e @ self.a["a_e"].T) @ self.a["b"].T


def tensors_of(d):
    """Spec-named float32 CPU tensors of a drafter."""
    out = {n.replace("__", "."): v.detach().float().cpu() for n, v in d.p.items()}
    if d.a is not None:
        out.update({f"adapter.{n}.weight": v.detach().float().cpu() for n, v in d.a.items()})
    return out


def quantize_i8(t):
    """Symmetric per-row int8: W[r,c] = q[r,c] * scale[r], scale = max|W[r,:]| / 127."""
    a = t.numpy().astype(np.float32)
    scale = np.abs(a).max(1) / 127.0
    scale[scale == 0] = 1.0
    q = np.clip(np.rint(a / scale[:, None]), -127, 127).astype(np.int8)
    return q, scale.astype(np.float32)


def export_arrays(tensors):
    """name -> numpy arrays as shipped: I8 matrices + .scale, F32 vectors; and the dequantized view."""
    ship, deq = {}, {}
    for n, t in tensors.items():
        if t.dim() == 2:
            q, s = quantize_i8(t)
            ship[n], ship[n + ".scale"] = q, s
            deq[n] = torch.from_numpy(q.astype(np.float32) * s[:, None])
        else:
            ship[n] = t.numpy().astype(np.float32)
            deq[n] = t.clone()
    return ship, deq


def reference_forward(cfg, W, feats, root, embd, lm_head):
    """dflash_spec.md's single-block forward in float32. W: name -> tensor (dequantized), feats [T,kE],
    root int, embd/lm_head [V,E] float32. Returns (logits [B-1,V], y [B,E])."""
    T, B, eps, D = feats.shape[0], cfg["block_size"], cfg["rms_eps"], cfg["head_dim"]
    H, Hk = cfg["n_head"], cfg["n_head_kv"]

    def norm(x, w):
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w

    def rope(x, pos):  # x [n, heads, D]
        inv = cfg["rope_base"] ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
        ang = pos.double()[:, None] * inv
        cos, sin = ang.cos().float()[:, None], ang.sin().float()[:, None]
        x1, x2 = x[..., : D // 2], x[..., D // 2:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)

    c = norm(feats @ W["fc.weight"].T, W["hidden_norm.weight"])
    x = W["mask_embd"].expand(B, -1).clone()
    x[0] = embd[root]
    cpos, bpos = torch.arange(T), torch.arange(T, T + B)
    for i in range(cfg["n_layer"]):
        p = f"layers.{i}."
        kc = rope(norm((c @ W[p + "k.weight"].T).view(T, Hk, D), W[p + "k_norm.weight"]), cpos)
        vc = (c @ W[p + "v.weight"].T).view(T, Hk, D)
        h = norm(x, W[p + "attn_norm.weight"])
        q = rope(norm((h @ W[p + "q.weight"].T).view(B, H, D), W[p + "q_norm.weight"]), bpos)
        kb = rope(norm((h @ W[p + "k.weight"].T).view(B, Hk, D), W[p + "k_norm.weight"]), bpos)
        vb = (h @ W[p + "v.weight"].T).view(B, Hk, D)
        K, V = torch.cat([kc, kb]), torch.cat([vc, vb])
        att = torch.empty(B, H, D)
        for hh in range(H):
            g = hh // (H // Hk)
            s = (q[:, hh] @ K[:, g].T) / math.sqrt(D)
            att[:, hh] = torch.softmax(s, -1) @ V[:, g]
        x = x + att.reshape(B, H * D) @ W[p + "o.weight"].T
        h = norm(x, W[p + "ffn_norm.weight"])
        x = x + (F.silu(h @ W[p + "gate.weight"].T) * (h @ W[p + "up.weight"].T)) @ W[p + "down.weight"].T
    y = norm(x, W["output_norm.weight"])
    return y[1:] @ lm_head.T, y
