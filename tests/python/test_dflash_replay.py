"""bench/dflash_replay.py studies tree construction offline: tests/tools/dflash_replay_dump writes
what the DFlash drafter proposes at every position of greedy texts, and the script builds the
trees again in Python. Its conclusions hold only if its trees are the engine's, so the dump also
carries how deep each text runs down the tree the engine's DflashDrafter proposes at that
position, and `check` must reach the same depth everywhere: with the shipped SmolLM2 drafter's
adapter trees at two budgets, with the context boost as shipped and changed through
SALVO_DFLASH_BOOST, and at a large tree's budget, whose 16 candidates a depth the dump then holds. Bad input to the dump tool is refused with what was wrong.
"""

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO_ROOT, model_path_or_skip, salvo_bin_or_skip, tool_path_or_skip

PROMPTS = [
    "Write a Python function that returns the squares of a list of numbers.",
    "Rewrite this sentence in the passive voice: the cat chased the mouse.",
]
REPLAY = str(REPO_ROOT / "bench" / "dflash_replay.py")
DRAFTER = REPO_ROOT / "drafters" / "smollm2-135m"


@pytest.fixture(scope="module")
def texts(tmp_path_factory):
    """Greedy texts of SmolLM2 (`salvo run --json`: prompt and answer token ids)."""
    model = model_path_or_skip("smollm2-135m")
    tmp = tmp_path_factory.mktemp("replay")
    prompts = tmp / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))
    proc = subprocess.run(
        [salvo_bin_or_skip(), "run", "--model", model, "--prompts-file", str(prompts), "--json",
         "--max-tokens", "40", "--temperature", "0", "--threads", "2", "--spec", "none"],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    path = tmp / "texts.jsonl"
    path.write_text(proc.stdout)
    seqs = subprocess.run([sys.executable, REPLAY, "sequences", str(path)], capture_output=True,
                          text=True, check=True).stdout
    assert len(seqs.splitlines()) == len(PROMPTS)
    (tmp / "seqs.txt").write_text(seqs)
    return model, tmp


def dump(model, tmp, name, budget, env=None, width=8):
    out = tmp / name
    proc = subprocess.run(
        [tool_path_or_skip("dflash_replay_dump"), model, str(DRAFTER), str(tmp / "seqs.txt"),
         str(out), str(width), str(budget)],
        capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


@pytest.mark.parametrize("budget,boost,width", [(7, None, 8), (24, None, 8), (24, "4", 8),
                                                (48, None, 16)])
def test_replayed_trees_are_the_engines(texts, budget, boost, width):
    model, tmp = texts
    env = dict(os.environ)
    env.pop("SALVO_DFLASH_BOOST", None)
    env.pop("SALVO_DFLASH_CONTEXT", None)
    env.pop("SALVO_DFLASH_WIDE", None)
    flags = []
    if boost:
        env["SALVO_DFLASH_BOOST"] = boost
        flags = ["--boost", boost]
    out = dump(model, tmp, f"dump_{budget}_{boost}.bin", budget, env, width)
    proc = subprocess.run([sys.executable, REPLAY, "check", str(out), str(tmp / "texts.jsonl"),
                           "-v", *flags], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert f"(budget {budget})" in proc.stdout
    # And the replay's figures: one row a budget, tokens a pass at least 1.
    proc = subprocess.run([sys.executable, REPLAY, "replay", str(out), str(tmp / "texts.jsonl"),
                           "--budgets", "1", str(budget), *flags],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    rows = [line.split() for line in lines[1:lines.index(next(x for x in lines
                                                              if x.startswith("passes")))]]
    assert [r[0] for r in rows] == ["1", str(budget)]
    assert all(float(r[1]) >= 1.0 for r in rows)
    assert float(rows[1][1]) >= float(rows[0][1])


def test_orders_give_a_path_per_position(texts):
    """`orders` (spec_policy_test's data): per text one field per answer position, each the
    rising grow orders of the path the text takes down that position's tree, '-' for none."""
    model, tmp = texts
    out = dump(model, tmp, "dump_orders.bin", 15)
    proc = subprocess.run([sys.executable, REPLAY, "orders", str(out), str(tmp / "texts.jsonl"),
                           "--budget", "15"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    rows = [json.loads(x) for x in (tmp / "texts.jsonl").read_text().splitlines()
            if x.startswith("{")]
    assert len(lines) == len(rows) == len(PROMPTS)
    for line, r in zip(lines, rows):
        fields = line.split()
        assert len(fields) == len(r["tokens"]) - 1
        for f in fields:
            if f != "-":
                orders = [int(x) for x in f.split(",")]
                assert orders == sorted(orders) and 0 <= orders[0] and orders[-1] < 15


def test_bad_sequences_are_refused(texts, tmp_path):
    model, _ = texts
    tool = tool_path_or_skip("dflash_replay_dump")
    for content, says in [("5 1 2 3\n", "bad n_prompt"), ("", None)]:
        seqs = tmp_path / "seqs.txt"
        seqs.write_text(content)
        proc = subprocess.run([tool, model, str(DRAFTER), str(seqs), str(tmp_path / "o.bin")],
                              capture_output=True, text=True, timeout=300)
        if says:
            assert proc.returncode == 2 and says in proc.stderr, proc.stderr
        else:
            assert proc.returncode == 0, proc.stderr
    proc = subprocess.run([tool, model, str(tmp_path / "no-such-drafter"), str(seqs),
                           str(tmp_path / "o.bin")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "dflash_replay_dump:" in proc.stderr
    proc = subprocess.run([tool, model, str(DRAFTER), str(seqs), str(tmp_path / "o.bin"), "8",
                           "16", "gpu"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "DEVICE must be cpu or cuda" in proc.stderr


def test_a_smaller_draft_vocabulary_drops_the_rare_ids():
    """--vocab N replays a head over ids below N (--spec-vocab): the rarer candidates leave each
    depth, the others move up in order, and the adapter's scores follow both their parent (the
    depth above, filtered too) and the candidate."""
    import numpy as np
    sys.path.insert(0, str(REPO_ROOT / "bench"))
    import dflash_replay

    toks = np.array([[[5, 70000, 7, 9], [80000, 3, 4, 90000]]], dtype=np.int32)  # [n, D, K]
    lps = np.array([[[-1, -2, -3, -4], [-1, -2, -3, -4]]], dtype=np.float32)
    ad = np.arange(2 * 4 * 4, dtype=np.float32).reshape(1, 2, 4, 4)  # [n, D, parent, candidate]
    t, lp, a = dflash_replay.below_vocab(toks, lps, ad, 65536)
    assert t.tolist() == [[[5, 7, 9, -1], [3, 4, -1, -1]]]
    assert lp[0, 0, :3].tolist() == [-1, -3, -4] and lp[0, 1, :2].tolist() == [-2, -3]
    # Depth 1's parent is the root; depth 2's kept parents were candidates 0, 2 and 3 of depth 1.
    assert a[0, 0, 0, :3].tolist() == [ad[0, 0, 0, 0], ad[0, 0, 0, 2], ad[0, 0, 0, 3]]
    assert a[0, 1, :3, :2].tolist() == ad[0, 1][[0, 2, 3]][:, [1, 2]].tolist()
    # With ranks (--ranks: a ranked draft vocabulary), the N best-ranked ids are kept instead.
    ranks = np.array([70000, 9, 3, 80000, 5], dtype=np.int64)
    t, lp, a = dflash_replay.below_vocab(toks, lps, ad, 4, ranks)
    assert t.tolist() == [[[70000, 9, -1, -1], [80000, 3, -1, -1]]]
    assert lp[0, 0, :2].tolist() == [-2, -4] and lp[0, 1, :2].tolist() == [-1, -2]
    assert a[0, 1, :2, :2].tolist() == ad[0, 1][[1, 3]][:, [0, 1]].tolist()
