"""The trainer's generation on a GPU, eager against --gen-compile, on random weights of the 1.5B's
shapes (no model to upload): batches as train.py makes them (~3900 rows of 10-60 prompt tokens, 256
new tokens), tokens/s per batch, then torch.profiler's kernels over a few eager decode steps. Run
from the repository root on the GPU machine: `python3 train/dflash/gen_bench.py [BATCHES]`.

Generation is a quarter of a one-command run (session 50: 334.6 s of 15 minutes, ~60k tokens/s
on the H100 against ~130k that the weights' flops and the cache's bytes allow): what it costs
decides how many drafter steps the rest of the budget buys."""

import os
import random
import sys
import time
from types import SimpleNamespace

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from budget import generation_batches, generation_order  # noqa: E402
from target import Target, rope_neox  # noqa: E402


def random_target(dev, n_layer=28, E=1536, H=12, Hk=2, ff=8960, V=151936):
    """A Target with random bf16 weights of Qwen2.5-1.5B's shapes (tied head, q/k/v biases)."""
    tg = Target.__new__(Target)
    torch.nn.Module.__init__(tg)
    D = E // H
    tg.hp = SimpleNamespace(n_layer=n_layer, n_embd=E, n_head=H, n_head_kv=Hk, head_dim=D, rope_base=1e6,
                            rms_eps=1e-6, n_vocab=V)
    tg.dtype, tg.device, tg.rope = torch.bfloat16, dev, rope_neox
    r = lambda *s: (torch.randn(*s, device=dev) * 0.02).bfloat16()
    one = lambda n: torch.ones(n, device=dev, dtype=torch.bfloat16)
    tg.embd = r(V, E)
    tg.lm_head, tg.out_norm = tg.embd, one(E)
    tg.layers = [{"an": one(E), "q": r(H * D, E), "k": r(Hk * D, E), "v": r(Hk * D, E), "o": r(E, H * D),
                  "fn": one(E), "g": r(ff, E), "u": r(ff, E), "d": r(E, ff), "qb": r(H * D), "kb": r(Hk * D),
                  "vb": r(Hk * D)} for _ in range(n_layer)]
    return tg


def main():
    dev = "cuda" if torch.cuda.is_available() else "cpu"  # the CPU: a smoke test at a tiny size
    n_batches = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    big = dev == "cuda"
    tg = random_target(dev) if big else random_target(dev, n_layer=2, E=128, H=4, Hk=2, ff=256, V=1000)
    rng = random.Random(0)
    max_new, rows, tokens = (256, 4000, 1200000) if big else (8, 6, 0)
    prompts = [[rng.randrange(100, 1000) for _ in range(rng.randint(10, 60))] for _ in range(rows * 4)]
    lens = [len(p) for p in prompts]
    order = generation_order(lens, 4096, seed=0)
    batches = generation_batches(order, lens, rows, tokens, max_new)[:n_batches]
    eos = [0]  # never drawn: every row runs max_new steps (the real data stop at EOS, mean 202 of 256)
    sync = torch.cuda.synchronize if big else (lambda: None)
    for compiled in (False, True, False):
        for s, e in batches:
            batch = [prompts[i] for i in order[s:e]]
            sync()
            t0 = time.time()
            out = tg.generate(batch, max_new, eos, compiled=compiled)
            sync()
            dt = time.time() - t0
            n = sum(len(o) for o in out)
            print(f"{'compiled' if compiled else 'eager'}: {len(batch)} rows, prompts up to {max(map(len, batch))}, "
                  f"{n} new tokens in {dt:.1f}s: {n / dt:.0f} tok/s", flush=True)
    if big:
        from torch.profiler import ProfilerActivity, profile
        s, e = batches[0]
        batch = [prompts[i] for i in order[s:e]]
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            tg.generate(batch, 24, eos)
            sync()
        print(prof.key_averages().table(sort_by="self_device_time_total", row_limit=25, max_name_column_width=60))


if __name__ == "__main__":
    main()
