#!/usr/bin/env python3
"""Speculative decoding benchmark (a benchmark, not a test): salvo's --spec none, ngram, draft and
auto against llama.cpp's plain decoding and its prompt-lookup speculation, per prompt category.

Prompts: ../shared/bench/prompts.jsonl (id, category, messages, max_tokens). Each salvo mode runs
every selected prompt in one process (`salvo run --prompts-file --json`, the model's chat template,
temperature 0); the prompt token ids salvo rendered are handed to llama.cpp (llama-cpp-python, same
GGUF, same threads), so both engines decode from exactly the same tokens.

  salvo none / ngram / draft / auto   `--spec MODE` (draft and auto with --draft-model)
  salvo auto:BUDGET:DEPTH             `--spec auto --spec-budget BUDGET --spec-depth DEPTH`
  salvo dflash:TREE:BUDGET            `--spec dflash --spec-tree TREE --spec-budget BUDGET
                                      --spec-depth 15` (TREE: chain, best, adapter; the drafter
                                      is --drafter DIR or drafters/<model>/); --dflash-sweep adds
                                      every tree at budgets 8/16/32/64. Tokens per pass is tau.
  llama.cpp plain                     eval one token at a time, argmax (as llama.cpp's own decoding)
  llama.cpp lookup                    Llama(draft_model=LlamaPromptLookupDecoding()), greedy
                                      generate(); llama-cpp-python exposes only prompt lookup (an
                                      n-gram mode) and has no draft-model speculation, so there is
                                      no llama.cpp draft-model column.

Reported per category: medians over its prompts of decode tok/s, tokens per forward pass and
acceptance (accepted / drafted tokens) for each salvo mode, decode tok/s for llama.cpp, the ratios
to salvo none and to llama.cpp plain, and auto / none (the target: auto never more than 3% slower).

On a loaded machine timings drift by tens of percent within minutes, so with --reps N every
prompt runs N times in every mode, the modes interleaved prompt by prompt (one process per
prompt and mode, the order rotated every repetition), and each figure is the median over the
repetitions. Ratios to none are taken per repetition (mode / none of the same repetition, run
seconds apart) and reported per prompt and per category as medians, and per category as the
ratio of total decode time for the same tokens.
llama.cpp generates as many tokens as salvo's plain run did for that prompt (greedy text from the
same ids; the counts agree unless the engines' greedy choices differ).

Usage: bench/bench_spec.py [--model qwen2.5-coder-1.5b] [--draft-model qwen2.5-coder-0.5b]
                           [--limit N per category] [--max-tokens N] [--threads N]
                           [--modes none ngram draft auto dflash:best:16] [--dflash-sweep]
                           [--drafter DIR] [--skip-llama] [--salvo PATH] [--reps N] [--per-prompt]
                           [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

BENCH_DIR = pathlib.Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
sys.path.insert(0, str(BENCH_DIR))
from bench_vs_llamacpp import amx_advertised, build_noamx_shim, last_json, run_child  # noqa: E402

CATEGORIES = ["code", "math", "chat", "grounded"]

# Share of the host's CPUs other processes may keep busy before a run without a warning. A
# drafted pass has more host steps than a plain one, so a busy host slows speculation most: on
# the H200 (session 22) a llama.cpp build beside bench_spec turned auto on chat from 0.99x plain
# into 0.96x, with 4-5 ms stalls in drafts and passes of 0.5 and 1.2 ms.
BUSY_WARNING = 0.2


def host_busy(seconds: float = 0.5) -> float | None:
    """Fraction of all CPUs busy over `seconds` (from /proc/stat; None where there is none)."""
    def sample():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return sum(v), v[3] + (v[4] if len(v) > 4 else 0)  # total, idle + iowait
    try:
        t0, i0 = sample()
        time.sleep(seconds)
        t1, i1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    return 1.0 - (i1 - i0) / (t1 - t0) if t1 > t0 else None


DEFAULT_PROMPTS = REPO_ROOT.parent / "shared" / "bench" / "prompts.jsonl"
if not DEFAULT_PROMPTS.exists():
    DEFAULT_PROMPTS = pathlib.Path("/work/shared/bench/prompts.jsonl")


def load_prompts(path: pathlib.Path, limit: int, max_tokens: int | None) -> list[dict]:
    per_category = collections.Counter()
    prompts = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        p = json.loads(line)
        if p["category"] not in CATEGORIES or per_category[p["category"]] >= limit:
            continue
        if len(p["messages"]) != 1 or p["messages"][0]["role"] != "user":
            raise SystemExit(f"{p['id']}: only single user messages are supported")
        per_category[p["category"]] += 1
        p["max_tokens"] = max_tokens or p.get("max_tokens", 256)
        prompts.append(p)
    return prompts


# ----------------------------------------------------------------------------------------------------
# salvo


def spec_flags(mode: str, drafter: str | None) -> list[str]:
    """`--spec` and its companions for a mode name (dflash:TREE:BUDGET, auto:BUDGET:DEPTH included)."""
    # auto drafts with the given drafter too: without it salvo looks for the model's drafter
    # beside its own source or install, which a GPU machine's copy lacks (sessions 14-15 measured
    # auto there with the n-gram drafter).
    with_drafter = ["--drafter", drafter] if drafter else []
    if mode.startswith("auto:"):
        _, budget, depth = mode.split(":")
        return ["--spec", "auto", "--spec-budget", budget, "--spec-depth", depth, *with_drafter]
    if mode == "auto":
        return ["--spec", "auto", *with_drafter]
    if not mode.startswith("dflash"):
        return ["--spec", mode]
    parts = mode.split(":")
    tree = parts[1] if len(parts) > 1 else "auto"
    budget = parts[2] if len(parts) > 2 else "16"
    flags = ["--spec", "dflash", "--spec-tree", tree, "--spec-budget", budget, "--spec-depth", "15"]
    return flags + with_drafter


def run_salvo(salvo: str, model: str, draft: str | None, mode: str, prompts: list[dict],
              threads: int, drafter: str | None = None, device: str = "cpu",
              temperature: float = 0.0) -> list[dict]:
    """One process per mode and max_tokens value; one JSON result per prompt, in order."""
    results: dict[str, dict] = {}
    by_max = collections.defaultdict(list)
    for p in prompts:
        by_max[p["max_tokens"]].append(p)
    for max_tokens, group in by_max.items():
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
            for p in group:
                f.write(json.dumps({"prompt": p["messages"][0]["content"]}) + "\n")
            prompts_file = f.name
        cmd = [salvo, "run", "--model", model, "--prompts-file", prompts_file, "--json",
               "--temperature", str(temperature), "--seed", "1", "--max-tokens", str(max_tokens),
               "--threads", str(threads), "--ctx", "2048", "--device", device,
               *spec_flags(mode, drafter)]
        # auto takes the draft model only where it exists (the GPU machine has none).
        if draft and (mode == "draft" or (mode == "auto" and os.path.exists(draft))):
            cmd += ["--draft-model", draft]
        try:
            so, _, _ = run_child(cmd)
        finally:
            os.unlink(prompts_file)
        lines = [json.loads(x) for x in so.splitlines() if x.strip().startswith("{")]
        assert len(lines) == len(group), (len(lines), len(group))
        for p, r in zip(group, lines):
            results[p["id"]] = r
    return [results[p["id"]] for p in prompts]


# ----------------------------------------------------------------------------------------------------
# llama.cpp child: reads [{"id", "prompt_tokens", "n_gen"}] and prints per-prompt decode tok/s.


def child_llama(args) -> None:
    import numpy as np
    import llama_cpp
    import llama_cpp.llama_cpp as low
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    if args.no_extra_bufts:
        original = low.llama_model_default_params

        def patched():
            p = original()
            p.use_extra_bufts = False
            return p

        low.llama_model_default_params = patched
    jobs = json.loads(pathlib.Path(args.jobs).read_text())
    kwargs = dict(n_ctx=2048, n_batch=512, n_threads=args.threads, n_threads_batch=args.threads,
                  verbose=False)
    out = []
    if args.lookup:
        llm = llama_cpp.Llama(args.model_path,
                              draft_model=LlamaPromptLookupDecoding(num_pred_tokens=10), **kwargs)
    else:
        llm = llama_cpp.Llama(args.model_path, **kwargs)
    n_vocab = llm.n_vocab()
    llm.eval(jobs[0]["prompt_tokens"][:16])  # warm-up: page in the weights
    for job in jobs:
        llm.reset()
        n_gen = job["n_gen"]
        if args.lookup:
            times = []
            gen = llm.generate(job["prompt_tokens"], temp=0.0, top_k=1, top_p=1.0, min_p=0.0,
                               repeat_penalty=1.0, reset=True)
            tokens = []
            for tok in gen:
                times.append(time.perf_counter())
                tokens.append(tok)
                if len(tokens) >= n_gen:
                    break
            gen.close()
        else:
            llm.eval(job["prompt_tokens"])
            logits = np.ctypeslib.as_array(low.llama_get_logits_ith(llm._ctx.ctx, -1), shape=(n_vocab,))
            tok = int(np.argmax(logits))
            tokens, times = [tok], [time.perf_counter()]
            while len(tokens) < n_gen:
                llm.eval([tok])
                logits = np.ctypeslib.as_array(low.llama_get_logits_ith(llm._ctx.ctx, -1),
                                               shape=(n_vocab,))
                tok = int(np.argmax(logits))
                tokens.append(tok)
                times.append(time.perf_counter())
        tps = (len(tokens) - 1) / (times[-1] - times[0]) if len(tokens) > 1 else None
        out.append({"id": job["id"], "decode_tps": tps, "tokens": tokens})
    print(json.dumps(out))


def run_llama(model: str, jobs: list[dict], threads: int, lookup: bool, shim: str | None) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(jobs, f)
        jobs_file = f.name
    cmd = [sys.executable, __file__, "--child-llama", "--model-path", model, "--jobs", jobs_file,
           "--threads", str(threads)] + (["--lookup"] if lookup else [])
    env = dict(os.environ)
    if amx_advertised():
        if shim:
            env["LD_PRELOAD"] = (shim + " " + env.get("LD_PRELOAD", "")).strip()
        else:
            cmd.append("--no-extra-bufts")
    try:
        so, _, _ = run_child(cmd, env=env)
    finally:
        os.unlink(jobs_file)
    return {r["id"]: r for r in json.loads(so.strip().splitlines()[-1])}


# ----------------------------------------------------------------------------------------------------
# report


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(x, spec=".2f"):
    return "-" if x is None else format(x, spec)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--draft-model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--prompts", type=pathlib.Path, default=DEFAULT_PROMPTS)
    ap.add_argument("--limit", type=int, default=100, help="prompts per category")
    ap.add_argument("--max-tokens", type=int, default=None, help="override each prompt's max_tokens")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--modes", nargs="+", default=["none", "ngram", "draft", "auto"])
    ap.add_argument("--models-dir", default=os.environ.get("SALVO_MODELS", str(REPO_ROOT / "models")))
    ap.add_argument("--salvo", default=os.environ.get("SALVO_BIN", str(REPO_ROOT / "build/release/salvo")))
    ap.add_argument("--drafter", help="DFlash drafter directory for the dflash modes")
    ap.add_argument("--dflash-sweep", action="store_true",
                    help="add dflash:{chain,best,adapter}:{8,16,32,64}")
    ap.add_argument("--skip-llama", action="store_true")
    ap.add_argument("--device", default="cpu", help="salvo's --device (cuda on the GPU machine)")
    ap.add_argument("--temperature", type=float, default=0.0,
                    help="salvo's sampling temperature (default 0: greedy; with top-k 40 above 0)")
    ap.add_argument("--json-out", help="write every per-prompt figure here")
    ap.add_argument("--reps", type=int, default=1, help="repetitions, interleaved prompt by prompt")
    ap.add_argument("--interleave", action="store_true",
                    help="interleave the modes prompt by prompt even with one repetition")
    ap.add_argument("--per-prompt", action="store_true", help="print a row per prompt too")
    ap.add_argument("--reuse-salvo", help="take salvo's results from an earlier --json-out")
    # internal
    ap.add_argument("--child-llama", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model-path", help=argparse.SUPPRESS)
    ap.add_argument("--jobs", help=argparse.SUPPRESS)
    ap.add_argument("--lookup", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--no-extra-bufts", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.temperature > 0 and not args.skip_llama:
        # The llama.cpp peer decodes greedily: sampled salvo runs have no matched peer here.
        print("--temperature > 0: llama.cpp is not run (its runs here are greedy)", file=sys.stderr)
        args.skip_llama = True
    if args.child_llama:
        child_llama(args)
        return

    def path_of(name):
        return name if name.endswith(".gguf") else str(pathlib.Path(args.models_dir) / f"{name}.gguf")

    model, draft = path_of(args.model), path_of(args.draft_model)
    modes = ["none"] + [m for m in args.modes if m != "none"]  # none is every ratio's baseline
    if args.dflash_sweep:
        modes += [f"dflash:{t}:{b}" for t in ("chain", "best", "adapter") for b in (8, 16, 32, 64)
                  if f"dflash:{t}:{b}" not in modes]
    prompts = load_prompts(args.prompts, args.limit, args.max_tokens)
    t0 = time.time()
    # salvo[mode][prompt id]: one result per repetition.
    salvo = {}
    if args.reuse_salvo:
        salvo = json.loads(pathlib.Path(args.reuse_salvo).read_text())["salvo"]
        salvo = {m: {i: r if isinstance(r, list) else [r] for i, r in by_id.items()}
                 for m, by_id in salvo.items()}
    todo = [m for m in modes if not (m in salvo and all(p["id"] in salvo[m] for p in prompts))]
    for m in todo:
        salvo[m] = {}
    busy = []  # host_busy() before each run: what else the machine was doing
    if todo and args.reps == 1 and not args.interleave:
        for mode in todo:
            busy.append(host_busy())
            print(f"salvo --spec {mode} on {len(prompts)} prompts ...", file=sys.stderr, flush=True)
            results = run_salvo(args.salvo, model, draft, mode, prompts, args.threads,
                                args.drafter, args.device, args.temperature)
            salvo[mode] = {p["id"]: [r] for p, r in zip(prompts, results)}
    elif todo:
        # Interleaved: prompt by prompt, every mode seconds apart, the order rotated per repetition.
        for rep in range(args.reps):
            busy.append(host_busy())
            for k, p in enumerate(prompts):
                order = todo[(rep + k) % len(todo):] + todo[:(rep + k) % len(todo)]
                print(f"rep {rep + 1}/{args.reps} {p['id']}: {' '.join(order)}", file=sys.stderr,
                      flush=True)
                for mode in order:
                    r = run_salvo(args.salvo, model, draft, mode, [p], args.threads,
                                  args.drafter, args.device, args.temperature)[0]
                    salvo[mode].setdefault(p["id"], []).append(r)
                if args.json_out:
                    pathlib.Path(args.json_out).write_text(json.dumps({"salvo": salvo, "llama": {}}))
    if args.json_out:
        pathlib.Path(args.json_out).write_text(json.dumps({"salvo": salvo, "llama": {}}))
    llama = {}
    if not args.skip_llama:
        jobs = [{"id": p["id"], "prompt_tokens": salvo["none"][p["id"]][0]["prompt_tokens"],
                 "n_gen": salvo["none"][p["id"]][0]["n_generated"]} for p in prompts]
        with tempfile.TemporaryDirectory() as tmp:
            shim = build_noamx_shim(tmp) if amx_advertised() else None
            for name, lookup in (("plain", False), ("lookup", True)):
                print(f"llama.cpp {name} ...", file=sys.stderr, flush=True)
                llama[name] = run_llama(model, jobs, args.threads, lookup, shim)

    # Exactness: every salvo mode emits the plain run's tokens at T=0.
    mismatches = [(m, p["id"]) for m in modes for p in prompts for r in salvo[m][p["id"]]
                  if r["tokens"] != salvo["none"][p["id"]][0]["tokens"]]

    print(f"\nmodel {args.model}, draft model {args.draft_model}, threads {args.threads}, "
          f"T={args.temperature:g}, "
          f"{len(prompts)} prompts ({args.limit} per category at most), "
          f"max tokens {args.max_tokens or 'per prompt'}, {args.reps} repetition(s)"
          f"{', interleaved' if args.reps > 1 or args.interleave else ''}; "
          f"medians per category; {time.time() - t0:.0f} s")
    busy = [b for b in busy if b is not None]
    if busy:
        print(f"host CPUs busy before the runs (other processes): at most {max(busy):.0%} of "
              f"{os.cpu_count()}")
        if max(busy) > BUSY_WARNING:
            print(f"WARNING: other processes kept more than {BUSY_WARNING:.0%} of the CPUs busy; "
                  "the speculative modes' timings (more host steps a pass) are the least reliable")
    print()

    def per_prompt(m, i, key):
        return median(r[key] for r in salvo[m][i])

    def ratio_to_none(m, i):
        """Median over repetitions of mode / none, each pair from the same repetition."""
        pairs = zip(salvo[m][i], salvo["none"][i])
        return median(a["decode_tps"] / b["decode_tps"] for a, b in pairs
                      if a["decode_tps"] and b["decode_tps"])

    def decode_seconds(r):
        return (r["n_generated"] - 1) / r["decode_tps"] if r["decode_tps"] else 0.0

    header = ["category", "n"]
    for m in modes:
        header += [f"{m} tok/s", f"{m} tok/pass"] + ([f"{m} accept"] if m != "none" else [])
    if llama:
        header += ["llama plain tok/s", "llama lookup tok/s"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    summary = {}
    for cat in CATEGORIES:
        ids = [p["id"] for p in prompts if p["category"] == cat]
        if not ids:
            continue
        row = [cat, str(len(ids))]
        s = {}
        for m in modes:
            s[m] = median(per_prompt(m, i, "decode_tps") for i in ids)
            acc = median(median(r["accepted_draft_tokens"] / r["drafted_nodes"] if r["drafted_nodes"]
                                else 0.0 for r in salvo[m][i]) for i in ids)
            row += [fmt(s[m], ".1f"), fmt(median(per_prompt(m, i, "tokens_per_pass") for i in ids))]
            if m != "none":
                row.append(fmt(acc))
        if llama:
            for name in ("plain", "lookup"):
                s["llama " + name] = median(llama[name][i]["decode_tps"] for i in ids)
                row.append(fmt(s["llama " + name], ".1f"))
        summary[cat] = s
        print("| " + " | ".join(row) + " |")

    cols = [m for m in modes if m != "none"]
    print("\nRatios to salvo none: median over prompts of the per-prompt ratio (itself the median "
          "over repetitions of mode/none from the same repetition) / total decode time of none over "
          "that of the mode, for the same tokens:\n")
    header = ["category"] + [f"{m}/none" for m in cols]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    worst = {}
    for cat in summary:
        ids = [p["id"] for p in prompts if p["category"] == cat]
        row = [cat]
        for m in cols:
            med = median(ratio_to_none(m, i) for i in ids)
            t_none = sum(decode_seconds(r) for i in ids for r in salvo["none"][i])
            t_mode = sum(decode_seconds(r) for i in ids for r in salvo[m][i])
            total = t_none / t_mode if t_mode else None
            worst[(cat, m)] = (med, total)
            row.append(f"{fmt(med)} / {fmt(total)}")
        print("| " + " | ".join(row) + " |")
    if args.per_prompt:
        print("\nPer prompt (tok/pass, ratio to none):\n")
        header = ["prompt", "none tok/s"] + [f"{m} tok/pass / ratio" for m in cols]
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for p in prompts:
            i = p["id"]
            row = [i, fmt(per_prompt("none", i, "decode_tps"), ".2f")]
            row += [f"{fmt(per_prompt(m, i, 'tokens_per_pass'))} / {fmt(ratio_to_none(m, i))}"
                    for m in cols]
            print("| " + " | ".join(row) + " |")
    if llama:
        print("\nRatios of median decode tok/s to llama.cpp plain:\n")
        header = ["category"] + [f"{m}/llama plain" for m in modes] + ["llama lookup/llama plain"]
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for cat, s in summary.items():
            def ratio(a, b):
                return None if s.get(a) is None or not s.get(b) else s[a] / s[b]
            row = [cat] + [fmt(ratio(m, "llama plain")) for m in modes]
            row.append(fmt(ratio("llama lookup", "llama plain")))
            print("| " + " | ".join(row) + " |")
    if "auto" in modes:
        print("\nauto vs none (target: auto never more than 3% slower; median ratio / time ratio):")
        for cat in summary:
            med, total = worst[(cat, "auto")]
            vals = [v for v in (med, total) if v is not None]
            verdict = "-" if not vals else ("ok" if min(vals) >= 0.97 else "MISS")
            print(f"  {cat:9s} {fmt(med)} / {fmt(total)}  {verdict}")
    print("\nllama.cpp lookup = llama-cpp-python's LlamaPromptLookupDecoding (prompt lookup, 10 "
          "tokens), driven by its Python generate(); llama-cpp-python has no draft-model mode.")
    if mismatches:
        print(f"\nWARNING: token ids differ from --spec none for {mismatches}")
    else:
        print("\nEvery salvo mode emitted exactly the --spec none tokens.")
    if args.json_out:
        pathlib.Path(args.json_out).write_text(json.dumps({"salvo": salvo, "llama": llama}, indent=1))


if __name__ == "__main__":
    main()
