"""Greedy generation with fixed-shape decode steps, replayed as CUDA graphs (train.py --gen-graphs).

Session 52's log: a decode step of ~800 to ~2900 rows takes ~33 ms whatever its rows, and one of
~3900 rows 57 ms. Eager, a step launches ~55 kernels a layer from Python (~1500 for the 1.5B), so
the small batches wait on the host. Here the steps of a bucket of BUCKET steps share their shapes:
every step attends over the bucket's last key count L (the keys not yet written are masked), and its
inputs (token ids, positions, the cache index) sit in fixed tensors. The bucket's first step runs
eagerly (torch.compile's shapes, if any, are made there), then the step is captured once and
replayed for the rest. Finished rows leave at a bucket's start (eager generation drops them every
16 steps). Both paths run Target.step; masked keys weigh exactly 0, so the tokens are those of
Target._generate but for rounding in the longer sums (the CPU check in gen_bench.py compares them).
"""

import torch

import target  # its module, not names: target.py imports this file

BUCKET = 64


def capture(tg, run):
    """run() captured as a CUDA graph: (graph, its output tensor). Not torch.cuda.graph(), which
    runs gc.collect() and empty_cache() before every capture (a run's ~100k prompts make the first
    slow, the second hands the KV caches' memory back); the graphs share one memory pool, as only
    the last captured is replayed. The first capture of a process runs it once more on the side
    stream first (cuBLAS's lazy set-up must not happen inside a capture): run() repeats the eager
    step just taken, so its cache writes are the same values.

    The process's first graph is kept for good (never replayed again): a pool's count of graphs
    must not fall to 0 while its blocks live on, or the next capture into it trips the caching
    allocator's `use_count > 0` assert (session 53's H100, torch 2.11: the second bucket's capture,
    after the first bucket's graph was dropped, failed so, and generation went eager)."""
    if not hasattr(tg, "_graph_stream"):
        tg._graph_stream, tg._graph_pool, tg._graph_warm = torch.cuda.Stream(), torch.cuda.graph_pool_handle(), False
        tg._graph_anchor = None
    s = tg._graph_stream
    s.wait_stream(torch.cuda.current_stream())
    g = torch.cuda.CUDAGraph()
    with torch.cuda.stream(s):
        if not tg._graph_warm:
            run()
            tg._graph_warm = True
        g.capture_begin(pool=tg._graph_pool)
        try:
            out = run()
        except BaseException:  # the stream must leave capture mode; run()'s error is the one to tell
            try:
                g.capture_end()
            except RuntimeError:
                pass
            raise
        g.capture_end()
    if tg._graph_anchor is None:
        tg._graph_anchor = g
    torch.cuda.current_stream().wait_stream(s)
    return g, out


def generate(tg, prompts, max_new, eos, fns, graphs):
    """Target.generate's result (left-padded batch, new ids cut after the first EOS). graphs: replay
    captured steps (CUDA); without, the same fixed-shape steps run eagerly (the CPU check)."""
    dev = tg.device
    ids, valid, pos, kc, vc, eos_t, done, out, rows = tg.new_batch(prompts, max_new, eos)
    P = ids.shape[1]
    nxt = tg.step(fns, ids, pos, 0, P, valid, kc, vc)
    # The ids, positions and cache index of the step to come, updated in place (a graph reads them).
    cur_ids, cur_pos, c = nxt[:, None].clone(), pos[:, -1:].clone(), torch.full((), P - 1, dtype=torch.long, device=dev)
    s = 0
    while True:
        out[rows, s] = torch.where(done, torch.zeros_like(nxt), nxt)
        done = done | torch.isin(nxt, eos_t)
        s += 1
        if s == max_new:
            break
        cur_ids.copy_(nxt[:, None])
        cur_pos += 1
        c += 1
        if (s - 1) % BUCKET == 0:  # a bucket starts: drop finished rows, take the bucket's shapes
            n_done = int(done.sum())
            if n_done == len(rows):
                break
            if n_done * 4 >= len(rows):
                keep = (~done).nonzero()[:, 0]
                kc, vc = [k[keep] for k in kc], [v[keep] for v in vc]
                valid, rows, done = valid[keep], rows[keep], done[keep]
                cur_ids, cur_pos = cur_ids[keep], cur_pos[keep]
            n = min(BUCKET, max_new - s)
            L = P + s + n - 1  # keys the bucket's last step sees
            run = lambda ids=cur_ids, pos=cur_pos, kc=kc, vc=vc, valid=valid, L=L: tg.step(
                fns, ids, pos, c, L, valid, kc, vc)
            nxt = run()
            graph = None  # the last bucket's graph goes (capture's anchor keeps the pool's count up)
            graph = capture(tg, run) if graphs and n > 1 else None
            continue
        if graph is not None:
            graph[0].replay()
            nxt = graph[1]
        else:
            nxt = run()
    return target.cut_at_eos(out, eos)
