"""Model and Session: the Python face of salvo_model and salvo_session."""

import codecs
import ctypes
import json
import queue
import threading
import weakref
from dataclasses import dataclass, field

from . import _lib
from ._lib import SalvoError

# GenerateParams fields a caller may set by keyword, with how each is converted.
_STRING_PARAMS = {"spec", "system"}
_BOOL_PARAMS = {"ignore_eos", "raw"}


@dataclass
class Result:
    text: str
    tokens: list
    stats: dict = field(default_factory=dict)

    @property
    def finish_reason(self):
        return self.stats.get("finish_reason", "")


def _generate_params(kwargs, keep):
    """GenerateParams from keyword arguments; `keep` holds the buffers C reads during the call."""
    p = _lib.lib().salvo_generate_default_params()
    names = {name for name, _ in _lib.GenerateParams._fields_} - {"stop", "n_stop"}
    for key, value in kwargs.items():
        if key == "stop":
            stops = [value] if isinstance(value, str) else list(value or [])
            array = (ctypes.c_char_p * max(1, len(stops)))(*[s.encode() for s in stops])
            keep.append(array)
            p.stop, p.n_stop = ctypes.cast(array, ctypes.POINTER(ctypes.c_char_p)), len(stops)
        elif key not in names:
            raise TypeError(f"unknown generation parameter '{key}'")
        elif value is None:
            continue
        elif key in _STRING_PARAMS:
            encoded = str(value).encode()
            keep.append(encoded)
            setattr(p, key, encoded)
        elif key in _BOOL_PARAMS:
            setattr(p, key, 1 if value else 0)
        else:
            setattr(p, key, value)
    return p


def _stats(s):
    out = {name: getattr(s, name) for name, _ in _lib.Stats._fields_}
    out["finish_reason"] = s.finish_reason.decode()
    out["drafter"] = s.drafter.decode()
    return out


class Model:
    """A loaded GGUF model (a path, or a known name such as "smollm2-135m")."""

    def __init__(self, model, threads=0, device="cpu", draft_model=None, drafter=None,
                 find_drafter=True):
        self._handle = None
        lib = _lib.lib()
        self._lib = lib
        params = lib.salvo_model_default_params()
        params.threads = threads
        params.device = device.encode()
        params.draft_model = draft_model.encode() if draft_model else None
        params.drafter = str(drafter).encode() if drafter else None
        params.find_drafter = 1 if find_drafter else 0
        self._handle = lib.salvo_model_load(str(model).encode(), ctypes.byref(params))
        if not self._handle:
            raise _lib.error()
        self._default_session = None
        self._sessions = weakref.WeakSet()

    def close(self):
        if self._handle:
            # Sessions go before the model they use (the default session and the model refer to
            # each other, so the collector may finalize either first); using one later raises.
            for session in list(self._sessions):
                session.close()
            self._default_session = None
            self._lib.salvo_model_free(self._handle)
            self._handle = None

    def __del__(self):
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _checked(self):
        if not self._handle:
            raise SalvoError("the model is closed")
        return self._handle

    @property
    def name(self):
        return self._lib.salvo_model_name(self._checked()).decode()

    @property
    def architecture(self):
        return self._lib.salvo_model_architecture(self._checked()).decode()

    @property
    def drafter(self):
        """The DFlash drafter's directory, "" when the model has none."""
        return self._lib.salvo_model_drafter(self._checked()).decode()

    @property
    def n_vocab(self):
        return self._lib.salvo_model_n_vocab(self._checked())

    def tokenize(self, text, add_special=True, parse_special=False):
        data = text.encode()
        n = self._lib.salvo_tokenize(self._checked(), data, len(data), int(add_special),
                                     int(parse_special), None, 0)
        if n < 0:
            raise _lib.error()
        ids = (ctypes.c_int32 * max(1, n))()
        n = self._lib.salvo_tokenize(self._handle, data, len(data), int(add_special),
                                     int(parse_special), ids, n)
        if n < 0:
            raise _lib.error()
        return list(ids[:n])

    def detokenize(self, ids):
        ids = list(ids)
        array = (ctypes.c_int32 * max(1, len(ids)))(*ids)
        return _lib.take_string(self._lib.salvo_detokenize(self._checked(), array, len(ids)))

    def apply_chat_template(self, messages):
        """The prompt text `messages` ([{"role", "content"}, ...]) renders to."""
        return _lib.take_string(
            self._lib.salvo_apply_chat_template(self._checked(), json.dumps(messages).encode()))

    def session(self, context_size=4096):
        return Session(self, context_size)

    def generate(self, prompt, **params):
        """One answer in the model's own session (which keeps the previous turn's cache)."""
        if self._default_session is None:
            self._default_session = self.session()
        return self._default_session.generate(prompt, **params)


