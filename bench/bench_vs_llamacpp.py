#!/usr/bin/env python3
"""salvo vs llama.cpp (llama-cpp-python) on the same GGUF, same machine, same run. A benchmark, not a test.

For each model: prefill of a 512-token prompt and greedy decode of 128 tokens, `--reps` times, medians.
Each engine runs in its own subprocess so peak RSS (getrusage of that child) is its own.

  llama.cpp: this script re-invoked with --child-llama (llama-cpp-python, n_batch = n_ubatch = 512).
  salvo:     `salvo bench --model M --json` if the subcommand exists (pp512 / tg128 figures), otherwise
             `salvo run --model M -m PROMPT --raw --max-tokens 128 --temperature 0 --json`, whose JSON
             holds "prefill_tps", "decode_tps", "peak_rss_mb".

Reported: tok/s, ratios salvo / llama.cpp, achieved decode bandwidth (bytes of weights read per token x
decode tok/s; the token embedding counts one row unless it is also the output head) and peak RSS, with the
targets decode >= 1.0x, prefill >= 0.8x, RSS <= file + KV cache (f16, 640 positions) + 15%.

Usage: bench/bench_vs_llamacpp.py [--models smollm2-135m qwen2.5-coder-1.5b] [--threads N] [--reps 5]
                                  [--salvo PATH (default $SALVO_BIN)] [--models-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
N_PROMPT = 512
N_GEN = 128

# Deterministic filler text; tokenized and cut to exactly N_PROMPT tokens by each engine's own tokenizer
# (salvo run) or fed as ids (llama.cpp).
PROMPT_TEXT = (
    "The history of computing is a story of abstractions stacked on abstractions. Early machines were "
    "programmed by rewiring panels; later, stored programs let the same hardware compute anything. "
    "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n"
    "Memory bandwidth, not arithmetic, bounds the speed at which a language model can emit tokens one by "
    "one, because every weight must be streamed from memory for each step. "
) * 40

# The AMX workaround (a shim that makes ggml's AMX permission request fail) has one copy, in
# tools/compare/servers.py, shared with the comparison client.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tools" / "compare"))
from servers import _NOAMX_SHIM, amx_advertised  # noqa: E402


def build_noamx_shim(tmpdir: str) -> str | None:
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        return None
    src = os.path.join(tmpdir, "noamx.c")
    out = os.path.join(tmpdir, "noamx.so")
    pathlib.Path(src).write_text(_NOAMX_SHIM)
    r = subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", out, src, "-ldl"], capture_output=True)
    return out if r.returncode == 0 else None


# ----------------------------------------------------------------------------------------------------
# llama.cpp child


def child_llama(args) -> None:
    import numpy as np
    import llama_cpp
    import llama_cpp.llama_cpp as low

    if args.no_extra_bufts:
        original = low.llama_model_default_params

        def patched():
            p = original()
            p.use_extra_bufts = False
            return p

        low.llama_model_default_params = patched
    n_ctx = N_PROMPT + N_GEN + 16
    llm = llama_cpp.Llama(args.model, n_ctx=n_ctx, n_batch=N_PROMPT, n_ubatch=N_PROMPT,
                          n_threads=args.threads, n_threads_batch=args.threads, logits_all=False,
                          verbose=False)
    tokens = llm.tokenize(PROMPT_TEXT.encode(), add_bos=True)[:N_PROMPT]
    assert len(tokens) == N_PROMPT, len(tokens)
    n_vocab = llm.n_vocab()

    def last_logits():
        return np.ctypeslib.as_array(low.llama_get_logits_ith(llm._ctx.ctx, -1), shape=(n_vocab,))

    llm.reset()
    llm.eval(tokens[:32])  # warm-up: page in weights, build graphs
    prefill, decode = [], []
    for _ in range(args.reps):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(tokens)
        t1 = time.perf_counter()
        tok = int(np.argmax(last_logits()))
        t2 = time.perf_counter()
        for _ in range(N_GEN):
            llm.eval([tok])
            tok = int(np.argmax(last_logits()))
        t3 = time.perf_counter()
        prefill.append(N_PROMPT / (t1 - t0))
        decode.append(N_GEN / (t3 - t2))
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB
    print(json.dumps({"prefill_tps": statistics.median(prefill), "decode_tps": statistics.median(decode),
                      "peak_rss_mb": rss_mb, "prefill_all": prefill, "decode_all": decode}))


def run_child(cmd: list[str], env: dict | None = None, timeout: float = 3600) -> tuple[str, str, float]:
    """Runs cmd, returns (stdout, stderr, peak RSS MiB of that child).

    The peak is the child's own VmHWM, polled from /proc while it runs: wait4's ru_maxrss would
    include this Python process's resident size at fork time, which Linux carries into the
    child's figure even after exec."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
        deadline = time.time() + timeout
        hwm_kib = 0
        while True:
            hwm_kib = max(hwm_kib, _vm_hwm_kib(proc.pid))
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.time() > deadline:
                proc.kill()
                raise TimeoutError(" ".join(cmd))
            time.sleep(0.05)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        so, se = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:6])}... exited {proc.returncode}\n{se[-3000:]}")
    return so, se, (hwm_kib or ru.ru_maxrss) / 1024.0


