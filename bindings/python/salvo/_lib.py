"""The ctypes declarations of include/salvo/salvo.h, loaded once."""

import ctypes
import os
from pathlib import Path


class SalvoError(RuntimeError):
    """A salvo call failed; the message says what was wrong."""


class ModelParams(ctypes.Structure):
    _fields_ = [("threads", ctypes.c_int32), ("device", ctypes.c_char_p),
                ("draft_model", ctypes.c_char_p), ("drafter", ctypes.c_char_p),
                ("find_drafter", ctypes.c_int32)]


class GenerateParams(ctypes.Structure):
    _fields_ = [("max_tokens", ctypes.c_int32), ("temperature", ctypes.c_float),
                ("top_k", ctypes.c_int32), ("top_p", ctypes.c_float), ("min_p", ctypes.c_float),
                ("repeat_penalty", ctypes.c_float), ("presence_penalty", ctypes.c_float),
                ("frequency_penalty", ctypes.c_float), ("seed", ctypes.c_int64),
                ("spec", ctypes.c_char_p), ("spec_budget", ctypes.c_int32),
                ("spec_depth", ctypes.c_int32), ("stop", ctypes.POINTER(ctypes.c_char_p)),
                ("n_stop", ctypes.c_int32), ("ignore_eos", ctypes.c_int32),
                ("raw", ctypes.c_int32), ("system", ctypes.c_char_p)]


class Stats(ctypes.Structure):
    _fields_ = [("prompt_tokens", ctypes.c_int32), ("cached_prompt_tokens", ctypes.c_int32),
                ("generated_tokens", ctypes.c_int32), ("forward_passes", ctypes.c_int32),
                ("ttft_ms", ctypes.c_double), ("prefill_tokens_per_second", ctypes.c_double),
                ("decode_tokens_per_second", ctypes.c_double), ("tokens_per_pass", ctypes.c_double),
                ("drafted_nodes", ctypes.c_int32), ("accepted_draft_tokens", ctypes.c_int32),
                ("draft_ms", ctypes.c_double), ("seed", ctypes.c_uint64),
                ("peak_rss_bytes", ctypes.c_size_t), ("peak_device_bytes", ctypes.c_size_t),
                ("finish_reason", ctypes.c_char * 16), ("drafter", ctypes.c_char * 48)]


class CResult(ctypes.Structure):
    _fields_ = [("text", ctypes.c_void_p), ("text_len", ctypes.c_size_t),
                ("tokens", ctypes.POINTER(ctypes.c_int32)), ("n_tokens", ctypes.c_int32),
                ("stats", Stats)]


TEXT_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_char), ctypes.c_size_t,
                                 ctypes.c_void_p)


def _candidates():
    if os.environ.get("SALVO_LIB"):
        yield Path(os.environ["SALVO_LIB"])
    root = Path(__file__).resolve().parents[3]  # bindings/python/salvo -> the checkout
    for preset in ("release", "debug", "asan"):
        yield root / "build" / preset / "libsalvo.so"
    yield Path("libsalvo.so")  # the system's library path


def _load():
    errors = []
    for path in _candidates():
        if path.is_absolute() and not path.exists():
            continue
        try:
            return ctypes.CDLL(str(path))
        except OSError as e:
            errors.append(f"{path}: {e}")
    raise SalvoError("cannot load libsalvo.so (build salvo, or set SALVO_LIB): "
                     + "; ".join(errors or ["not found"]))


def _declare(lib):
    P, I32 = ctypes.c_void_p, ctypes.c_int32
    sigs = {
        "salvo_version": (ctypes.c_char_p, []),
        "salvo_last_error": (ctypes.c_char_p, []),
        "salvo_model_default_params": (ModelParams, []),
        "salvo_generate_default_params": (GenerateParams, []),
        "salvo_model_load": (P, [ctypes.c_char_p, ctypes.POINTER(ModelParams)]),
        "salvo_model_free": (None, [P]),
        "salvo_model_name": (ctypes.c_char_p, [P]),
        "salvo_model_architecture": (ctypes.c_char_p, [P]),
        "salvo_model_drafter": (ctypes.c_char_p, [P]),
        "salvo_model_n_vocab": (I32, [P]),
        "salvo_tokenize": (I32, [P, ctypes.c_char_p, ctypes.c_size_t, I32, I32,
                                 ctypes.POINTER(I32), I32]),
        "salvo_detokenize": (P, [P, ctypes.POINTER(I32), I32]),
        "salvo_apply_chat_template": (P, [P, ctypes.c_char_p]),
        "salvo_string_free": (None, [P]),
        "salvo_session_new": (P, [P, I32]),
        "salvo_session_free": (None, [P]),
        "salvo_generate": (ctypes.c_int, [P, ctypes.c_char_p, ctypes.POINTER(GenerateParams),
                                          TEXT_CALLBACK, P, ctypes.POINTER(CResult)]),
        "salvo_chat": (ctypes.c_int, [P, ctypes.c_char_p, ctypes.POINTER(GenerateParams),
                                      TEXT_CALLBACK, P, ctypes.POINTER(CResult)]),
        "salvo_generate_tokens": (ctypes.c_int, [P, ctypes.POINTER(I32), I32,
                                                 ctypes.POINTER(GenerateParams), TEXT_CALLBACK,
                                                 P, ctypes.POINTER(CResult)]),
        "salvo_result_free": (None, [ctypes.POINTER(CResult)]),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    return lib


_handle = None


def lib():
    global _handle
    if _handle is None:
        _handle = _declare(_load())
    return _handle


def error():
    """The last failed call's message as a SalvoError."""
    return SalvoError(lib().salvo_last_error().decode("utf-8", "replace"))


def take_string(pointer):
    """A malloc'ed C string from salvo as str (freed); raises the last error for NULL."""
    if not pointer:
        raise error()
    try:
        return ctypes.string_at(pointer).decode("utf-8", "replace")
    finally:
        lib().salvo_string_free(pointer)


def version():
    return lib().salvo_version().decode()
