"""The target model (llama / qwen2 GGUF) as a minimal PyTorch module, weights dequantized on its device.

Only what training needs: a batched forward that returns the outputs of chosen blocks, and a KV-cache
step for greedy generation. RoPE follows llama.cpp: llama-arch GGUFs store Q/K permuted for the
interleaved ("norm") mode, qwen2 uses NEOX, so each arch gets its own rotation and no un-permuting.
"""

import torch
import torch.nn.functional as F

import gguf
import dequant
import static_decode


def _field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


class GGUFWeights:
    """A GGUF's hparams and its tensors, dequantized on demand (tensor()) on the device asked for."""

    def __init__(self, path):
        r = gguf.GGUFReader(path)
        arch = _field(r, "general.architecture")
        if arch not in ("llama", "qwen2"):
            raise SystemExit(f"error: {path}: architecture {arch!r} is not llama or qwen2")
        self.arch = arch
        g = lambda k, d=None: _field(r, f"{arch}.{k}", d)
        self.n_layer = int(g("block_count"))
        self.n_embd = int(g("embedding_length"))
        self.n_head = int(g("attention.head_count"))
        self.n_head_kv = int(g("attention.head_count_kv", self.n_head))
        self.head_dim = self.n_embd // self.n_head
        self.rope_base = float(g("rope.freq_base", 10000.0))
        self.rms_eps = float(g("attention.layer_norm_rms_epsilon", 1e-6))
        eos = {int(_field(r, "tokenizer.ggml.eos_token_id", 0))}
        tokens = _field(r, "tokenizer.ggml.tokens") or []
        for name in ("<|im_end|>", "<|endoftext|>", "<|eot_id|>"):
            if name in tokens:
                eos.add(tokens.index(name))
        self.eos = sorted(eos)
        # The quantized bytes only: Target expands them on its device (dequant.py).
        self.raw = {t.name: (t.data, t.tensor_type, list(reversed([int(x) for x in t.shape]))) for t in r.tensors}
        self.n_vocab = self.raw["token_embd.weight"][2][0]
        self.tied = "output.weight" not in self.raw

    def has(self, name):
        return name in self.raw or (name == "output.weight" and self.tied)

    def tensor(self, name, device="cpu", dtype=torch.float32):
        """[rows, cols] like PyTorch (1-D tensors flat); a tied head is the token embedding."""
        data, qtype, shape = self.raw["token_embd.weight" if name == "output.weight" and self.tied else name]
        return dequant.to_torch(data, qtype, shape, device, dtype)


def rope_tables(positions, head_dim, base, device):
    inv = base ** (-torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim)
    ang = positions.to(torch.float32)[..., None] * inv  # [..., head_dim/2]
    return ang.cos(), ang.sin()


def rope_neox(x, cos, sin):
    """x [..., T, H, D]; cos/sin [..., T, D/2]: rotate halves (i, i + D/2)."""
    d = x.shape[-1] // 2
    c, s = cos[..., None, :].to(x.dtype), sin[..., None, :].to(x.dtype)
    x1, x2 = x[..., :d], x[..., d:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def rope_norm(x, cos, sin):
    """Interleaved pairs (2i, 2i+1), llama.cpp's normal mode."""
    c, s = cos[..., None, :].to(x.dtype), sin[..., None, :].to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).flatten(-2)


