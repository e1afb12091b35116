"""The metrics curve reduction behind GET /jobs/{id}/metrics?max_points= (functions/service/metrics_reduce.py)."""

from __future__ import annotations

import math
import random

import pytest

from functions.service.metrics_reduce import reduce_points
from schemas.api import MetricsPoint


def _curve(n: int, *, eval_every: int = 1000) -> list[MetricsPoint]:
    rng = random.Random(3)
    points = []
    for s in range(1, n + 1):
        loss = 3.0 * math.exp(-s / (n / 3)) + rng.random() * 0.05
        points.append(MetricsPoint(step=s, loss=loss, learning_rate=1e-4, eval_loss=loss - 0.1 if s % eval_every == 0 else None))
    return points


def test_a_long_curve_keeps_its_ends_spikes_dips_and_every_eval_point() -> None:
    # Given 100,000 points with one spike and one dip, and 100 eval points
    points = _curve(100_000)
    points[41_234] = points[41_234].model_copy(update={"loss": 50.0})
    points[77_777] = points[77_777].model_copy(update={"loss": -5.0})
    # When reduced for a chart of ~900 pixels
    reduced = reduce_points(points, 1800)
    # Then it is at most the budget, in step order, whole points, spanning the same steps
    steps = [p.step for p in reduced]
    assert 1500 <= len(reduced) <= 1800 and steps == sorted(steps) and len(set(steps)) == len(steps)
    assert steps[0] == 1 and steps[-1] == 100_000
    assert all(p.learning_rate == 1e-4 for p in reduced)
    # And the extremes survive: the spike, the dip, the curve's min and max
    kept = {p.step for p in reduced}
    assert {41_235, 77_778} <= kept
    assert max(p.loss for p in reduced if p.loss is not None) == 50.0 and min(p.loss for p in reduced if p.loss is not None) == -5.0
    # And every eval point is kept (100 fit in a quarter of the budget)
    assert sum(1 for p in reduced if p.eval_loss is not None) == 100
    # And each bucket's range is drawn: the reduced curve's max in any stretch of steps equals the original's
    for start in range(1, 100_000, 5_000):
        original = max(p.loss for p in points[start - 1 : start + 4_999] if p.loss is not None)
        drawn = max(p.loss for p in reduced if p.loss is not None and start <= p.step < start + 5_000)
        assert drawn == pytest.approx(original, abs=0.06)


def test_a_short_curve_is_returned_whole_in_step_order() -> None:
    points = list(reversed(_curve(50, eval_every=10)))
    assert [p.step for p in reduce_points(points, 50)] == list(range(1, 51))


def test_many_eval_points_and_points_without_loss_share_the_budget() -> None:
    # Given eval and train points on separate lines (as Trainer logs them), and learning-rate-only lines
    points = [MetricsPoint(step=s, loss=1.0 / s) for s in range(1, 5001)]
    points += [MetricsPoint(step=s, eval_loss=2.0 / s) for s in range(1, 5001, 2)]
    points += [MetricsPoint(step=s, learning_rate=0.1) for s in range(1, 5001, 5)]
    reduced = reduce_points(points, 400)
    assert len(reduced) <= 400
    evals = [p for p in reduced if p.eval_loss is not None]
    losses = [p for p in reduced if p.loss is not None]
    assert 50 <= len(evals) <= 100 and len(losses) >= 250
    assert evals[0].step == 1 and evals[-1].step == 4999 and losses[-1].step == 5000


def test_a_budget_below_the_minimum_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 10"):
        reduce_points(_curve(100), 9)
