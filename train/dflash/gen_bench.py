"""The trainer's generation on a GPU, eager against its other modes, on random weights of the 1.5B's
shapes (no model to upload): batches as train.py makes them (~3900 rows of 10-60 prompt tokens, 256
new tokens), tokens/s per batch eager, compiled, as CUDA graphs (static_decode.py) and both, with the
share of its tokens that a full forward agrees with (Target.agreement), then torch.profiler's kernels
over a few eager decode steps. Run from the repository root on the GPU machine:
`python3 train/dflash/gen_bench.py [BATCHES]`.

Generation is a quarter of a one-command run (session 50: 334.6 s of 15 minutes, ~60k tokens/s
on the H100 against ~130k that the weights' flops and the cache's bytes allow): what it costs
decides how many drafter steps the rest of the budget buys."""

import argparse
import os
import random
import sys
import time
from types import SimpleNamespace

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from budget import generation_batches, generation_order  # noqa: E402
import static_decode  # noqa: E402
from target import Target, rope_neox  # noqa: E402


def random_target(dev, n_layer=28, E=1536, H=12, Hk=2, ff=8960, V=151936):
    """A Target with random bf16 weights of Qwen2.5-1.5B's shapes (q/k/v biases)."""
    tg = Target.__new__(Target)
    torch.nn.Module.__init__(tg)
    D = E // H
    tg.hp = SimpleNamespace(n_layer=n_layer, n_embd=E, n_head=H, n_head_kv=Hk, head_dim=D, rope_base=1e6,
                            rms_eps=1e-6, n_vocab=V)
    tg.dtype, tg.device, tg.rope = torch.bfloat16, dev, rope_neox
    r = lambda *s: (torch.randn(*s, device=dev) * 0.02).bfloat16()
    one = lambda n: torch.ones(n, device=dev, dtype=torch.bfloat16)
    tg.embd = r(V, E)
    # A head of its own: tied to these embeddings, the residual stream stays near the current
    # token's row and every row repeats its last token, which no fault in a decode path changes.
    tg.lm_head, tg.out_norm = r(V, E), one(E)
    tg.layers = [{"an": one(E), "q": r(H * D, E), "k": r(Hk * D, E), "v": r(Hk * D, E), "o": r(E, H * D),
                  "fn": one(E), "g": r(ff, E), "u": r(ff, E), "d": r(E, ff), "qb": r(H * D), "kb": r(Hk * D),
                  "vb": r(Hk * D)} for _ in range(n_layer)]
    return tg


def run_mode(tg, batches, max_new, eos, compiled, graphs, first, sync):
    """Generates each batch (lists of prompts) in one mode, printed per batch with the share of the
    first mode's tokens it reproduces (first: batch index -> tokens) and the share that a full
    forward over their history agrees with (Target.agreement: on random weights the top logits lie
    close, so a row that rounding turned goes its own way, and eager's tokens say little). Returns
    (seconds, the least of the latter)."""
    name = "+".join(n for n, on in (("compiled", compiled), ("graphs", graphs)) if on) or "eager"
    secs, least = 0.0, 1.0
    for j, batch in enumerate(batches):
        sync()
        t0 = time.time()
        out = tg.generate(batch, max_new, eos, compiled=compiled, graphs=graphs)
        sync()
        dt = time.time() - t0
        n = sum(len(o) for o in out)
        ref = first.setdefault(j, out)
        same = sum(a == b for o, r in zip(out, ref) for a, b in zip(o, r)) / max(1, sum(map(len, ref)))
        agree = tg.agreement(batch, out)
        print(f"{name}: {len(batch)} rows, prompts up to {max(map(len, batch))}, {n} new tokens in {dt:.1f}s: "
              f"{n / dt:.0f} tok/s, {same:.4f} of eager's tokens, {agree:.4f} agree with a full forward", flush=True)
        secs, least = secs + dt, min(least, agree)
    return secs, least


