"""train.py --compile: the drafter's training forward and loss through torch.compile.

Session 47's profile of a step on the H200 (the 1.5B's three-layer drafter, --loss-vocab 32768):
29.6 ms of device time, of which ~13 ms are small elementwise kernels and dtype copies (RMSNorm,
RoPE, SwiGLU, the residual's casts, forward and backward) that a compiled graph fuses. A failure
to compile must never cost a training run (a window of GPU time): every new shape is tried once,
backward included, and any error switches the run to the eager function for good, with a line in
the log."""

import torch


class Compiled:
    """dynamic: {argument index: dimension} of the sizes that change from call to call (the
    drafter's padded length). Marked before the first call, they give the one graph that torch
    would otherwise compile on the second shape, after a first, static one (sessions 53-54: the
    two compiles took 70-130 s of a 9-minute drafter phase)."""

    def __init__(self, fn, params, log, dynamic=None):
        self.eager, self.params, self.log = fn, params, log
        self.fn = torch.compile(fn)
        self.shapes = set()
        self.dynamic = dynamic or {}

    def __call__(self, *args):
        if self.fn is self.eager:
            return self.eager(*args)
        try:
            return self._compiled(*args)
        except Exception as e:  # noqa: BLE001 -- any compiler failure: train on, uncompiled
            if self.dynamic:  # the marks are new (session 54): without them, torch compiles per shape
                self.log(f"torch.compile with dynamic lengths failed ({type(e).__name__}: {str(e)[:300]}); "
                         "compiling per shape")
                self.dynamic, self.shapes = {}, set()
                torch._dynamo.reset()
                self.fn = torch.compile(self.eager)
                return self(*args)
            self.log(f"torch.compile failed ({type(e).__name__}: {str(e)[:300]}); the eager step from here on")
            self.fn = self.eager
            return self.eager(*args)

    def _compiled(self, *args):
        for i, dim in self.dynamic.items():
            torch._dynamo.maybe_mark_dynamic(args[i], dim)
        shape = tuple(tuple(a.shape) for a in args if isinstance(a, torch.Tensor))
        if shape not in self.shapes:
            # Inductor compiles the backward lazily: a trial forward and backward of its own
            # (a compiled backward frees its buffers, so the caller's graph cannot be reused)
            # makes its failure, too, fall back before the step.
            trial = self.fn(*args)[0]
            torch.autograd.grad(trial, [p for p in self.params if p.requires_grad], allow_unused=True)
            self.shapes.add(shape)
        return self.fn(*args)