class Session:
    """One conversation with its own KV cache: a prompt that extends the previous one reuses it."""

    def __init__(self, model, context_size=4096):
        self._handle = None
        self._model = model  # keeps the model alive as long as the session
        self._lib = model._lib
        self._handle = self._lib.salvo_session_new(model._checked(), context_size)
        if not self._handle:
            raise _lib.error()
        model._sessions.add(self)

    def close(self):
        if self._handle:
            self._lib.salvo_session_free(self._handle)
            self._handle = None

    def __del__(self):
        self.close()

    def _run(self, call, on_text, params):
        """Runs a salvo_generate-like `call(params, callback, result)`, streaming to on_text."""
        if not self._handle:
            raise SalvoError("the session is closed")
        keep = []
        p = _generate_params(params, keep)
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        failure = []

        def forward(piece, length, _user):
            if on_text is None:
                return 1
            try:
                text = decoder.decode(ctypes.string_at(piece, length))
                return 0 if (text and on_text(text) is False) else 1
            except BaseException as e:  # an exception must not unwind through C
                failure.append(e)
                return 0

        callback = _lib.TEXT_CALLBACK(forward)
        result = _lib.CResult()
        rc = call(ctypes.byref(p), callback, ctypes.byref(result))
        if failure:
            self._lib.salvo_result_free(ctypes.byref(result))
            raise failure[0]
        if rc != 0:
            raise _lib.error()
        try:
            text = ctypes.string_at(result.text, result.text_len).decode("utf-8", "replace")
            tokens = list(result.tokens[:result.n_tokens])
            return Result(text=text, tokens=tokens, stats=_stats(result.stats))
        finally:
            self._lib.salvo_result_free(ctypes.byref(result))

    def generate(self, prompt, on_text=None, **params):
        """An answer to `prompt` (str: through the chat template unless raw=True; a list of
        token ids: as it is). on_text(piece) sees the text as it comes; returning False stops."""
        if isinstance(prompt, str):
            data = prompt.encode()
            return self._run(lambda p, cb, r: self._lib.salvo_generate(
                self._handle, data, p, cb, None, r), on_text, params)
        ids = list(prompt)
        array = (ctypes.c_int32 * max(1, len(ids)))(*ids)
        return self._run(lambda p, cb, r: self._lib.salvo_generate_tokens(
            self._handle, array, len(ids), p, cb, None, r), on_text, params)

    def chat(self, messages, on_text=None, **params):
        """An answer to a conversation: [{"role": ..., "content": ...}, ...]."""
        data = json.dumps(messages).encode()
        return self._run(lambda p, cb, r: self._lib.salvo_chat(self._handle, data, p, cb, None, r),
                         on_text, params)

    def stream(self, prompt, **params):
        """Yields the answer's text piece by piece; the Result is the generator's return value.
        Closing the generator early stops the generation."""
        pieces = queue.Queue()
        stop = threading.Event()
        outcome = {}

        def on_text(piece):
            pieces.put(piece)
            return not stop.is_set()

        def work():
            try:
                outcome["result"] = self.generate(prompt, on_text=on_text, **params)
            except BaseException as e:
                outcome["error"] = e
            pieces.put(None)

        worker = threading.Thread(target=work, daemon=True)
        worker.start()
        try:
            while (piece := pieces.get()) is not None:
                yield piece
        finally:
            stop.set()
            worker.join()
        if "error" in outcome:
            raise outcome["error"]
        return outcome["result"]
