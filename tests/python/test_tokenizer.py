"""Tokenizer goldens: salvo's ids must equal llama.cpp's (through llama-cpp-python) for every
string of tokenizer_strings.STRINGS on every model, with and without special-token handling;
decoding must give the text back, and streaming decoding must never split a UTF-8 character.

Needs SALVO_BIN (the salvo executable; ctest sets it). SALVO_TOKENIZE_BIN may name another
executable with the same `tokenize` subcommand, for use before the full CLI links."""
import json
import os
import subprocess
from pathlib import Path

import pytest

from tokenizer_strings import STRINGS
from conftest import missing

REPO = Path(__file__).resolve().parents[2]
MODELS_DIR = Path(os.environ.get("SALVO_MODELS", REPO / "models"))
MODELS = ["smollm2-135m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b", "gemma3-270m"]
BPE_MODELS = {"smollm2-135m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"}


def salvo_bin():
    path = os.environ.get("SALVO_BIN") or os.environ.get("SALVO_TOKENIZE_BIN")
    if not path:
        missing("SALVO_BIN is not set")
    return path


def model_path(name):
    path = MODELS_DIR / f"{name}.gguf"
    if not path.exists():
        missing(f"{path} is missing (salvo pull {name})")
    return path


def run_salvo(args, lines, tmp_path, name):
    jsonl = tmp_path / f"{name}.jsonl"
    jsonl.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    proc = subprocess.run([salvo_bin(), "tokenize", *args, "--jsonl", str(jsonl)],
                          capture_output=True, timeout=600)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    # Not splitlines(): it also splits at U+2028, U+0085 and \x1c-\x1e, which JSON keeps raw.
    out = [json.loads(line) for line in proc.stdout.decode("utf-8").split("\n") if line]
    assert len(out) == len(lines)
    return out


_llamas = {}


def reference(name):
    llama_cpp = pytest.importorskip("llama_cpp")
    if name not in _llamas:
        _llamas[name] = llama_cpp.Llama(model_path=str(model_path(name)), vocab_only=True,
                                        verbose=False)
    return _llamas[name]


def describe(llama, ids):
    return [(i, llama.detokenize([i], special=True)) for i in ids]


@pytest.mark.parametrize("special", [True, False], ids=["special", "plain"])
@pytest.mark.parametrize("model", MODELS)
def test_matches_llama_cpp(model, special, tmp_path):
    path = model_path(model)
    salvo_bin()
    llama = reference(model)
    args = ["--model", str(path)] + ([] if special else ["--no-special", "--no-parse-special"])
    got = run_salvo(args, STRINGS, tmp_path, "strings")
    mismatches = []
    for text, ids in zip(STRINGS, got):
        want = llama.tokenize(text.encode("utf-8"), add_bos=special, special=special)
        if ids != want:
            mismatches.append(f"{text!r}:\n  salvo {describe(llama, ids)}\n"
                              f"  llama {describe(llama, want)}")
    assert not mismatches, f"{len(mismatches)}/{len(STRINGS)} differ:\n" + "\n".join(
        mismatches[:20])


@pytest.mark.parametrize("model", MODELS)
def test_decode_round_trip_and_streaming(model, tmp_path):
    path = model_path(model)
    ids = run_salvo(["--model", str(path), "--no-special"], STRINGS, tmp_path, "encode")
    decoded = run_salvo(["--model", str(path), "--decode"], ids, tmp_path, "decode")
    failures = []
    for text, token_ids, result in zip(STRINGS, ids, decoded):
        stream = result["stream"]
        if "".join(stream) != result["text"]:
            failures.append(f"{text!r}: stream {stream!r} != decode {result['text']!r}")
        # A chunk ending inside a character would have come back as U+FFFD.
        if any("\ufffd" in chunk for chunk in stream) and "\ufffd" not in text:
            failures.append(f"{text!r}: a stream chunk split a UTF-8 character: {stream!r}")
        if result["text"] != text:
            # A byte the vocabulary cannot spell (SmolLM2 lacks a few control bytes) is dropped
            # by llama.cpp's encoder as well; that is a property of the vocabulary, not a bug.
            lost_by_reference = reference(model).detokenize(token_ids, special=True) != \
                text.encode("utf-8")
            if not lost_by_reference:
                failures.append(f"{text!r}: decode gave {result['text']!r} ({token_ids})")
    assert not failures, f"{len(failures)} failures:\n" + "\n".join(failures[:20])


def test_decode_ids_flag():
    path = model_path("qwen2.5-coder-0.5b")
    proc = subprocess.run([salvo_bin(), "tokenize", "--model", str(path), "--decode", "--ids",
                           "9707,1879,0"], capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert proc.stdout.decode("utf-8") == "Hello world!\n"


def test_bad_ids_are_a_user_error():
    path = model_path("smollm2-135m")
    proc = subprocess.run([salvo_bin(), "tokenize", "--model", str(path), "--decode", "--ids",
                           "1,x"], capture_output=True, timeout=120)
    assert proc.returncode != 0
    assert b"--ids" in proc.stderr
