"""Job cost (functions/service/costs.py): per-attempt pricing, idempotent totals, the max_cost_usd guard."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from functions.adapters.launchers.sagemaker import describe_training_job
from functions.service import costs
from functions.service.ports import LaunchHandle, RunDescription, RunState
from schemas.job import AttemptCost, Cost, StatusEvent
from schemas.status import JobStatus
from tests.cloud_fixtures import load_event
from tests.fakes import InMemoryJobRepository
from tests.lifecycle_support import make_job, make_request

NOW = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


def test_sagemaker_spot_uses_sagemakers_own_billable_time() -> None:
    # Given a finished managed-spot run on two p5 nodes: 10800 s of training, 3240 s billed
    run = describe_training_job(load_event("sagemaker_describe_completed_spot"))
    # When priced
    entry = costs.attempt_cost(2, run)
    # Then the cost is the billed seconds, the saving the seconds SageMaker did not bill, GPU-hours the run
    rate = 63.30
    assert entry.estimated_cost_usd == pytest.approx(3240 * 2 * rate / 3600, abs=1e-5)
    assert entry.spot_savings_usd == pytest.approx((10800 - 3240) * 2 * rate / 3600, abs=1e-5)
    assert entry.gpu_hours == pytest.approx(10800 * 8 * 2 / 3600)
    assert (entry.billable_seconds, entry.instance_type, entry.spot) == (6480.0, "ml.p5.48xlarge", True)


def test_ec2_spot_is_estimated_with_the_typical_discount_and_on_demand_in_full() -> None:
    # Given one hour on a g5.xlarge, once spot and once on demand
    spot = costs.attempt_cost(1, RunDescription(RunState.COMPLETED, run_seconds=3600.0, instance_type="g5.xlarge", spot=True))
    on_demand = costs.attempt_cost(1, RunDescription(RunState.COMPLETED, run_seconds=3600.0, instance_type="g5.xlarge"))
    # Then spot costs 35 % of on demand and saves the rest
    assert spot.estimated_cost_usd == pytest.approx(1.006 * 0.35, abs=1e-6)
    assert spot.spot_savings_usd == pytest.approx(1.006 * 0.65, abs=1e-6)
    assert (on_demand.estimated_cost_usd, on_demand.spot_savings_usd, on_demand.gpu_hours) == (pytest.approx(1.006), 0.0, 1.0)


def test_the_launch_handle_fills_in_what_the_description_lacks_and_local_is_free() -> None:
    # Given a description without an instance type (instance gone), and a local run
    handle = LaunchHandle("ec2", "i-1", 1, {"instance_type": "p4d.24xlarge", "instance_count": "1", "spot": "false"})
    lost = costs.attempt_cost(1, RunDescription(RunState.PREEMPTED, run_seconds=1800.0), handle=handle)
    local = costs.attempt_cost(1, RunDescription(RunState.COMPLETED, run_seconds=1800.0), handle=LaunchHandle("local", "42", 1))
    # Then the handle's type prices the first; the local run costs nothing
    assert lost.estimated_cost_usd == pytest.approx(21.96 / 2, abs=1e-5) and lost.gpu_hours == pytest.approx(4.0)
    assert (local.estimated_cost_usd, local.gpu_hours, local.instance_type) == (0.0, 0.0, None)


def test_totals_sum_attempts_and_recording_an_attempt_again_changes_nothing() -> None:
    # Given two attempts, the second recorded twice
    first = AttemptCost(attempt=1, instance_type="g5.xlarge", billable_seconds=100, gpu_hours=0.5, estimated_cost_usd=1.0)
    second = AttemptCost(
        attempt=2, instance_type="g6.xlarge", billable_seconds=200, gpu_hours=1, estimated_cost_usd=2.5, spot_savings_usd=1
    )
    cost = costs.with_attempt(costs.with_attempt(costs.with_attempt(Cost(), first), second), second)
    # Then each attempt counts once, the latest type shows
    assert (cost.estimated_cost_usd, cost.gpu_hours, cost.billable_seconds, cost.spot_savings_usd) == (3.5, 1.5, 300.0, 1.0)
    assert cost.instance_type == "g6.xlarge" and [a.attempt for a in cost.attempts] == [1, 2]


def _running_job(handle_extra: dict[str, str], *, limit: float | None, previous: float = 0.0, attempt: int = 2):  # type: ignore[no-untyped-def]
    job = make_job(make_request(scheduling_config={"max_cost_usd": limit} if limit else {}))
    cost = costs.with_attempt(Cost(), AttemptCost(attempt=1, estimated_cost_usd=previous)) if previous else Cost()
    return job.model_copy(
        update={
            "status": JobStatus.TRAINING,
            "attempt": attempt,
            "cost": cost,
            "run_handle": LaunchHandle("sagemaker", "tp-x-a2", attempt, handle_extra).to_dict(),
        }
    )


def test_the_budget_guard_projects_the_next_interval_at_the_current_rate() -> None:
    # Given a job on one on-demand ml.p5.48xlarge for 30 minutes, 10 USD spent by its first attempt
    launched = str((NOW - timedelta(minutes=30)).timestamp())
    extra = {"instance_type": "ml.p5.48xlarge", "instance_count": "1", "spot": "false", "launched_at": launched}
    tight = _running_job(extra, limit=60.0, previous=10.0)
    loose = _running_job(extra, limit=500.0, previous=10.0)
    unlimited = _running_job(extra, limit=None, previous=10.0)
    # When checked with an hour until the next check
    verdict = costs.check_budget(tight, interval_seconds=3600, now=NOW)
    # Then spent = 10 + half an hour, projected adds an hour: past 60 -> stop, with a message naming the field
    assert verdict.spent_usd == pytest.approx(10 + 63.30 / 2, abs=1e-4)
    assert verdict.projected_usd == pytest.approx(10 + 63.30 * 1.5, abs=1e-4)
    assert verdict.exceeded and "max_cost_usd=60.00" in verdict.message
    assert not costs.check_budget(loose, interval_seconds=3600, now=NOW).exceeded
    assert not costs.check_budget(unlimited, interval_seconds=3600, now=NOW).exceeded


def test_the_budget_guard_counts_spot_at_the_discount_and_ignores_jobs_not_running() -> None:
    extra = {"instance_type": "ml.g5.xlarge", "instance_count": "4", "spot": "true", "launched_at": str(NOW.timestamp())}
    job = _running_job(extra, limit=1.0)
    verdict = costs.check_budget(job, interval_seconds=3600, now=NOW)
    assert verdict.hourly_usd == pytest.approx(4 * 1.408 * 0.30, abs=1e-6) and verdict.exceeded
    paused = job.model_copy(update={"status": JobStatus.PAUSED})
    assert costs.check_budget(paused, interval_seconds=3600, now=NOW).exceeded is False


def test_record_run_cost_writes_once_per_attempt() -> None:
    # Given a stored job whose attempt 1 ran on SageMaker
    repo = InMemoryJobRepository()
    job = make_job(make_request())
    repo.create(job, StatusEvent(at=job.created_at, to_status=JobStatus.PENDING))
    run = describe_training_job(load_event("sagemaker_describe_failed_oom"))
    # When its end is recorded twice (event + reconciler)
    first = costs.record_run_cost(repo, repo.get(job.job_id), 1, run)
    second = costs.record_run_cost(repo, repo.get(job.job_id), 1, run)
    # Then the job shows the cost of 600 billable seconds of ml.g5.xlarge, once
    stored = repo.get(job.job_id).cost
    assert first == second == stored
    assert stored.estimated_cost_usd == pytest.approx(600 * 1.408 / 3600, abs=1e-5) and len(stored.attempts) == 1
