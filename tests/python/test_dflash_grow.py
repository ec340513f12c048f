"""train/dflash/grow.py: a drafter started from a shipped one, the same size or grown.

Grown, it must compute what the old one computed: the old target layers' features reach fc's
output through the same weights wherever those layers now sit, the added layers' features through
zeros, and added layers write nothing to the residual stream (zero o and down).
"""

import pathlib
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "train" / "dflash"))
import grow  # noqa: E402

E, FF = 8, 12


def config(target_layers, n_layer):
    return {"target": {"name": "t", "n_embd": E}, "target_layers": target_layers, "n_layer": n_layer,
            "block_size": 4, "n_embd": E, "n_head": 2, "n_head_kv": 1, "head_dim": 4, "n_ff": FF,
            "adapter": {"n_hidden": 4, "top_k": 8}}


def shapes(cfg):
    """The drafter's tensors (drafter.py's names) for a config."""
    out = {"fc.weight": (E, len(cfg["target_layers"]) * E), "hidden_norm.weight": (E,), "mask_embd": (E,),
           "output_norm.weight": (E,)}
    for i in range(cfg["n_layer"]):
        q = f"layers.{i}."
        out.update({q + "q.weight": (8, E), q + "k.weight": (4, E), q + "v.weight": (4, E), q + "o.weight": (E, 8),
                    q + "attn_norm.weight": (E,), q + "ffn_norm.weight": (E,), q + "q_norm.weight": (4,),
                    q + "k_norm.weight": (4,), q + "gate.weight": (FF, E), q + "up.weight": (FF, E),
                    q + "down.weight": (E, FF)})
    return out


def random_weights(cfg, seed=0):
    rng = np.random.default_rng(seed)
    return {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes(cfg).items()}


def test_same_shape_copies_every_tensor():
    cfg = config([2, 13, 24], 3)
    old = random_weights(cfg)
    got = grow.start_arrays(cfg, cfg, old, shapes(cfg), "old")
    assert got.keys() == old.keys()
    assert all(np.array_equal(got[n], old[n]) for n in old)


def test_a_grown_drafter_starts_as_the_old_function():
    old_cfg, new_cfg = config([2, 13, 24], 3), config([2, 7, 13, 19, 24], 5)
    grow.check_configs(old_cfg, new_cfg, True, "old")
    old = random_weights(old_cfg)
    got = grow.start_arrays(old_cfg, new_cfg, old, shapes(new_cfg), "old")
    # fc: the same context from the old layers' features, whatever the added layers hold.
    feats = {l: np.random.default_rng(l).standard_normal((5, E)).astype(np.float32) for l in new_cfg["target_layers"]}
    c_old = np.concatenate([feats[l] for l in old_cfg["target_layers"]], 1) @ old["fc.weight"].T
    c_new = np.concatenate([feats[l] for l in new_cfg["target_layers"]], 1) @ got["fc.weight"].T
    np.testing.assert_allclose(c_new, c_old, rtol=1e-5, atol=1e-5)
    # The old layers as they were; the added ones add nothing to the residual stream.
    for n, a in old.items():
        if n != "fc.weight":
            assert np.array_equal(got[n], a), n
    for i in (3, 4):
        assert not got[f"layers.{i}.o.weight"].any() and not got[f"layers.{i}.down.weight"].any()
        assert f"layers.{i}.q.weight" not in got and f"layers.{i}.gate.weight" not in got  # random start


@pytest.mark.parametrize("new, grow_flag, says", [
    (config([2, 7, 13, 19, 24], 3), False, "target_layers is [2, 13, 24] there"),
    (config([2, 13, 24], 5), False, "n_layer is 3 there"),
    (config([2, 7, 19, 24], 5), True, "lacks [13]"),
    (config([2, 13, 24], 2), True, "--n-layer 2 is below"),
    ({**config([2, 13, 24], 3), "n_ff": 16}, True, "n_ff is 12 there"),
    ({**config([2, 13, 24], 3), "target": {"name": "u", "n_embd": E}}, True, "drafts for t, not u"),
])
def test_configs_that_cannot_start_say_why(new, grow_flag, says):
    with pytest.raises(SystemExit, match=says.replace("[", r"\[").replace("]", r"\]")):
        grow.check_configs(config([2, 13, 24], 3), new, grow_flag, "old")


def test_a_missing_or_misshapen_tensor_is_named():
    cfg = config([2, 13, 24], 3)
    old = random_weights(cfg)
    del old["layers.1.up.weight"]
    with pytest.raises(SystemExit, match="has no layers.1.up.weight"):
        grow.start_arrays(cfg, cfg, old, shapes(cfg), "old")
    old = random_weights(cfg)
    old["mask_embd"] = np.zeros(E + 1, np.float32)
    with pytest.raises(SystemExit, match="mask_embd is"):
        grow.start_arrays(cfg, cfg, old, shapes(cfg), "old")


def test_shipped_arrays_dequantize_rows():
    q = np.array([[1, -2], [127, 0]], np.int8)
    got = grow.shipped_arrays({"m": q, "m.scale": np.array([0.5, 2.0], np.float32), "v": np.ones(2, np.float32)})
    np.testing.assert_array_equal(got["m"], [[0.5, -1.0], [254.0, 0.0]])
    assert set(got) == {"m", "v"}
