"""The forecast learns from finished jobs (issue 25 point 6; docs/BUDGETS.md "Learning from finished jobs").

Per shape (GPU type x units / training type / model size bucket: budget_meter.shape_of) one record keeps the newest completed
jobs' measured seconds per step (run seconds over all attempts / the steps the trainer reported), their
durations, their reported tokens/s, and how far the forecast was from each one's actual duration. A job is
then forecast as its steps (hyperparameters.max_steps) x the shape's measured seconds per step, or, when it
sets no max_steps, as the shape's durations. From 3 jobs of 2 sizes on, a least-squares line of run seconds
= startup + steps x seconds/step replaces the plain ratio (a fixed startup weighs on short runs). The range
is the samples' 10th..90th percentiles, widened while there are few of them. With no history the forecast
is the job's cap or the documented prior (budget_meter.forecast).

A completion is recorded once: the lifecycle calls `record` after the conditional transition to COMPLETED
that it alone won, and the record keeps the newest job ids so a retried call does not count a job twice.
Each job is scored against the forecast the shape's history gave before it was added (out of sample).
"""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING

from functions.errors import ConcurrentModification
from functions.service import budget_meter as meter
from functions.service.feature_ports import ShapeRecords
from schemas.job import Job
from schemas.status import JobStatus

if TYPE_CHECKING:
    from schemas.budgets import ForecastAccuracy, ShapeRecord

logger = logging.getLogger(__name__)

WINDOW = 50  # newest samples kept per shape (throughput drifts: new images, new drivers)
SCORED = 200  # newest forecast errors kept per shape (the accuracy's window)
_RETRIES = 8


def _quantile(samples: Sequence[float], q: float) -> float:
    ordered = sorted(samples)
    position = q * (len(ordered) - 1)
    lower = math.floor(position)
    upper = min(lower + 1, len(ordered) - 1)
    return ordered[lower] + (ordered[upper] - ordered[lower]) * (position - lower)


def steps_of(job: Job) -> int | None:
    """The steps the job will take, where it says: hyperparameters.max_steps."""
    raw = job.training_config.hyperparameters.get("max_steps")
    try:
        steps = int(raw) if raw is not None else None
    except ValueError:
        return None
    return steps if steps is not None and steps > 0 else None


def run_seconds(job: Job) -> float:
    """Seconds the job's runs took, over all its attempts (what the forecast's duration predicts)."""
    return math.fsum(entry.run_seconds for entry in job.cost.attempts)


def startup_and_per_step(record: ShapeRecord) -> tuple[float, float] | None:
    """Least squares of run seconds = startup + steps x seconds/step over the shape's jobs (a run's fixed cost,
    loading the model and data, weighs on short runs), neither part negative; None with under 3 jobs or one size
    only."""
    pairs = list(zip(record.steps, record.seconds_per_step, strict=False))
    if len(pairs) < 3 or len({steps for steps, _ in pairs}) < 2:
        return None
    xs = [float(steps) for steps, _ in pairs]
    ys = [steps * per_step for steps, per_step in pairs]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    slope = math.fsum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / math.fsum((x - mean_x) ** 2 for x in xs)
    if slope <= 0:  # run time does not grow with steps (the startup dominates, e.g. tiny local runs): a flat line
        return mean_y, 0.0
    startup = mean_y - slope * mean_x
    if startup < 0:  # no fixed cost to see: a line through the origin
        return 0.0, math.fsum(ys) / math.fsum(xs)
    return startup, slope


def _step_samples(record: ShapeRecord, steps: int) -> tuple[list[float], str]:
    """What the shape's jobs say a run of `steps` takes: the fit scaled by each job's own ratio to it, or
    (before a fit) steps x each job's seconds/step."""
    fit = startup_and_per_step(record)
    if fit is None:
        return [per_step * steps for per_step in record.seconds_per_step], "steps x measured seconds/step"
    startup, per_step = fit
    expected = startup + per_step * steps
    ratios = [(n * s) / (startup + per_step * n) for n, s in zip(record.steps, record.seconds_per_step, strict=False)]
    return [expected * r for r in ratios], "startup + steps x measured seconds/step"


