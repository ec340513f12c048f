"""Shared fixtures for salvo's Python-side golden tests.

Environment:
  SALVO_MODELS  directory holding <name>.gguf (default: <repo>/models)
  SALVO_BIN     path to the salvo executable (tests that run salvo skip when unset)
  SALVO_LLAMA_EXTRA_BUFTS=1  keep llama.cpp's extra CPU buffer types even where AMX is advertised
                             (see open_llama)
"""

from __future__ import annotations

import functools
import os
import pathlib
import sys

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

# name -> (architecture, short description); the golden tests iterate over these.
MODELS = {
    "smollm2-135m": "llama",
    "gemma3-270m": "gemma3",
    "qwen2.5-coder-0.5b": "qwen2",
    "qwen2.5-coder-1.5b": "qwen2",
}
MODEL_NAMES = list(MODELS)


def missing(reason: str):
    """Something a test needs is absent: skip when a developer runs the file by hand, but fail
    under the suite (SALVO_STRICT=1, set by ctest), where `make test` installed and pulled it all."""
    if os.environ.get("SALVO_STRICT") == "1":
        pytest.fail(f"{reason} (SALVO_STRICT=1: the suite must not skip)")
    pytest.skip(reason)


def models_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("SALVO_MODELS", REPO_ROOT / "models"))


def model_path_or_skip(name: str) -> str:
    path = models_dir() / f"{name}.gguf"
    if not path.is_file():
        missing(f"model {path} not present (set SALVO_MODELS)")
    return str(path)


def tool_path_or_skip(name: str) -> str:
    """A helper program of tests/tools/ (built beside the tests): $SALVO_BUILD_DIR's, else the
    first build/*/ that has it."""
    build = os.environ.get("SALVO_BUILD_DIR")
    if build and (pathlib.Path(build) / "tests" / name).exists():
        return str(pathlib.Path(build) / "tests" / name)
    found = sorted((REPO_ROOT / "build").glob(f"*/tests/{name}"))
    if not found:
        missing(f"{name} is not built")
    return str(found[0])


def salvo_bin_or_skip() -> str:
    path = os.environ.get("SALVO_BIN")
    if not path:
        missing("SALVO_BIN not set")
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        pytest.fail(f"SALVO_BIN={path} is not an executable file")
    return path


def llama_cpp_or_skip():
    return pytest.importorskip("llama_cpp", reason="llama-cpp-python not installed")


def _amx_advertised() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return "amx_int8" in f.read()
    except OSError:
        return False


def open_llama(path: str, **kwargs):
    """llama_cpp.Llama with test defaults (2 threads, quiet).

    Workaround: on CPUs advertising AMX, ggml's AMX buffer type executes tile instructions that fault
    (SIGSEGV in ggml_backend_amx_mul_mat) inside VMs that do not enable AMX state. We then turn off the
    extra buffer types (AMX and weight repacking). Repacking changes only the layout and summation
    order, not the int8 activation rounding, so logits stay representative of llama.cpp.
    """
    llama_cpp = llama_cpp_or_skip()
    import llama_cpp.llama_cpp as low

    kwargs.setdefault("n_threads", 2)
    kwargs.setdefault("verbose", False)
    disable = _amx_advertised() and os.environ.get("SALVO_LLAMA_EXTRA_BUFTS") != "1"
    original = low.llama_model_default_params

    def patched():
        params = original()
        params.use_extra_bufts = False
        return params

    if disable:
        low.llama_model_default_params = patched
    try:
        return llama_cpp.Llama(path, **kwargs)
    finally:
        low.llama_model_default_params = original


@functools.lru_cache(maxsize=8)
def _vocab_model(path: str):
    return open_llama(path, vocab_only=True)


def llama_tokenize(path: str, text: str) -> list[int]:
    """llama.cpp's tokenization with its default special handling (BOS added iff the GGUF asks)."""
    return list(_vocab_model(path).tokenize(text.encode("utf-8"), add_bos=True, special=False))


def llama_eos_ids(path: str) -> set[int]:
    vm = _vocab_model(path)
    ids = {vm.token_eos()}
    import llama_cpp.llama_cpp as low

    # End-of-generation tokens (e.g. <|im_end|>, <end_of_turn>) stop llama.cpp's generation too.
    ids |= {t for t in range(vm.n_vocab()) if low.llama_vocab_is_eog(vm._model.vocab, t)} if hasattr(
        low, "llama_vocab_is_eog") else set()
    return {i for i in ids if i >= 0}


@pytest.fixture(params=MODEL_NAMES)
def model_name(request) -> str:
    return request.param


@pytest.fixture
def model_path(model_name) -> str:
    return model_path_or_skip(model_name)


@pytest.fixture
def salvo_bin() -> str:
    return salvo_bin_or_skip()