def _vm_hwm_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def last_json(stdout: str) -> dict:
    try:
        return json.loads(stdout.strip())
    except json.JSONDecodeError:
        for line in reversed(stdout.strip().splitlines()):
            if line.strip().startswith("{"):
                return json.loads(line)
    raise ValueError(f"no JSON in output:\n{stdout[-1000:]}")


def bench_llama(model: str, threads: int, reps: int, shim: str | None) -> dict:
    cmd = [sys.executable, __file__, "--child-llama", "--model", model, "--threads", str(threads),
           "--reps", str(reps)]
    env = dict(os.environ)
    note = ""
    if amx_advertised():
        if shim:
            env["LD_PRELOAD"] = (shim + " " + env.get("LD_PRELOAD", "")).strip()
            note = "AMX off (shim)"
        else:
            cmd.append("--no-extra-bufts")
            note = "AMX+repack off"
    so, _, rss = run_child(cmd, env=env)
    res = last_json(so)
    res["peak_rss_mb"] = max(res.get("peak_rss_mb", 0.0), rss)
    res["note"] = note
    return res


# ----------------------------------------------------------------------------------------------------
# salvo


def _pick(d: dict, *keys):
    for k in keys:
        if k in d and d[k] is not None:
            return float(d[k])
    return None


def salvo_has_bench(salvo: str) -> bool:
    r = subprocess.run([salvo, "bench", "--help"], capture_output=True, text=True)
    return r.returncode == 0


def bench_salvo(salvo: str, model: str, threads: int, reps: int) -> dict:
    if salvo_has_bench(salvo):
        cmd = [salvo, "bench", "--model", model, "--json", "-p", str(N_PROMPT), "-n", str(N_GEN),
               "-r", str(reps), "-t", str(threads)]
        so, _, rss = run_child(cmd)
        d = last_json(so)
        # Accept llama-bench-like shapes: flat keys or a list of {"test": "pp512"/"tg128", "tps": x}.
        rows = d.get("results") if isinstance(d.get("results"), list) else []
        flat = dict(d)
        for r in rows:
            name = str(r.get("test", r.get("name", "")))
            v = r.get("tps", r.get("tps_mean", r.get("avg_ts")))
            flat[name] = statistics.median(v) if isinstance(v, list) and v else v  # per-rep list -> median
        pp = _pick(flat, f"pp{N_PROMPT}", "prefill_tps", "pp_tps")
        tg = _pick(flat, f"tg{N_GEN}", "decode_tps", "tg_tps")
        rss_json = _pick(flat, "peak_rss_mb")
        return {"prefill_tps": pp, "decode_tps": tg,
                "peak_rss_mb": max(rss, rss_json or 0.0), "note": "salvo bench"}
    pre, dec, rss_all = [], [], []
    for _ in range(reps):
        cmd = [salvo, "run", "--model", model, "-m", PROMPT_TEXT, "--raw", "--max-tokens", str(N_GEN),
               "--temperature", "0", "--json", "--threads", str(threads)]
        so, _, rss = run_child(cmd)
        d = last_json(so)
        pre.append(_pick(d, "prefill_tps"))
        dec.append(_pick(d, "decode_tps"))
        rss_all.append(max(rss, _pick(d, "peak_rss_mb") or 0.0))
    return {"prefill_tps": statistics.median(pre), "decode_tps": statistics.median(dec),
            "peak_rss_mb": max(rss_all), "note": "salvo run (prompt not cut to 512)"}


# ----------------------------------------------------------------------------------------------------
# model facts


