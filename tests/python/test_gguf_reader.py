"""`salvo info --json` against gguf-py's GGUFReader, an independent GGUF parser.

Every metadata key (scalars and strings by value, arrays by length and, when short, by value) and
every tensor's name, type, dims, offset and size must agree on each real model.
"""
import json
import math
import os
import subprocess
from pathlib import Path

import pytest
from conftest import missing

gguf = pytest.importorskip("gguf")

REPO = Path(__file__).resolve().parents[2]
MODELS = ["smollm2-135m", "qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b", "gemma3-270m"]
MAX_JSON_ARRAY = 16  # longer arrays are summarised as {"type", "length"}


def models_dir() -> Path:
    return Path(os.environ.get("SALVO_MODELS", REPO / "models"))


def salvo_info(path: Path) -> dict:
    binary = os.environ.get("SALVO_BIN")
    if not binary:
        missing("SALVO_BIN is not set")
    out = subprocess.run([binary, "info", str(path), "--json"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def same_scalar(ours, theirs) -> bool:
    if isinstance(theirs, float):
        return (math.isnan(ours) and math.isnan(theirs)) or ours == theirs
    return ours == theirs


@pytest.mark.parametrize("name", MODELS)
def test_info_matches_gguf_reader(name):
    path = models_dir() / f"{name}.gguf"
    if not path.exists():
        missing(f"{path} not found")
    info = salvo_info(path)
    reader = gguf.GGUFReader(path)

    # GGUFReader exposes the header counts as pseudo-fields named GGUF.*.
    fields = {k: f for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    assert list(info["metadata"].keys()) == list(fields.keys())
    for key, field in fields.items():
        ours = info["metadata"][key]
        if field.types[0] == gguf.GGUFValueType.ARRAY:
            length = len(field.data)
            if length > MAX_JSON_ARRAY:
                assert ours == {"type": field.types[-1].name.lower(), "length": length}, key
            else:
                theirs = field.contents()
                assert len(ours) == length, key
                assert all(same_scalar(a, b) for a, b in zip(ours, theirs)), (key, ours, theirs)
        else:
            assert same_scalar(ours, field.contents()), (key, ours, field.contents())

    arch = fields["general.architecture"].contents()
    assert info["architecture"] == arch
    assert info["gguf_version"] == reader.fields["GGUF.version"].contents()
    assert info["file_size"] == path.stat().st_size
    assert info["vocab_size"] == len(fields["tokenizer.ggml.tokens"].data)
    assert info["block_count"] == fields[f"{arch}.block_count"].contents()
    assert info["context_length"] == fields[f"{arch}.context_length"].contents()
    template = fields.get("tokenizer.chat_template")
    assert info["chat_template"] == (template.contents() if template else None)

    assert len(info["tensors"]) == len(reader.tensors)
    n_params = 0
    for ours, theirs in zip(info["tensors"], reader.tensors):
        assert ours["name"] == theirs.name
        assert ours["type"] == theirs.tensor_type.name, ours["name"]
        # GGUFReader's shape is in ggml order (dims[0] is the row length), as is ours.
        assert ours["dims"] == [int(d) for d in theirs.shape], ours["name"]
        assert info["data_offset"] + ours["offset"] == theirs.data_offset, ours["name"]
        assert ours["size"] == theirs.n_bytes, ours["name"]
        n_params += int(theirs.n_elements)
    assert info["parameters"] == n_params
    counts = {}
    for t in reader.tensors:
        counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + 1
    assert info["tensor_types"] == counts


def test_info_rejects_a_broken_file(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + (1).to_bytes(4, "little") + bytes(16))
    binary = os.environ.get("SALVO_BIN")
    if not binary:
        missing("SALVO_BIN is not set")
    out = subprocess.run([binary, "info", str(bad)], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "version 1 is not supported" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
