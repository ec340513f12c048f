"""salvo from Python: load a GGUF model and generate text, through libsalvo's C API (ctypes).

    import salvo
    model = salvo.Model("qwen2.5-coder-1.5b")          # a known name or a GGUF path
    chat = model.session()                              # one conversation, its own KV cache
    result = chat.generate("Write quicksort in C", temperature=0, max_tokens=200)
    print(result.text, result.stats["tokens_per_pass"])
    for piece in chat.stream("And in Python?", temperature=0):
        print(piece, end="", flush=True)

libsalvo.so is found through $SALVO_LIB, the build tree beside this package, or the system's
library path. Errors (a missing file, a bad parameter) raise salvo.SalvoError with salvo's message.
"""

from ._lib import SalvoError, version
from .model import Model, Result, Session

__all__ = ["Model", "Session", "Result", "SalvoError", "version"]
