"""Trains a DFlash drafter (dflash_spec.md v1) for a llama/qwen2 GGUF target, end to end, seeded.

  python3 train/dflash/train.py --target qwen2.5-coder-1.5b --gguf PATH --data data.json \
      --out drafters/qwen2.5-coder-1.5b --seed 0 --minutes 6
Steps: greedy continuations of the prompts by the target (the training data), target features at
target_layers, drafter training (weighted CE), adapter training (drafter frozen), held-out tau
(chain, best-first trees at 8/16/32/64 nodes, with and without adapter) and the export.
"""

import argparse
import hashlib
import json
import math
import os
import random
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from budget import budget_minutes, generation_batches, generation_order, schedule_fraction  # noqa: E402
from compiled import Compiled  # noqa: E402
from corpus import in_child, load_prompts, write_generated  # noqa: E402
import grow as grow_mod  # noqa: E402
from drafter import Drafter, export_arrays, reference_forward, tensors_of  # noqa: E402
from evaluate import evaluate  # noqa: E402
from features import FeatureStore, compute_features, feature_bytes, shards_of  # noqa: E402
from target import GGUFWeights, Target  # noqa: E402
from token_ranks import token_ranks, write_token_ranks  # noqa: E402


RANK_TAG = ""  # " rank N" on ranks other than 0 of a torchrun


def log(*a):
    print(f"[{time.strftime('%H:%M:%S')}]{RANK_TAG}", *a, flush=True)


class Ranks:
    """torchrun's processes, one GPU each (world 1 without torchrun): each generates its share of
    the data, holds the features of its share of the training sequences and steps on them with its
    own anchors; the gradients are averaged before every step, so all keep the same weights (a
    world of N trains on N times the features in the time one takes for its share). Rank 0
    evaluates and writes the drafter."""

    def __init__(self, device):
        global RANK_TAG
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.dist = None
        if self.world > 1:
            import datetime
            import torch.distributed as dist
            if device == "cuda":
                torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", self.rank)))
            # Generous: ranks wait on each other's generation (files) and rank 0's evaluation.
            dist.init_process_group("nccl" if device == "cuda" else "gloo", timeout=datetime.timedelta(minutes=60))
            self.dist = dist
            RANK_TAG = f" rank {self.rank}" if self.rank else ""

    def barrier(self):
        if self.dist:
            self.dist.barrier()

    def same_weights(self, params):
        """Rank 0's initial weights everywhere (the seeds agree, this makes sure)."""
        if self.dist:
            for p in params:
                self.dist.broadcast(p.data, 0)

    def average_grads(self, params):
        """One all_reduce over every gradient flattened together (one a tensor: ~40 collectives
        a step). The ranks run the same graph, so the same parameters have gradients on each."""
        if not self.dist:
            return
        params = [p for p in params if p.grad is not None]
        if not params:
            return
        flat = torch.cat([p.grad.flatten() for p in params])
        self.dist.all_reduce(flat)
        flat.div_(self.world)
        o = 0
        for p in params:
            n = p.numel()
            p.grad.copy_(flat[o:o + n].view_as(p.grad))
            o += n

    def max(self, x, dev):
        """The largest x over the ranks (each rank's clock: all stop and anneal together)."""
        if not self.dist:
            return x
        t = torch.tensor([x], dtype=torch.float64, device=dev)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return float(t.item())

    def check_same(self, params):
        """Every rank must end with rank 0's weights (same averaged gradients, same steps)."""
        if not self.dist:
            return
        dev = params[0].device
        sums = torch.stack([p.detach().double().sum() for p in params]).to(dev)
        lo, hi = sums.clone(), sums.clone()
        self.dist.all_reduce(lo, op=self.dist.ReduceOp.MIN)
        self.dist.all_reduce(hi, op=self.dist.ReduceOp.MAX)
        if not torch.equal(lo, hi):
            raise SystemExit(f"error: the ranks' weights differ after training (max |diff| {float((hi - lo).abs().max()):.3g})")

    def close(self):
        if self.dist:
            self.dist.destroy_process_group()
            self.dist = None


def load_init(d, cfg, folder, grow=False):
    """Copies a shipped drafter's weights (I8 rows times their scale, F32 vectors) into d: the two
    configs agree on every shape, or with grow, d may read more target layers and have more
    layers, and starts as the same function (grow.py)."""
    from safetensors.numpy import load_file
    old = json.load(open(os.path.join(folder, "config.json")))
    grow_mod.check_configs(old, cfg, grow, folder)
    w = grow_mod.shipped_arrays(load_file(os.path.join(folder, "model.safetensors")))
    tensors = tensors_of(d)
    start = grow_mod.start_arrays(old, cfg, w, {n: tuple(t.shape) for n, t in tensors.items()}, folder)
    with torch.no_grad():
        for n, a in start.items():
            dst = d.a[n.split(".")[1]] if n.startswith("adapter.") else d.w(n)
            dst.copy_(torch.from_numpy(a))


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 24), b""):
            h.update(chunk)
    return h.hexdigest()


def generate_rows(tg, rows, max_new, eos, how):
    """tg.generate (how: its compiled / graphs), in halves while the GPU runs out of memory (a
    --gen-batch too large for long prompts must not cost the run)."""
    try:
        return tg.generate(rows, max_new, eos, **how)
    except torch.cuda.OutOfMemoryError:
        if len(rows) == 1:
            raise
    torch.cuda.empty_cache()
    h = len(rows) // 2
    log(f"out of GPU memory generating {len(rows)} rows: two batches of {h} and {len(rows) - h}")
    return generate_rows(tg, rows[:h], max_new, eos, how) + generate_rows(tg, rows[h:], max_new, eos, how)


