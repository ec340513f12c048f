"""The target's hidden states at the drafter's layers ("features"), computed once per shard and
kept on the GPU while the drafter trains on them.

--feature-fp8 keeps them as float8 (e4m3) with a scale per token and layer: half the memory of
bf16, so session 47's 99k sequences (251 GB in bf16, three shards that each took its passes in
a row) fit one shard and every pass draws from all of them. e4m3 keeps ~3 significant bits at
any magnitude, which the per-token scale puts in range (the target's hidden states hold a few
channels hundreds of times larger than the rest)."""

import gc
import math
import time

import numpy as np
import torch

FP8_MAX = 448.0  # the largest finite float8_e4m3fn


def pad_batch(seqs, dev):
    T = max(len(s) for s in seqs)
    ids = torch.zeros(len(seqs), T, dtype=torch.long, device=dev)
    for n, s in enumerate(seqs):
        ids[n, :len(s)] = torch.tensor(s, device=dev)
    return ids


def compute_features(tg, seqs, layers, batch, dev):
    """bf16 [N, Tmax, k*E] features of every sequence (past its end: the padding's, not to be used)."""
    T = max(len(s) for s in seqs)
    E = tg.hp.n_embd
    feats = torch.zeros(len(seqs), T, len(layers) * E, dtype=torch.bfloat16, device=dev)
    for s in range(0, len(seqs), batch):
        chunk = seqs[s:s + batch]
        ids = pad_batch(chunk, dev)
        n, t = ids.shape
        # Right-padded, as Target.forward takes them; the padding's features are not kept.
        o = tg(ids, torch.arange(t, device=dev).expand(n, t), set(layers), upto=max(layers))
        feats[s:s + n, :t] = torch.cat([o[l] for l in layers], -1)
    return feats


def to_fp8(f, k):
    """[..., k*E] bf16 -> (float8_e4m3fn [..., k*E], float32 scales [..., k]), one scale per layer's E."""
    g = f.float().unflatten(-1, (k, -1))
    scale = (g.abs().amax(-1) / FP8_MAX).clamp(min=1e-12)
    # Clamped: e4m3fn has no infinity, and a value rounded past its largest is NaN.
    return (g / scale[..., None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).flatten(-2), scale


def from_fp8(q, scale, k):
    return (q.unflatten(-1, (k, -1)).to(torch.bfloat16) * scale[..., None].to(torch.bfloat16)).flatten(-2)


def feature_bytes(k, E, fp8):
    """Bytes a token's features take in the store."""
    return k * E + 4 * k if fp8 else 2 * k * E


class FeatureStore:
    """Features of a set of training sequences, packed without padding ([sum of lengths, k*E], bf16
    or float8 with scales) so that tens of thousands of sequences fit; a larger set is trained on in
    shards (see shards_of)."""

    def __init__(self, tg, seqs, layers, dev, tokens_per_batch=64 * 512, fp8=False, capacity=0):
        self.tg, self.seqs, self.layers, self.dev, self.tpb = tg, seqs, layers, dev, tokens_per_batch
        self.fp8, self.k = fp8, len(layers)
        self.key, self.flat, self.scale = None, None, None
        # One buffer for every shard, sized at the first load for `capacity` tokens (the largest
        # shard's): session 55's run freed its first 40 GB shard and could not allocate the
        # second, the allocator's cache having fragmented around it over 12k steps.
        self.cap, self.buf, self.sbuf = capacity, None, None

    def load(self, idx):
        key = tuple(idx)
        if key == self.key:
            return 0.0
        t0 = time.time()
        self.key, self.flat, self.scale = None, None, None
        lens = [len(self.seqs[i]) for i in idx]
        self.off = torch.tensor([0] + list(np.cumsum(lens)[:-1]), device=self.dev)
        self.lens = torch.tensor(lens, device=self.dev)
        self.pos = {i: n for n, i in enumerate(idx)}
        width = self.k * self.tg.hp.n_embd
        # float8 is kept as its bytes (uint8): indexing and copies need no float8 kernels.
        dtype = torch.uint8 if self.fp8 else torch.bfloat16
        n_tok = sum(lens)
        if self.buf is None or self.buf.shape[0] < n_tok:
            self.buf, self.sbuf = None, None
            gc.collect()
            if self.dev == "cuda":
                torch.cuda.empty_cache()
            rows = max(n_tok, self.cap)
            self.buf = torch.empty(rows, width, dtype=dtype, device=self.dev)
            if self.fp8:
                self.sbuf = torch.empty(rows, self.k, dtype=torch.float32, device=self.dev)
        self.flat = self.buf[:n_tok]
        if self.fp8:
            self.scale = self.sbuf[:n_tok]
        order = sorted(range(len(idx)), key=lambda n: lens[n])  # similar lengths together: little padding
        s = 0
        while s < len(order):
            e = s + 1
            while e < len(order) and (e - s + 1) * lens[order[e]] <= self.tpb:
                e += 1
            chunk = order[s:e]
            f = compute_features(self.tg, [self.seqs[idx[n]] for n in chunk], self.layers, len(chunk), self.dev)
            if self.fp8:
                f, sc = to_fp8(f, self.k)
                f = f.view(torch.uint8)
            for r, n in enumerate(chunk):
                o = int(self.off[n])
                self.flat[o:o + lens[n]] = f[r, :lens[n]]
                if self.fp8:
                    self.scale[o:o + lens[n]] = sc[r, :lens[n]]
            s = e
        if self.dev == "cuda":
            torch.cuda.synchronize()
        self.key = key
        return time.time() - t0

    def batch(self, sel, T):
        """bf16 [n, T, k*E] for the given sequence indices (T at least their longest; rows past a
        sequence's end repeat its last row and are never attended: contexts end before the anchor)."""
        rows = torch.tensor([self.pos[i] for i in sel], device=self.dev)
        L = self.lens[rows]
        at = self.off[rows, None] + torch.minimum(torch.arange(T, device=self.dev)[None], L[:, None] - 1)
        if self.fp8:
            return from_fp8(self.flat[at].view(torch.float8_e4m3fn), self.scale[at], self.k)
        return self.flat[at]


def shards_of(tr, seqs, token_bytes, feature_gb, rng, trim=0.03):
    """The training indices in shards whose packed features fit in feature_gb (one shard when all
    fit), and the features' total GB. When the features are at most `trim` over a shard fewer,
    the sequences past it are left out: session 55's 131 GB against 2 x 64 made a third shard,
    whose features cost 67 s of an H100's time (~3,000 steps) for 2% of the data."""
    total = sum(len(seqs[i]) for i in tr) * token_bytes / 1e9
    k = max(1, math.ceil(total / feature_gb))
    order = list(tr)
    if k > 1:
        rng.shuffle(order)
    if k > 1 and total <= (k - 1) * feature_gb * (1 + trim):
        k -= 1
        room, kept = k * feature_gb * 1e9 / token_bytes, []
        for i in order:
            if room >= len(seqs[i]):
                kept.append(i)
                room -= len(seqs[i])
        order, total = kept, sum(len(seqs[i]) for i in kept) * token_bytes / 1e9
    return [sorted(order[j::k]) for j in range(k)], total