def learned(record: ShapeRecord | None, job: Job) -> meter.JobForecast | None:
    """The job's forecast from its shape's history; None with no history (the caller falls back to the prior)."""
    if record is None or not record.durations:
        return None
    steps = steps_of(job)
    if steps is not None and record.seconds_per_step:
        samples, basis = _step_samples(record, steps)
    else:
        samples, basis = list(record.durations), "the shape's measured durations"
    mid = statistics.median(samples)
    spread = 0.5 / math.sqrt(len(samples))  # few samples: a wider range than their own spread shows
    low = min(_quantile(samples, 0.1), mid * (1 - spread))
    high = max(_quantile(samples, 0.9), mid * (1 + spread))
    cap = job.scheduling_config.max_runtime_seconds
    if cap is not None:  # the run is stopped at its cap: it never takes longer
        mid, low, high = min(mid, cap), min(low, cap), min(high, cap)
    return meter.JobForecast(meter.unit_rate(job), mid, low, high, f"{basis} ({len(samples)} finished jobs of the shape)")


def forecast(record: ShapeRecord | None, job: Job) -> meter.JobForecast:
    """Learned where the shape has history, else the job's cap or the documented prior."""
    return learned(record, job) or meter.forecast(job)


def observed(record: ShapeRecord, job: Job) -> ShapeRecord | None:
    """`record` with the completed `job` added (scored against what `record` forecast); None when it has
    nothing to teach (already counted, or no measured run time)."""
    actual = run_seconds(job)
    if job.job_id in record.job_ids or actual <= 0:
        return None
    error = abs(forecast(record, job).seconds - actual) / actual * 100.0
    steps = job.progress.step or job.progress.total_steps or 0
    per_step = [*record.seconds_per_step, actual / steps][-WINDOW:] if steps > 0 else record.seconds_per_step
    step_counts = [*record.steps, steps][-WINDOW:] if steps > 0 else record.steps
    tokens = job.progress.tokens_per_second
    return record.model_copy(
        update={
            "count": record.count + 1,
            "seconds_per_step": per_step,
            "steps": step_counts,
            "durations": [*record.durations, actual][-WINDOW:],
            "tokens_per_second": [*record.tokens_per_second, tokens][-WINDOW:] if tokens else record.tokens_per_second,
            "errors_percent": [*record.errors_percent, round(error, 3)][-SCORED:],
            "job_ids": [*record.job_ids, job.job_id][-SCORED:],
        }
    )


class ForecastLearner:
    """Records completed jobs per shape and forecasts from what they measured (the port: ShapeRecords)."""

    def __init__(self, records: ShapeRecords) -> None:
        self.records = records

    def forecast(self, job: Job) -> meter.JobForecast:
        return forecast(self.records.get(meter.shape_of(job)), job)

    def record(self, job: Job) -> bool:
        """Add a COMPLETED job to its shape's record (conditional writes; a lost race re-reads). True if added."""
        if job.status != JobStatus.COMPLETED:
            return False
        from schemas.budgets import ShapeRecord

        shape = meter.shape_of(job)
        for _ in range(_RETRIES):
            stored = self.records.get(shape)
            base = stored or ShapeRecord(shape=shape)
            updated = observed(base, job)
            if updated is None:
                return False
            try:
                self.records.put(updated, base.version)
                return True
            except ConcurrentModification:
                continue
        logger.warning("forecast record of %s kept losing races; %s not recorded", shape, job.job_id)
        return False

    def accuracy(self) -> ForecastAccuracy:
        from schemas.budgets import ForecastAccuracy, ShapeAccuracy

        def median(values: Sequence[float]) -> float | None:
            return round(statistics.median(values), 3) if values else None

        return ForecastAccuracy(
            shapes=[
                ShapeAccuracy(
                    shape=r.shape,
                    count=r.count,
                    scored=len(r.errors_percent),
                    median_abs_error_percent=median(r.errors_percent),
                    seconds_per_step=median(r.seconds_per_step),
                    tokens_per_second=median(r.tokens_per_second),
                )
                for r in sorted(self.records.list(), key=lambda r: r.shape)
            ]
        )
