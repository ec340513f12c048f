"""train/dflash/budget.py: the order and batches of the trainer's generation, and the drafter's
minutes under --total-minutes (no torch: the parts of a GPU run that must not cost its window).
"""

import pathlib
import random
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "train" / "dflash"))
import budget  # noqa: E402

_rng = random.Random(7)
LENS = [_rng.randint(1, 300) for _ in range(1000)]


def test_without_chunks_the_order_is_by_length():
    order = budget.generation_order(LENS, 0, seed=1)
    assert sorted(order) == list(range(len(LENS)))
    assert [LENS[i] for i in order] == sorted(LENS)


def test_chunks_are_random_subsets_each_by_length():
    order = budget.generation_order(LENS, 128, seed=1)
    assert sorted(order) == list(range(len(LENS)))
    chunks = [order[c:c + 128] for c in range(0, len(order), 128)]
    for chunk in chunks:
        assert [LENS[i] for i in chunk] == sorted(LENS[i] for i in chunk)
    # The first chunk is a random sample of the lengths, not the shortest prompts.
    first = [LENS[i] for i in chunks[0]]
    assert max(first) > 250 and min(first) < 50
    assert budget.generation_order(LENS, 128, seed=1) == order
    assert budget.generation_order(LENS, 128, seed=2) != order


def test_batches_keep_their_caps_and_do_not_mix_chunks():
    order = budget.generation_order(LENS, 128, seed=3)
    batches = budget.generation_batches(order, LENS, batch=50, tokens=20000, max_new=64)
    assert batches[0][0] == 0 and batches[-1][1] == len(order)
    assert all(a[1] == b[0] for a, b in zip(batches, batches[1:]))
    for s, e in batches:
        rows, longest = e - s, max(LENS[i] for i in order[s:e])
        assert 1 <= rows <= 50
        assert rows == 1 or (rows * (longest + 64) <= 20000 and rows * longest <= 5000)
        # Within a batch the lengths rise: a batch never holds the end of one chunk and the start
        # of the next where the lengths drop.
        assert [LENS[i] for i in order[s:e]] == sorted(LENS[i] for i in order[s:e])
    # Without a token cap, a batch ends at its row cap or where a chunk ends.
    wide = budget.generation_batches(budget.generation_order(LENS, 0, 0), LENS, 256, 0, 64)
    assert [e - s for s, e in wide] == [256, 256, 256, 232]


def test_a_prompt_longer_than_the_token_cap_still_gets_its_batch():
    batches = budget.generation_batches([0, 1], [5000, 6000], batch=8, tokens=1000, max_new=10)
    assert batches == [(0, 1), (1, 2)]


def test_the_drafter_gets_what_the_budget_leaves():
    # 22 minutes: 6.5 spent (load, generation, the first shard's 90 s of features), one shard
    # more to load, 2 kept: the drafter 22 - 6.5 - 1.5 - 2 = 12 minutes, the adapter all of the 2 but
    # the half minute the evaluation and export keep.
    drafter, adapter, left = budget.budget_minutes(22, 2, 0, 0, 6.5 * 60, 90, 2, passes=20)
    assert abs(drafter - 12) < 1e-9 and abs(adapter - 1.5) < 1e-9 and abs(left - 12) < 1e-9
    # A small reserve still gives the adapter a third of it.
    _, adapter, _ = budget.budget_minutes(22, 0.6, 0, 0, 6.5 * 60, 90, 2, passes=20)
    assert abs(adapter - 0.2) < 1e-9
    # --minutes and --adapter-minutes cap them further.
    drafter, adapter, _ = budget.budget_minutes(22, 2, 5, 0.25, 6.5 * 60, 90, 2, passes=20)
    assert drafter == 5 and adapter == 0.25
    # --shards-per-pass loads every shard every pass: 3 passes x 2 shards, less the one loaded.
    drafter, _, _ = budget.budget_minutes(22, 2, 0, 0, 6.5 * 60, 30, 2, passes=2.5, shards_per_pass=True)
    assert abs(drafter - (22 - 6.5 - 5 * 0.5 - 2)) < 1e-9


def test_a_budget_already_spent_still_trains_half_a_minute_and_says_so():
    drafter, _, left = budget.budget_minutes(10, 2, 0, 0, 9.5 * 60, 60, 1, passes=4)
    assert drafter == 0.5 and left < 0.5


def test_the_schedule_runs_over_the_time_that_steps():
    # Planned steps decide while they are the larger fraction.
    assert budget.schedule_fraction(50, 100, busy=10, stall=0, budget_s=600) == 0.5
    # A 60 s compile in a 600 s budget: 60 s after it the schedule is a tenth of the way, not a fifth.
    assert abs(budget.schedule_fraction(10, 10**6, busy=120, stall=60, budget_s=600) - 60 / 540) < 1e-12
    # The deadline stays where the budget put it.
    assert budget.schedule_fraction(10, 10**6, busy=600, stall=60, budget_s=600) == 1.0
    assert budget.schedule_fraction(10, 10**6, busy=300, stall=0, budget_s=0) == 10 / 10**6
    # Steps that all count as stalls (a slow machine) still end at the deadline.
    assert budget.schedule_fraction(3, 10**6, busy=601, stall=601, budget_s=600) == 1.0