def grouped_attention(q, k, v, mask):
    """Attention of q [n,H,T,D] over k, v [n,Hk,S,D] under a bool mask broadcastable to [n,1,T,S],
    the H / Hk query heads of a K/V head as one matrix against it, K and V read once. SDPA given a
    mask and enable_gqa may take its math path, which repeats K and V for every query head: for
    the 1.5B's ~2600-row decode steps (6 heads a K/V head) an estimated ~440 GB of copies a step
    against ~33 GB of K and V, which fits the ~29k tokens/s that sessions 23-25 generated at."""
    n, H, T, D = q.shape
    Hk = k.shape[1]
    s = torch.matmul(q.reshape(n, Hk, H // Hk * T, D), k.transpose(-1, -2)).float() * D ** -0.5
    # Finite: a left-padded prefill's padding rows see no key, and their softmax must not be NaN (their
    # V enters the cache, and 0 x NaN is NaN in every row that masks it).
    s = s.view(n, Hk, H // Hk, T, -1).masked_fill_(~mask.reshape(mask.shape[0], 1, 1, T, -1), -1e30)
    p = torch.softmax(s, -1).to(v.dtype).view(n, Hk, H // Hk * T, -1)
    return torch.matmul(p, v).view(n, H, T, D)


def rms(x, w, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


class Target(torch.nn.Module):
    def __init__(self, gw, device, dtype=torch.bfloat16):
        super().__init__()
        self.hp = gw
        self.dtype = dtype
        self.device = device
        t = lambda n: gw.tensor(n, device, dtype)
        self.embd = t("token_embd.weight")
        self.lm_head = self.embd if gw.tied else t("output.weight")
        self.out_norm = t("output_norm.weight")
        self.layers = []
        for i in range(gw.n_layer):
            p = f"blk.{i}."
            L = {k: t(p + n) for k, n in [("an", "attn_norm.weight"), ("q", "attn_q.weight"), ("k", "attn_k.weight"),
                                           ("v", "attn_v.weight"), ("o", "attn_output.weight"),
                                           ("fn", "ffn_norm.weight"), ("g", "ffn_gate.weight"),
                                           ("u", "ffn_up.weight"), ("d", "ffn_down.weight")]}
            for k, n in [("qb", "attn_q.bias"), ("kb", "attn_k.bias"), ("vb", "attn_v.bias")]:
                L[k] = t(p + n) if gw.has(p + n) else None
            self.layers.append(L)
        self.rope = rope_neox if gw.arch == "qwen2" else rope_norm

    @torch.no_grad()
    def forward(self, ids, pos, capture, upto=None):
        """ids/pos [N, T], rows right-padded. Causal. Returns {layer: [N,T,E]} for the layers in
        capture (block outputs) and the final hidden state if upto is None. Causality alone keeps
        a real position's keys real, so SDPA runs without a mask (given one with enable_gqa it may
        take its math path: K and V repeated per head, the scores materialized)."""
        hp = self.hp
        N, T = ids.shape
        x = self.embd[ids]
        cos, sin = rope_tables(pos, hp.head_dim, hp.rope_base, ids.device)
        out = {}
        last = hp.n_layer if upto is None else upto + 1
        for i in range(last):
            L = self.layers[i]
            q, k, v = self._pre_attn(x, L["an"], L["q"], L["k"], L["v"], L["qb"], L["kb"], L["vb"], cos, sin)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            x = self._post_attn(x, a, L["o"], L["fn"], L["g"], L["u"], L["d"])
            if i in capture:
                out[i] = x
        if upto is None:
            out["final"] = rms(x, self.out_norm, hp.rms_eps)
        return out

    def _pre_attn(self, x, an, wq, wk, wv, qb, kb, vb, cos, sin):
        """A layer up to its attention: q [n,H,T,D] and k, v [n,Hk,T,D], RoPE applied."""
        hp = self.hp
        n, T = x.shape[:2]
        h = rms(x, an, hp.rms_eps)
        q, k, v = h @ wq.T, h @ wk.T, h @ wv.T
        if qb is not None:
            q, k, v = q + qb, k + kb, v + vb
        q = self.rope(q.view(n, T, hp.n_head, hp.head_dim), cos, sin).transpose(1, 2)
        k = self.rope(k.view(n, T, hp.n_head_kv, hp.head_dim), cos, sin).transpose(1, 2)
        return q, k, v.view(n, T, hp.n_head_kv, hp.head_dim).transpose(1, 2)

    def _post_attn(self, x, a, wo, fn, wg, wu, wd):
        """The rest of a layer after its attention a [n,H,T,D]."""
        n, T = x.shape[:2]
        x = x + a.transpose(1, 2).reshape(n, T, -1) @ wo.T
        h = rms(x, fn, self.hp.rms_eps)
        return x + (F.silu(h @ wg.T) * (h @ wu.T)) @ wd.T

    def _head(self, x):
        return (rms(x[:, -1], self.out_norm, self.hp.rms_eps) @ self.lm_head.T).argmax(-1)

    def _compiled(self):
        """The decode step's pieces through torch.compile (train.py --gen-compile): eager generation
        runs ~50 small kernels a layer a step, each launched from Python; compiled, a layer is two
        calls of fused kernels around the attention and its cache writes."""
        if not hasattr(self, "_fns"):
            self._fns = tuple(torch.compile(f, dynamic=True) for f in (self._pre_attn, self._post_attn, self._head))
        return self._fns

    @torch.no_grad()
    def generate(self, prompts, max_new, eos, compiled=False, graphs=False):
        """Greedy continuation of a batch of token-id lists (left-padded). Returns the new ids per
        prompt, cut after the first EOS (EOS included). compiled: the step's pieces through
        torch.compile; graphs: fixed-shape steps replayed as CUDA graphs (static_decode.py). If
        either fails, generation goes on without it from then on."""
        eager = (self._pre_attn, self._post_attn, self._head)
        fns = eager
        if compiled and not getattr(self, "_compile_failed", False):
            fns = self._compiled()
        if graphs and not getattr(self, "_graphs_failed", False):
            try:
                return static_decode.generate(self, prompts, max_new, eos, fns,
                                              torch.device(self.device).type == "cuda")
            except torch.cuda.OutOfMemoryError:
                raise  # the batch's size: the caller splits it
            except Exception as e:  # noqa: BLE001 -- a capture or compiler failure: plain steps
                print(f"generate: graphs failed ({type(e).__name__}: {str(e)[:300]}); plain steps from here on",
                      flush=True)
                self._graphs_failed = True
        if fns is not eager:
            try:
                return self._generate(prompts, max_new, eos, *fns)
            except torch.cuda.OutOfMemoryError:
                raise
            except Exception as e:  # noqa: BLE001 -- any compiler failure: generate uncompiled
                print(f"generate: torch.compile failed ({type(e).__name__}: {str(e)[:300]}); eager from here on",
                      flush=True)
                self._compile_failed = True
        return self._generate(prompts, max_new, eos, *eager)

    @torch.no_grad()
    def agreement(self, prompts, outs, rows=32):
        """The share of generated tokens (outs, per prompt) that are the argmax of a full causal
        forward over the prompt and the tokens before them, on the first `rows` rows: each token
        judged on its own history by an independent path (SDPA, no cache). Rounding between the
        paths flips a near tie now and then; a fault in a decode path (a cache index, a mask)
        flips most tokens. train.py checks its fast generation paths with it."""
        hit = total = 0
        for p, o in list(zip(prompts, outs))[:rows]:
            if not o:
                continue
            seq = torch.tensor([list(p) + list(o)], device=self.device)
            h = self.forward(seq, torch.arange(seq.shape[1], device=self.device)[None], ())["final"][0]
            pred = (h[len(p) - 1:-1] @ self.lm_head.T).argmax(-1)
            hit += int((pred == seq[0, len(p):]).sum())
            total += len(o)
        return hit / max(1, total)

    def new_batch(self, prompts, max_new, eos):
        """A generation's state for a batch of token-id lists, left-padded to the longest (P):
        ids [N,P], valid [N,P+max_new] (the real positions), pos [N,P], empty K/V caches a layer,
        the EOS ids, done and out (the new ids) per row, and rows (each live row's original row)."""
        hp, dev = self.hp, self.device
        N = len(prompts)
        P = max(len(p) for p in prompts)
        ids = torch.zeros(N, P, dtype=torch.long, device=dev)
        valid = torch.zeros(N, P + max_new, dtype=torch.bool, device=dev)
        for n, p in enumerate(prompts):
            ids[n, P - len(p):] = torch.tensor(p, device=dev)
            valid[n, P - len(p):] = True
        pos = (valid[:, :P].long().cumsum(1) - 1).clamp(min=0)
        kc = [torch.zeros(N, hp.n_head_kv, P + max_new, hp.head_dim, dtype=self.dtype, device=dev) for _ in self.layers]
        vc = [torch.zeros_like(k) for k in kc]
        return (ids, valid, pos, kc, vc, torch.tensor(eos, device=dev), torch.zeros(N, dtype=torch.bool, device=dev),
                torch.zeros(N, max_new, dtype=torch.long, device=dev), torch.arange(N, device=dev))

    def step(self, fns, ids, pos, c, L, valid, kc, vc):
        """One generation step (fns: pre_attn, post_attn, head, eager or compiled): T =
        ids.shape[1] tokens at cache index c (an int, or a 0-d device tensor that a CUDA graph
        reads) onward, attending over the first L keys under the causal and `valid` masks. Writes
        their K and V into kc / vc and returns the greedy next token of each row's last one."""
        pre_attn, post_attn, head = fns
        hp, dev = self.hp, ids.device
        T = ids.shape[1]
        x = self.embd[ids]
        cos, sin = rope_tables(pos, hp.head_dim, hp.rope_base, dev)
        at = c + torch.arange(T, device=dev)
        mask = (torch.arange(L, device=dev)[None, :] <= at[:, None])[None] & valid[:, None, :L]
        mask = mask[:, None]
        for i, Ly in enumerate(self.layers):
            q, k, v = pre_attn(x, Ly["an"], Ly["q"], Ly["k"], Ly["v"], Ly["qb"], Ly["kb"], Ly["vb"], cos, sin)
            kc[i].index_copy_(2, at, k)
            vc[i].index_copy_(2, at, v)
            a = grouped_attention(q, kc[i][:, :, :L], vc[i][:, :, :L], mask)
            x = post_attn(x, a, Ly["o"], Ly["fn"], Ly["g"], Ly["u"], Ly["d"])
        return head(x)  # argmax of the bf16 logits: a float copy changes no order

    def _generate(self, prompts, max_new, eos, *fns):
        ids, valid, pos, kc, vc, eos_t, done, out, rows = self.new_batch(prompts, max_new, eos)
        cur_ids, cur_pos, start = ids, pos, 0
        for step in range(max_new):
            T = cur_ids.shape[1]
            nxt = self.step(fns, cur_ids, cur_pos, start, start + T, valid, kc, vc)
            out[rows, step] = torch.where(done, torch.zeros_like(nxt), nxt)
            done = done | torch.isin(nxt, eos_t)
            if step == max_new - 1:
                break
            start += T
            cur_ids = nxt[:, None]
            cur_pos = cur_pos[:, -1:] + 1
            if step % 16 == 15:  # drop finished rows: the longest answers no longer drag the whole batch
                n_done = int(done.sum())
                if n_done == len(rows):
                    break
                if n_done * 4 >= len(rows):
                    keep = (~done).nonzero()[:, 0]
                    kc = [k[keep] for k in kc]
                    vc = [v[keep] for v in vc]
                    valid, rows, done = valid[keep], rows[keep], done[keep]
                    cur_ids, cur_pos = cur_ids[keep], cur_pos[keep]
        return cut_at_eos(out, eos)


def cut_at_eos(out, eos):
    """The new ids [N, max_new] as lists, each cut after its first EOS (EOS included)."""
    res = []
    for row in out.tolist():
        cut = next((j + 1 for j, t in enumerate(row) if t in eos), len(row))
        res.append(row[:cut])
    return res
