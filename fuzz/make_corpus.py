#!/usr/bin/env python3
"""Writes the seed corpus of the GGUF fuzzer into fuzz/corpus/.

Seeds are tiny valid GGUF files made with gguf-py's GGUFWriter (an independent writer), a few
hand-made headers (bad magic, version 1/99, huge counts), and truncated and bit-flipped variants of
the valid files, so libFuzzer starts from inputs that reach deep into the parser. The output is
deterministic; rerun after changing this script and commit the result.
"""
import random
import struct
import tempfile
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFValueType, GGUFWriter

OUT = Path(__file__).resolve().parent / "corpus"


def build(arch, kvs, tensors, alignment=None):
    """kvs: (key, value, GGUFValueType[, sub_type]); tensors: (name, array, raw_dtype or None)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "seed.gguf"
        w = GGUFWriter(path, arch)
        if alignment is not None:
            w.add_custom_alignment(alignment)
        for kv in kvs:
            w.add_key_value(*kv)
        for name, array, raw_dtype in tensors:
            w.add_tensor(name, array, raw_dtype=raw_dtype)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        return path.read_bytes()


def q_block(n_bytes, seed):
    # Raw quantized blocks: arbitrary bytes are fine, the reader never interprets them.
    return np.random.default_rng(seed).integers(0, 256, size=n_bytes, dtype=np.uint8)


def valid_seeds():
    V = GGUFValueType
    all_types = [
        ("t.u8", 200, V.UINT8), ("t.i8", -100, V.INT8), ("t.u16", 60000, V.UINT16),
        ("t.i16", -3000, V.INT16), ("t.u32", 4000000000, V.UINT32), ("t.i32", -7, V.INT32),
        ("t.f32", 0.5, V.FLOAT32), ("t.bool", True, V.BOOL), ("t.str", "hello", V.STRING),
        ("t.u64", 1 << 63, V.UINT64), ("t.i64", -(1 << 40), V.INT64), ("t.f64", 1e300, V.FLOAT64),
        ("t.arr_i32", [1, -2, 3], V.ARRAY, V.INT32), ("t.arr_f32", [1.5, 2.0], V.ARRAY, V.FLOAT32),
        ("t.arr_str", ["a", "", "ccc"], V.ARRAY, V.STRING), ("t.arr_bool", [True, False], V.ARRAY, V.BOOL),
    ]
    llama = [
        ("general.name", "tiny", V.STRING), ("llama.block_count", 1, V.UINT32),
        ("llama.context_length", 64, V.UINT32), ("llama.embedding_length", 32, V.UINT32),
        ("llama.attention.head_count", 2, V.UINT32), ("llama.attention.head_count_kv", 1, V.UINT32),
        ("llama.rope.freq_base", 10000.0, V.FLOAT32), ("tokenizer.ggml.model", "gpt2", V.STRING),
        ("tokenizer.ggml.tokens", ["<s>", "a", "b", "ab"], V.ARRAY, V.STRING),
        ("tokenizer.ggml.token_type", [3, 1, 1, 1], V.ARRAY, V.INT32),
        ("tokenizer.ggml.merges", ["a b"], V.ARRAY, V.STRING),
        ("tokenizer.chat_template", "{{ messages[0].content }}", V.STRING),
    ]
    f32 = np.arange(8, dtype=np.float32).reshape(2, 4)
    yield "valid_all_types", build("llama", all_types, [("a.weight", f32, None)])
    yield "valid_tiny_llama", build("llama", llama, [
        ("token_embd.weight", np.ones((4, 32), dtype=np.float32), None),
        ("blk.0.attn_q.weight", q_block(2 * 34, 1).reshape(2, 34), GGMLQuantizationType.Q8_0),
        ("blk.0.ffn_up.weight", q_block(144, 2).reshape(1, 144), GGMLQuantizationType.Q4_K),
        ("blk.0.ffn_down.weight", q_block(210, 3).reshape(1, 210), GGMLQuantizationType.Q6_K),
        ("output_norm.weight", np.ones(32, dtype=np.float16), None),
    ])
    yield "valid_align64", build("qwen2", llama[:3], [
        ("x.weight", q_block(20, 4).reshape(1, 20), GGMLQuantizationType.Q4_1),
        ("y.weight", q_block(22, 5).reshape(1, 22), GGMLQuantizationType.Q5_0),
    ], alignment=64)
    yield "valid_no_tensors", build("gemma3", all_types[:4], [])


def header(magic=b"GGUF", version=3, n_tensors=0, n_kv=0):
    return magic + struct.pack("<IQQ", version, n_tensors, n_kv)


def main():
    OUT.mkdir(exist_ok=True)
    for old in OUT.iterdir():
        old.unlink()
    seeds = dict(valid_seeds())
    broken = {
        "bad_magic": header(magic=b"GGML"),
        "version1": b"GGUF" + struct.pack("<III", 1, 0, 0),
        "version99": header(version=99),
        "big_endian": header(version=3 << 24),
        "huge_tensor_count": header(n_tensors=1 << 62),
        "huge_kv_count": header(n_kv=(1 << 64) - 1),
        "empty": b"",
    }
    rng = random.Random(1234)
    for name, data in list(seeds.items()):
        for cut in sorted(rng.sample(range(1, len(data)), 4)):
            broken[f"{name}_cut{cut}"] = data[:cut]
        for k in range(6):
            flipped = bytearray(data)
            for _ in range(rng.randint(1, 4)):
                pos = rng.randrange(len(flipped))
                flipped[pos] ^= 1 << rng.randrange(8)
            broken[f"{name}_flip{k}"] = bytes(flipped)
    seeds.update(broken)
    for name, data in seeds.items():
        (OUT / f"{name}.gguf").write_bytes(data)
    total = sum(len(d) for d in seeds.values())
    print(f"wrote {len(seeds)} seeds, {total} bytes, to {OUT}")


if __name__ == "__main__":
    main()
