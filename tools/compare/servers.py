#!/usr/bin/env python3
"""Start an OpenAI-compatible server, wait until it answers, stop it; read a process's RSS.

One module for the tests (tests/python/test_compare.py, test_load_short.py) and the scripts
(tools/compare/compare.py users, bench/load_test.py), so they start servers the same way:

  salvo:     `salvo serve --model M --host 127.0.0.1 --port P [--parallel N] [--ctx N] [--api-key K]`
  llama.cpp: `python3 -m llama_cpp.server --model PATH --port P --n_threads T --n_ctx C` from
             llama-cpp-python (needs its server extras: fastapi, uvicorn, sse-starlette, ...)

Each server writes its log to a temporary file; when it dies before it is ready, the error carries
the log's tail.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

HOST = "127.0.0.1"


class ServerError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def rss_kib(pid: int) -> int | None:
    """Resident set size of a live process in KiB (VmRSS), None when it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


# ggml picks its AMX matmul on CPUs that advertise AMX, and on these VMs the tile instructions fault
# (see DEVELOPERS.md). Making ggml's request for AMX state fail turns AMX off and keeps weight
# repacking, so llama.cpp runs as it would on an AVX-512 machine (the same shim as
# bench/bench_vs_llamacpp.py).
_NOAMX_SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <sys/syscall.h>
long syscall(long n, ...) {
    va_list ap; va_start(ap, n);
    long a[6]; for (int i = 0; i < 6; i++) a[i] = va_arg(ap, long);
    va_end(ap);
    if (n == SYS_arch_prctl && a[0] == 0x1023 /* ARCH_REQ_XCOMP_PERM */) { errno = EPERM; return -1; }
    static long (*real)(long, ...);
    if (!real) real = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
    return real(n, a[0], a[1], a[2], a[3], a[4], a[5]);
}
"""


def amx_advertised() -> bool:
    try:
        return "amx_int8" in pathlib.Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


def noamx_shim() -> str:
    """Path of the compiled shim (built once per user into the temp directory)."""
    digest = hashlib.sha256(_NOAMX_SHIM.encode()).hexdigest()[:12]
    out = pathlib.Path(tempfile.gettempdir()) / f"salvo-noamx-{os.getuid()}-{digest}.so"
    if out.is_file():
        return str(out)
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise ServerError("this CPU advertises AMX, which faults in llama.cpp here; building the "
                          "no-AMX shim needs a C compiler (cc or gcc) on PATH")
    with tempfile.TemporaryDirectory() as tmp:
        src = pathlib.Path(tmp) / "noamx.c"
        src.write_text(_NOAMX_SHIM)
        tmp_out = pathlib.Path(tmp) / "noamx.so"
        r = subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", str(tmp_out), str(src), "-ldl"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise ServerError(f"building the no-AMX shim failed:\n{r.stderr[-2000:]}")
        shutil.move(str(tmp_out), out)  # atomic within one file system: racing builders agree
    return str(out)


class Server:
    """A server process started by this module. Use as a context manager, or call stop()."""

    def __init__(self, name: str, cmd: list[str], port: int, env: dict | None = None):
        self.name = name
        self.cmd = cmd
        self.port = port
        self.url = f"http://{HOST}:{port}"  # without /v1
        self._log = tempfile.NamedTemporaryFile(prefix=f"{name}-server-", suffix=".log",
                                                delete=False)
        self.log_path = self._log.name
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env)
        self.pid = self.proc.pid

    def log_tail(self, n: int = 3000) -> str:
        try:
            return pathlib.Path(self.log_path).read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Waits until GET /health answers 200 (salvo answers 503 while loading). Servers without
        /health (llama-cpp-python's) count as ready when GET /v1/models answers 200."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerError(f"{self.name} server exited with {self.proc.returncode} before it "
                                  f"was ready: {' '.join(self.cmd)}\n{self.log_tail()}")
            for path in ("/health", "/v1/models"):
                status = _http_status(self.url + path)
                if status == 200:
                    return
                if status != 404:
                    break  # 503 (loading) or no answer yet: wait; 404 means try the next path
            time.sleep(0.2)
        raise ServerError(f"{self.name} server at {self.url} was not ready after {timeout:.0f} s\n"
                          f"{self.log_tail()}")

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM (graceful shutdown), then SIGKILL after `timeout` seconds. Returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
        try:
            os.unlink(self.log_path)
        except OSError:
            pass


def _ready_or_stopped(server: Server, timeout: float) -> None:
    """Waits for the server; on any failure or interrupt it is stopped, never left orphaned."""
    try:
        server.wait_ready(timeout)
    except BaseException:
        server.stop()
        raise


def _http_status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except (urllib.error.URLError, OSError):
        return None


def start_salvo(salvo_bin: str, model: str, *, port: int | None = None,
                parallel: int | None = None, ctx: int | None = None,
                api_key: str | None = None, extra: list[str] | None = None,
                timeout: float = 120.0) -> Server:
    """Starts `salvo serve` and waits until /health is 200."""
    if not (os.path.isfile(salvo_bin) and os.access(salvo_bin, os.X_OK)):
        raise ServerError(f"salvo binary {salvo_bin} is not an executable file")
    port = port or free_port()
    cmd = [salvo_bin, "serve", "--model", model, "--host", HOST, "--port", str(port)]
    if parallel:
        cmd += ["--parallel", str(parallel)]
    if ctx:
        cmd += ["--ctx", str(ctx)]
    if api_key:
        cmd += ["--api-key", api_key]
    cmd += extra or []
    server = Server("salvo", cmd, port)
    _ready_or_stopped(server, timeout)
    return server


def start_llama_cpp(model_path: str, *, port: int | None = None, threads: int = 2,
                    ctx: int = 2048, api_key: str | None = None,
                    timeout: float = 120.0) -> Server:
    """Starts llama-cpp-python's OpenAI server on a GGUF file and waits until it answers."""
    if not os.path.isfile(model_path):
        raise ServerError(f"model file {model_path} does not exist")
    missing = [m for m in ("llama_cpp", "fastapi", "uvicorn", "sse_starlette", "starlette_context",
                           "pydantic_settings") if not _importable(m)]
    if missing:
        raise ServerError(f"llama-cpp-python's server needs {', '.join(missing)} "
                          "(run scripts/setup.sh test)")
    port = port or free_port()
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", model_path, "--host", HOST,
           "--port", str(port), "--n_threads", str(threads), "--n_threads_batch", str(threads),
           "--n_ctx", str(ctx), "--verbose", "False"]
    if api_key:
        cmd += ["--api_key", api_key]
    env = dict(os.environ)
    if amx_advertised():
        env["LD_PRELOAD"] = (noamx_shim() + " " + env.get("LD_PRELOAD", "")).strip()
    server = Server("llama.cpp", cmd, port, env=env)
    _ready_or_stopped(server, timeout)
    return server


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def resolve_model_path(name_or_path: str) -> str:
    """A GGUF path, or a short name (smollm2-135m, ...) looked up in $SALVO_MODELS
    (default <repo>/models)."""
    if os.path.isfile(name_or_path):
        return name_or_path
    models = pathlib.Path(os.environ.get("SALVO_MODELS",
                                         pathlib.Path(__file__).resolve().parents[2] / "models"))
    path = models / f"{name_or_path}.gguf"
    if not path.is_file():
        raise ServerError(f"model '{name_or_path}' is neither a file nor {path} (set SALVO_MODELS, "
                          "or run `salvo pull NAME`)")
    return str(path)