def generate_data(tg, prompts, max_new, batch, eos, tokens=0, how=None, deadline=0.0, seed=0):
    """Greedy answers, in budget.py's order and batches (by length; `batch` rows and `tokens` KV
    positions at most). deadline (a time.time(), 0: none): no batch starts after it, and the
    prompts not reached stay None (random chunks of 8 batches each make them a random subset, but
    for the last chunk's longest)."""
    lens = [len(p["ids"]) for p in prompts]
    order = generation_order(lens, 8 * batch if deadline else 0, seed)
    out = [None] * len(prompts)
    for j, (s, e) in enumerate(generation_batches(order, lens, batch, tokens, max_new)):
        if deadline and time.time() >= deadline:
            log(f"generation deadline: {len(order) - s} of {len(order)} prompts not generated")
            break
        idx = order[s:e]
        t0 = time.time()
        rows = [prompts[i]["ids"] for i in idx]
        gen = generate_rows(tg, rows, max_new, eos, how or {})
        if any((how or {}).values()) and j % 8 == 0:
            # The fast paths (graphs, compile) are judged on the real weights: a full forward must
            # own their tokens (bf16 rounding flips a near tie now and then; a fault most tokens).
            agree = tg.agreement(rows, gen)
            log(f"generation check: {agree:.4f} of {min(32, len(rows))} rows' tokens agree with a full forward")
            if agree < 0.9:
                log("generation check failed: eager generation from here on, this batch again")
                how = {}
                gen = generate_rows(tg, rows, max_new, eos, how)
        for i, g in zip(idx, gen):
            out[i] = g
        # Per batch, so that a run tells where generation's time goes (rows against prompt length).
        dt, new = time.time() - t0, sum(len(g) for g in gen)
        log(f"generated {e}/{len(order)} (batch of {len(idx)}, prompts up to {len(prompts[idx[-1]]['ids'])} "
            f"tokens, {new} new tokens in {dt:.1f}s: {new / max(dt, 1e-9):.0f} tok/s)")
    return out


def start_helpers(args, gen_path):
    """One helper process per --gen-gpus entry, each on its own GPU, generating part k of N (the
    same command with --gen-parts N --gen-part k); this process generates part 0 and trains."""
    gpus = [g for g in args.gen_gpus.split(",") if g.strip()]
    if not gpus or args.gen_parts > 1:
        return []
    args.gen_parts = len(gpus) + 1
    for k in range(args.gen_parts):  # an earlier run's parts must not stand in for this one's
        if os.path.exists(f"{gen_path}.part{k}"):
            os.remove(f"{gen_path}.part{k}")
    procs = []
    for k, gpu in enumerate(gpus, 1):
        logf = open(f"{gen_path}.part{k}.log", "w")
        argv, skip = [], False
        for a in sys.argv[1:]:  # the same command less --gen-gpus (and its value)
            if skip or a.startswith("--gen-gpus="):
                skip = False
                continue
            skip = a == "--gen-gpus"
            if not skip:
                argv.append(a)
        cmd = [sys.executable, os.path.abspath(__file__)] + argv + \
            ["--gen-parts", str(args.gen_parts), "--gen-part", str(k)]
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=gpu.strip())
        procs.append((subprocess.Popen(cmd, env=env, stdout=logf, stderr=subprocess.STDOUT), time.time(), logf))
        log(f"generation part {k}/{args.gen_parts} on GPU {gpu.strip()} (log {logf.name})")
    return procs


def finish_helper(h):
    """Waits for a helper; its seconds (GPU time of its own)."""
    proc, t0, logf = h
    rc = proc.wait()
    logf.close()
    if rc:
        raise SystemExit(f"error: generation helper exited with {rc} (log {logf.name})")
    return time.time() - t0


def generate_parts(tg, prompts, args, eos, gen_path, helpers=(), every_part=False, deadline=0.0):
    """Greedy answers of every prompt, or of this process's share when --gen-parts N > 1: part k takes
    every N-th prompt by length (equal work), writes it to gen_path.partK (atomically) and returns
    None, except part 0 (and every part when every_part: torchrun's ranks), which waits for the
    others' files and returns the whole list. Two GPUs halve generation's time;
    the answers do not depend on the split (greedy, one row's result independent of its batch up
    to bf16 rounding). deadline: generate_data's (its prompts not reached stay None)."""
    N, k = args.gen_parts, args.gen_part
    gen_args = dict(how=dict(compiled=args.gen_compile, graphs=args.gen_graphs), deadline=deadline, seed=args.seed + k)
    if N <= 1:
        return generate_data(tg, prompts, args.max_new, args.gen_batch, eos, args.gen_tokens, **gen_args)
    if not 0 <= k < N:
        raise SystemExit(f"error: --gen-part {k} is outside [0, {N})")
    mine = generation_order([len(p["ids"]) for p in prompts], 0, 0)[k::N]
    got = generate_data(tg, [prompts[i] for i in mine], args.max_new, args.gen_batch, eos, args.gen_tokens,
                        **gen_args)
    path = f"{gen_path}.part{k}"
    json.dump({"idx": mine, "gen": got}, open(path + ".tmp", "w"))
    os.replace(path + ".tmp", path)
    if k and not every_part:
        return None
    out = [None] * len(prompts)
    for j in range(N):
        pj, t0 = f"{gen_path}.part{j}", time.time()
        while not os.path.exists(pj):
            for proc, _, logf in helpers:
                if proc.poll():
                    raise SystemExit(f"error: generation helper exited with {proc.returncode} (log {logf.name})")
            if time.time() - t0 > args.gen_wait:
                raise SystemExit(f"error: part {j} of the generation ({pj}) did not come in {args.gen_wait:.0f}s")
            time.sleep(2)
        part = json.load(open(pj))
        for i, g in zip(part["idx"], part["gen"]):
            out[i] = g
    missing = sum(g is None for g in out)
    if missing and not deadline:
        raise SystemExit(f"error: {missing} prompts have no generation: were the parts run with other data?")
    return out