def choose(tg, short, long, max_new, rows, tokens, eos, sync, path):
    """train.py's generation flags for this machine, written to path: the mode (eager, graphs,
    compiled + graphs) that generates a batch of short prompts and one of long ones (a chunk's
    tail, fewer rows) fastest. Each mode first runs a few rows of both (torch.compile's first
    shapes, cuBLAS's set-up), and a mode whose tokens a full forward mostly disowns (a fault, not
    rounding) is not chosen; the others must be 5% faster than eager. The best so far is written
    after each mode: device.sh starts the run without waiting for the compiled mode when the
    uploads are done first (and stops this script)."""
    pick = lambda ps: [ps[i] for i in generation_order([len(p) for p in ps], 0, 0)]
    batches = []
    for ps in (pick(short), pick(long)):
        s, e = generation_batches(list(range(len(ps))), [len(p) for p in ps], rows, tokens, max_new)[0]
        batches.append(ps[s:e])
    first, times = {}, {}
    for compiled, graphs, flags in ((False, False, ""), (False, True, "--gen-graphs"),
                                    (True, True, "--gen-graphs --gen-compile")):
        for batch in batches:  # first shapes, lazy set-ups and compiles out of the timing
            tg.generate(batch[:8], static_decode.BUCKET + 2, eos, compiled=compiled, graphs=graphs)
        secs, agree = run_mode(tg, batches, max_new, eos, compiled, graphs, first, sync)
        fell_back = (graphs and getattr(tg, "_graphs_failed", False)) or \
            (compiled and getattr(tg, "_compile_failed", False))  # then its times are another mode's
        if not flags or (agree >= 0.5 and not fell_back):
            times[flags] = secs
        # Another mode must beat eager by 5%: less than that is noise, and eager is the proven one.
        best = min(times, key=lambda f: times[f] * (1.05 if f else 1.0))
        print(f"best so far: '{best}' ({times[''] / times[best]:.2f}x eager's speed)", flush=True)
        with open(path + ".tmp", "w") as f:
            f.write(best + "\n")
        os.replace(path + ".tmp", path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("batches", nargs="?", type=int, default=2, help="batches of short prompts a mode")
    ap.add_argument("--choose", metavar="FILE", help="write the fastest mode's train.py flags to FILE")
    args = ap.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"  # the CPU: a smoke test at a tiny size
    big = dev == "cuda"
    tg = random_target(dev) if big else random_target(dev, n_layer=2, E=128, H=4, Hk=2, ff=256, V=1000)
    rng = random.Random(0)
    max_new, rows, tokens = (256, 4000, 1200000) if big else (80, 6, 2000)  # 80: two buckets of graphs
    prompts = [[rng.randrange(100, 1000) for _ in range(rng.randint(10, 60))] for _ in range(rows * 4)]
    eos = [0]  # never drawn: every row runs max_new steps (the real data stop at EOS, mean 199 of 256)
    sync = torch.cuda.synchronize if big else (lambda: None)
    if args.choose:
        long = [[rng.randrange(100, 1000) for _ in range(rng.randint(200, 260))] for _ in range(rows)]
        return choose(tg, prompts, long, max_new, rows, tokens, eos, sync, args.choose)
    lens = [len(p) for p in prompts]
    order = generation_order(lens, 4096, seed=0)
    batches = [[prompts[i] for i in order[s:e]]
               for s, e in generation_batches(order, lens, rows, tokens, max_new)[:args.batches]]
    first = {}  # each batch's eager tokens: the other modes must give the same (but for rounding)
    for compiled, graphs in ((False, False), (True, False), (False, True), (True, True), (False, False)):
        run_mode(tg, batches, max_new, eos, compiled, graphs, first, sync)
    if big:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            tg.generate(batches[0], 24, eos)
            sync()
        print(prof.key_averages().table(sort_by="self_device_time_total", row_limit=25, max_name_column_width=60))


if __name__ == "__main__":
    main()
