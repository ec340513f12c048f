"""The drafter's training step on a GPU, eager against --compile, on random weights and features of
the 1.5B's shapes (three layers, batch 32 x 16 anchors, 384 positions, the loss over 32768 ids):
no model to upload, ~2-3 minutes with the compile. Run from the repository root on the GPU machine:
`python3 train/dflash/step_bench.py`. It prints ms a step for each and whether compiling fell back."""

import os
import random
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train as T  # noqa: E402
from drafter import Drafter  # noqa: E402


def main():
    torch.manual_seed(0)
    dev = "cuda" if torch.cuda.is_available() else "cpu"  # the CPU: a smoke test at a smaller batch
    E, V, B, A = 1536, 32768, 16, 16
    N, Tn = (32, 384) if dev == "cuda" else (2, 128)
    cfg = {"target": {"n_embd": E}, "target_layers": [2, 13, 24], "block_size": B, "n_layer": 3, "n_embd": E,
           "n_head": 12, "n_head_kv": 2, "head_dim": 128, "n_ff": 3072, "rope_base": 1e6, "rms_eps": 1e-6,
           "adapter": {"n_hidden": 256, "top_k": 8}}
    d = Drafter(cfg).to(dev)
    embd = (torch.randn(151936, E, device=dev) * 0.02).bfloat16()
    head = (torch.randn(V, E, device=dev) * 0.02).bfloat16()
    # train.py's own step (the head stands for --loss-vocab's: labels are drawn below V)
    forward_loss = T.drafter_forward(d, embd, head, B, T.position_weights(B, dev), None, T.autocast(dev), False)
    params = list(d.p.values())
    opt = torch.optim.AdamW(params, lr=1e-4, fused=dev == "cuda")
    rng = random.Random(0)
    data = []
    for _ in range(4):
        anchors = torch.tensor(T.sample_anchors([Tn] * N, [40] * N, A, B, rng), device=dev)
        data.append((torch.randn(N, Tn, 3 * E, device=dev).bfloat16(), torch.randint(0, V, (N, Tn), device=dev),
                     torch.full((N,), Tn, device=dev), anchors))

    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)

    def ms_per_step(fn, steps):
        sync()
        t0 = time.time()
        for i in range(steps):
            loss, _ = fn(*data[i % len(data)])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
        sync()
        return (time.time() - t0) / steps * 1000

    ms_per_step(forward_loss, 5)
    print(f"eager: {ms_per_step(forward_loss, 40):.2f} ms a step", flush=True)
    compiled = T.drafter_forward(d, embd, head, B, T.position_weights(B, dev), None, T.autocast(dev), True)
    t0 = time.time()
    ms_per_step(compiled, 2)
    print(f"compile: {time.time() - t0:.0f} s, fell back: {compiled.fn is compiled.eager}", flush=True)
    print(f"compiled: {ms_per_step(compiled, 40):.2f} ms a step", flush=True)
    print(f"eager again: {ms_per_step(forward_loss, 40):.2f} ms a step", flush=True)


if __name__ == "__main__":
    main()
