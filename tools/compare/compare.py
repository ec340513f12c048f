#!/usr/bin/env python3
"""Compare OpenAI-compatible inference servers under matched conditions.

Every endpoint gets the same chat messages, temperature 0, the same max_tokens and seed, streaming,
one request at a time. Each endpoint is warmed up first; then every prompt is sent --reps times,
endpoints taking turns per prompt (the order rotates each repetition) so that a change in machine
load hits all of them alike. Prompts go round in order, so a server that reuses the previous
request's prompt prefix (llama.cpp does) gains only the chat template's shared head; with a single
prompt and several reps it would gain the whole prompt. Per request:

  TTFT        request sent -> first streamed chunk with text
  decode      (completion tokens - 1) / (last text chunk - first text chunk), in tokens/s
  total       request sent -> end of stream (compare it only where the tokens column agrees: an
              engine that stops early at end-of-text takes less time)
  tok/pass    usage.tokens_per_pass (or completion_tokens / usage.forward_passes) where the server
              reports it (salvo does)

Completion tokens come from the final usage chunk (stream_options.include_usage) when the server
sends one, else from the number of streamed chunks that carry text; the "tokens from" column says
which. Counting chunks undercounts a server that streams several tokens per chunk.

The markdown table shows medians per endpoint and per prompt category, with speedups against the
baseline endpoint (>1.00x = faster than the baseline). --json prints every request and the
summaries instead.

  compare.py --endpoint salvo=http://127.0.0.1:8080 \
             --endpoint llama.cpp=http://127.0.0.1:8081 --baseline llama.cpp \
             [--prompts FILE.jsonl] [--category code] [--limit 4] [--reps 3] [--max-tokens 128]

An endpoint is NAME=URL[,model=M][,api_key=K]; URL may end in /v1 or not. Without model=, the
first model the server lists is used. The prompts file is JSONL, one object per line:
  {"id": "code-00", "category": "code", "messages": [{"role": "user", "content": "..."}],
   "max_tokens": 256}
(id, category and max_tokens are optional; the default file is prompts.jsonl next to this script).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import statistics
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
DEFAULT_PROMPTS = HERE / "prompts.jsonl"
ROLES = ("system", "user", "assistant")


class UsageError(Exception):
    """A mistake in the command line, the prompts file or an endpoint: one line, exit 2."""


@dataclasses.dataclass
class Endpoint:
    name: str
    base_url: str  # ends in /v1
    model: str | None = None
    api_key: str | None = None
    include_usage: bool = True  # cleared when the server rejects stream_options
    client: object = None


@dataclasses.dataclass
class Prompt:
    id: str
    category: str
    messages: list
    max_tokens: int


def parse_endpoint(spec: str) -> Endpoint:
    name, eq, rest = spec.partition("=")
    if not eq or not name or not rest:
        raise UsageError(f"--endpoint '{spec}': expected NAME=URL[,model=M][,api_key=K]")
    url, *options = rest.split(",")
    if not url.startswith(("http://", "https://")):
        raise UsageError(f"--endpoint '{spec}': URL '{url}' must start with http:// or https://")
    url = url.rstrip("/")
    ep = Endpoint(name=name, base_url=url if url.endswith("/v1") else url + "/v1")
    for option in options:
        key, eq, value = option.partition("=")
        if not eq or key not in ("model", "api_key") or not value:
            raise UsageError(f"--endpoint '{spec}': unknown option '{option}' "
                             "(expected model=M or api_key=K)")
        setattr(ep, key, value)
    return ep


def load_prompts(path: pathlib.Path, category: list[str] | None, limit: int | None,
                 max_tokens: int | None) -> list[Prompt]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"--prompts {path}: cannot read: {e}")
    prompts: list[Prompt] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"--prompts {path}, line {n}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise UsageError(f"{where}: not JSON ({e.msg} at column {e.colno})")
        if not isinstance(obj, dict):
            raise UsageError(f"{where}: expected a JSON object")
        messages = obj.get("messages")
        if not isinstance(messages, list) or not messages:
            raise UsageError(f"{where}: 'messages' must be a non-empty list")
        for m in messages:
            if (not isinstance(m, dict) or m.get("role") not in ROLES
                    or not isinstance(m.get("content"), str)):
                raise UsageError(f"{where}: each message needs a role in {ROLES} and a string "
                                 "content")
        mt = obj.get("max_tokens", 128)
        if not isinstance(mt, int) or isinstance(mt, bool) or mt < 1:
            raise UsageError(f"{where}: 'max_tokens' must be a positive integer")
        cat = obj.get("category", "all")
        pid = obj.get("id", f"line-{n}")
        if not isinstance(cat, str) or not isinstance(pid, str):
            raise UsageError(f"{where}: 'id' and 'category' must be strings")
        prompts.append(Prompt(pid, cat, messages, max_tokens or mt))
    if not prompts:
        raise UsageError(f"--prompts {path}: no prompts in the file")
    if category:
        known = sorted({p.category for p in prompts})
        unknown = [c for c in category if c not in known]
        if unknown:
            raise UsageError(f"--category {', '.join(unknown)}: not in {path} "
                             f"(categories: {', '.join(known)})")
        prompts = [p for p in prompts if p.category in category]
    return prompts[:limit] if limit else prompts


def connect(ep: Endpoint, timeout: float) -> None:
    """Creates the client and checks that the endpoint answers; picks its model if none given."""
    import openai

    ep.client = openai.OpenAI(base_url=ep.base_url, api_key=ep.api_key or "none",
                              timeout=timeout, max_retries=0)
    try:
        models = [m.id for m in ep.client.with_options(timeout=10).models.list()]
    except openai.APIConnectionError as e:
        raise UsageError(f"endpoint '{ep.name}' at {ep.base_url} is unreachable ({e.__cause__ or e})")
    except openai.AuthenticationError:
        raise UsageError(f"endpoint '{ep.name}' at {ep.base_url} refused the API key (401); "
                         "give it as api_key=K")
    except openai.APIStatusError as e:
        raise UsageError(f"endpoint '{ep.name}': GET {ep.base_url}/models answered "
                         f"{e.status_code}: {e.message}")
    if ep.model is None:
        if not models:
            raise UsageError(f"endpoint '{ep.name}' lists no models; give one as model=M")
        ep.model = models[0]


# llama-cpp-python's server applies repeat_penalty 1.1 unless a request says otherwise, which
# would compare penalised decoding against plain greedy; every request states 1.0 (a field the
# OpenAI API does not define: servers that do not know it ignore it).
EXTRA_BODY: dict = {"repeat_penalty": 1.0}


def run_request(ep: Endpoint, prompt: Prompt, seed: int) -> dict:
    """One streamed chat completion; timings in seconds from just before the request is sent."""
    import openai

    kwargs = dict(model=ep.model, messages=prompt.messages, temperature=0.0,
                  max_tokens=prompt.max_tokens, seed=seed, stream=True)
    if EXTRA_BODY:
        kwargs["extra_body"] = EXTRA_BODY
    if ep.include_usage:
        kwargs["stream_options"] = {"include_usage": True}
    t0 = time.perf_counter()
    try:
        stream = ep.client.chat.completions.create(**kwargs)
    except openai.BadRequestError as e:
        if ep.include_usage and "stream_options" in str(e):
            ep.include_usage = False
            return run_request(ep, prompt, seed)
        raise
    text, chunks, usage, finish = [], 0, None, None
    t_first = t_last = None
    for chunk in stream:
        now = time.perf_counter()
        if chunk.usage is not None:
            usage = chunk.usage.model_dump()
        for choice in chunk.choices:
            if choice.delta is not None and choice.delta.content:
                text.append(choice.delta.content)
                chunks += 1
                t_first = t_first if t_first is not None else now
                t_last = now
            if choice.finish_reason:
                finish = choice.finish_reason
    t_end = time.perf_counter()
    if usage and usage.get("completion_tokens") is not None:
        tokens, source = int(usage["completion_tokens"]), "usage"
    else:
        tokens, source = chunks, "chunks"
    decode_tps = None
    if t_first is not None and tokens >= 2 and t_last > t_first:
        decode_tps = (tokens - 1) / (t_last - t_first)
    tokens_per_pass = None
    if usage:
        if usage.get("tokens_per_pass") is not None:
            tokens_per_pass = float(usage["tokens_per_pass"])
        elif usage.get("forward_passes"):
            tokens_per_pass = tokens / float(usage["forward_passes"])
    return {
        "endpoint": ep.name, "prompt": prompt.id, "category": prompt.category,
        "ttft_s": None if t_first is None else t_first - t0, "decode_tps": decode_tps,
        "total_s": t_end - t0, "completion_tokens": tokens, "tokens_from": source,
        "tokens_per_pass": tokens_per_pass, "finish_reason": finish, "text": "".join(text),
        "usage": usage,
    }


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summarise(records: list[dict], endpoints: list[Endpoint], baseline: str) -> dict:
    def group(rs: list[dict]) -> dict:
        ok = [r for r in rs if "error" not in r]
        sources = sorted({r["tokens_from"] for r in ok})
        return {
            "requests": len(rs), "failed": len(rs) - len(ok),
            "ttft_ms": None if median([r["ttft_s"] for r in ok]) is None
            else 1000 * median([r["ttft_s"] for r in ok]),
            "decode_tps": median([r["decode_tps"] for r in ok]),
            "total_s": median([r["total_s"] for r in ok]),
            "completion_tokens": median([r["completion_tokens"] for r in ok]),
            "tokens_per_pass": median([r["tokens_per_pass"] for r in ok]),
            "tokens_from": "/".join(sources) or None,
        }

    # Same text as the baseline for the same prompt and repetition (greedy decoding of one model
    # should agree; engines whose arithmetic differs may diverge after a near-tie).
    base_text = {(r["prompt"], r["rep"]): r.get("text") for r in records
                 if r["endpoint"] == baseline and "error" not in r}

    def add_ratios(row: dict, base: dict, rs: list[dict]) -> dict:
        row["same_text"] = sum(1 for r in rs if "error" not in r
                               and base_text.get((r["prompt"], r["rep"])) == r["text"])
        row["decode_speedup"] = _ratio(row["decode_tps"], base["decode_tps"])
        row["ttft_speedup"] = _ratio(base["ttft_ms"], row["ttft_ms"])
        row["total_speedup"] = _ratio(base["total_s"], row["total_s"])
        return row

    overall, by_category = [], []
    base_all = group([r for r in records if r["endpoint"] == baseline])
    for ep in endpoints:
        rs = [r for r in records if r["endpoint"] == ep.name]
        overall.append(add_ratios({"endpoint": ep.name, **group(rs)}, base_all, rs))
    categories = list(dict.fromkeys(r["category"] for r in records))
    for cat in categories:
        base_cat = group([r for r in records if r["endpoint"] == baseline and r["category"] == cat])
        for ep in endpoints:
            rs = [r for r in records if r["endpoint"] == ep.name and r["category"] == cat]
            by_category.append(add_ratios({"category": cat, "endpoint": ep.name, **group(rs)},
                                          base_cat, rs))
    return {"overall": overall, "by_category": by_category}


def _ratio(a, b):
    return a / b if a is not None and b else None


def _fmt(v, spec: str, suffix: str = "") -> str:
    return "—" if v is None else format(v, spec) + suffix


def markdown(summary: dict, baseline: str, reps: int, n_prompts: int) -> str:
    head = ("| TTFT ms | decode tok/s | total s | tokens | tokens from | tok/pass | same text "
            "| TTFT vs base | decode vs base | total vs base | failed |")
    sep = "|" + " --- |" * (head.count("|") - 1)

    def cells(row: dict) -> str:
        return (f" {_fmt(row['ttft_ms'], '.1f')} | {_fmt(row['decode_tps'], '.1f')} "
                f"| {_fmt(row['total_s'], '.2f')} | {_fmt(row['completion_tokens'], '.0f')} "
                f"| {row['tokens_from'] or '—'} | {_fmt(row['tokens_per_pass'], '.2f')} "
                f"| {row['same_text']}/{row['requests'] - row['failed']} "
                f"| {_fmt(row['ttft_speedup'], '.2f', 'x')} "
                f"| {_fmt(row['decode_speedup'], '.2f', 'x')} "
                f"| {_fmt(row['total_speedup'], '.2f', 'x')} | {row['failed']} |")

    out = [f"Medians over {n_prompts} prompts x {reps} reps, temperature 0, streaming; speedups "
           f"against `{baseline}` (>1.00x = faster).", "",
           "| endpoint " + head, "| --- " + sep]
    out += [f"| {r['endpoint']} |" + cells(r) for r in summary["overall"]]
    out += ["", "| category | endpoint " + head, "| --- | --- " + sep]
    out += [f"| {r['category']} | {r['endpoint']} |" + cells(r) for r in summary["by_category"]]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="salvo compare", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Example: salvo compare --endpoint salvo=http://127.0.0.1:8080 "
               "--endpoint llama.cpp=http://127.0.0.1:8081 --baseline llama.cpp")
    ap.add_argument("--endpoint", action="append", default=[], metavar="NAME=URL[,model=M][,api_key=K]",
                    help="an OpenAI-compatible server (repeat for each)")
    ap.add_argument("--baseline", help="endpoint name the ratios are against (default: the first)")
    ap.add_argument("--prompts", type=pathlib.Path, default=DEFAULT_PROMPTS,
                    help=f"JSONL prompts file (default {DEFAULT_PROMPTS.name} next to this script)")
    ap.add_argument("--category", action="append", help="only prompts of this category (repeatable)")
    ap.add_argument("--limit", type=int, help="at most this many prompts (after --category)")
    ap.add_argument("--max-tokens", type=int, help="max_tokens for every prompt (default: the "
                    "file's per-prompt value, else 128)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions of each prompt (default 3)")
    ap.add_argument("--warmup", type=int, default=1, help="warm-up requests per endpoint (default 1)")
    ap.add_argument("--seed", type=int, default=1234, help="seed sent with every request")
    ap.add_argument("--repeat-penalty", default="1.0",
                    help="repeat_penalty sent with every request (default 1.0: llama-cpp-python's "
                         "server otherwise applies 1.1); 'none' sends no such field")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per request (default 600)")
    ap.add_argument("--json", action="store_true", help="print JSON (every request + summaries)")
    ap.add_argument("--json-out", type=pathlib.Path, metavar="FILE",
                    help="also write that JSON to FILE (the table still goes to stdout)")
    ap.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = ap.parse_args(argv)
    try:
        return _compare(args)
    except UsageError as e:
        print(f"compare: {e}", file=sys.stderr)
        return 2


def _compare(args) -> int:
    global EXTRA_BODY
    if args.repeat_penalty == "none":
        EXTRA_BODY = {}
    else:
        try:
            EXTRA_BODY = {"repeat_penalty": float(args.repeat_penalty)}
        except ValueError:
            raise UsageError(f"--repeat-penalty: '{args.repeat_penalty}' is neither a number nor 'none'")
    if not args.endpoint:
        raise UsageError("give at least one --endpoint NAME=URL")
    if args.reps < 1 or args.warmup < 0 or (args.limit is not None and args.limit < 1):
        raise UsageError("--reps and --limit must be >= 1, --warmup >= 0")
    if args.max_tokens is not None and args.max_tokens < 1:
        raise UsageError("--max-tokens must be >= 1")
    if args.json_out and not args.json_out.resolve().parent.is_dir():
        raise UsageError(f"--json-out {args.json_out}: no such directory")
    endpoints = [parse_endpoint(s) for s in args.endpoint]
    names = [ep.name for ep in endpoints]
    if len(set(names)) != len(names):
        raise UsageError(f"endpoint names must differ: {', '.join(names)}")
    baseline = args.baseline or names[0]
    if baseline not in names:
        raise UsageError(f"--baseline '{baseline}' is not an endpoint ({', '.join(names)})")
    prompts = load_prompts(args.prompts, args.category, args.limit, args.max_tokens)
    try:
        import openai  # noqa: F401
    except ImportError:
        raise UsageError("the 'openai' Python package is missing (pip install openai, or "
                         "scripts/setup.sh test)")
    import openai

    def log(msg: str) -> None:
        if not args.quiet:
            print(msg, file=sys.stderr, flush=True)

    for ep in endpoints:
        connect(ep, args.timeout)
        log(f"compare: {ep.name} = {ep.base_url} model {ep.model}")
    # A warm-up prompt outside the set: a server that reuses the previous request's prompt prefix
    # (llama.cpp does) must not get the first measured prompt for free.
    warmup = Prompt("warm-up", "warm-up", [{"role": "user", "content": "Say hello in five words."}],
                    min(16, prompts[0].max_tokens))
    for ep in endpoints:
        for _ in range(args.warmup):
            try:
                run_request(ep, warmup, args.seed)
            except openai.OpenAIError as e:
                raise UsageError(f"endpoint '{ep.name}': warm-up request failed: {e}")
    records = []
    for rep in range(args.reps):
        for p in prompts:
            order = endpoints[rep % len(endpoints):] + endpoints[:rep % len(endpoints)]
            for ep in order:
                try:
                    r = run_request(ep, p, args.seed)
                except openai.OpenAIError as e:
                    r = {"endpoint": ep.name, "prompt": p.id, "category": p.category,
                         "error": f"{type(e).__name__}: {e}"}
                r["rep"] = rep
                records.append(r)
                if "error" in r:
                    log(f"compare: {ep.name} {p.id} rep {rep}: FAILED {r['error']}")
                else:
                    log(f"compare: {ep.name} {p.id} rep {rep}: {r['completion_tokens']} tokens, "
                        f"ttft {_fmt(r['ttft_s'] and 1000 * r['ttft_s'], '.0f')} ms, "
                        f"{_fmt(r['decode_tps'], '.1f')} tok/s")
    summary = summarise(records, endpoints, baseline)
    doc = json.dumps({
        "baseline": baseline, "reps": args.reps, "seed": args.seed,
        "endpoints": [{"name": ep.name, "url": ep.base_url, "model": ep.model,
                       "include_usage": ep.include_usage} for ep in endpoints],
        "prompts": [dataclasses.asdict(p) for p in prompts],
        "summary": summary, "requests": records}, indent=1)
    if args.json_out:
        args.json_out.write_text(doc + "\n")
    if args.json:
        print(doc)
    else:
        print(markdown(summary, baseline, args.reps, len(prompts)))
    return 1 if any("error" in r for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
