"""Cost of a job: GPU-hours and an estimated price per attempt, summed over attempts; the max_cost_usd guard.

Prices come from the one table (functions/catalog/pricing.py). How an attempt is priced:
- SageMaker: BillableTimeInSeconds x instances x the ml.* rate. With managed spot SageMaker bills
  fewer seconds than the run lasted; that difference is the spot saving, as SageMaker reports it.
- EC2: the instance's seconds x the on-demand rate; spot runs are estimated with the typical spot
  discount (the real spot price moves and is not looked up per job).
- local compute is free.

Recording is idempotent per attempt (an event, the reconciler and the launcher monitor may all
report the same end): the attempt's entry is replaced, the totals recomputed from the entries.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Literal

from functions.catalog import pricing
from functions.catalog.instances import spec_for
from functions.errors import ConcurrentModification, IllegalTransition
from functions.service.ports import JobRepository, LaunchHandle, RunDescription
from schemas.job import AttemptCost, Cost, ErrorType, Job, PendingAction
from schemas.status import PAUSABLE, RUNNING

logger = logging.getLogger(__name__)

Platform = Literal["sagemaker", "ec2", "local"]
_HOUR = 3600.0


@dataclass(frozen=True)
class BudgetVerdict:
    """What check_budget found: stop the job (gracefully, with a checkpoint) when `exceeded`."""

    exceeded: bool
    spent_usd: float  # finished attempts plus the running one so far
    projected_usd: float  # spent plus the next interval at the current rate
    limit_usd: float | None
    hourly_usd: float  # the current run's rate (0 when nothing runs)
    message: str = ""


def platform_of(instance_type: str | None) -> Platform:
    if not instance_type:
        return "local"
    if instance_type.startswith("ml."):
        return "sagemaker"
    return "ec2"


def hourly_rate(instance_type: str | None, instance_count: int = 1, *, spot: bool = False) -> float:
    """USD per hour for the whole run (all instances); spot at the estimated discount; 0 for unknown types."""
    platform = platform_of(instance_type)
    if platform == "local" or instance_type is None:
        return 0.0
    try:
        rate = pricing.spot_hourly_estimate(instance_type, platform) if spot else pricing.on_demand_hourly(instance_type, platform)
    except KeyError:
        logger.warning("no price for %s; counted as free", instance_type)
        return 0.0
    return rate * max(instance_count, 1)


def attempt_cost(attempt: int, run: RunDescription, *, handle: LaunchHandle | None = None) -> AttemptCost:
    """One finished (or running, for a projection) attempt priced from its description.

    The description's instance type/count/spot win; the launch handle fills what a description lacks
    (a local run, or a describe of an instance that is already gone).
    """
    extra = handle.extra if handle is not None else {}
    instance_type = run.instance_type or extra.get("instance_type")
    count = run.instance_count if run.instance_type else int(extra.get("instance_count", run.instance_count) or 1)
    spot = run.spot or extra.get("spot") == "true"
    platform = platform_of(instance_type)
    run_seconds = float(run.run_seconds or run.billable_seconds or 0.0)
    billable = float(run.billable_seconds if run.billable_seconds is not None else run_seconds)
    gpus = _gpus(instance_type)
    if platform == "local" or instance_type is None:
        return AttemptCost(attempt=attempt, instance_count=count, run_seconds=run_seconds, billable_seconds=0.0)
    try:
        on_demand = pricing.on_demand_hourly(instance_type, platform)
    except KeyError:
        logger.warning("no price for %s; attempt %d counted as free", instance_type, attempt)
        on_demand = 0.0
    if platform == "sagemaker":
        cost = billable * count * on_demand / _HOUR
        # SageMaker's own saving: the run lasted run_seconds, it billed `billable`.
        savings = max(run_seconds - billable, 0.0) * count * on_demand / _HOUR if spot else 0.0
    else:
        discount = pricing.SPOT_DISCOUNT_ESTIMATE["ec2"] if spot else 0.0
        cost = billable * count * on_demand * (1.0 - discount) / _HOUR
        savings = billable * count * on_demand * discount / _HOUR
    return AttemptCost(
        attempt=attempt,
        instance_type=instance_type,
        instance_count=count,
        spot=spot,
        run_seconds=run_seconds,
        billable_seconds=billable * count,
        gpu_hours=run_seconds * gpus * count / _HOUR,
        estimated_cost_usd=round(cost, 6),
        spot_savings_usd=round(savings, 6),
    )


def with_attempt(cost: Cost, entry: AttemptCost) -> Cost:
    """`cost` with the attempt's entry added or replaced and the totals recomputed (idempotent)."""
    entries = sorted([e for e in cost.attempts if e.attempt != entry.attempt] + [entry], key=lambda e: e.attempt)
    latest_type = next((e.instance_type for e in reversed(entries) if e.instance_type), cost.instance_type)
    return Cost(
        gpu_hours=round(sum(e.gpu_hours for e in entries), 6),
        billable_seconds=round(sum(e.billable_seconds for e in entries), 3),
        estimated_cost_usd=round(sum(e.estimated_cost_usd for e in entries), 6),
        spot_savings_usd=round(sum(e.spot_savings_usd for e in entries), 6),
        instance_type=latest_type,
        attempts=entries,
    )


