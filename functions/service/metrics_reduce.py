"""Reducing a long metrics curve to a few points that keep its shape (GET /jobs/{id}/metrics?max_points=).

A chart `w` pixels wide shows at most ~2 values per pixel column: its lowest and highest. So a curve of
100,000 points is reduced, per series, to min/max per bucket (M4-style, without the duplicate ends):
each bucket of consecutive steps contributes the points holding its lowest and its highest value, so a
spike or a dip survives any reduction, and the first and last points are always kept (the curve spans
the same steps). The series are `loss` and `eval_loss`: eval points are few (one per eval interval)
and are kept whole while they fit in a quarter of the budget, otherwise reduced the same way. A point
is returned whole (all its metrics), and the result is in step order, never more than `max_points`.
Points carrying neither loss nor eval_loss (e.g. learning-rate-only lines) are sampled evenly with
whatever budget the two series leave.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from schemas.api import MetricsPoint

MIN_MAX_POINTS = 10  # the smallest max_points accepted: a first, a last, and a few buckets


def reduce_points(points: Sequence[MetricsPoint], max_points: int) -> list[MetricsPoint]:
    """At most `max_points` of `points` (whole points, in step order) that keep the loss curves' shape."""
    if max_points < MIN_MAX_POINTS:
        raise ValueError(f"max_points must be at least {MIN_MAX_POINTS}")
    order = sorted(range(len(points)), key=lambda i: points[i].step)  # stable: repeated steps keep file order
    if len(points) <= max_points:
        return [points[i] for i in order]
    losses = [i for i in order if _finite(points[i].loss)]
    evals = [i for i in order if _finite(points[i].eval_loss)]
    kept: set[int] = set()
    eval_budget = min(len(evals), max_points // 4) if losses else max_points
    kept.update(_min_max(points, evals, "eval_loss", eval_budget))
    kept.update(_min_max(points, losses, "loss", max_points - len(kept)))
    left = max_points - len(kept)
    if left > 0:
        others = [i for i in order if i not in kept and not _finite(points[i].loss) and not _finite(points[i].eval_loss)]
        kept.update(_evenly(others, left))
    return [points[i] for i in order if i in kept]


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def _min_max(points: Sequence[MetricsPoint], indices: list[int], key: str, budget: int) -> list[int]:
    """Indices (a subset of `indices`, which are in step order) of at most `budget` points: the first,
    the last, and each bucket's lowest and highest value of `key` in between."""
    if len(indices) <= budget:
        return indices
    if budget <= 2:
        return [indices[0], indices[-1]][:budget]
    inner = indices[1:-1]
    buckets = (budget - 2) // 2
    chosen = [indices[0]]
    size = len(inner) / buckets
    for b in range(buckets):
        bucket = inner[math.floor(b * size) : math.floor((b + 1) * size)]
        if not bucket:
            continue
        values = [getattr(points[i], key) for i in bucket]
        lo = min(range(len(bucket)), key=values.__getitem__)
        hi = max(range(len(bucket)), key=values.__getitem__)
        chosen.extend(bucket[p] for p in sorted({lo, hi}))  # in step order
    chosen.append(indices[-1])
    return chosen


def _evenly(indices: list[int], budget: int) -> list[int]:
    if len(indices) <= budget:
        return indices
    step = len(indices) / budget
    return [indices[math.floor(k * step)] for k in range(budget)]
