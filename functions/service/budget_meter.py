"""Budget metering, pure (issue 25; docs/BUDGETS.md): a job's rate, what it has cost so far, which budgets
cover it, its forecast, and the overshoot bound. No I/O: functions/service/budgets.py reads and writes.

A job's rate is its run's instance rate (functions/service/costs.py: on-demand or spot, x instances) once a
cloud run is launched; before that, and for local mode's emulated GPUs (`trainplane up --gpus`), its units
(GPUs over all nodes) x the price of one unit-hour of its GPU type from the deployment's price table
(functions/catalog/gpu_types.py). What a job has cost is idempotent from the job record alone: each finished
attempt's recorded cost (or, where compute is free to AWS, its run seconds x the rate), plus the running
attempt's seconds since it started x the rate. A budget's spend is the sum of its jobs' charges, replaced
(never added) at each tick, so two ticks racing or one repeated never count a second twice.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from functions.catalog.gpu_types import gpu_type_of, unit_hourly_usd, units_of
from functions.catalog.model_sizes import model_size_bucket
from functions.service.costs import hourly_rate
from functions.service.ports import LaunchHandle
from schemas.budgets import Budget, BudgetScope, Period, ScopeKind
from schemas.job import Job
from schemas.status import RUNNING

HOUR = 3600.0
# The forecast's prior when a job sets no max_runtime_seconds (docs/BUDGETS.md): one hour expected, the
# range half an hour to four hours. A job that sets max_runtime_seconds is forecast at that cap (its most).
PRIOR_SECONDS = 3600.0
PRIOR_LOW_SECONDS = 1800.0
PRIOR_HIGH_SECONDS = 4 * 3600.0


def unit_rate(job: Job) -> float:
    """USD/h of the job's units at its GPU type's unit price (the emulated and the not-yet-launched rate)."""
    rc = job.resource_config
    return units_of(rc) * unit_hourly_usd(gpu_type_of(rc))


def job_rate(job: Job) -> float:
    """USD/h of the job's current (or next) run: its launched instances' rate, else its units' rate."""
    if job.run_handle:
        extra = LaunchHandle.from_dict(job.run_handle).extra
        rate = hourly_rate(extra.get("instance_type"), int(extra.get("instance_count", "1") or 1), spot=extra.get("spot") == "true")
        if rate > 0:
            return rate
    return unit_rate(job)


def running_seconds(job: Job, now: datetime) -> float:
    """Seconds the current attempt has run (0 when nothing runs)."""
    if job.status not in RUNNING or job.run_started_at is None:
        return 0.0
    return max((now - job.run_started_at).total_seconds(), 0.0)


def accrued_usd(job: Job, now: datetime) -> float:
    """What the job has cost: finished attempts as recorded (free compute priced at the unit rate) plus the
    running attempt so far. Idempotent: the same job and time give the same figure."""
    rate = unit_rate(job)
    finished = 0.0
    for entry in job.cost.attempts:
        if entry.attempt == job.attempt and job.status in RUNNING:
            continue  # the running attempt is counted from its start below
        finished += entry.estimated_cost_usd if entry.estimated_cost_usd > 0 else entry.run_seconds * rate / HOUR
    return finished + job_rate(job) * running_seconds(job, now) / HOUR


def covers(scope: BudgetScope, job: Job) -> bool:
    if scope.kind == ScopeKind.DEPLOYMENT:
        return True
    if scope.kind == ScopeKind.TEAM:
        return job.team == scope.value
    if scope.kind == ScopeKind.PRINCIPAL:
        return job.owner == scope.value
    key, value = scope.label()
    return job.labels.get(key) == value


def period_start(budget_period: Period, now: datetime, created_at: datetime, starts_at: datetime | None) -> datetime:
    """The start of the period that holds `now`: lifetime from creation, monthly from the 1st, weekly from Monday (UTC)."""
    if budget_period == Period.LIFETIME:
        return created_at
    if budget_period == Period.CUSTOM:
        assert starts_at is not None
        return starts_at
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if budget_period == Period.MONTHLY:
        return day.replace(day=1)
    return day - timedelta(days=day.weekday())


def in_period(budget: Budget, job: Job) -> bool:
    """A job counts in the period it was created in (docs/BUDGETS.md: a run spanning two periods counts in the first)."""
    if budget.period == Period.LIFETIME:
        return True
    if budget.period == Period.CUSTOM and budget.ends_at is not None and job.created_at >= budget.ends_at:
        return False
    return job.created_at >= budget.period_start


@dataclass(frozen=True)
class JobForecast:
    hourly_usd: float
    seconds: float
    low_seconds: float
    high_seconds: float
    basis: str

    @property
    def total_usd(self) -> float:
        return self.hourly_usd * self.seconds / HOUR

    @property
    def low_usd(self) -> float:
        return self.hourly_usd * self.low_seconds / HOUR

    @property
    def high_usd(self) -> float:
        return self.hourly_usd * self.high_seconds / HOUR


def shape_of(job: Job) -> str:
    """The forecast's shape key: GPU type x units / training type / model size bucket (what finished jobs are
    learned by: functions/catalog/model_sizes.py)."""
    rc, training = job.resource_config, job.training_config
    return f"{gpu_type_of(rc)}x{units_of(rc)}/{training.training_type}/{model_size_bucket(training.base_model)}"


def forecast(job: Job) -> JobForecast:
    """The job's forecast: its cap (max_runtime_seconds) when it sets one, else the documented prior."""
    rate = unit_rate(job)
    cap = job.scheduling_config.max_runtime_seconds
    if cap is not None:
        return JobForecast(rate, float(cap), min(float(cap), PRIOR_LOW_SECONDS), float(cap), "max_runtime_seconds")
    return JobForecast(rate, PRIOR_SECONDS, PRIOR_LOW_SECONDS, PRIOR_HIGH_SECONDS, "prior")


def reservation_usd(job: Job) -> float:
    """What admission reserves: the forecast's upper end (the job's cap, or the prior's high end)."""
    return round(forecast(job).high_usd, 6)


def overshoot_bound_usd(rates_usd_per_hour: Iterable[float], tick_seconds: float, grace_seconds: float) -> float:
    """The most a budget passes its amount by: its running jobs' rates x (one tick + the checkpoint grace).

    A tick that finds spend below the amount lets the jobs run until the next tick (at most `tick_seconds`
    more); the tick that finds it at or above asks them to pause, and a pause takes at most the stop grace
    (SIGTERM -> checkpoint -> exit) before the run stops billing."""
    return math.fsum(rates_usd_per_hour) * (tick_seconds + grace_seconds) / HOUR
