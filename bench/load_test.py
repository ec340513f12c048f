#!/usr/bin/env python3
"""Load test for an OpenAI-compatible server: N concurrent clients stream chat requests for D seconds.

Each client sends streaming chat completions back to back, taking the prompts of the prompts file in
turn (client k starts at prompt k, so the mix is spread over the clients), with temperature 0 and
--max-tokens. No request starts after --duration seconds; those in flight finish and count.

Reported: requests done, failures (anything but a stream that ends with a finish_reason; the exit
status is 1 when there is any), p50/p99 latency and time to first token, aggregate completion tok/s
(completion tokens of all requests / wall time; tokens from the usage chunk, else streamed chunks),
and the server's RSS sampled every --rss-interval seconds, with its growth over the second half of
the run (the first half holds the warm-up; flat memory: the second half stays near zero).

  bench/load_test.py --url http://127.0.0.1:8080 --pid $(pgrep -f 'salvo serve')
  bench/load_test.py --salvo build/release/salvo --model smollm2-135m --parallel 8   # starts it

Defaults: 32 clients, 120 s, 64 tokens per request, prompts from tools/compare/prompts.jsonl.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import statistics
import sys
import threading
import time

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "tools" / "compare"))

import servers  # noqa: E402
from compare import UsageError, load_prompts  # noqa: E402


def percentile(values: list[float], p: float) -> float | None:
    """Nearest-rank percentile (p in 0..100)."""
    if not values:
        return None
    s = sorted(values)
    return s[max(0, math.ceil(p / 100 * len(s)) - 1)]


def one_request(client, model: str, prompt, max_tokens: int) -> dict:
    t0 = time.perf_counter()
    ttft, chunks, usage, finish = None, 0, None, None
    stream = client.chat.completions.create(
        model=model, messages=prompt.messages, temperature=0.0, max_tokens=max_tokens, stream=True,
        stream_options={"include_usage": True})
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta is not None and choice.delta.content:
                chunks += 1
                ttft = ttft if ttft is not None else time.perf_counter() - t0
            if choice.finish_reason:
                finish = choice.finish_reason
    latency = time.perf_counter() - t0
    if finish is None:
        raise RuntimeError("stream ended without a finish_reason")
    tokens = usage.completion_tokens if usage is not None else chunks
    return {"latency_s": latency, "ttft_s": ttft, "tokens": tokens,
            "tokens_from": "usage" if usage is not None else "chunks", "finish": finish}


def client_loop(k: int, args, model: str, prompts, deadline: float, results: list, lock) -> None:
    import openai

    client = openai.OpenAI(base_url=args.url.rstrip("/") + "/v1", api_key=args.api_key or "none",
                           timeout=args.timeout, max_retries=0)
    i = k
    while time.perf_counter() < deadline:
        prompt = prompts[i % len(prompts)]
        i += 1
        start = time.perf_counter()
        try:
            r = one_request(client, model, prompt, args.max_tokens)
        except Exception as e:  # every failure is counted and reported, none stops the test
            r = {"error": f"{type(e).__name__}: {e}"[:300]}
        r.update(client=k, prompt=prompt.id, start_s=start, end_s=time.perf_counter())
        with lock:
            results.append(r)


def rss_sampler(pid: int, interval: float, stop: threading.Event, samples: list, t0: float) -> None:
    while not stop.is_set():
        kib = servers.rss_kib(pid)
        if kib is not None:
            samples.append((time.perf_counter() - t0, kib / 1024.0))
        stop.wait(interval)


def rss_summary(samples: list[tuple[float, float]]) -> dict | None:
    if len(samples) < 4:
        return None
    mib = [m for _, m in samples]
    # The first half includes warm-up (weight pages touched by new prompts, slot buffers filled);
    # a leak keeps growing through the second half.
    mid = mib[len(mib) // 2]
    step = max(1, len(samples) // 12)
    return {"samples": len(mib), "start_mib": mib[0], "min_mib": min(mib), "max_mib": max(mib),
            "mid_mib": mid, "end_mib": mib[-1], "second_half_growth_mib": mib[-1] - mid,
            "second_half_growth_pct": 100.0 * (mib[-1] - mid) / mid,
            "timeline": [(round(t, 1), round(m, 1)) for t, m in samples[::step]]}


def report(res: dict) -> str:
    f = lambda v, spec: "—" if v is None else format(v, spec)  # noqa: E731
    lines = [
        f"load test: {res['clients']} clients x {res['duration_s']:.0f} s against {res['url']} "
        f"(max_tokens {res['max_tokens']}, {res['prompts']} prompts)",
        "",
        "| requests | failed | p50 latency s | p99 latency s | p50 TTFT ms | p99 TTFT ms "
        "| completion tok/s | requests/s | wall s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        f"| {res['requests']} | {res['failed']} | {f(res['latency_p50_s'], '.2f')} "
        f"| {f(res['latency_p99_s'], '.2f')} | {f(res['ttft_p50_ms'], '.0f')} "
        f"| {f(res['ttft_p99_ms'], '.0f')} | {f(res['completion_tps'], '.1f')} "
        f"| {f(res['requests_per_s'], '.2f')} | {res['wall_s']:.1f} |",
        "",
        f"completion tokens: {res['completion_tokens']} (from {res['tokens_from']})",
    ]
    rss = res.get("rss")
    if rss:
        lines += [
            f"server RSS (pid {res['pid']}): start {rss['start_mib']:.1f} MiB, max "
            f"{rss['max_mib']:.1f}, half-way {rss['mid_mib']:.1f}, end {rss['end_mib']:.1f}; "
            f"second half: {rss['second_half_growth_mib']:+.1f} MiB "
            f"({rss['second_half_growth_pct']:+.1f}%)",
            "RSS over time (s: MiB): " + ", ".join(f"{t:g}: {m:.1f}" for t, m in rss["timeline"]),
        ]
    else:
        lines.append("server RSS: not sampled (give --pid, or let the script start the server)")
    for err in res["errors"][:5]:
        lines.append(f"failure: {err}")
    if "server_exit" in res:
        lines.append(f"server exit status after SIGTERM: {res['server_exit']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", help="server base URL (http://HOST:PORT, with or without /v1)")
    ap.add_argument("--pid", type=int, help="server process id, for its RSS")
    ap.add_argument("--salvo", help="start `salvo serve` from this binary instead of --url")
    ap.add_argument("--model", help="with --salvo: the model to serve (name or GGUF path); "
                    "otherwise the request's model (default: the first the server lists)")
    ap.add_argument("--parallel", type=int, help="with --salvo: --parallel N")
    ap.add_argument("--ctx", type=int, help="with --salvo: --ctx N")
    ap.add_argument("--server-arg", action="append", default=[],
                    help="with --salvo: one more argument for `salvo serve` (repeatable)")
    ap.add_argument("--api-key")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--duration", type=float, default=120.0, help="seconds (default 120)")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--prompts", type=pathlib.Path,
                    default=REPO_ROOT / "tools" / "compare" / "prompts.jsonl")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per request")
    ap.add_argument("--rss-interval", type=float, default=1.0)
    ap.add_argument("--max-rss-growth", type=float, metavar="PCT",
                    help="exit 1 when the server's RSS grows more than PCT%% over the second half")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args(argv)
    if bool(args.url) == bool(args.salvo):
        ap.error("give exactly one of --url or --salvo")
    if args.salvo and not args.model:
        ap.error("--salvo needs --model")
    if args.clients < 1 or args.duration <= 0 or args.max_tokens < 1:
        ap.error("--clients, --duration and --max-tokens must be positive")
    try:
        import openai
    except ImportError:
        ap.error("the 'openai' Python package is missing (scripts/setup.sh test)")
    try:
        prompts = load_prompts(args.prompts, None, None, args.max_tokens)
    except UsageError as e:
        ap.error(str(e))

    server = None
    if args.salvo:
        try:
            server = servers.start_salvo(args.salvo, args.model, parallel=args.parallel,
                                         ctx=args.ctx, api_key=args.api_key, extra=args.server_arg)
        except servers.ServerError as e:
            print(f"load_test: {e}", file=sys.stderr)
            return 2
        args.url, args.pid, request_model = server.url, server.pid, None
    else:
        request_model = args.model
    try:
        client = openai.OpenAI(base_url=args.url.rstrip("/").removesuffix("/v1") + "/v1",
                               api_key=args.api_key or "none", timeout=30, max_retries=0)
        args.url = args.url.rstrip("/").removesuffix("/v1")
        try:
            request_model = request_model or client.models.list().data[0].id
            one_request(client, request_model, prompts[0], args.max_tokens)  # warm-up, not counted
        except Exception as e:
            print(f"load_test: {args.url} does not answer a chat request: {e}", file=sys.stderr)
            return 2
        res = run_load(args, request_model, prompts)
    finally:
        if server is not None:
            code = server.stop()
            if args.json is False:
                print(f"load_test: server stopped (exit status {code})", file=sys.stderr)
    if server is not None:
        res["server_exit"] = code
        res["server_log_tail"] = server.log_tail(2000) if code not in (0, None) else ""
    rss = res["rss"]
    res["rss_growth_exceeded"] = bool(args.max_rss_growth is not None and rss
                                      and rss["second_half_growth_pct"] > args.max_rss_growth)
    print(json.dumps(res, indent=1) if args.json else report(res))
    if res["rss_growth_exceeded"]:
        print(f"load_test: RSS grew {rss['second_half_growth_pct']:.1f}% over the second half "
              f"(limit {args.max_rss_growth}%)", file=sys.stderr)
    return 1 if res["failed"] or res["rss_growth_exceeded"] else 0


def run_load(args, model: str, prompts) -> dict:
    results: list[dict] = []
    samples: list[tuple[float, float]] = []
    lock = threading.Lock()
    stop = threading.Event()
    t0 = time.perf_counter()
    sampler = None
    if args.pid:
        sampler = threading.Thread(target=rss_sampler,
                                   args=(args.pid, args.rss_interval, stop, samples, t0), daemon=True)
        sampler.start()
    deadline = t0 + args.duration
    threads = [threading.Thread(target=client_loop,
                                args=(k, args, model, prompts, deadline, results, lock), daemon=True)
               for k in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    stop.set()
    if sampler:
        sampler.join()
    ok = [r for r in results if "error" not in r]
    tokens = sum(r["tokens"] for r in ok)
    ttfts = [r["ttft_s"] for r in ok if r["ttft_s"] is not None]
    lat = [r["latency_s"] for r in ok]
    return {
        "url": args.url, "model": model, "clients": args.clients, "duration_s": args.duration,
        "max_tokens": args.max_tokens, "prompts": len(prompts), "requests": len(results),
        "failed": len(results) - len(ok), "errors": [r["error"] for r in results if "error" in r],
        "latency_p50_s": percentile(lat, 50), "latency_p99_s": percentile(lat, 99),
        "ttft_p50_ms": None if not ttfts else 1000 * percentile(ttfts, 50),
        "ttft_p99_ms": None if not ttfts else 1000 * percentile(ttfts, 99),
        "completion_tokens": tokens, "completion_tps": tokens / wall,
        "tokens_from": "/".join(sorted({r["tokens_from"] for r in ok})) or "—",
        "requests_per_s": len(results) / wall, "wall_s": wall, "pid": args.pid,
        "rss": rss_summary(samples),
    }


if __name__ == "__main__":
    sys.exit(main())
