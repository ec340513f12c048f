"""GGUF tensors dequantized with torch, on the device that will hold them.

Session 54's run spent 58 s of its 24 GPU minutes loading the 1.5B: gguf's numpy dequantizers
hold the GIL, so a thread pool ran them about one at a time on the CPU, and the float32 copies
were then cast and sent to the GPU. Here the quantized bytes (~1 GB) travel and the GPU expands
them. The block layouts are ggml's; every step is in float32 in the order gguf's numpy code uses,
so the results match it bit for bit (`python3 dequant.py MODEL.gguf...` checks every tensor).
Types without a torch form here come back through gguf's numpy dequantizer."""

import sys

import numpy as np
import torch

from gguf import GGMLQuantizationType as Q

# (bytes a block, values a block) of the block types done here
BLOCKS = {Q.Q4_0: (18, 32), Q.Q4_1: (20, 32), Q.Q5_0: (22, 32), Q.Q8_0: (34, 32), Q.Q4_K: (144, 256),
          Q.Q6_K: (210, 256)}


def _f16(b, lo):
    """Bytes lo, lo+1 of every block as a float32 column."""
    return b[:, lo:lo + 2].contiguous().view(torch.float16).float()


def _nibbles(qs):
    """[n, 16] bytes -> [n, 32]: the low nibbles are values 0-15, the high ones 16-31."""
    return torch.cat([qs & 0x0F, qs >> 4], dim=1)


def _q4_0(b):
    return _f16(b, 0) * (_nibbles(b[:, 2:18]).to(torch.int8) - 8).float()


def _q4_1(b):
    return _f16(b, 0) * _nibbles(b[:, 4:20]).float() + _f16(b, 2)


def _q5_0(b):
    qh = b[:, 2:6].to(torch.int64)
    qh = qh[:, 0] | qh[:, 1] << 8 | qh[:, 2] << 16 | qh[:, 3] << 24
    high = (qh[:, None] >> torch.arange(32, device=b.device)) & 1  # bit j is value j's fifth bit
    q = _nibbles(b[:, 6:22]).to(torch.int64) | high << 4
    return _f16(b, 0) * (q - 16).float()


def _q8_0(b):
    return _f16(b, 0) * b[:, 2:34].contiguous().view(torch.int8).float()


def _q4_k(b):
    # 8 sub-blocks of 32 values, each a 6-bit scale and a 6-bit min packed in 12 bytes: bytes 0-3
    # hold scales 0-3 (low 6 bits), 4-7 mins 0-3, and 8-11 the low 4 bits of scale / min 4-7, whose
    # top 2 bits sit in the top bits of bytes 0-3 / 4-7.
    n = b.shape[0]
    s = b[:, 4:16].reshape(n, 3, 4)
    lo, mid, hi = s[:, 0], s[:, 1], s[:, 2]
    sc = torch.cat([lo & 0x3F, (hi & 0x0F) | ((lo >> 2) & 0x30)], dim=1).float()
    mn = torch.cat([mid & 0x3F, (hi >> 4) | ((mid >> 2) & 0x30)], dim=1).float()
    d = (_f16(b, 0) * sc)[:, :, None]
    dm = (_f16(b, 2) * mn)[:, :, None]
    # 4 groups of 32 bytes; a group's low nibbles are sub-block 2g, its high ones 2g+1
    qs = b[:, 16:144].reshape(n, 4, 1, 32)
    q = torch.cat([qs & 0x0F, qs >> 4], dim=2).reshape(n, 8, 32).float()
    return (d * q - dm).reshape(n, 256)


def _q6_k(b):
    # Two halves of 128 values; in half h, ql's 64 bytes give the low 4 bits (low nibbles: values
    # 0-63, high: 64-127), qh's 32 bytes the top 2 bits (bit pairs 0-3 for the four runs of 32).
    # 16 int8 scales, one a run of 16 values.
    n = b.shape[0]
    ql = b[:, 0:128].reshape(n, 2, 1, 64)
    ql = torch.cat([ql & 0x0F, ql >> 4], dim=2).reshape(n, 2, 4, 32)
    qh = b[:, 128:192].reshape(n, 2, 1, 32)
    qh = (qh >> torch.tensor([0, 2, 4, 6], dtype=torch.uint8, device=b.device).reshape(1, 1, 4, 1)) & 0x03
    q = ((ql | (qh << 4)).to(torch.int8) - 32).reshape(n, 16, 16).float()
    d = (_f16(b, 208) * b[:, 192:208].contiguous().view(torch.int8).float())[:, :, None]
    return (d * q).reshape(n, 256)


KERNELS = {Q.Q4_0: _q4_0, Q.Q4_1: _q4_1, Q.Q5_0: _q5_0, Q.Q8_0: _q8_0, Q.Q4_K: _q4_k, Q.Q6_K: _q6_k}


def to_torch(data, qtype, shape, device, dtype=torch.float32):
    """One GGUF tensor (a GGUFReader tensor's data and type) as a `shape` tensor on device."""
    qtype = Q(qtype)
    if qtype in (Q.F32, Q.F16, Q.BF16) or qtype not in KERNELS:
        if qtype == Q.BF16:  # numpy has no bfloat16: the bits travel as int16
            t = torch.from_numpy(np.array(data).view(np.int16)).to(device).view(torch.bfloat16)
        elif qtype in (Q.F32, Q.F16):
            t = torch.from_numpy(np.array(data)).to(device)
        else:
            from gguf.quants import dequantize
            t = torch.from_numpy(np.asarray(dequantize(data, qtype), np.float32)).to(device)
        return t.reshape(shape).to(dtype)
    size, _ = BLOCKS[qtype]
    raw = torch.from_numpy(np.array(data, dtype=np.uint8).reshape(-1, size)).to(device)
    return KERNELS[qtype](raw).reshape(shape).to(dtype)


def check(paths):
    """Every tensor of each GGUF against gguf's numpy dequantizer; the largest difference."""
    import gguf
    from gguf.quants import dequantize
    worst = 0.0
    for path in paths:
        r = gguf.GGUFReader(path)
        seen = set()
        for t in r.tensors:
            shape = list(reversed([int(x) for x in t.shape]))
            ref = np.asarray(dequantize(t.data, t.tensor_type), np.float32).reshape(shape)
            got = to_torch(t.data, t.tensor_type, shape, "cpu").numpy()
            diff = float(np.abs(got - ref).max()) if ref.size else 0.0
            worst = max(worst, diff)
            seen.add(Q(t.tensor_type).name)
        print(f"{path}: {len(r.tensors)} tensors ({', '.join(sorted(seen))}), largest difference {worst:g}")
    return worst


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit("usage: dequant.py MODEL.gguf...")
    sys.exit(0 if check(sys.argv[1:]) == 0.0 else 1)
