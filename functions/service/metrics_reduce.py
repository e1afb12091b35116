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

import contextlib
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from schemas.api import MetricsPoint

MIN_MAX_POINTS = 10  # the smallest max_points accepted: a first, a last, and a few buckets


def parse_documents(lines: Sequence[str]) -> list[dict[str, Any]]:
    """metrics.jsonl's non-blank lines as dicts with an int step: in one json.loads while every line is one
    JSON value (the common case), line by line otherwise; a torn line is left out."""
    parsed: Any = None
    with contextlib.suppress(ValueError):
        parsed = json.loads("[" + ",".join(lines) + "]")
    if not isinstance(parsed, list) or len(parsed) != len(lines):
        parsed = []
        for line in lines:
            try:
                parsed.append(json.loads(line))
            except ValueError:
                parsed.append(None)
    return [d for d in parsed if isinstance(d, dict) and type(d.get("step")) is int]


def reduce_points(points: Sequence[MetricsPoint], max_points: int) -> list[MetricsPoint]:
    """At most `max_points` of `points` (whole points, in step order) that keep the loss curves' shape."""
    kept = reduce_indices([p.step for p in points], _finite([p.loss for p in points]), _finite([p.eval_loss for p in points]), max_points)
    return [points[i] for i in kept]


def reduce_documents(documents: Sequence[Mapping[str, Any]], max_points: int) -> list[Mapping[str, Any]]:
    """reduce_points over metrics.jsonl's parsed lines (each a dict with an int `step`), before any model is
    built: building 100,000 pydantic models costs ~10x parsing the JSON, and only the kept ones need one."""
    losses = _finite([d.get("loss") for d in documents])
    evals = _finite([d.get("eval_loss") for d in documents])
    kept = reduce_indices([d["step"] for d in documents], losses, evals, max_points)
    return [documents[i] for i in kept]


def reduce_indices(steps: Sequence[int], losses: Sequence[float | None], evals: Sequence[float | None], max_points: int) -> list[int]:
    """The indices of the points to keep, in step order (the module's docstring says which); a value of
    None is no value (_finite made every non-finite or non-number value None)."""
    if max_points < MIN_MAX_POINTS:
        raise ValueError(f"max_points must be at least {MIN_MAX_POINTS}")
    order = sorted(range(len(steps)), key=steps.__getitem__)  # stable: repeated steps keep file order
    if len(steps) <= max_points:
        return order
    with_loss = [i for i in order if losses[i] is not None]
    with_eval = [i for i in order if evals[i] is not None]
    kept: set[int] = set()
    eval_budget = min(len(with_eval), max_points // 4) if with_loss else max_points
    kept.update(_min_max(evals, with_eval, eval_budget))
    kept.update(_min_max(losses, with_loss, max_points - len(kept)))
    left = max_points - len(kept)
    if left > 0:
        others = [i for i in order if i not in kept and losses[i] is None and evals[i] is None]
        kept.update(_evenly(others, left))
    return [i for i in order if i in kept]


def _finite(values: list[Any]) -> list[float | None]:
    """Each value as a finite float, or None (missing, NaN, infinite, not a number; a bool is no number).
    One comprehension, no call per value: it runs over every point of a long curve."""
    inf = math.inf
    return [v if type(v) is float and -inf < v < inf else float(v) if type(v) is int else None for v in values]


def _min_max(values: Sequence[float | None], indices: list[int], budget: int) -> list[int]:
    """Indices (a subset of `indices`, which are in step order) of at most `budget` points: the first,
    the last, and each bucket's lowest and highest value in between."""
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
        lo = min(bucket, key=values.__getitem__)  # type: ignore[arg-type]  # finite floats here
        hi = max(bucket, key=values.__getitem__)  # type: ignore[arg-type]
        chosen.extend(sorted({lo, hi}, key=bucket.index) if lo != hi else [lo])  # in step order
    chosen.append(indices[-1])
    return chosen


def _evenly(indices: list[int], budget: int) -> list[int]:
    if len(indices) <= budget:
        return indices
    step = len(indices) / budget
    return [indices[math.floor(k * step)] for k in range(budget)]
