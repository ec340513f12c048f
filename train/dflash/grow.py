"""Starting a drafter from a shipped one (train.py --init), also a larger one (--grow).

A grown drafter starts as the function of the one it grows from: features of added target layers
enter fc through zero columns, and added layers (after the old ones) have zero output and down
projections, so each adds nothing to the residual stream until training moves it. Their other
matrices keep their random start, which is what lets the gradient reach them once o and down
move. No torch here, so the tests run it on any machine (tests/python/test_dflash_grow.py).
"""

import numpy as np

# Shapes a drafter cannot change and stay the same function.
FIXED = ("block_size", "n_embd", "n_head", "n_head_kv", "head_dim", "n_ff", "adapter")


def check_configs(old, new, grow, where):
    """Raises SystemExit saying what differs when `old`'s weights cannot start `new`."""
    keys = FIXED if grow else FIXED + ("target_layers", "n_layer")
    for key in keys:
        if old.get(key) != new.get(key):
            raise SystemExit(f"error: --init {where}: {key} is {old.get(key)!r} there, {new.get(key)!r} here")
    if old["target"]["name"] != new["target"]["name"]:
        raise SystemExit(f"error: --init {where} drafts for {old['target']['name']}, not {new['target']['name']}")
    if grow:
        missing = [l for l in old["target_layers"] if l not in new["target_layers"]]
        if missing:
            raise SystemExit(f"error: --grow: --target-layers {new['target_layers']} lacks {missing}, "
                             f"which {where} reads")
        if new["n_layer"] < old["n_layer"]:
            raise SystemExit(f"error: --grow: --n-layer {new['n_layer']} is below {where}'s {old['n_layer']}")


def shipped_arrays(w):
    """name -> float32 array of a shipped model.safetensors (I8 rows times their .scale, F32 vectors)."""
    out = {}
    for n, a in w.items():
        if n.endswith(".scale"):
            continue
        out[n] = a.astype(np.float32) * w[n + ".scale"][:, None] if n + ".scale" in w else a.astype(np.float32)
    return out


def start_arrays(old_cfg, new_cfg, old, shapes, where):
    """The arrays that replace a new drafter's random start: name -> float32 array, for each name of
    `shapes` (name -> shape, the new drafter's tensors) that the old drafter decides. Names left out
    keep their random start (an added layer's q, k, v, gate and up; its norms are ones either way)."""
    n_old, E = old_cfg["n_layer"], new_cfg["target"]["n_embd"]
    out = {}
    for n, shape in shapes.items():
        parts = n.split(".")
        if parts[0] == "layers" and int(parts[1]) >= n_old:
            if parts[2] in ("o", "down"):
                out[n] = np.zeros(shape, np.float32)
            continue
        if n not in old:
            raise SystemExit(f"error: --init {where}: model.safetensors has no {n}")
        a = old[n]
        if n == "fc.weight" and old_cfg["target_layers"] != new_cfg["target_layers"]:
            fc = np.zeros(shape, np.float32)
            for j, l in enumerate(old_cfg["target_layers"]):
                i = new_cfg["target_layers"].index(l)
                fc[:, i * E:(i + 1) * E] = a[:, j * E:(j + 1) * E]
            a = fc
        if a.shape != tuple(shape):
            raise SystemExit(f"error: --init {where}: {n} is {a.shape} there, {tuple(shape)} here")
        out[n] = a
    return out
