"""The lifecycle engine records each run's cost and stops runs that would pass max_cost_usd (on fakes)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from functions.service import costs
from functions.service.ports import RunDescription, RunState, Transition
from schemas.job import ErrorType
from schemas.status import JobStatus
from schemas.trainer import TrainerEventKind
from tests.unit.test_statemachine_tasks import EXEC, World, event

S = JobStatus
PRICED = "ml.g5.xlarge"  # a GPU instance in the price table


def _on_priced_instance(w: World, job_id: str) -> None:
    """Make the fake launch look like a cloud run on a priced instance (the handle's extra says so)."""
    handle = dict(w.repo.get(job_id).run_handle or {})
    w.repo.annotate(job_id, {"run_handle": {**handle, "instance_type": PRICED, "instance_count": "1"}})


def test_a_finished_local_run_records_its_cost_once_even_if_reported_twice() -> None:
    # Given a local (CPU) job running
    w = World()
    job = w.submit(max_steps=4)
    w.to_training(job.job_id)
    finished = RunDescription(state=RunState.COMPLETED, run_seconds=42.0)
    # When its end is reported twice (the launcher monitor and the reconciler)
    w.svc.on_run_finished(job.job_id, 1, finished)
    w.svc.on_run_finished(job.job_id, 1, finished)
    # Then one cost entry is stored for attempt 1: local compute is free, no GPU-hours
    done = w.repo.get(job.job_id)
    assert done.status == S.COMPLETED
    assert [e.attempt for e in done.cost.attempts] == [1]
    entry = done.cost.attempts[0]
    assert entry.instance_type is None and entry.run_seconds == 42.0
    assert done.cost.gpu_hours == 0.0 and done.cost.estimated_cost_usd == 0.0


def test_a_run_end_without_timings_is_priced_from_its_start_and_never_erases_a_priced_entry() -> None:
    # Given a job on a priced instance whose end was already priced by the cloud event (3600 s)
    w = World()
    job = w.submit(max_steps=4)
    w.to_training(job.job_id)
    _on_priced_instance(w, job.job_id)
    w.now += timedelta(seconds=600)
    priced = costs.record_run_cost(w.repo, w.repo.get(job.job_id), 1, RunDescription(state=RunState.COMPLETED, run_seconds=3600.0))
    assert priced.estimated_cost_usd > 0
    # When the lifecycle hears of the end with no timings (a lost run)
    w.svc.on_run_finished(job.job_id, 1, RunDescription(state=RunState.UNKNOWN, message="lost"))
    # Then the priced entry stands
    assert w.repo.get(job.job_id).cost == priced


def test_a_cancelled_run_s_end_still_prices_its_attempt() -> None:
    # Given a job running for ten minutes on a priced instance, cancelled (the cancel lands before the run's end)
    w = World()
    job = w.submit(max_steps=4)
    w.to_training(job.job_id)
    _on_priced_instance(w, job.job_id)
    w.now += timedelta(seconds=600)
    running = w.repo.get(job.job_id)
    w.repo.transition(Transition(job.job_id, running.version, running.status, S.CANCELLED, "BUDGET: cancelled", "system"))
    # When the stopped run's end is reported
    w.svc.on_run_finished(job.job_id, 1, RunDescription(state=RunState.STOPPED, run_seconds=600.0))
    # Then the attempt is priced (a budget meters what it cost), and the job stays CANCELLED
    done = w.repo.get(job.job_id)
    assert done.status == S.CANCELLED and [e.attempt for e in done.cost.attempts] == [1]
    assert done.cost.attempts[0].run_seconds == 600.0 and done.cost.estimated_cost_usd > 0


def test_a_job_that_would_pass_max_cost_usd_pauses_with_a_checkpoint_by_default() -> None:
    # Given a job with a tiny limit (on_exceed: pause, the default) running for an hour on a priced GPU instance
    w = World()
    job = w.submit(max_steps=100, scheduling_config={"max_cost_usd": 0.01})
    assert job.scheduling_config.on_exceed == "pause"
    w.to_training(job.job_id)
    _on_priced_instance(w, job.job_id)
    w.now += timedelta(hours=1)
    # When the trainer reports progress (twice)
    w.svc.on_trainer_event(job.job_id, 1, event(TrainerEventKind.PROGRESS, step=5, total_steps=100, loss=1.0))
    w.svc.on_trainer_event(job.job_id, 1, event(TrainerEventKind.PROGRESS, step=6, total_steps=100, loss=1.0))
    # Then it takes the checkpointed pause once, reason BUDGET
    asked = w.repo.get(job.job_id)
    assert asked.pending_action == "pause" and asked.pending_reason is not None and asked.pending_reason.startswith("BUDGET: ")
    assert w.tokens.stops == [(job.job_id, True, asked.pending_reason)]
    # And when the stopped run ends with its checkpoint, the job is PAUSED (same id), not FAILED
    w.svc.on_run_finished(job.job_id, 1, RunDescription(state=RunState.STOPPED, message="stopped with a checkpoint", run_seconds=3600.0))
    paused = w.repo.get(job.job_id)
    assert paused.status == S.PAUSED and paused.error_type is None
    assert "max_cost_usd=0.01" in w.repo.history(job.job_id)[-1].reason


@pytest.mark.parametrize("name", ["on_exceed", "max_cost_on_exceed"])  # the field, and its deprecated former name
def test_a_job_that_would_pass_max_cost_usd_is_stopped_gracefully_and_fails_with_budget(name: str) -> None:
    # Given a job with a tiny budget (on_exceed: fail) running for an hour on a priced GPU instance
    w = World()
    job = w.submit(max_steps=100, scheduling_config={"max_cost_usd": 0.01, name: "fail"})
    w.to_training(job.job_id)
    _on_priced_instance(w, job.job_id)
    w.now += timedelta(hours=1)
    # When the trainer reports progress
    w.svc.on_trainer_event(job.job_id, 1, event(TrainerEventKind.PROGRESS, step=5, total_steps=100, loss=1.0))
    # Then the run is asked to stop gracefully (a checkpoint is saved), once
    assert w.tokens.stops == [(job.job_id, True, w.repo.get(job.job_id).error_message)]
    w.svc.on_trainer_event(job.job_id, 1, event(TrainerEventKind.PROGRESS, step=6, total_steps=100, loss=1.0))
    w.svc.on_run_alive(job.job_id, 1)
    assert len(w.tokens.stops) == 1
    # And when the stopped run ends with its checkpoint, the job FAILED with BUDGET and the reason
    w.svc.on_run_finished(job.job_id, 1, RunDescription(state=RunState.STOPPED, message="stopped with a checkpoint", run_seconds=3600.0))
    failed = w.repo.get(job.job_id)
    assert failed.status == S.FAILED and failed.error_type == ErrorType.BUDGET
    assert failed.error_message is not None and "max_cost_usd=0.01" in failed.error_message
    assert failed.retries_used == 0 and failed.preemptions == 0
    assert w.tokens.answers[-1] == (f"run-{job.job_id}", {"next": "failed"})
    assert failed.cost.estimated_cost_usd > 0.01
    assert w.svc.admit(job.job_id, EXEC) == {"next": "ended"}


def test_a_job_without_max_cost_usd_is_never_stopped_for_its_cost() -> None:
    # Given a job with no budget running for a long time on a priced GPU instance
    w = World()
    job = w.submit(max_steps=100)
    w.to_training(job.job_id)
    _on_priced_instance(w, job.job_id)
    w.now += timedelta(days=30)
    # When it reports progress and is seen alive
    w.svc.on_trainer_event(job.job_id, 1, event(TrainerEventKind.PROGRESS, step=5, total_steps=100, loss=1.0))
    w.svc.on_run_alive(job.job_id, 1)
    # Then nothing stops it, and its end decides as usual
    assert w.tokens.stops == []
    w.svc.on_run_finished(job.job_id, 1, RunDescription(state=RunState.COMPLETED, run_seconds=30 * 86400.0))
    assert w.repo.get(job.job_id).status == S.COMPLETED


def test_a_budgeted_cpu_job_costs_nothing_and_is_never_stopped() -> None:
    # Given a local CPU job with a tiny budget (local compute is free)
    w = World()
    job = w.submit(max_steps=100, scheduling_config={"max_cost_usd": 0.01})
    w.to_training(job.job_id)
    w.now += timedelta(days=1)
    # When it is seen alive
    w.svc.on_run_alive(job.job_id, 1)
    # Then it keeps running
    assert w.tokens.stops == [] and w.repo.get(job.job_id).status == S.TRAINING