class StepProfiler:
    """--profile-steps: torch.profiler over `steps` drafter steps after `skip` (warm caches, a
    settled allocator), its table of kernels and ops by device time written to the log: where a
    step's time goes decides what to make faster (session 44: the drafter's training steps, ~74 ms
    each on the H200, had never been broken down). A failure is logged and never stops the run."""

    def __init__(self, steps, skip=30):
        from torch.profiler import ProfilerActivity, profile, schedule
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
        self.prof = profile(activities=acts, schedule=schedule(wait=skip, warmup=3, active=steps, repeat=1),
                            on_trace_ready=self.report)
        self.prof.start()
        self.steps, self.n, self.last = steps, 0, skip + 3 + steps

    def report(self, prof):
        try:
            ka = prof.key_averages()
            for key in ("self_device_time_total", "self_cuda_time_total", "self_cpu_time_total"):
                try:
                    table = ka.table(sort_by=key, row_limit=40)
                    break
                except Exception:  # older and newer torch name the device column differently
                    continue
            log(f"profile of {self.steps} drafter steps, sorted by {key}:\n{table}")
        except Exception as e:
            log(f"profile failed: {e!r}")

    def step(self):
        if self.prof is None:
            return
        try:
            self.prof.step()
            self.n += 1
            if self.n >= self.last:
                self.prof.stop()
                self.prof = None
        except Exception as e:
            log(f"profile failed: {e!r}")
            self.prof = None


