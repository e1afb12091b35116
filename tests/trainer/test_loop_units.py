"""The loop's pure parts: the data order per epoch and per rank, the exit-code-free
helpers. (The loop end to end: test_loop_types.py, test_resume.py.)"""

from __future__ import annotations

import pytest
from trainer.failures import UserError
from trainer.loop import DataOrder


def test_one_process_sees_every_example_once_per_epoch_in_a_seeded_order() -> None:
    # Given 10 examples in batches of 4
    order = DataOrder(10, 4, seed=7)

    # Then an epoch is 3 micro-batches (the last one short) covering each example once
    assert order.micro_per_epoch == 3
    epoch0 = [i for j in range(3) for i in order.micro_batch(0, j)]
    assert sorted(epoch0) == list(range(10)) and len(order.micro_batch(0, 2)) == 2
    # and the next epoch is another order, the same for the same seed
    epoch1 = [i for j in range(3) for i in order.micro_batch(1, j)]
    assert epoch1 != epoch0 and sorted(epoch1) == list(range(10))
    assert [DataOrder(10, 4, seed=7).micro_batch(1, j) for j in range(3)] == [order.micro_batch(1, j) for j in range(3)]


def test_ranks_take_disjoint_slices_of_the_same_permutation_and_drop_the_ragged_tail() -> None:
    # Given 2 workers, batch 2, 11 examples: 2 full micro-batches each, one example left over
    ranks = [DataOrder(11, 2, seed=3, rank=r, world_size=2) for r in range(2)]
    assert [r.micro_per_epoch for r in ranks] == [2, 2]
    taken = [i for j in range(2) for r in ranks for i in r.micro_batch(0, j)]
    # Then together they read the first 8 of one process's permutation with batch 4
    single = DataOrder(11, 4, seed=3)
    assert taken == single.micro_batch(0, 0) + single.micro_batch(0, 1)
    with pytest.raises(UserError, match="cannot fill one batch"):
        DataOrder(3, 2, seed=0, rank=0, world_size=2)
    with pytest.raises(UserError, match="empty"):
        DataOrder(0, 2, seed=0)
