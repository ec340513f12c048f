#!/usr/bin/env python3
"""Writes the seed corpus of the safetensors fuzzer into fuzz/corpus_safetensors/.

Seeds are small valid files from the `safetensors` package (an independent writer) covering every
dtype salvo reads, a drafter-like file with I8 matrices and .scale companions, plus hand-made
broken headers and truncated / bit-flipped variants. Deterministic; rerun after changing it and
commit the result.
"""
import json
import random
import struct
from pathlib import Path

import numpy as np
from safetensors.numpy import save

OUT = Path(__file__).resolve().parent / "corpus_safetensors"


def raw(header, data=b""):
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def main():
    OUT.mkdir(exist_ok=True)
    rng = np.random.default_rng(0)
    seeds = {
        "all_dtypes": save({
            "f32": rng.standard_normal((3, 4)).astype(np.float32),
            "f16": rng.standard_normal((5,)).astype(np.float16),
            "i8": rng.integers(-127, 128, (2, 8)).astype(np.int8),
            "i32": np.arange(4, dtype=np.int32),
            "empty": np.zeros((0, 3), dtype=np.float32),
        }, metadata={"format": "pt"}),
        "drafter_like": save({
            "fc.weight": rng.integers(-127, 128, (8, 24)).astype(np.int8),
            "fc.weight.scale": rng.random(8).astype(np.float32),
            "mask_embd": rng.standard_normal(8).astype(np.float32),
        }),
        "bf16": raw({"x": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8]}}, bytes(range(8))),
        "overlap": raw({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                        "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, bytes(12)),
        "bad_dtype": raw({"a": {"dtype": "F64", "shape": [1], "data_offsets": [0, 8]}}, bytes(8)),
        "past_end": raw({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, bytes(8)),
        "not_json": struct.pack("<Q", 5) + b"{abc]",
        "huge_len": struct.pack("<Q", 1 << 40) + b"{}",
        "empty_header": raw({}),
    }
    random.seed(0)
    for name, blob in list(seeds.items())[:3]:
        for i, cut in enumerate(sorted(random.sample(range(1, len(blob)), 3))):
            seeds[f"{name}_cut{i}"] = blob[:cut]
        for i in range(4):
            flipped = bytearray(blob)
            at = random.randrange(len(flipped))
            flipped[at] ^= 1 << random.randrange(8)
            seeds[f"{name}_flip{i}"] = bytes(flipped)
    for name, blob in seeds.items():
        (OUT / f"{name}.safetensors").write_bytes(blob)


if __name__ == "__main__":
    main()