def padded_len(n, multiple):
    """n rounded up to a multiple of `multiple` (--pad-multiple). H200, session 46's profile of
    the 1.5B's drafter steps: 143 ms a step for 49 ms of device time, and cuDNN's attention took
    20 ms of host time a layer forward and 25 ms backward. cuDNN builds (and caches) an execution
    plan per shape, and a step's attention shapes follow its batch's longest sequence, which
    differed nearly every step; rounded lengths repeat, so their plans are built once. Session
    47 (with --loss-vocab 32768): 37 ms a step over a whole run (19251 steps in 720 s; the runs of
    sessions 23-35, unpadded, ~62 ms), the profile's steps at 35 ms for 29.6 ms of device time.
    The padded positions are masked (contexts end before the anchor, labels past a sequence's end
    are not counted), so the loss is the unpadded one."""
    return -(-n // multiple) * multiple


def sample_anchors(lens, plens, A, B, gen):
    """A random root positions per sequence, in the generated part (plen <= p <= len-2)."""
    out = []
    for L, P in zip(lens, plens):
        hi = max(P, L - 2)
        out.append([random.Random(gen.random()).randint(P, hi) for _ in range(A)])
    return out


class LossVocab:
    """--loss-vocab N: the loss's softmax over the N best-ranked ids only (token_ranks.py), the
    ids salvo's drafters draft from (32768 for small trees, 65536 for large ones): the LM head's
    product, the largest matmul of a step (7680 rows x 151936 x 1536 for the 1.5B, forward and
    backward), and its fp32 logits shrink by n_vocab / N. A label outside them is never drafted,
    so its position is left out of the loss."""

    def __init__(self, ranked, n_vocab, lm_head):
        self.ids = torch.as_tensor(ranked, dtype=torch.long, device=lm_head.device)
        self.head = lm_head[self.ids].contiguous()  # [N, E], frozen as the whole head is
        self.column = torch.full((n_vocab,), -1, dtype=torch.long, device=lm_head.device)
        self.column[self.ids] = torch.arange(len(self.ids), device=lm_head.device)


def block_loss(y, lm_head, ids, lens, anchors, B, weights, adapt=None, embd=None, vocab=None):
    """Weighted CE of rows 1..B-1. y [N,A,B,E]; labels ids[p+j] (ignored past the end, and
    outside `vocab` when one is given: a LossVocab)."""
    N, A = anchors.shape
    dev = y.device
    j = torch.arange(1, B, device=dev)
    pos = anchors[:, :, None] + j  # [N,A,B-1]
    valid = pos < lens[:, None, None]
    labels = torch.gather(ids, 1, pos.clamp(max=ids.shape[1] - 1).flatten(1)).view(N, A, B - 1)
    if vocab is not None:
        lm_head = vocab.head
        labels = vocab.column[labels]
        valid = valid & (labels >= 0)
        labels = labels.clamp(min=0)
    h = y[:, :, 1:]
    if adapt is not None:
        prev = torch.gather(ids, 1, (pos - 1).clamp(max=ids.shape[1] - 1).flatten(1)).view(N, A, B - 1)
        h = adapt(h, embd[prev].to(h.dtype))
    logits = (h.to(lm_head.dtype) @ lm_head.T).float()
    ce = F.cross_entropy(logits.flatten(0, 2), labels.flatten(), reduction="none").view(N, A, B - 1)
    w = weights[None, None] * valid
    acc = ((logits.argmax(-1) == labels) & valid).float().sum() / valid.float().sum()
    return (ce * w).sum() / w.sum(), acc


def train_phase(name, params, passes, lr, store, shards, batch, step_fn, log_every, rng, max_minutes=0, warmup=100,
                ranks=None, steps_per_shard=None, shards_once=False, on_step=None):
    """`passes` passes over the training sequences (a pass draws every sequence once, in random
    order, shard by shard), AdamW with a cosine schedule over the planned steps. max_minutes
    (0 = none) caps the time spent stepping; the schedule then follows the elapsed fraction so the
    learning rate still anneals (the steps that compile do not count: budget.schedule_fraction).
    With several ranks, shards are this rank's share and steps_per_shard (the same on every rank)
    how many steps each takes; the ranks agree on the schedule's fraction every step. shards_once: each shard's features are computed once and it
    takes its share of the schedule in a row (its passes one after another) instead of the shards
    taking turns every pass, which recomputes every shard's features every pass (~75 s a shard
    for the 1.5B). on_step (optional) is called after every step. Returns curve, steps, step seconds,
    feature seconds, epochs."""
    # fused: one kernel for every tensor's update (the H200 profile: 1.5 ms a step unfused).
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=0.01, fused=params[0].is_cuda)
    per_shard = steps_per_shard or [max(1, len(s) // batch) for s in shards]
    total = max(1, round(passes * sum(per_shard)))
    # The schedule's fraction at which each shard hands over (shards_once): its share of the steps.
    ends = list(np.cumsum(per_shard) / sum(per_shard)) if shards_once else [1.0] * len(shards)
    ends[-1] = 1.0
    t0, feat_s, stall, curve, step = time.time(), 0.0, 0.0, [], 0

    def one_pass(j):
        """A pass over shard j in random order: "done" when the schedule ends, "next" when the
        shard's share does (shards_once), else "more"."""
        nonlocal step, stall
        perm = list(shards[j])
        rng.shuffle(perm)
        for b in range(per_shard[j]):
            busy = time.time() - t0 - feat_s
            frac = schedule_fraction(step, total, busy, stall, max_minutes * 60)
            if ranks and ranks.world > 1:
                frac = ranks.max(frac, params[0].device)
            if step >= total or frac >= 1:
                return "done"
            if frac >= ends[j]:
                return "next"
            cur = lr * min(1, (step + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * frac))
            for g in opt.param_groups:
                g["lr"] = cur
            t_step = time.time()
            loss, acc = step_fn(perm[b * batch:(b + 1) * batch])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if ranks:
                ranks.average_grads(params)
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            if on_step:
                on_step()
            took = time.time() - t_step
            if took > 2.0:  # a compile, not a step: the schedule waits for it
                stall += took
            if step % log_every == 0:
                curve.append({"step": step, "loss": round(loss.item(), 4), "acc1": round(acc.item(), 4),
                              "lr": cur, "s": round(time.time() - t0, 1)})
                log(name, curve[-1])
            step += 1
        return "more"

    state = "more"
    try:
        while state != "done":
            for j, sh in enumerate(shards):
                if step >= total:
                    state = "done"
                    break
                feat_s += store.load(sh)
                state = one_pass(j)
                while shards_once and state == "more":  # this shard's passes in a row
                    state = one_pass(j)
                if state == "done":
                    break
            if shards_once:
                break
    except torch.cuda.OutOfMemoryError as e:
        if ranks and ranks.world > 1:
            raise  # the ranks would disagree on the schedule
        # The phase keeps what it has trained and the run goes on to its export: session 55's
        # window lost 12,550 steps to an allocation for its second shard.
        opt.zero_grad(set_to_none=True)
        torch.cuda.empty_cache()
        log(name, f"out of GPU memory at step {step}: the phase ends here ({str(e).splitlines()[0][:120]})")
    n = sum(len(s) for s in shards)
    return curve, step, time.time() - t0 - feat_s, feat_s, step * batch / n


def target_layers(args, hp):
    return [int(x) for x in args.target_layers.split(",")] if args.target_layers else \
        [1, hp.n_layer // 2 - 1, hp.n_layer - 4]


def drafter_config(args, hp, layers, target_sha):
    return {"format": "salvo-dflash", "version": 1,
            "target": {"name": args.target, "arch": hp.arch, "n_embd": hp.n_embd, "n_vocab": hp.n_vocab,
                       "n_layer": hp.n_layer, "sha256": target_sha},
            "target_layers": layers, "block_size": args.block, "n_layer": args.n_layer, "n_embd": hp.n_embd,
            "n_head": hp.n_head, "n_head_kv": hp.n_head_kv, "head_dim": hp.head_dim, "n_ff": args.n_ff,
            "rope_base": hp.rope_base, "rms_eps": hp.rms_eps,
            "adapter": {"n_hidden": args.adapter_hidden, "top_k": 8}}


def position_weights(B, dev):
    """The loss's weight of block position j (1..B-1): early positions decide a pass's length."""
    return torch.exp(-torch.arange(B - 1, device=dev, dtype=torch.float32) / 7.0)


def autocast(dev):
    return torch.autocast("cuda", dtype=torch.bfloat16) if dev == "cuda" else torch.autocast("cpu", enabled=False)


def drafter_forward(d, embd, lm_head, B, weights, loss_vocab, ac, compile_):
    """The drafter's training forward and loss: f [N,T,k*E], ids [N,T], L [N], anchors [N,A]. One
    function for the run and for --precompile, so that both compile the same graph."""
    def forward_loss(f, ids, L, anchors):
        with ac:
            y = d.train_forward(f, ids, anchors, embd)
            return block_loss(y, lm_head, ids, L, anchors, B, weights, vocab=loss_vocab)

    # The padded length (dimension 1 of f and ids) changes from batch to batch.
    return Compiled(forward_loss, list(d.p.values()), log, dynamic={0: 1, 1: 1}) if compile_ else forward_loss


# --precompile: the targets' hparams as their GGUFs give them (rms_eps is the GGUF's float32, widened),
# so that the graph compiled before the GGUF arrives is the run's graph.
TARGET_SHAPES = {
    "qwen2.5-coder-1.5b": dict(arch="qwen2", n_layer=28, n_embd=1536, n_head=12, n_head_kv=2, head_dim=128,
                               n_vocab=151936, rope_base=1000000.0, rms_eps=9.999999974752427e-07),
    "qwen2.5-coder-0.5b": dict(arch="qwen2", n_layer=24, n_embd=896, n_head=14, n_head_kv=2, head_dim=64,
                               n_vocab=151936, rope_base=1000000.0, rms_eps=9.999999974752427e-07),
    "smollm2-135m": dict(arch="llama", n_layer=30, n_embd=576, n_head=9, n_head_kv=3, head_dim=64,
                         n_vocab=49152, rope_base=100000.0, rms_eps=9.999999747378752e-06),
}


def precompile(args, dev, max_len=1024):
    """--precompile: compile the drafter's training step on random weights of the target's shapes,
    for every padded length up to max_len, and exit. torch.compile keeps what it built on disk
    (/tmp/torchinductor_$USER, Triton's cache), so a run started later on the machine finds its
    graphs there: device.sh runs this while the GGUF's pieces travel, when the GPU is idle (the
    compiles took 70-130 s of sessions 53-54's runs). Nothing here reads the GGUF or the data."""
    if args.target not in TARGET_SHAPES:
        raise SystemExit(f"error: --precompile knows the shapes of {', '.join(TARGET_SHAPES)}, not {args.target}")
    from types import SimpleNamespace
    hp = SimpleNamespace(**TARGET_SHAPES[args.target])
    cfg = drafter_config(args, hp, target_layers(args, hp), "")
    dtype = torch.bfloat16 if dev == "cuda" else torch.float32  # Target's
    d = Drafter(cfg).to(dev)
    embd = (torch.randn(hp.n_vocab, hp.n_embd, device=dev) * 0.02).to(dtype)
    B, k = args.block, len(cfg["target_layers"])
    vocab = LossVocab(list(range(min(args.loss_vocab, hp.n_vocab))), hp.n_vocab, embd) if args.loss_vocab > 0 \
        else None
    forward = drafter_forward(d, embd, embd, B, position_weights(B, dev), vocab, autocast(dev), True)
    rng = random.Random(0)
    t0 = time.time()
    for T in range(padded_len(B + 2, args.pad_multiple), max_len + 1, args.pad_multiple):
        L = [rng.randint(max(B + 2, T - args.pad_multiple + 1), T) for _ in range(args.batch)]
        L[0] = T
        plens = [rng.randint(1, n - B) for n in L]
        f = torch.randn(args.batch, T, k * hp.n_embd, device=dev).to(torch.bfloat16)
        ids = torch.randint(0, hp.n_vocab, (args.batch, T), device=dev)
        anchors = torch.tensor(sample_anchors(L, plens, args.anchors, B, rng), device=dev)
        loss, _ = forward(f, ids, torch.tensor(L, device=dev), anchors)
        loss.backward()
        if forward.fn is forward.eager:
            raise SystemExit("error: the compile failed (above); the run will train eagerly")
        log(f"precompile: T={T} done, {time.time() - t0:.0f}s")
    log(f"precompile: {time.time() - t0:.0f}s for lengths up to {max_len}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--data", required=True,
                    help="JSON from make_data.py; comma-separated for several (earlier runs' generated.json.gz too)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default=None, help="cache folder for the generated data")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--passes", type=float, default=4.0, help="drafter passes over the training sequences")
    ap.add_argument("--adapter-passes", type=float, default=1.0)
    ap.add_argument("--minutes", type=float, default=0, help="cap on drafter training minutes (0: none)")
    ap.add_argument("--total-minutes", type=float, default=0,
                    help="the whole command's minutes (0: no budget): the drafter steps for what is left after "
                         "loading, generation and the first features, less --reserve-minutes and the other "
                         "shards' features")
    ap.add_argument("--started", type=float, default=0,
                    help="when the command began (a time.time(); 0: now): --total-minutes and the GPU minutes count "
                         "from it, so a driver that held the run back (device.sh's gen_bench) counts that wait too")
    ap.add_argument("--reserve-minutes", type=float, default=2.0,
                    help="with --total-minutes: kept for the adapter (all but half a minute, a third at least), evaluation and export")
    ap.add_argument("--regenerate", action="store_true",
                    help="generate every prompt's continuation, also where a --data file comes with one")
    ap.add_argument("--gen-minutes", type=float, default=0,
                    help="cap on generation minutes (0: none): prompts not reached by then are left out, a random "
                         "subset of them (generated in random chunks, each by length)")
    ap.add_argument("--adapter-minutes", type=float, default=0, help="cap on adapter training minutes (0: none)")
    ap.add_argument("--feature-gb", type=float, default=40.0, help="GPU memory for training features; more: shards")
    ap.add_argument("--feature-fp8", action="store_true",
                    help="features kept as float8 with a scale per token and layer (half of bf16's memory)")
    ap.add_argument("--shards-per-pass", action="store_true",
                    help="with several shards, take turns every pass (recomputing each shard's features every pass) "
                         "instead of computing each shard once and giving it its share of the steps in a row")
    ap.add_argument("--eval-max", type=int, default=320, help="held-out sequences evaluated")
    ap.add_argument("--eval-train", type=int, default=96, help="training sequences evaluated (memorisation check)")
    ap.add_argument("--max-prompts", type=int, default=0)
    ap.add_argument("--max-new", type=int, default=320)
    ap.add_argument("--gen-batch", type=int, default=256, help="rows per generation batch, at most")
    ap.add_argument("--gen-tokens", type=int, default=0, help="KV positions per generation batch, at most (0: no cap)")
    ap.add_argument("--gen-compile", action="store_true",
                    help="generation's decode step through torch.compile (eager if it fails)")
    ap.add_argument("--gen-graphs", action="store_true",
                    help="generation's decode steps as CUDA graphs of fixed shapes (static_decode.py; plain if it fails)")
    ap.add_argument("--gen-gpus", default="",
                    help="more GPUs for the generation (CUDA_VISIBLE_DEVICES values, comma-separated): "
                         "this process starts one helper part on each (see generate_parts)")
    ap.add_argument("--gen-parts", type=int, default=1, help=argparse.SUPPRESS)  # set for helper parts
    ap.add_argument("--gen-part", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--gen-wait", type=float, default=1800, help="seconds part 0 waits for the other parts")
    ap.add_argument("--target-layers", default="")
    ap.add_argument("--n-layer", type=int, default=1)
    ap.add_argument("--n-ff", type=int, default=3072)
    ap.add_argument("--block", type=int, default=16)
    ap.add_argument("--anchors", type=int, default=16)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--heldout", type=float, default=0.05)
    ap.add_argument("--adapter-hidden", type=int, default=256)
    ap.add_argument("--init", default="", help="a drafter folder to start from (its shipped I8 weights, dequantized; "
                    "same shape): training continues it on this data")
    ap.add_argument("--grow", action="store_true",
                    help="with --init: --target-layers may add layers to the old ones and --n-layer add layers after "
                         "the old ones; the grown drafter starts as the old one's function")
    ap.add_argument("--loss-vocab", type=int, default=0,
                    help="the loss's softmax over the N ids the target generates most (0: every id); "
                         "salvo drafts from the best-ranked 32768/65536")
    ap.add_argument("--pad-multiple", type=int, default=64,
                    help="a batch's length rounded up to a multiple of this (1: its longest sequence)")
    ap.add_argument("--profile-steps", type=int, default=0,
                    help="torch.profiler over this many drafter steps (after 33), its table in the log")
    ap.add_argument("--compile", action="store_true",
                    help="the drafter's training forward and loss through torch.compile (eager if it fails)")
    ap.add_argument("--precompile", action="store_true",
                    help="only compile the drafter's step for the target's shapes on random weights (torch's "
                         "on-disk caches keep it for a run started later; see precompile) and exit")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    if args.pad_multiple < 1:
        raise SystemExit(f"error: --pad-multiple must be at least 1, not {args.pad_multiple}")
    ranks = Ranks(args.device)
    if ranks.world > 1:
        if args.gen_gpus or args.gen_parts > 1:
            raise SystemExit("error: under torchrun every rank generates its share: leave out --gen-gpus")
        args.gen_parts, args.gen_part = ranks.world, ranks.rank
    t_start = args.started or time.time()
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    dev = args.device
    torch.backends.cuda.matmul.allow_tf32 = False
    if args.precompile:
        return precompile(args, dev)
    os.makedirs(args.out, exist_ok=True)

    log("loading", args.gguf)
    gw = GGUFWeights(args.gguf)
    tg = Target(gw, dev, torch.bfloat16 if dev == "cuda" else torch.float32)
    log(f"target {gw.arch} n_layer={gw.n_layer} n_embd={gw.n_embd} vocab={gw.n_vocab} eos={gw.eos}")
    target_sha = sha256_of(args.gguf)
    data_prompts = load_prompts(args.data.split(","), args.target, gw.n_vocab, target_sha, args.max_new, log,
                                regenerate=args.regenerate)
    by_split = {}
    for p in data_prompts:
        by_split.setdefault(p.get("split", "train"), []).append(p)
    if args.max_prompts:  # smoke tests: a few of each split
        by_split["train"] = by_split.get("train", [])[:args.max_prompts]
        by_split["heldout"] = by_split.get("heldout", [])[:max(4, args.max_prompts // 8)]
    prompts = by_split.get("train", []) + by_split.get("heldout", []) + by_split.get("bench", [])

    # Prompts that came with their continuation (an earlier run's generated.json.gz) skip generation.
    todo = [i for i, p in enumerate(prompts) if p.get("gen") is None]
    todo_prompts = [prompts[i] for i in todo]
    work = args.work or args.out
    os.makedirs(work, exist_ok=True)
    gen_path = os.path.join(work, f"gen_{args.target}_{len(todo_prompts)}_{args.max_new}.json")
    cached = os.path.exists(gen_path) or not todo_prompts
    ranks.barrier()  # every rank saw the same cache state before rank 0 may write it
    helpers = start_helpers(args, gen_path) if not cached else []
    if ranks.world > 1 and not cached:
        stale = f"{gen_path}.part{ranks.rank}"  # an earlier run's, not to be read as this one's
        if os.path.exists(stale):
            os.remove(stale)
        ranks.barrier()
    t_gen = time.time()
    if not todo_prompts:
        new_gen = []
    elif cached:
        new_gen = json.load(open(gen_path))
    else:
        deadline = time.time() + args.gen_minutes * 60 if args.gen_minutes > 0 else 0.0
        new_gen = generate_parts(tg, todo_prompts, args, gw.eos, gen_path, helpers, every_part=ranks.world > 1,
                                 deadline=deadline)
        if new_gen is None:  # a helper part: its share is written, part 0 trains
            log(f"part {args.gen_part}/{args.gen_parts} written")
            return
    t_gen = time.time() - t_gen
    helper_s = sum(finish_helper(h) for h in helpers)
    gen = [p.get("gen") for p in prompts]
    for i, g in zip(todo, new_gen):
        gen[i] = g
    done = [i for i, g in enumerate(new_gen) if g is not None]
    join_writes = lambda timeout: None
    if ranks.rank == 0 and done:
        # The cache (a rerun skips generation) and generated.json.gz (a later run's data) are
        # written by a child while the features start: 41 s of session 54's budget otherwise.
        def write_both():
            if not cached:
                json.dump(new_gen, open(gen_path + ".tmp", "w"))
                os.replace(gen_path + ".tmp", gen_path)
            path = os.path.join(args.out, "generated.json.gz")
            write_generated(path, args.target, target_sha, args.max_new, " ".join(sys.argv),
                            [todo_prompts[i] for i in done], [new_gen[i] for i in done])
            log(f"{path}: {len(done)} prompts with their continuations, {os.path.getsize(path) / 1e6:.1f} MB")
        join_writes = in_child(write_both, log)
    log(f"generation {t_gen:.0f}s for {len(done)} of {len(todo)} prompts ({len(prompts) - len(todo)} came with "
        f"theirs), mean {np.mean([len(g) for g in gen if g is not None]):.0f} new tokens")
    if len(done) < len(todo):  # --gen-minutes ran out: the prompts not reached are left out
        kept = [i for i, g in enumerate(gen) if g is not None]
        prompts, gen = [prompts[i] for i in kept], [gen[i] for i in kept]
        log(f"{len(todo) - len(done)} prompts without a continuation left out: {len(prompts)} remain")

    # make_data.py marks held-out prompts (from source groups that training never sees); older data
    # without them: a random 5% of the prompts. Benchmark prompts (make_data.py --bench) are
    # evaluated apart and never trained on.
    bench = [i for i, p in enumerate(prompts) if p.get("split") == "bench"]
    ho = [i for i, p in enumerate(prompts) if p.get("split") == "heldout"]
    tr = [i for i, p in enumerate(prompts) if p.get("split", "train") == "train"]
    if not ho:
        random.Random(args.seed).shuffle(tr)
        n_ho = max(4, int(len(tr) * args.heldout))
        ho, tr = sorted(tr[:n_ho]), sorted(tr[n_ho:])
    ho = ho[:args.eval_max]
    tr_eval = random.Random(args.seed + 2).sample(tr, min(len(tr), args.eval_train))
    seqs = [prompts[i]["ids"] + gen[i] for i in range(len(prompts))]
    plens = [len(p["ids"]) for p in prompts]

    layers = target_layers(args, gw)
    cfg = drafter_config(args, gw, layers, target_sha)
    log("config", json.dumps(cfg))

    # Shards of the whole training set over every rank's memory; rank r holds every world-th
    # sequence of each, and all ranks take the steps of the smallest share.
    feature_gb, store, trim = args.feature_gb, None, 0.03
    while store is None:
        shards, feat_gb = shards_of(tr, seqs, feature_bytes(len(layers), gw.n_embd, args.feature_fp8),
                                    feature_gb * ranks.world, random.Random(args.seed + 3), trim)
        left_out = len(tr) - sum(len(sh) for sh in shards)
        steps_per_shard = [max(1, len(sh) // ranks.world // args.batch) for sh in shards]
        shards = [sh[ranks.rank::ranks.world] for sh in shards]
        log(f"{len(tr)} training sequences, {sum(len(seqs[i]) for i in tr)} tokens, features {feat_gb:.1f} GB "
            f"in {len(shards)} shard(s)" + (f" over {ranks.world} ranks" if ranks.world > 1 else ""))
        if left_out > 0:
            log(f"{left_out} training sequences left out: a shard fewer to compute")
        store = FeatureStore(tg, seqs, layers, dev, fp8=args.feature_fp8,
                             capacity=max(sum(len(seqs[i]) for i in sh) for sh in shards))
        try:
            t_feat = store.load(shards[0])
        except torch.cuda.OutOfMemoryError:
            # A --feature-gb past what the GPU holds beside the target must not cost the run (a
            # window of GPU time): one shard more, until they fit. One rank alone: the ranks
            # would disagree on the shards.
            if ranks.world > 1:
                raise
            store = None
        if store is None:
            torch.cuda.empty_cache()
            trim = 0  # the shard more must not be trimmed away again
            feature_gb = feat_gb / ranks.world / (len(shards) + 1) * 1.01
            log(f"out of GPU memory for the features: {len(shards) + 1} shards of at most {feature_gb:.1f} GB")
    log(f"features of shard 0 in {t_feat:.0f}s")
    minutes, adapter_minutes = args.minutes, args.adapter_minutes
    if args.total_minutes > 0:
        elapsed = time.time() - t_start
        minutes, adapter_minutes, left = budget_minutes(args.total_minutes, args.reserve_minutes, args.minutes,
                                                        args.adapter_minutes, elapsed, t_feat, len(shards),
                                                        args.passes, args.shards_per_pass)
        log(f"budget: {args.total_minutes:.1f} minutes, {elapsed / 60:.1f} spent: the drafter {minutes:.1f} "
            f"minutes, the adapter at most {adapter_minutes:.1f}"
            + (f" (past the budget: {left:.1f} minutes were left for it)" if left < 0.5 else ""))
    lens_all = torch.tensor([len(s) for s in seqs], device=dev)
    off_all = torch.tensor([0] + list(np.cumsum([len(s) for s in seqs])[:-1]), device=dev)
    ids_flat = torch.tensor([t for s in seqs for t in s], device=dev)

    d = Drafter(cfg).to(dev)
    if args.init:
        load_init(d, cfg, args.init, args.grow)
        log(f"weights from {args.init}" + (" (grown)" if args.grow else ""))
    ranks.same_weights(list(d.p.values()) + list(d.a.values()))
    B = args.block
    weights = position_weights(B, dev)
    grng = random.Random(args.seed + 1 + 1000 * ranks.rank)  # each rank its own anchors and order
    embd, lm_head = tg.embd, tg.lm_head
    ranked = token_ranks([seqs[i][plens[i]:] for i in tr])
    loss_vocab = LossVocab(ranked[:args.loss_vocab], gw.n_vocab, lm_head) if args.loss_vocab > 0 else None
    if loss_vocab is not None:
        log(f"loss over the {len(loss_vocab.ids)} best-ranked ids")
    ac = autocast(dev)

    def batch_of(sel):
        rows = torch.tensor(sel, device=dev)
        L = lens_all[rows]
        T = padded_len(int(L.max()), args.pad_multiple)
        ids = ids_flat[off_all[rows, None] + torch.minimum(torch.arange(T, device=dev)[None], L[:, None] - 1)]
        anchors = torch.tensor(sample_anchors(L.tolist(), [plens[s] for s in sel], args.anchors, B, grng), device=dev)
        return store.batch(sel, T), ids, L, anchors

    params = [p for p in d.p.values()]
    forward = drafter_forward(d, embd, lm_head, B, weights, loss_vocab, ac, args.compile)

    def drafter_step(sel):
        return forward(*batch_of(sel))

    prof = StepProfiler(args.profile_steps) if args.profile_steps > 0 else None
    curve, steps, secs, fsecs, epochs = train_phase("drafter", params, args.passes, args.lr, store, shards, args.batch,
                                                    drafter_step, 50, grng, minutes, ranks=ranks,
                                                    steps_per_shard=steps_per_shard,
                                                    shards_once=not args.shards_per_pass,
                                                    on_step=prof.step if prof else None)
    log(f"drafter: {steps} steps, {epochs:.2f} epochs, {secs:.0f}s (+{fsecs:.0f}s features)")
    for p in params:
        p.requires_grad_(False)

    def adapter_step(sel):
        f, ids, L, anchors = batch_of(sel)
        with ac:
            with torch.no_grad():
                y = d.train_forward(f, ids, anchors, embd)
            return block_loss(y, lm_head, ids, L, anchors, B, weights, adapt=d.adapt, embd=embd,
                              vocab=loss_vocab)

    a_shards = shards[-1:] if len(shards) > 1 else shards  # the adapter is small: the loaded shard is enough
    acurve, asteps, asecs, afsecs, aepochs = train_phase("adapter", list(d.a.values()), args.adapter_passes, args.lr,
                                                         store, a_shards, args.batch, adapter_step, 50, grng,
                                                         adapter_minutes, 20, ranks=ranks,
                                                         steps_per_shard=steps_per_shard[-1:])
    log(f"adapter: {asteps} steps, {aepochs:.2f} epochs of its shard, {asecs:.0f}s")
    t_feat += fsecs + afsecs
    del store
    world = ranks.world
    ranks.check_same(list(d.p.values()) + list(d.a.values()))
    ranks.close()
    if ranks.rank:  # rank 0 evaluates and writes
        return

    # Export: I8 matrices; evaluation and the reference use the weights as stored.
    ship, deq = export_arrays(tensors_of(d))
    # Written before the evaluation, so a failure there still leaves the drafter (device.sh
    # exports what there is).
    from safetensors.numpy import save_file
    save_file(ship, os.path.join(args.out, "model.safetensors"))
    # The draft vocabulary (salvo's CPU drafter computes its head over the best-ranked ids):
    # the target's own continuations of the training prompts.
    write_token_ranks(args.out, ranked)
    json.dump(cfg, open(os.path.join(args.out, "config.json"), "w"), indent=2)
    d_q = Drafter(cfg).to(dev)
    with torch.no_grad():
        for n, v in deq.items():
            if n.startswith("adapter."):
                d_q.a[n.split(".")[1]].copy_(v)
            else:
                d_q.w(n).copy_(v)
    ho_seqs = [seqs[i] for i in ho]
    t_eval = time.time()
    tau = evaluate(tg, d_q, cfg, ho_seqs, [plens[i] for i in ho], [prompts[i]["cat"] for i in ho], layers, dev)
    bench_tau = evaluate(tg, d_q, cfg, [seqs[i] for i in bench], [plens[i] for i in bench],
                         [prompts[i]["cat"] for i in bench], layers, dev) if bench else None
    bench_walk = evaluate(tg, d_q, cfg, [seqs[i] for i in bench], [plens[i] for i in bench],
                          [prompts[i]["cat"] for i in bench], layers, dev, walk=True) if bench else None
    train_tau = evaluate(tg, d_q, cfg, [seqs[i] for i in tr_eval], [plens[i] for i in tr_eval],
                         [prompts[i]["cat"] for i in tr_eval], layers, dev)
    t_eval = time.time() - t_eval
    log("train-sample tau (memorisation check)", json.dumps(train_tau["all"]))
    log("held-out tau", json.dumps(tau, indent=1))
    if bench_tau:
        log("benchmark tau", json.dumps(bench_tau, indent=1))
        log("benchmark tau, walked as a decoder would", json.dumps(bench_walk, indent=1))

    # reference.safetensors: a held-out context, its features, and float32 logits.
    r0 = min(range(len(ho)), key=lambda n: (plens[ho[n]], n))  # shortest prompt: a small file
    s = ho_seqs[r0]
    T = min(plens[ho[r0]] + 8, len(s) - 1)
    ref_feats = compute_features(tg, [s[:T]], layers, 1, dev)[0].float().cpu()
    E32 = gw.tensor("token_embd.weight")
    H32 = gw.tensor("output.weight")
    logits, y = reference_forward(cfg, deq, ref_feats, s[T], E32, H32)
    prev = torch.tensor([s[T]] + list(np.random.RandomState(args.seed).randint(0, gw.n_vocab, B - 2)), dtype=torch.int32)
    yb = y[1:]
    u = yb + F.silu(yb @ deq["adapter.a_h.weight"].T + E32[prev.long()] @ deq["adapter.a_e.weight"].T) @ deq["adapter.b.weight"].T
    a_logits = u @ H32.T
    lt = np.float16  # travels on every device call; F16 rounding is far inside the tests' tolerance
    save_file({"features": ref_feats.numpy(), "root": np.array([s[T]], np.int32),
               "logits": logits.numpy().astype(lt), "adapter_prev": prev.numpy(),
               "adapter_logits": a_logits.numpy().astype(lt)}, os.path.join(args.out, "reference.safetensors"))
    # cross-check: the batched training forward on the same block (bf16-free on CPU float32 weights)
    with torch.no_grad():
        yt = d_q.float().train_forward(ref_feats[None].to(dev), torch.tensor([s[:T + 1]], device=dev),
                                       torch.tensor([[T]], device=dev), E32.to(dev))[0, 0]
    xdiff = float((yt.cpu() - y).norm() / y.norm())
    log(f"reference: T={T} root={s[T]} train_forward vs reference_forward rel diff {xdiff:.2e}")

    gpu_min = ((time.time() - t_start) * world + helper_s) / 60  # every rank's and helper's GPU
    json.dump({"command": " ".join(sys.argv), "seed": args.seed, "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu",
               "torch": torch.__version__, "n_prompts": len(prompts), "n_generated": len(todo),
               "n_train": len(tr), "n_heldout": len(ho),
               "n_prompts_by_split_cat": {f"{sp}/{c}": sum(1 for p in prompts if p.get("split", "train") == sp and p["cat"] == c)
                                          for sp in ("train", "heldout", "bench") for c in sorted({p["cat"] for p in prompts})},
               "mean_new_tokens": float(np.mean([len(g) for g in gen])),
               "train_tokens": int(sum(len(seqs[i]) for i in tr)),
               "seconds": {"generation": round(t_gen, 1), "features": round(t_feat, 1), "drafter": round(secs, 1),
                           "adapter": round(asecs, 1), "eval": round(t_eval, 1)},
               "gpu_minutes_total": round(gpu_min, 2), "drafter_steps": steps, "adapter_steps": asteps,
               "drafter_epochs": round(epochs, 3), "adapter_epochs": round(aepochs, 3), "feature_gb": round(feat_gb, 2),
               "feature_shards": len(shards), "ranks": world, "loss_vocab": args.loss_vocab, "pad_multiple": args.pad_multiple, "batch": args.batch, "anchors": args.anchors,
               "loss_curve": curve, "adapter_curve": acurve, "heldout_tau": tau, "bench_tau": bench_tau, "bench_walk_tau": bench_walk, "train_tau": train_tau, "n_train_eval": len(tr_eval), "n_bench": len(bench),
               "reference_cross_check_rel": xdiff},
              open(os.path.join(args.out, "train_log.json"), "w"), indent=1)
    if join_writes(300) not in (None, 0):
        log("the continuations were not written (the child's error above)")
    for f in sorted(os.listdir(args.out)):
        log(f, os.path.getsize(os.path.join(args.out, f)))


if __name__ == "__main__":
    main()