def main(argv: list[str] | None = None) -> int:
    """Runs one server in the foreground until Ctrl-C, e.g. llama.cpp next to `salvo serve` for
    compare.py: `servers.py llama-cpp --model smollm2-135m --port 8081 --threads 2`."""
    import argparse

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("kind", choices=["llama-cpp", "salvo"])
    ap.add_argument("--model", required=True, help="GGUF path or short name")
    ap.add_argument("--port", type=int, default=8081)
    ap.add_argument("--threads", type=int, default=2,
                    help="threads (salvo: passed as --threads)")
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--parallel", type=int, help="salvo: slots")
    ap.add_argument("--api-key")
    ap.add_argument("--salvo", help="salvo: binary (default $SALVO_BIN or build/release/salvo)")
    ap.add_argument("--server-arg", action="append", default=[],
                    help="salvo: one more argument for `salvo serve` (repeatable)")
    args = ap.parse_args(argv)
    # SIGTERM (and SIGINT, which a shell's background job ignores) stop the server, also while it
    # is starting.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        if args.kind == "llama-cpp":
            server = start_llama_cpp(resolve_model_path(args.model), port=args.port,
                                     threads=args.threads, ctx=args.ctx, api_key=args.api_key)
        else:
            salvo_bin = args.salvo or os.environ.get("SALVO_BIN") or str(
                pathlib.Path(__file__).resolve().parents[2] / "build/release/salvo")
            extra = ["--threads", str(args.threads)] + args.server_arg
            server = start_salvo(salvo_bin, args.model, port=args.port, parallel=args.parallel,
                                 ctx=args.ctx, api_key=args.api_key, extra=extra)
    except ServerError as e:
        print(f"servers: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 1
    print(f"{server.name} server ready at {server.url}/v1 (pid {server.pid}, log {server.log_path}); "
          "Ctrl-C stops it", flush=True)
    try:
        while server.proc.poll() is None:
            time.sleep(0.5)
        print(f"servers: {server.name} exited with {server.proc.returncode}\n{server.log_tail()}",
              file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
