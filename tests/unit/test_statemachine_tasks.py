"""The state machine's tasks and the run reports (functions/service/lifecycle.py, run_reports.py) on in-memory fakes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from functions import composition
from functions.errors import ConcurrentModification
from functions.handlers import lifecycle as handler
from functions.service.lifecycle import LifecycleConfig, LifecycleService, TransientError
from functions.service.lifecycle_outcomes import decide_run_end
from functions.service.ports import LaunchHandle, LaunchRequest, RunDescription, RunState
from functions.service.scheduler import LocalCapacity, Scheduler
from schemas.job import ErrorType, Job, PendingAction
from schemas.status import JobStatus
from schemas.trainer import RunSpec, TrainerEvent, TrainerEventKind
from tests.fakes import InMemoryArtifactStore, InMemoryJobRepository
from tests.lifecycle_support import InMemoryLedger, make_job, make_request

S = JobStatus
EXEC = "arn:aws:states:us-east-1:123456789012:execution:lifecycle:one"


class FakeLauncher:
    name = "local"

    def __init__(self) -> None:
        self.launched: list[LaunchRequest] = []
        self.stopped: list[tuple[str, bool]] = []
        self.state = RunState.RUNNING

    def launch(self, request: LaunchRequest) -> LaunchHandle:
        self.launched.append(request)
        return LaunchHandle("local", str(1000 + len(self.launched)), request.attempt, {"job_id": request.job_id})

    def stop(self, handle: LaunchHandle, *, graceful: bool = True) -> None:
        self.stopped.append((handle.run_id, graceful))

    def describe(self, handle: LaunchHandle) -> RunDescription:
        return RunDescription(state=self.state)


class FakeTokens:
    def __init__(self) -> None:
        self.answers: list[tuple[str, dict[str, Any]]] = []
        self.heartbeats: list[str] = []
        self.stops: list[tuple[str, bool, str]] = []

    def send_success(self, token: str, output: Any) -> bool:
        self.answers.append((token, dict(output)))
        return True

    def send_heartbeat(self, token: str) -> bool:
        self.heartbeats.append(token)
        return True

    def stop_run(self, job: Job, *, graceful: bool, reason: str) -> None:
        self.stops.append((job.job_id, graceful, reason))


class World:
    def __init__(self, *, cpu_slots: int = 1, gpu_slots: int = 0, max_preemptions: int = 2) -> None:
        self.repo = InMemoryJobRepository()
        self.artifacts = InMemoryArtifactStore()
        self.launcher = FakeLauncher()
        self.tokens = FakeTokens()
        self.ledger = InMemoryLedger()
        self.scheduler = Scheduler(
            self.repo, self.ledger, LocalCapacity(gpu_slots=gpu_slots, cpu_slots=cpu_slots), self.tokens, self.tokens
        )
        self.now = datetime(2026, 1, 1, tzinfo=UTC)
        self.svc = LifecycleService(
            self.repo,
            self.artifacts,
            {"local": self.launcher},
            self.tokens,
            self.tokens,
            self.scheduler,
            LifecycleConfig(bucket="bkt", heartbeat_seconds=40, max_preemptions=max_preemptions),
            clock=lambda: self.now,
        )

    def submit(self, **kwargs: Any) -> Job:
        job = make_job(make_request(**kwargs))
        from schemas.job import StatusEvent

        self.repo.create(job, StatusEvent(at=job.created_at, to_status=S.PENDING, reason="submitted"))
        self.repo.annotate(job.job_id, {"execution_arn": EXEC})
        return job

    def to_training(self, job_id: str) -> Job:
        assert self.svc.admit(job_id, EXEC) == {"next": "wait_capacity"}
        assert self.svc.wait_capacity(job_id, EXEC, f"cap-{job_id}") == {"next": "waiting"}
        assert self.tokens.answers[-1] == (f"cap-{job_id}", {"next": "go"})
        assert self.svc.prepare(job_id, EXEC) == {"next": "launch"}
        out = self.svc.launch(job_id, EXEC)
        assert out["next"] == "wait"
        assert self.svc.wait_run(job_id, EXEC, f"run-{job_id}") == {"next": "waiting"}
        return self.repo.get(job_id)

    def statuses(self, job_id: str) -> list[str]:
        return [e.to_status.value for e in self.repo.history(job_id)]


def event(kind: TrainerEventKind, **data: Any) -> TrainerEvent:
    return TrainerEvent(kind=kind, time=0.0, data=data)


def test_happy_path_writes_run_spec_launches_and_completes() -> None:
    w = World()
    job = w.submit(max_steps=4)
    # When the tasks run in order and the trainer reports
    training = w.to_training(job.job_id)
    w.svc.on_trainer_event(job.job_id, 1, event(TrainerEventKind.PHASE, phase="CHECKPOINTING"))
    w.svc.on_trainer_event(
        job.job_id, 1, event(TrainerEventKind.CHECKPOINT, checkpoint_id="step-000002", step=2, metrics={"loss": 0.5}, uri="s3://bkt/x")
    )
    w.svc.on_trainer_event(job.job_id, 1, event(TrainerEventKind.PHASE, phase="TRAINING"))
    w.svc.on_trainer_event(job.job_id, 1, event(TrainerEventKind.PROGRESS, step=3, total_steps=4, loss=0.4))
    w.svc.on_run_finished(job.job_id, 1, RunDescription(state=RunState.COMPLETED))
    # Then the job walked the lifecycle, with its run spec, run handle, checkpoint and progress
    done = w.repo.get(job.job_id)
    assert done.status == S.COMPLETED
    assert w.statuses(job.job_id) == ["PENDING", "QUEUED", "SCHEDULING", "PREPARING", "TRAINING", "CHECKPOINTING", "TRAINING", "COMPLETED"]
    spec = RunSpec.model_validate_json(w.artifacts.objects[f"jobs/{job.job_id}/config/run-001.json"])
    assert spec.attempt == 1 and spec.checkpoint_uri == f"s3://bkt/jobs/{job.job_id}/checkpoints" and spec.resume_from is None
    assert training.run_handle == {"launcher": "local", "run_id": "1001", "attempt": "1", "job_id": job.job_id}
    assert w.launcher.launched[0].run_spec_uri == f"s3://bkt/jobs/{job.job_id}/config/run-001.json"
    assert done.latest_checkpoint_id == "step-000002" and done.progress.step == 3 and done.progress.percent == 75.0
    # And the run's wait was answered once, the capacity given back
    assert w.tokens.answers[-1] == (f"run-{job.job_id}", {"next": "completed"})
    assert w.ledger.holders("local/cpu") == {}


def test_every_job_status_is_reachable_through_the_tasks_and_verbs() -> None:
    seen: set[str] = set()
    # completed, through every run phase
    w = World(max_preemptions=0)
    a = w.submit()
    w.to_training(a.job_id)
    for phase in ("CHECKPOINTING", "EVALUATING", "EXPORTING"):
        w.svc.on_trainer_event(a.job_id, 1, event(TrainerEventKind.PHASE, phase=phase))
    w.svc.on_run_finished(a.job_id, 1, RunDescription(state=RunState.COMPLETED))
    seen |= set(w.statuses(a.job_id))
    # paused, then failed; and preempted (budget 0)
    b = w.submit()
    w.to_training(b.job_id)
    job = w.repo.get(b.job_id)
    w.repo.update(b.job_id, job.version, {"pending_action": PendingAction.PAUSE})
    w.svc.on_run_finished(b.job_id, 1, RunDescription(state=RunState.STOPPED))
    seen |= set(w.statuses(b.job_id))
    c = w.submit()
    w.to_training(c.job_id)
    w.svc.on_run_finished(c.job_id, 1, RunDescription(state=RunState.PREEMPTED))
    seen |= set(w.statuses(c.job_id))
    d = w.submit()
    w.to_training(d.job_id)
    w.svc.on_run_finished(d.job_id, 1, RunDescription(state=RunState.FAILED, error_type=ErrorType.DATA_ERROR, message="bad"))
    seen |= set(w.statuses(d.job_id))
    # cancelled (the API's verb) from PENDING
    from functions.service.ports import Transition

    e = w.submit()
    w.repo.transition(Transition(e.job_id, 1, S.PENDING, S.CANCELLED, "cancel", "user"))
    seen |= set(w.statuses(e.job_id))
    assert seen == {s.value for s in JobStatus}


def test_run_that_ends_before_its_wait_starts_is_answered_by_the_wait_itself() -> None:
    w = World()
    job = w.submit()
    w.svc.admit(job.job_id, EXEC)
    w.svc.wait_capacity(job.job_id, EXEC, "cap")
    w.svc.prepare(job.job_id, EXEC)
    w.svc.launch(job.job_id, EXEC)
    # When the run completes before WaitForRun stored its token
    w.svc.on_run_finished(job.job_id, 1, RunDescription(state=RunState.COMPLETED))
    assert w.repo.get(job.job_id).status == S.COMPLETED
    # Then the wait answers its own token with the decided outcome
    assert w.svc.wait_run(job.job_id, EXEC, "late") == {"next": "answered"}
    assert w.tokens.answers[-1] == ("late", {"next": "completed"})


def test_waits_that_start_after_their_answer_answer_themselves() -> None:
    from functions.service.ports import Transition

    w = World()
    job = w.submit()
    w.svc.admit(job.job_id, EXEC)
    # Given a cancel that landed before the capacity token was stored
    w.repo.transition(Transition(job.job_id, w.repo.get(job.job_id).version, S.QUEUED, S.CANCELLED, "cancel", "user"))
    # Then the capacity wait ends at once
    assert w.svc.wait_capacity(job.job_id, EXEC, "cap") == {"next": "answered"}
    assert w.tokens.answers[-1] == ("cap", {"next": "ended"})
    # Given a job paused and already resumed before its resume wait began
    p = w.submit()
    w.to_training(p.job_id)
    w.repo.update(p.job_id, w.repo.get(p.job_id).version, {"pending_action": PendingAction.PAUSE})
    w.svc.on_run_finished(p.job_id, 1, RunDescription(state=RunState.STOPPED))
    w.repo.transition(Transition(p.job_id, w.repo.get(p.job_id).version, S.PAUSED, S.QUEUED, "resume", "user"))
    assert w.svc.wait_resume(p.job_id, EXEC, "res") == {"next": "answered"}
    assert w.tokens.answers[-1] == ("res", {"next": "resume"})


def test_gpu_job_on_a_machine_without_gpus_fails_with_a_clear_reason() -> None:
    w = World(gpu_slots=0)
    job = w.submit(resource_config={"gpu_count": 1})
    w.svc.admit(job.job_id, EXEC)
    # When it waits for capacity it can never get
    w.svc.wait_capacity(job.job_id, EXEC, "cap")
    # Then it FAILED with CAPACITY naming the field to change, and its wait was answered "failed"
    failed = w.repo.get(job.job_id)
    assert failed.status == S.FAILED and failed.error_type == ErrorType.CAPACITY
    assert "resource_config.gpu_count" in (failed.error_message or "")
    assert w.tokens.answers[-1] == ("cap", {"next": "failed"})


def test_stale_duplicate_and_late_reports_change_nothing() -> None:
    w = World()
    job = w.submit()
    w.to_training(job.job_id)
    w.svc.on_run_finished(job.job_id, 1, RunDescription(state=RunState.COMPLETED))
    writes, answers = w.repo.writes, len(w.tokens.answers)
    # When the same end is reported again, an old attempt reports, and events arrive after the end
    w.svc.on_run_finished(job.job_id, 1, RunDescription(state=RunState.FAILED, message="late"))
    w.svc.on_run_finished(job.job_id, 0, RunDescription(state=RunState.PREEMPTED))
    w.svc.on_trainer_event(job.job_id, 1, event(TrainerEventKind.PHASE, phase="EVALUATING"))
    w.svc.on_trainer_event(job.job_id, 7, event(TrainerEventKind.PROGRESS, step=99))
    # Then the job is unchanged and nobody was answered twice
    assert w.repo.get(job.job_id).status == S.COMPLETED and w.repo.writes == writes
    # (a duplicate end may re-deliver the same decision; an answered token ignores it)
    assert all(answer == (f"run-{job.job_id}", {"next": "completed"}) for answer in w.tokens.answers[answers:])


def test_a_superseded_execution_ends_without_touching_the_job() -> None:
    w = World()
    job = w.submit()
    assert w.svc.admit(job.job_id, EXEC + "-old") == {"next": "ended"}
    assert w.repo.get(job.job_id).status == S.PENDING


def test_prepare_resolves_the_checkpoint_to_start_from() -> None:
    w = World()
    # A checkpoint URI (a retry child starting from its parent's checkpoint) is passed through
    child = w.submit(training_config={"resume_from_checkpoint": "s3://bkt/jobs/parent/checkpoints/step-000004"})
    w.svc.admit(child.job_id, EXEC)
    w.svc.wait_capacity(child.job_id, EXEC, "cap")
    w.svc.prepare(child.job_id, EXEC)
    spec = RunSpec.model_validate_json(w.artifacts.objects[f"jobs/{child.job_id}/config/run-001.json"])
    assert spec.resume_from == "s3://bkt/jobs/parent/checkpoints/step-000004"
    # An id the job does not have is a clear failure naming the field
    w.svc.on_run_finished(child.job_id, 1, RunDescription(state=RunState.COMPLETED))
    bad = w.submit(training_config={"resume_from_checkpoint": "step-000123"})
    w.svc.admit(bad.job_id, EXEC)
    w.svc.wait_capacity(bad.job_id, EXEC, "cap2")
    assert w.svc.prepare(bad.job_id, EXEC) == {"next": "failed"}
    failed = w.repo.get(bad.job_id)
    assert failed.error_type == ErrorType.USER_ERROR and "training_config.resume_from_checkpoint" in (failed.error_message or "")
    assert w.ledger.holders("local/cpu") == {}


def test_resume_from_a_named_checkpoint_uses_its_uri() -> None:
    w = World()
    job = w.submit()
    w.to_training(job.job_id)
    w.svc.on_trainer_event(
        job.job_id, 1, event(TrainerEventKind.CHECKPOINT, checkpoint_id="step-000002", step=2, uri="s3://bkt/c/step-000002")
    )
    w.svc.on_trainer_event(
        job.job_id, 1, event(TrainerEventKind.CHECKPOINT, checkpoint_id="step-000004", step=4, uri="s3://bkt/c/step-000004")
    )
    w.repo.update(job.job_id, w.repo.get(job.job_id).version, {"pending_action": PendingAction.PAUSE})
    w.svc.on_run_finished(job.job_id, 1, RunDescription(state=RunState.STOPPED))
    from functions.service.ports import Transition

    w.repo.transition(
        Transition(
            job.job_id, w.repo.get(job.job_id).version, S.PAUSED, S.QUEUED, "resume", "user", {"resume_checkpoint_id": "step-000002"}
        )
    )
    w.svc.admit(job.job_id, EXEC)
    w.svc.wait_capacity(job.job_id, EXEC, "cap2")
    w.svc.prepare(job.job_id, EXEC)
    spec = RunSpec.model_validate_json(w.artifacts.objects[f"jobs/{job.job_id}/config/run-002.json"])
    # The checkpoint's URI is the one under the job's own prefix, never what the event reported
    # (a custom script can print any event: docs/SECURITY.md).
    assert spec.attempt == 2 and spec.resume_from == f"s3://bkt/jobs/{job.job_id}/checkpoints/step-000002"


@pytest.mark.parametrize(
    ("state", "pending", "kwargs", "expected"),
    [
        (RunState.COMPLETED, PendingAction.PAUSE, {}, (S.COMPLETED, "completed")),
        (RunState.STOPPED, PendingAction.PAUSE, {}, (S.PAUSED, "paused")),
        (RunState.STOPPED, PendingAction.PREEMPT, {}, (S.QUEUED, "requeue")),
        (RunState.STOPPED, None, {}, (S.PREEMPTED, "resume_preempted")),
        (RunState.UNKNOWN, PendingAction.PAUSE, {}, (S.PAUSED, "paused")),
        (RunState.PREEMPTED, PendingAction.PREEMPT, {}, (S.PREEMPTED, "resume_preempted")),
        (RunState.FAILED, None, {"error_type": ErrorType.OUT_OF_MEMORY}, (S.QUEUED, "requeue")),
        (RunState.FAILED, None, {"error_type": ErrorType.TIMEOUT}, (S.FAILED, "failed")),
    ],
)
def test_run_end_decisions(state: RunState, pending: PendingAction | None, kwargs: dict[str, Any], expected: tuple[JobStatus, str]) -> None:
    job = make_job(make_request(training_config={"max_retries": 1})).model_copy(update={"status": S.TRAINING, "pending_action": pending})
    decision = decide_run_end(job, RunDescription(state=state, message="m", **kwargs), max_preemptions=1)
    assert (decision.status, decision.next) == expected


def test_preemption_budget_and_retry_budget_are_separate() -> None:
    job = make_job(make_request()).model_copy(update={"status": S.TRAINING, "preemptions": 1, "retries_used": 0})
    spent = decide_run_end(job, RunDescription(state=RunState.PREEMPTED), max_preemptions=1)
    assert (spent.status, spent.next) == (S.PREEMPTED, "ended") and "budget" in spent.changes["error_message"]
    assert "retries_used" not in spent.changes


def test_run_timeout_past_max_runtime_fails_with_timeout_and_stops_the_run() -> None:
    w = World()
    job = w.submit(scheduling_config={"max_runtime_seconds": 60})
    w.to_training(job.job_id)
    w.now += timedelta(seconds=61)
    assert w.svc.run_timeout(job.job_id, EXEC) == {"next": "failed"}
    failed = w.repo.get(job.job_id)
    assert failed.error_type == ErrorType.TIMEOUT and w.tokens.stops[-1][0] == job.job_id


def test_run_timeout_within_runtime_waits_again_or_recovers_a_lost_run() -> None:
    w = World()
    job = w.submit(scheduling_config={"max_runtime_seconds": 600})
    w.to_training(job.job_id)
    w.now += timedelta(seconds=100)
    # A missed heartbeat while the run is alive: wait again, for the remaining time plus grace
    again = w.svc.run_timeout(job.job_id, EXEC)
    assert again["next"] == "wait" and 500 + 120 <= again["timeout_seconds"] <= 500 + 120 + 300 and again["heartbeat_seconds"] == 40
    # The run is gone: PREEMPTED and resumed
    w.launcher.state = RunState.UNKNOWN
    assert w.svc.run_timeout(job.job_id, EXEC) == {"next": "resume_preempted"}
    assert w.repo.get(job.job_id).status == S.PREEMPTED


def test_crash_fails_the_job_and_frees_its_capacity() -> None:
    w = World()
    job = w.submit()
    w.to_training(job.job_id)
    assert w.svc.crash(job.job_id, EXEC, {"Error": "States.Runtime", "Cause": "boom"}) == {"next": "failed"}
    failed = w.repo.get(job.job_id)
    assert failed.error_type == ErrorType.INTERNAL and "States.Runtime" in (failed.error_message or "")
    assert w.ledger.holders("local/cpu") == {} and w.tokens.stops[-1][1] is False


def test_progress_heartbeats_are_rate_limited() -> None:
    w = World()
    job = w.submit()
    w.to_training(job.job_id)
    writes: list[int] = []
    real = w.repo.record_progress
    w.repo.record_progress = lambda job_id, progress: (writes.append(progress.step), real(job_id, progress))  # type: ignore[method-assign]
    for step in range(1, 21):
        w.svc.on_trainer_event(job.job_id, 1, event(TrainerEventKind.PROGRESS, step=step, total_steps=20))
    assert w.tokens.heartbeats == [f"run-{job.job_id}"]
    # and the job record is written the first time, then at most every progress_interval_seconds, and at the end
    assert writes == [1, 20] and w.repo.get(job.job_id).progress.step == 20


def test_a_pause_landing_during_launch_is_acted_on_once_the_run_exists() -> None:
    w = World()
    job = w.submit()
    w.svc.admit(job.job_id, EXEC)
    w.svc.wait_capacity(job.job_id, EXEC, "cap")
    w.svc.prepare(job.job_id, EXEC)
    real_launch = w.launcher.launch

    def launch_and_pause(request: LaunchRequest) -> LaunchHandle:
        current = w.repo.get(job.job_id)
        w.repo.update(job.job_id, current.version, {"pending_action": PendingAction.PAUSE}, allowed=frozenset({S.TRAINING}))
        return real_launch(request)

    w.launcher.launch = launch_and_pause  # type: ignore[method-assign]
    assert w.svc.launch(job.job_id, EXEC)["next"] == "wait"
    assert w.tokens.stops == [(job.job_id, True, "pause")]


def test_handler_dispatch_and_error_mapping(monkeypatch: pytest.MonkeyPatch) -> None:
    w = World()
    composition.configure(lifecycle=w.svc)
    try:
        job = w.submit()
        assert handler.handler({"action": "admit", "job_id": job.job_id, "execution": EXEC}) == {"next": "wait_capacity"}
        # A deleted job ends its execution (answering its token if it waits)
        assert handler.handler({"action": "wait_resume", "job_id": "nope", "execution": EXEC, "token": "t"}) == {"next": "ended"}
        assert w.tokens.answers[-1] == ("t", {"next": "ended"})
        with pytest.raises(ValueError, match="unknown lifecycle action"):
            handler.handler({"action": "explode", "job_id": job.job_id})

        def lose(*args: Any) -> None:
            raise ConcurrentModification(job.job_id)

        monkeypatch.setattr(w.svc, "prepare", lose)
        with pytest.raises(TransientError):
            handler.handler({"action": "prepare", "job_id": job.job_id})
    finally:
        composition.reset()


def test_waits_and_launch_never_make_a_users_verb_lose_its_race() -> None:
    from functions.service.ports import Transition

    w = World()
    w.ledger.claim("local/cpu", "someone-else", 1, 1)
    job = w.submit()
    w.svc.admit(job.job_id, EXEC)
    # Given the user's copy of the job, read before the capacity wait stored its token
    users_copy = w.repo.get(job.job_id)
    assert w.svc.wait_capacity(job.job_id, EXEC, "cap") == {"next": "waiting"}
    # When the user cancels with that copy, Then the cancel is not a 409
    w.repo.transition(Transition(job.job_id, users_copy.version, users_copy.status, S.CANCELLED, "cancel", "user"))


def test_the_workflow_answers_the_token_stored_after_the_callers_read() -> None:
    from functions.adapters.stepfunctions import StepFunctionsWorkflow

    class Sfn:
        def __init__(self) -> None:
            self.calls: list[tuple[str, dict[str, Any]]] = []

        def send_task_success(self, **kwargs: Any) -> None:
            self.calls.append(("success", kwargs))

    class Clients:
        sfn = Sfn()

        def client(self, service: str) -> Any:
            return self.sfn

    w = World()
    job = w.submit()
    stale = w.repo.get(job.job_id)  # no token yet
    w.repo.annotate(job.job_id, {"task_token": "fresh", "task_token_kind": "capacity"})
    clients = Clients()
    # Without a reader the caller's copy is all there is: nothing to answer
    StepFunctionsWorkflow(clients, "arn", {}).answer_wait(stale, "cancel")
    assert clients.sfn.calls == []
    # With one, the token stored after the caller's read is answered; a resume never answers a capacity wait
    workflow = StepFunctionsWorkflow(clients, "arn", {}, jobs=w.repo.get)
    workflow.answer_wait(stale, "resume")
    assert clients.sfn.calls == []
    workflow.answer_wait(stale, "cancel", {"reason": "r"})
    assert clients.sfn.calls == [("success", {"taskToken": "fresh", "output": '{"next": "cancel", "reason": "r"}'})]
