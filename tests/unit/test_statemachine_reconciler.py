"""The reconciler on fakes: missed run ends, lost executions, waiting jobs without one, orphan claims."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from functions.service.ports import RunDescription, RunState, Transition
from functions.service.reconciler import Reconciler
from schemas.job import PendingAction
from schemas.status import JobStatus
from tests.unit.test_statemachine_tasks import EXEC, World

S = JobStatus


class Executions:
    def __init__(self, alive: set[str] | None = None) -> None:
        self.alive = set(alive or ())
        self.started: list[tuple[str, str | None]] = []

    def execution_running(self, arn: str | None) -> bool:
        return arn in self.alive

    def start(self, job: Any, *, before_start: Any = None) -> str:
        arn = f"{EXEC}-new-{len(self.started)}"
        recorded = None
        if before_start is not None:
            before_start(arn)
            recorded = arn
        self.started.append((job.job_id, recorded))
        self.alive.add(arn)
        return arn


def _reconciler(w: World, executions: Executions, grace: float = 60.0) -> Reconciler:
    return Reconciler(w.repo, w.svc, executions, {"local": w.launcher}, grace_seconds=grace, clock=lambda: w.now)


def test_an_idle_deployment_costs_one_read() -> None:
    w = World()
    calls: list[Any] = []
    w.repo.list_jobs = lambda query: calls.append(query) or ([], None)  # type: ignore[method-assign]
    assert _reconciler(w, Executions()).run_once().restarted == []
    assert calls == []


def test_a_missed_run_end_is_reported_and_its_live_execution_carries_on() -> None:
    w = World()
    job = w.submit()
    w.to_training(job.job_id)
    w.launcher.state = RunState.COMPLETED
    report = _reconciler(w, Executions({EXEC})).run_once()
    assert report.reported_ends == [job.job_id] and report.restarted == []
    assert w.repo.get(job.job_id).status == S.COMPLETED
    assert w.tokens.answers[-1] == (f"run-{job.job_id}", {"next": "completed"})


def test_a_running_job_whose_execution_is_gone_is_stopped_preempted_and_resumed_by_a_new_execution() -> None:
    w = World()
    job = w.submit()
    w.to_training(job.job_id)
    executions = Executions()  # nothing alive: e.g. `trainplane up` restarted
    report = _reconciler(w, executions).run_once(startup=True)
    assert report.preempted == [job.job_id] and w.launcher.stopped == [("1001", True)]
    resumed = w.repo.get(job.job_id)
    assert resumed.status == S.PREEMPTED and resumed.preemptions == 1 and resumed.run_outcome == "resume_preempted"
    # the new execution was recorded on the job before it started (its first task must find itself current)
    assert executions.started == [(job.job_id, f"{EXEC}-new-0")] and resumed.execution_arn == f"{EXEC}-new-0"
    assert w.svc.admit(job.job_id, f"{EXEC}-new-0") == {"next": "wait_capacity"}


def test_waiting_jobs_get_an_execution_only_once_settled_or_at_startup() -> None:
    w = World()
    pending = w.submit()
    paused = w.submit()
    w.to_training(paused.job_id)
    w.repo.update(paused.job_id, w.repo.get(paused.job_id).version, {"pending_action": PendingAction.PAUSE})
    from functions.service.ports import RunDescription

    w.svc.on_run_finished(paused.job_id, 1, RunDescription(state=RunState.STOPPED))
    executions = Executions()
    w.now = w.repo.get(paused.job_id).updated_at  # both just changed
    assert _reconciler(w, executions).run_once().restarted == []
    w.now += timedelta(seconds=61)
    assert sorted(_reconciler(w, executions).run_once().restarted) == sorted([pending.job_id, paused.job_id])
    # a PAUSED job's new execution goes to wait for its resume, it is not re-queued
    assert w.svc.admit(paused.job_id, w.repo.get(paused.job_id).execution_arn) == {"next": "paused"}


def test_a_preempted_job_with_its_budget_spent_is_left_alone() -> None:
    w = World(max_preemptions=0)
    job = w.submit()
    w.to_training(job.job_id)
    from functions.service.ports import RunDescription

    w.svc.on_run_finished(job.job_id, 1, RunDescription(state=RunState.PREEMPTED))
    assert w.repo.get(job.job_id).status == S.PREEMPTED
    assert _reconciler(w, Executions()).run_once(startup=True).restarted == []


def test_orphan_claims_are_released_on_the_second_sweep_and_live_runs_get_a_heartbeat() -> None:
    w = World(cpu_slots=2)
    job = w.submit()
    w.to_training(job.job_id)
    w.ledger.claim("local/cpu", "ghost", 1, 2)
    reconciler = _reconciler(w, Executions({EXEC}))
    first = reconciler.run_once()
    assert first.released == [] and first.heartbeats == 1 and w.tokens.heartbeats == [f"run-{job.job_id}"]
    assert reconciler.run_once().released == ["ghost"]
    assert w.ledger.holders("local/cpu") == {job.job_id: 1}


def test_a_claim_of_a_job_that_is_being_scheduled_is_not_an_orphan() -> None:
    w = World()
    job = w.submit()
    w.svc.admit(job.job_id, EXEC)
    w.ledger.claim("local/cpu", job.job_id, 1, 1)  # a pass claimed, its QUEUED -> SCHEDULING not yet written
    reconciler = _reconciler(w, Executions({EXEC}))
    reconciler.run_once()
    current = w.repo.get(job.job_id)
    w.repo.transition(Transition(job.job_id, current.version, S.QUEUED, S.SCHEDULING, "go", changes={"capacity_pool": "local/cpu"}))
    assert reconciler.run_once().released == []


def test_a_run_this_control_plane_does_not_know_is_stopped_before_it_is_preempted() -> None:
    w = World()
    job = w.submit()
    w.to_training(job.job_id)
    w.launcher.state = RunState.UNKNOWN  # e.g. a trainer left behind by a `trainplane up` killed with -9
    report = _reconciler(w, Executions()).run_once(startup=True)
    assert report.reported_ends == [job.job_id] and report.restarted == [job.job_id]
    assert w.launcher.stopped == [("1001", True)]
    assert w.repo.get(job.job_id).status == S.PREEMPTED


def test_a_running_job_whose_reports_stopped_is_caught_up_from_s3() -> None:
    import json

    from schemas.checkpoint import CheckpointManifest

    w = World()
    job = w.submit()
    w.to_training(job.job_id)
    # Given a live run that wrote two checkpoints and metrics to S3, none of which was reported
    for step in (2, 4):
        manifest = CheckpointManifest(checkpoint_id=f"step-{step:06d}", job_id=job.job_id, step=step, files=[], created_at=w.now)
        w.artifacts.objects[f"jobs/{job.job_id}/checkpoints/step-{step:06d}/manifest.json"] = manifest.model_dump_json().encode()
    w.artifacts.objects[f"jobs/{job.job_id}/metrics.jsonl"] = "\n".join(
        json.dumps({"step": s, "loss": 1.0 / s, "attempt": 1}) for s in range(1, 6)
    ).encode()
    reconciler = _reconciler(w, Executions({EXEC}))
    # When a sweep comes within the grace period of the run's start, nothing is read yet
    assert reconciler.run_once().caught_up == []
    # When reports have been missing for longer than the grace period
    w.now += timedelta(seconds=61)
    report = reconciler.run_once()
    # Then the record has what S3 holds; the job keeps running
    caught = w.repo.get(job.job_id)
    assert report.caught_up == [job.job_id] and report.heartbeats == 1
    assert [r.checkpoint_id for r in caught.checkpoints] == ["step-000002", "step-000004"] and caught.latest_checkpoint_id == "step-000004"
    assert (caught.progress.step, caught.progress.attempt, caught.status) == (5, 1, S.TRAINING)
    # And a sweep that finds nothing new changes nothing
    w.now += timedelta(seconds=61)
    assert reconciler.run_once().caught_up == []


def test_a_resumed_job_being_scheduled_is_not_ended_again_by_its_paused_runs_handle() -> None:
    # Given a job paused (its run stopped with a checkpoint), resumed, and granted capacity again: SCHEDULING,
    # still at the paused attempt and carrying that run's handle until prepare() opens the next attempt
    w = World()
    job = w.submit()
    w.to_training(job.job_id)
    w.repo.update(job.job_id, w.repo.get(job.job_id).version, {"pending_action": PendingAction.PAUSE})
    w.svc.on_run_finished(job.job_id, 1, RunDescription(state=RunState.STOPPED))
    w.repo.transition(Transition(job.job_id, w.repo.get(job.job_id).version, S.PAUSED, S.QUEUED, "resume", "user"))
    assert w.svc.wait_capacity(job.job_id, EXEC, "cap-again") == {"next": "waiting"}
    scheduled = w.repo.get(job.job_id)
    assert scheduled.status == S.SCHEDULING and scheduled.run_handle and scheduled.attempt == 1
    # When a sweep runs while the launcher still describes that paused run as stopped
    w.launcher.state = RunState.STOPPED
    report = _reconciler(w, Executions({EXEC})).run_once()
    # Then the old run's end is not reported again: the job goes on to its next attempt, not PREEMPTED
    assert report.reported_ends == [] and report.preempted == []
    assert w.repo.get(job.job_id).status == S.SCHEDULING
    assert w.svc.prepare(job.job_id, EXEC) == {"next": "launch"}
