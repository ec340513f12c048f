"""salvo's dequantization against gguf-py's independent NumPy dequantizers.

Real tensors come from the GGUF models in models/ (every quantized type they hold); types no
model holds are synthesized: random quant bytes with sane fp16 scales, or gguf.quants.quantize
where it supports the type.
"""

import functools
import glob
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf import GGUFReader
from gguf import quants
from conftest import missing, models_dir, tool_path_or_skip

MODELS = sorted(glob.glob(str(models_dir() / "*.gguf")))
SUPPORTED = [T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q8_0, T.Q4_K, T.Q5_K, T.Q6_K]
TENSORS_PER_TYPE = 2  # per model
MAX_BYTES = 1 << 18  # leading bytes of each real tensor (whole blocks)


def salvo_dequantize(raw: np.ndarray, qtype: T, tmp_path: Path) -> np.ndarray:
    block_size, type_size = quants.GGML_QUANT_SIZES[qtype]
    raw = np.ascontiguousarray(raw).view(np.uint8).reshape(-1)
    assert raw.size % type_size == 0
    n = raw.size // type_size * block_size
    src, dst = tmp_path / "in.bin", tmp_path / "out.bin"
    raw.tofile(src)
    subprocess.run([tool_path_or_skip("dequant_tool"), str(int(qtype)), str(n), str(src), str(dst)], check=True)
    return np.fromfile(dst, dtype=np.float32)


def reference_dequantize(raw: np.ndarray, qtype: T) -> np.ndarray:
    raw = np.ascontiguousarray(raw).view(np.uint8).reshape(1, -1)
    return quants.dequantize(raw, qtype).reshape(-1).astype(np.float32)


def assert_same(got: np.ndarray, want: np.ndarray, qtype: T):
    assert got.shape == want.shape
    # Same float operations in the same order: bit-equal, NaN/inf included.
    same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    if not same.all():
        bad = np.flatnonzero(~same)[:5]
        pytest.fail(f"{qtype.name}: {(~same).sum()} mismatches, first at {bad}: "
                    f"salvo {got[bad]} vs gguf {want[bad]}")


@functools.lru_cache(maxsize=None)
def reader_of(model: str) -> GGUFReader:
    return GGUFReader(model)


def test_models_are_present():
    if not MODELS:
        missing(f"no GGUF models in {models_dir()} to take real tensors from")


def real_tensors():
    cases = []
    for model in MODELS:
        reader = reader_of(model)
        taken = {}
        for t in reader.tensors:
            qtype = T(t.tensor_type)
            if qtype not in SUPPORTED or taken.get(qtype, 0) >= TENSORS_PER_TYPE:
                continue
            taken[qtype] = taken.get(qtype, 0) + 1
            cases.append(pytest.param(model, t.name, id=f"{Path(model).stem}:{t.name}"))
    return cases


@pytest.mark.parametrize("model,name", real_tensors())
def test_real_tensor(model, name, tmp_path):
    reader = reader_of(model)
    tensor = next(t for t in reader.tensors if t.name == name)
    qtype = T(tensor.tensor_type)
    _, type_size = quants.GGML_QUANT_SIZES[qtype]
    raw = np.ascontiguousarray(tensor.data).view(np.uint8).reshape(-1)
    raw = raw[: min(raw.size, MAX_BYTES) // type_size * type_size]
    assert_same(salvo_dequantize(raw, qtype, tmp_path), reference_dequantize(raw, qtype), qtype)


def synthesized_blocks(qtype: T, n_blocks: int, rng: np.random.Generator) -> np.ndarray:
    """Random quant bytes with finite, moderate fp16 scales at the type's scale offsets."""
    _, type_size = quants.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)

    def put_f16(offset, scale):
        vals = (rng.uniform(0.25, 1.25, n_blocks) * scale * rng.choice([-1, 1], n_blocks))
        raw[:, offset:offset + 2] = vals.astype(np.float16).view(np.uint8).reshape(n_blocks, 2)

    if qtype in (T.Q4_0, T.Q5_0, T.Q8_0):
        put_f16(0, 0.01)
    elif qtype == T.Q4_1:
        put_f16(0, 0.01)
        put_f16(2, 0.08)
    elif qtype in (T.Q4_K, T.Q5_K):
        put_f16(0, 0.001)
        put_f16(2, 0.001)
    elif qtype == T.Q6_K:
        put_f16(208, 0.0005)
    return raw


@pytest.mark.parametrize("qtype", [T.Q4_0, T.Q4_1, T.Q5_0, T.Q8_0, T.Q4_K, T.Q5_K, T.Q6_K],
                         ids=lambda q: q.name)
def test_synthesized_blocks(qtype, tmp_path):
    raw = synthesized_blocks(qtype, 257, np.random.default_rng(int(qtype)))
    assert_same(salvo_dequantize(raw, qtype, tmp_path), reference_dequantize(raw, qtype), qtype)


@pytest.mark.parametrize("qtype", [T.F16, T.BF16, T.Q4_0, T.Q8_0, T.Q5_0, T.Q4_1],
                         ids=lambda q: q.name)
def test_gguf_quantized(qtype, tmp_path):
    rng = np.random.default_rng(7)
    values = rng.standard_normal((16, 256)).astype(np.float32)
    values[0, :6] = [0.0, -0.0, 1e-8, 65504.0, -65504.0, 3e-5]
    try:
        raw = quants.quantize(values, qtype)
    except NotImplementedError:
        pytest.skip(f"gguf cannot quantize {qtype.name}")
    assert_same(salvo_dequantize(raw, qtype, tmp_path), reference_dequantize(raw, qtype), qtype)


def test_f16_all_bit_patterns(tmp_path):
    raw = np.arange(1 << 16, dtype=np.uint16)
    for qtype in (T.F16, T.BF16):
        assert_same(salvo_dequantize(raw, qtype, tmp_path), reference_dequantize(raw, qtype),
                    qtype)