def record_run_cost(repository: JobRepository, job: Job, attempt: int, run: RunDescription) -> Cost:
    """Price the attempt's run and store it on the job (unversioned: never a 409 for the caller)."""
    handle = LaunchHandle.from_dict(job.run_handle) if job.run_handle and job.run_handle.get("attempt") == str(attempt) else None
    updated = with_attempt(job.cost, attempt_cost(attempt, run, handle=handle))
    if updated != job.cost:
        repository.annotate(job.job_id, {"cost": updated})
    return updated


def check_budget(job: Job, *, interval_seconds: float, now: datetime | None = None) -> BudgetVerdict:
    """Would the job pass scheduling_config.max_cost_usd within the next interval at its current rate?

    Call it periodically while a job runs (e.g. on each heartbeat or reconciler sweep, with the time
    until the next call as `interval_seconds`). When `exceeded`, stop the run gracefully (a checkpoint
    is saved) and fail the job with error_type BUDGET and `message`.
    """
    limit = job.scheduling_config.max_cost_usd
    finished = sum(e.estimated_cost_usd for e in job.cost.attempts if e.attempt != job.attempt)
    rate = 0.0
    running_so_far = 0.0
    if job.status in RUNNING and job.run_handle:
        handle = LaunchHandle.from_dict(job.run_handle)
        extra = handle.extra
        rate = hourly_rate(extra.get("instance_type"), int(extra.get("instance_count", "1") or 1), spot=extra.get("spot") == "true")
        started = _started_at(job, handle)
        if started is not None:
            elapsed = max(((now or datetime.now(UTC)) - started).total_seconds(), 0.0)
            running_so_far = rate * elapsed / _HOUR
    else:
        # Not running: the current attempt's recorded cost, if any, is final.
        finished += sum(e.estimated_cost_usd for e in job.cost.attempts if e.attempt == job.attempt)
    spent = finished + running_so_far
    projected = spent + rate * max(interval_seconds, 0.0) / _HOUR
    exceeded = limit is not None and rate > 0 and projected > limit
    message = (
        f"estimated cost would pass scheduling_config.max_cost_usd={limit:.2f} "
        f"(spent {spent:.2f} USD, {rate:.2f} USD/h): stopped with a checkpoint"
        if exceeded and limit is not None
        else ""
    )
    return BudgetVerdict(exceeded, round(spent, 6), round(projected, 6), limit, round(rate, 6), message)


def _started_at(job: Job, handle: LaunchHandle) -> datetime | None:
    launched = handle.extra.get("launched_at")
    if launched:
        try:
            return datetime.fromtimestamp(float(launched), UTC)
        except ValueError:
            pass
    return job.run_started_at


def _gpus(instance_type: str | None) -> int:
    if not instance_type:
        return 0
    try:
        return spec_for(instance_type).gpus
    except KeyError:
        return 0


def price_attempt(repository: JobRepository, job: Job, attempt: int, run: RunDescription, *, now: datetime) -> None:
    """Price an attempt before its end is decided (the lifecycle's; idempotent per attempt: every reporter may
    call it). Never raises: the cost record must never keep a run's end from being decided."""
    if run.run_seconds is None and run.billable_seconds is None:
        if any(e.attempt == attempt for e in job.cost.attempts):
            return  # an end without timings (lost, timed out) must not erase a priced entry
        if job.run_started_at is not None:
            # No timings reported: the run lasted at most from its launch until now.
            run = replace(run, run_seconds=max((now - job.run_started_at).total_seconds(), 0.0))
    try:
        record_run_cost(repository, job, attempt, run)
    except Exception:
        logger.exception("cost of %s attempt %d not recorded", job.job_id, attempt)


def stop_over_budget(repository: JobRepository, job: Job, verdict: BudgetVerdict, *, stop: Callable[[Job, str], None]) -> None:
    """Stop a run that passed scheduling_config.max_cost_usd (the lifecycle's budget check decided it).

    on_exceed `pause` (the default): the checkpointed pause (pending_action pause, reason BUDGET), so
    the job ends PAUSED and resumes exactly once its limit is raised. `fail`: error_type BUDGET on the running
    job; decide_run_end then ends the run FAILED with it, whichever way the stopped run reports its end."""
    if job.scheduling_config.on_exceed == "pause":
        reason = f"{ErrorType.BUDGET.value}: {verdict.message}"
        try:
            job = repository.update(
                job.job_id, job.version, {"pending_action": PendingAction.PAUSE, "pending_reason": reason}, PAUSABLE, action="pause"
            )
        except (ConcurrentModification, IllegalTransition):
            return  # it moved on since it was read (a pause, a cancel, its end): that writer decided
        stop(job, reason)
        return
    repository.annotate(job.job_id, {"error_type": ErrorType.BUDGET, "error_message": verdict.message})
    stop(job, verdict.message)
