"""What the server-driving tests share: `salvo serve` present, the OpenAI client and llama.cpp's
server extras installed, and the helpers in tools/compare/servers.py on the import path."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

from conftest import REPO_ROOT, missing, salvo_bin_or_skip

sys.path.insert(0, str(REPO_ROOT / "tools" / "compare"))

import servers  # noqa: E402,F401  (re-exported for the tests)


def salvo_serve_bin() -> str:
    """SALVO_BIN, which must have the `serve` subcommand."""
    path = salvo_bin_or_skip()
    proc = subprocess.run([path, "serve", "--help"], capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        missing(f"{path} has no working `serve` subcommand: {proc.stderr.strip()[:200]}")
    return path


def require_modules(*modules: str) -> None:
    absent = [m for m in modules if importlib.util.find_spec(m) is None]
    if absent:
        missing(f"Python modules {', '.join(absent)} not installed (scripts/setup.sh test)")
