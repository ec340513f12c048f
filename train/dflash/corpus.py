"""The training corpus: make_data.py's prompt files and the continuations earlier runs generated.

No torch here, so the tests run it on any machine (tests/python/test_dflash_corpus.py).
"""

import gzip
import json
import os
import sys
import time
import zlib


def load_prompts(paths, target, n_vocab, target_sha, max_new, log=print, regenerate=False):
    """The prompts of make_data.py JSONs (or of earlier runs' generated.json.gz), in file order,
    each token sequence once (the benchmark prompts come with every file). A prompt keeps its
    "gen" (the target's greedy continuation) only when its file was generated from the same GGUF
    with the same --max-new: the continuations are the costly part of the data, so runs can add
    up a corpus by passing the earlier ones' files beside a new make_data.py file. regenerate
    (train.py --regenerate): no continuation is kept, so one command generates all its data."""
    out, seen = [], set()
    for path in paths:
        try:
            data = json.load(gzip.open(path, "rt") if path.endswith(".gz") else open(path))
        except (OSError, EOFError, ValueError, zlib.error) as e:  # missing, truncated, not JSON
            raise SystemExit(f"error: {path}: {e}")
        if not isinstance(data, dict) or not isinstance(data.get("prompts"), list) or not data["prompts"]:
            raise SystemExit(f"error: {path}: expected make_data.py's JSON with a non-empty 'prompts' list")
        if data.get("model") != target:
            raise SystemExit(f"error: {path} was tokenized for {data.get('model')!r}, not {target!r}")
        reuse = data.get("gen_target_sha256") == target_sha and data.get("gen_max_new") == max_new
        n_gen = sum(1 for p in data["prompts"] if isinstance(p, dict) and p.get("gen") is not None)
        if n_gen and regenerate:
            log(f"{path}: its {n_gen} continuations are left aside (--regenerate): generated again")
            reuse = False
        elif n_gen and not reuse:
            log(f"{path}: its {n_gen} continuations came from another GGUF or --max-new: generated again")
        n_dup = 0
        for i, p in enumerate(data["prompts"]):
            ids = p.get("ids") if isinstance(p, dict) else None
            if not isinstance(ids, list) or not ids or not all(isinstance(t, int) and 0 <= t < n_vocab for t in ids) \
                    or "cat" not in p:
                raise SystemExit(f"error: {path}: prompt {i} has no category or ids outside [0, {n_vocab})")
            g = p.get("gen")
            if g is not None and (not isinstance(g, list) or not all(isinstance(t, int) and 0 <= t < n_vocab for t in g)):
                raise SystemExit(f"error: {path}: prompt {i} has a continuation with ids outside [0, {n_vocab})")
            key = tuple(ids)
            if key in seen:
                n_dup += 1
                continue
            seen.add(key)
            p = dict(p)
            if not reuse or not g:
                p.pop("gen", None)
            out.append(p)
        log(f"{path}: {len(data['prompts'])} prompts ({n_dup} seen before), {n_gen if reuse else 0} with continuations")
    return out


def write_generated(path, target, target_sha, max_new, source, prompts, gen):
    """Prompts with their continuations (gen[i] for prompts[i]), for a later run's load_prompts."""
    keep = ("ids", "cat", "split")
    data = {"model": target, "gen_target_sha256": target_sha, "gen_max_new": max_new, "source": source,
            "prompts": [{**{k: p[k] for k in keep if k in p}, "gen": g} for p, g in zip(prompts, gen)]}
    with gzip.open(path + ".tmp", "wt", compresslevel=9) as f:
        json.dump(data, f, separators=(",", ":"))
    os.replace(path + ".tmp", path)


def in_child(fn, log=print):
    """fn() in a forked child, so the run goes on while it works (session 54: the JSON and gzip of
    100k continuations took 41 s of a 24-minute budget). The child touches no GPU state; its data
    is the parent's at the fork. Returns join(timeout): the child's exit code, or None once it has
    been killed for outliving timeout seconds (a hung writer must not hold the run's export)."""
    sys.stdout.flush()  # what the parent has buffered must not be printed twice
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            fn()
            code = 0
        except BaseException as e:  # noqa: BLE001 -- the child reports and exits, whatever it was
            log(f"in_child: {type(e).__name__}: {e}")
        finally:
            sys.stdout.flush()
            os._exit(code)

    def join(timeout):
        end = time.time() + timeout
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status)
            if time.time() >= end:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                log(f"in_child: killed after {timeout:.0f}s")
                return None
            time.sleep(0.2)
    return join
