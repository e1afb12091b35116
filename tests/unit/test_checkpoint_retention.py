"""schemas/checkpoint.py's ONE computation of best and retained checkpoints (the trainer deletes by it, the
service names by it), case by case: each rule with the case that tells it from its near neighbours."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from schemas.checkpoint import best_checkpoint, checkpoint_id_for, metric_direction, metric_value, retained, step_of


@dataclass(frozen=True)
class Ckpt:
    step: int
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def checkpoint_id(self) -> str:
        return checkpoint_id_for(self.step)


def ids(*steps: int) -> set[str]:
    return {checkpoint_id_for(s) for s in steps}


def test_checkpoint_ids_are_six_digit_steps_and_read_back() -> None:
    assert checkpoint_id_for(500) == "step-000500"
    assert checkpoint_id_for(1234567) == "step-1234567"
    assert step_of("step-000500") == 500
    assert step_of(checkpoint_id_for(0)) == 0


@pytest.mark.parametrize("bad", ["step-", "step-12a", "steps-000500", "best-000500", "000500", "", "step-+5", "step--5"])
def test_step_of_refuses_anything_else(bad: str) -> None:
    with pytest.raises(ValueError, match="not a checkpoint id"):
        step_of(bad)


def test_metric_direction_follows_the_loss_convention_unless_told() -> None:
    assert metric_direction("eval_loss", None) is False
    assert metric_direction("loss", None) is False
    assert metric_direction("accuracy", None) is True
    assert metric_direction("loss_ratio", None) is True  # only a name ending in loss is better lower
    assert metric_direction("eval_loss", True) is True
    assert metric_direction("accuracy", False) is False


def test_metric_value_by_name_then_as_evaluated() -> None:
    assert metric_value({"loss": 1.5, "eval_loss": 0.5}, "loss") == 1.5
    assert metric_value({"eval_loss": 0.5}, "loss") == 0.5
    assert metric_value({"eval_accuracy": 0.9}, "eval_accuracy") == 0.9
    assert metric_value({"accuracy": 0.9}, "loss") is None
    assert metric_value({"loss": 0.0}, "loss") == 0.0


def test_best_is_the_lowest_loss_with_ties_to_the_earlier() -> None:
    checkpoints = [Ckpt(100, {"eval_loss": 0.5}), Ckpt(200, {"eval_loss": 0.3}), Ckpt(300, {"eval_loss": 0.3}), Ckpt(400, {})]
    assert best_checkpoint(checkpoints, "eval_loss", None) == checkpoints[1]
    # The tie goes to the earlier whichever order the checkpoints come in
    assert best_checkpoint(list(reversed(checkpoints)), "eval_loss", None) == checkpoints[1]
    # Told that greater is better, the highest wins, ties again to the earlier
    assert best_checkpoint(checkpoints, "eval_loss", True) == checkpoints[0]
    highest = [Ckpt(100, {"acc": 0.7}), Ckpt(200, {"acc": 0.9}), Ckpt(300, {"acc": 0.9})]
    assert best_checkpoint(list(reversed(highest)), "acc", None) == highest[1]


def test_best_reads_the_eval_name_and_is_none_without_metric_or_scores() -> None:
    checkpoints = [Ckpt(100, {"eval_loss": 0.2}), Ckpt(200, {"eval_loss": 0.4})]
    assert best_checkpoint(checkpoints, "loss", None) == checkpoints[0]
    assert best_checkpoint(checkpoints, None, None) is None
    assert best_checkpoint(checkpoints, "", None) is None
    assert best_checkpoint(checkpoints, "accuracy", None) is None
    assert best_checkpoint([], "loss", None) is None


def test_retained_keeps_the_newest_limit_by_step_not_by_order() -> None:
    checkpoints = [Ckpt(300), Ckpt(100), Ckpt(400), Ckpt(200)]
    assert retained(checkpoints, save_total_limit=2, metric=None, greater_is_better=None) == ids(300, 400)
    assert retained(checkpoints, save_total_limit=1, metric=None, greater_is_better=None) == ids(400)
    assert retained(checkpoints, save_total_limit=None, metric=None, greater_is_better=None) == ids(100, 200, 300, 400)
    assert retained(checkpoints, save_total_limit=0, metric=None, greater_is_better=None) == ids(100, 200, 300, 400)
    assert retained(checkpoints, save_total_limit=9, metric=None, greater_is_better=None) == ids(100, 200, 300, 400)


def test_retained_adds_the_best_and_the_resumed_from_beyond_the_limit() -> None:
    checkpoints = [
        Ckpt(100, {"eval_loss": 0.1}),
        Ckpt(200, {"eval_loss": 0.5}),
        Ckpt(300, {"eval_loss": 0.6}),
        Ckpt(400, {"eval_loss": 0.7}),
    ]
    assert retained(checkpoints, save_total_limit=1, metric="eval_loss", greater_is_better=None) == ids(100, 400)
    assert retained(checkpoints, save_total_limit=1, metric="eval_loss", greater_is_better=True) == ids(400)
    kept = retained(checkpoints, save_total_limit=1, metric=None, greater_is_better=None, resumed_from=checkpoint_id_for(200))
    assert kept == ids(200, 400)
    # A resumed-from id that names none of these checkpoints adds nothing
    kept = retained(checkpoints, save_total_limit=1, metric=None, greater_is_better=None, resumed_from=checkpoint_id_for(250))
    assert kept == ids(400)
    assert retained([], save_total_limit=2, metric="eval_loss", greater_is_better=None, resumed_from="step-000100") == set()
