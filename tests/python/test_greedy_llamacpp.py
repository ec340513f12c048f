"""Greedy 64-token continuations: salvo against llama.cpp on the same GGUF.

For every model and every prompt in prompts_greedy.PROMPTS (raw text, no chat template):
  salvo:     $SALVO_BIN run --model PATH -m PROMPT --raw --max-tokens 64 --temperature 0 --json
             (one JSON object; "prompt_tokens" and "tokens" hold the prompt and generated ids)
  llama.cpp: llama-cpp-python, eval the prompt, then argmax / eval one token at a time (2 threads).
Both sequences are cut after the first end-of-generation token (llama.cpp's EOG set).

Two int8-activation engines legitimately disagree where the top two logits are nearly tied, and after
the first disagreement the texts are unrelated. So at the first divergence j we require that
  * llama.cpp's logit for salvo's token is within NEAR_TIE of its logit for its own token (the two
    engines' choices are the near-tied top two; with a three-way tie salvo's may rank third).
NEAR_TIE = 0.5 logits: against the exact NumPy reference, llama.cpp's own top-1 flips occurred at gaps
<= 0.35 (gemma3-270m) and 0.03-1.07 elsewhere (test_numpy_ref); two engines each that far from exact can
flip a gap of about twice one engine's error on a single logit, which for the 135M-1.5B models is ~0.1-0.3.
Override with SALVO_GREEDY_NEAR_TIE.
"""

import functools
import json
import os
import subprocess
import time

import numpy as np
import pytest

from conftest import (MODEL_NAMES, llama_eos_ids, llama_tokenize, model_path_or_skip, open_llama,
                      salvo_bin_or_skip)
from prompts_greedy import PROMPTS

N_GEN = 64
NEAR_TIE = float(os.environ.get("SALVO_GREEDY_NEAR_TIE", "0.5"))


def parse_json_output(stdout: str) -> dict:
    text = stdout.strip()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    for line in reversed(text.splitlines()):  # tolerate streamed text before the JSON line
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise AssertionError(f"no JSON object in salvo output:\n{stdout[-2000:]}")


def salvo_greedy(salvo: str, path: str, prompt: str) -> dict:
    cmd = [salvo, "run", "--model", path, "-m", prompt, "--raw", "--max-tokens", str(N_GEN),
           "--temperature", "0", "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{cmd}\nstdout:\n{proc.stdout[-2000:]}\nstderr:\n{proc.stderr[-2000:]}"
    return parse_json_output(proc.stdout)


@functools.lru_cache(maxsize=1)
def _llama(path: str):
    return open_llama(path, n_ctx=512, n_batch=512, logits_all=False)


def _last_logits(llm) -> np.ndarray:
    import llama_cpp.llama_cpp as low

    ptr = low.llama_get_logits_ith(llm._ctx.ctx, -1)
    return np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),)).astype(np.float32).copy()


def llama_greedy(path: str, prompt_tokens: list[int], eog: set[int]):
    """Returns (generated ids, logits rows [len, n_vocab] used to pick each id)."""
    llm = _llama(path)
    llm.reset()
    llm.eval(prompt_tokens)
    out, rows = [], []
    for _ in range(N_GEN):
        logits = _last_logits(llm)
        tok = int(np.argmax(logits))
        out.append(tok)
        rows.append(logits)
        if tok in eog:
            break
        llm.eval([tok])
    return out, rows


def cut_at_eog(tokens: list[int], eog: set[int]) -> list[int]:
    for i, t in enumerate(tokens):
        if t in eog:
            return tokens[: i + 1]
    return list(tokens)


def compare_greedy(path: str, prompt_tokens: list[int], generated: list[int], eog: set[int]):
    """Checks salvo's greedy ids for `prompt_tokens` against llama.cpp's (N_GEN of them): equal, or
    first different where llama.cpp's top two are near-tied. Returns (failure or None, a line saying
    what happened)."""
    ref, rows = llama_greedy(path, prompt_tokens, eog)
    got = cut_at_eog(generated, eog)
    if got == ref:
        return None, f"match ({len(ref)} tokens)"
    j = next((k for k in range(min(len(got), len(ref))) if got[k] != ref[k]), min(len(got), len(ref)))
    if j >= len(got) or j >= len(ref):
        return (f"one side stopped early without divergence at {j}: salvo {len(got)} tokens, "
                f"llama.cpp {len(ref)}"), "stopped early"
    logits = rows[j]
    order = np.argsort(-logits)
    # The two engines' choices are the top two that matter: llama.cpp's logit for salvo's token
    # must be within NEAR_TIE of its logit for its own (several candidates can tie, e.g. digits,
    # so salvo's token need not be llama.cpp's second).
    gap = float(logits[ref[j]] - logits[got[j]])
    rank = int(np.where(order == got[j])[0][0]) + 1
    line = (f"diverge at {j}: llama.cpp {ref[j]} salvo {got[j]} (rank {rank} for llama.cpp, "
            f"logit gap {gap:.3f})")
    if gap >= NEAR_TIE:
        return (f"divergence at {j} is not a near tie: llama.cpp chose {ref[j]}, salvo {got[j]} "
                f"(rank {rank}), logit gap {gap:.3f} (limit {NEAR_TIE})"), line
    return None, line


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_greedy_matches_llama_cpp(name):
    salvo = salvo_bin_or_skip()
    path = model_path_or_skip(name)
    eog = llama_eos_ids(path)
    failures, n_full, lines = [], 0, []
    t_salvo = t_llama = 0.0
    for i, prompt in enumerate(PROMPTS):
        t0 = time.time()
        res = salvo_greedy(salvo, path, prompt)
        t1 = time.time()
        want_prompt = llama_tokenize(path, prompt)
        if list(res["prompt_tokens"]) != want_prompt:
            failures.append(f"prompt {i}: salvo prompt_tokens {res['prompt_tokens']} != llama.cpp {want_prompt}")
            continue
        got = [int(t) for t in res["tokens"]]
        t_salvo += t1 - t0
        t2 = time.time()
        failure, line = compare_greedy(path, want_prompt, got, eog)
        t_llama += time.time() - t2
        n_full += line.startswith("match")
        lines.append(f"  prompt {i:2d}: {line}")
        if failure:
            failures.append(f"prompt {i}: {failure}")
    print(f"\n[{name}] {n_full}/{len(PROMPTS)} prompts matched fully "
          f"(salvo {t_salvo:.1f}s, llama.cpp {t_llama:.1f}s)\n" + "\n".join(lines))
    assert not failures, "\n".join(failures)