def model_facts(path: str) -> dict:
    import gguf

    r = gguf.GGUFReader(path)
    arch = r.fields["general.architecture"].contents()
    tensors = {t.name: t for t in r.tensors}
    tied = "output.weight" not in tensors
    read_per_token = 0
    for name, t in tensors.items():
        if name == "token_embd.weight" and not tied:
            read_per_token += int(t.n_bytes) // int(t.shape[1])  # one row
        else:
            read_per_token += int(t.n_bytes)
    f = lambda k, d=None: r.fields[k].contents() if k in r.fields else d  # noqa: E731
    n_layer = int(f(f"{arch}.block_count"))
    n_embd = int(f(f"{arch}.embedding_length"))
    n_head = int(f(f"{arch}.attention.head_count"))
    n_head_kv = int(f(f"{arch}.attention.head_count_kv", n_head))
    dk = int(f(f"{arch}.attention.key_length", n_embd // n_head))
    dv = int(f(f"{arch}.attention.value_length", n_embd // n_head))
    kv_bytes = (N_PROMPT + N_GEN) * n_layer * n_head_kv * (dk + dv) * 2  # f16 cache
    return {"file_bytes": os.path.getsize(path), "read_per_token": read_per_token, "kv_bytes": kv_bytes}


def fmt(x, spec=".1f"):
    return "-" if x is None else format(x, spec)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["smollm2-135m", "qwen2.5-coder-1.5b"])
    ap.add_argument("--models-dir", default=os.environ.get("SALVO_MODELS", str(REPO_ROOT / "models")))
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--salvo", default=os.environ.get("SALVO_BIN"))
    ap.add_argument("--skip-llama", action="store_true")
    # internal
    ap.add_argument("--child-llama", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--no-extra-bufts", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.child_llama:
        child_llama(args)
        return

    salvo = args.salvo if args.salvo and os.access(args.salvo, os.X_OK) else None
    if not salvo:
        print(f"note: salvo binary not found ({args.salvo!r}); measuring llama.cpp only", file=sys.stderr)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        shim = build_noamx_shim(tmp) if amx_advertised() else None
        for name in args.models:
            path = str(pathlib.Path(args.models_dir) / f"{name}.gguf")
            facts = model_facts(path)
            llama = None if args.skip_llama else bench_llama(path, args.threads, args.reps, shim)
            mine = None
            if salvo:
                try:
                    mine = bench_salvo(salvo, path, args.threads, args.reps)
                except Exception as e:  # report and continue with the other models
                    print(f"salvo failed on {name}: {e}", file=sys.stderr)
            rows.append((name, facts, llama, mine))

    print(f"\nthreads={args.threads} reps={args.reps} prompt={N_PROMPT} gen={N_GEN} (medians)\n")
    print("| model | engine | prefill tok/s | decode tok/s | prefill ratio | decode ratio | decode GB/s "
          "| peak RSS MiB | RSS limit MiB | targets | note |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|")
    for name, facts, llama, mine in rows:
        rss_limit = (facts["file_bytes"] + facts["kv_bytes"]) * 1.15 / 2**20
        for engine, res in (("llama.cpp", llama), ("salvo", mine)):
            if res is None:
                continue
            gbs = None if res["decode_tps"] is None else facts["read_per_token"] * res["decode_tps"] / 1e9
            pr = dr = None
            targets = ""
            if engine == "salvo" and llama is not None:
                if res["prefill_tps"] and llama["prefill_tps"]:
                    pr = res["prefill_tps"] / llama["prefill_tps"]
                if res["decode_tps"] and llama["decode_tps"]:
                    dr = res["decode_tps"] / llama["decode_tps"]
                ok = lambda c: "ok" if c else "MISS"  # noqa: E731
                targets = (f"decode>=1.0x {ok(dr is not None and dr >= 1.0)}, "
                           f"prefill>=0.8x {ok(pr is not None and pr >= 0.8)}, "
                           f"RSS {ok(res['peak_rss_mb'] <= rss_limit)}")
            print(f"| {name} | {engine} | {fmt(res['prefill_tps'])} | {fmt(res['decode_tps'])} | "
                  f"{fmt(pr, '.2f')} | {fmt(dr, '.2f')} | {fmt(gbs, '.2f')} | {fmt(res['peak_rss_mb'], '.0f')} | "
                  f"{rss_limit:.0f} | {targets} | {res.get('note', '')} |")
    print("\ndecode GB/s = GGUF weight bytes read per token (token_embd counted as one row unless tied) x "
          "decode tok/s. llama.cpp RSS includes the Python interpreter (~30-60 MiB).")


if __name__ == "__main__":
    main()
