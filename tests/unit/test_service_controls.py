"""The lifecycle verbs with fakes: status checks (409 naming states), one decision, history, engine calls, races."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from functions.errors import ConcurrentModification, DomainError, IllegalTransition, InvalidRequest, JobNotFound
from functions.service.controls import WorkflowUnavailable
from functions.service.jobs import JobService
from functions.service.ports import Transition
from functions.service.principal import Principal
from functions.settings import Settings
from schemas.api import RetryRequest
from schemas.job import CheckpointRef, Job, PendingAction, SubmitJobRequest
from schemas.status import JobStatus
from tests.fakes import InMemoryArtifactStore, InMemoryJobRepository, RecordingWorkflow
from tests.helpers.jobs import ADMIN, ALICE, BOB, request_body, submit_request

S = JobStatus
alice = Principal(ALICE)
bob = Principal(BOB)
admin = Principal(ADMIN, is_admin=True)
TO_TRAINING = (S.QUEUED, S.SCHEDULING, S.PREPARING, S.TRAINING)


def _clock() -> Callable[[], datetime]:
    ticks = itertools.count(1)
    return lambda: datetime(2026, 3, 1, tzinfo=UTC) + timedelta(seconds=next(ticks))


def build(workflow: RecordingWorkflow | None) -> tuple[JobService, InMemoryJobRepository]:
    clock = _clock()  # one clock for service and repository, so history entries sort as they happened
    repo = InMemoryJobRepository(clock=clock)
    counter = itertools.count(1)
    settings = Settings(admin_arns=(ADMIN,))
    service = JobService(repo, InMemoryArtifactStore(), workflow, settings, clock=clock, ids=lambda: f"job-{next(counter):04d}")
    return service, repo


@pytest.fixture
def workflow() -> RecordingWorkflow:
    return RecordingWorkflow()


@pytest.fixture
def wired(workflow: RecordingWorkflow) -> tuple[JobService, InMemoryJobRepository]:
    return build(workflow)


def job_in(service: JobService, repo: InMemoryJobRepository, *path: JobStatus, **changes: Any) -> Job:
    job = service.submit(submit_request(), alice)
    for status in path:
        job = repo.transition(Transition(job.job_id, job.version, job.status, status, actor="system"))
    if changes:
        job = repo.update(job.job_id, job.version, changes)
    return job


def ref(job_id: str, step: int) -> CheckpointRef:
    return CheckpointRef(
        checkpoint_id=f"step-{step:06d}", step=step, uri=f"s3://trainplane-artifacts/jobs/{job_id}/checkpoints/step-{step:06d}"
    )


def with_checkpoints(repo: InMemoryJobRepository, job: Job, *steps: int) -> Job:
    for step in steps:
        job = repo.add_checkpoint(job.job_id, ref(job.job_id, step))
    return job


# --- cancel --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "stops_run"),
    [((), False), ((S.QUEUED,), False), (TO_TRAINING, True), ((*TO_TRAINING, S.PAUSED), False), ((S.QUEUED, S.SCHEDULING), True)],
)
def test_cancel_from_any_non_terminal_state(
    wired: tuple[JobService, InMemoryJobRepository], workflow: RecordingWorkflow, path: tuple[JobStatus, ...], stops_run: bool
) -> None:
    service, repo = wired
    # Given a job in some non-terminal state
    job = job_in(service, repo, *path)
    before = job.status
    # When alice cancels it with a reason
    cancelled = service.cancel(job.job_id, alice, reason="wrong data")
    # Then it is CANCELLED, the history records her and her reason
    assert cancelled.status == S.CANCELLED and repo.get(job.job_id).status == S.CANCELLED
    last = repo.history(job.job_id)[-1]
    assert (last.from_status, last.to_status, last.actor, last.reason) == (before, S.CANCELLED, "user", "wrong data")
    # And a running job's run is stopped hard; every execution's wait is answered "cancel"
    calls = [c for c in workflow.calls if c.method != "start"]
    assert [c.method for c in calls] == (["stop_run", "answer_wait"] if stops_run else ["answer_wait"])
    assert calls[-1].kwargs["decision"] == "cancel" and calls[-1].status == S.CANCELLED
    if stops_run:
        assert calls[0].kwargs["graceful"] is False


@pytest.mark.parametrize("terminal", [S.FAILED, S.CANCELLED])
def test_cancel_of_a_terminal_job_is_a_409_naming_allowed_states(
    wired: tuple[JobService, InMemoryJobRepository], terminal: JobStatus
) -> None:
    service, repo = wired
    job = job_in(service, repo, terminal)
    with pytest.raises(IllegalTransition, match=f"cannot cancel job {job.job_id} while it is {terminal}; allowed from .*PENDING"):
        service.cancel(job.job_id, alice)


def test_twenty_concurrent_cancels_exactly_one_wins(wired: tuple[JobService, InMemoryJobRepository], workflow: RecordingWorkflow) -> None:
    service, repo = wired
    # Given a training job
    job = job_in(service, repo, *TO_TRAINING)
    barrier = threading.Barrier(20)
    results: list[str] = []
    lock = threading.Lock()

    def worker() -> None:
        barrier.wait()
        try:
            service.cancel(job.job_id, alice, reason="stop")
            outcome = "ok"
        except DomainError as exc:
            outcome = type(exc).__name__
        with lock:
            results.append(outcome)

    # When 20 cancels race
    threads = [threading.Thread(target=worker) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Then exactly one wins, the others are 409s, the history has exactly one CANCELLED entry and the
    # engine was told once
    assert results.count("ok") == 1 and set(results) <= {"ok", "ConcurrentModification", "IllegalTransition"}
    assert [e.to_status for e in repo.history(job.job_id)].count(S.CANCELLED) == 1
    assert workflow.methods().count("stop_run") == 1


def test_cancel_stands_when_the_engine_cannot_be_told() -> None:
    service, repo = build(RecordingWorkflow(fail_on={"stop_run"}))
    job = job_in(service, repo, *TO_TRAINING)
    assert service.cancel(job.job_id, alice).status == S.CANCELLED
    assert repo.get(job.job_id).status == S.CANCELLED


# --- pause ---------------------------------------------------------------------------------------------


def test_pause_records_a_pending_pause_and_stops_the_run_gracefully(
    wired: tuple[JobService, InMemoryJobRepository], workflow: RecordingWorkflow
) -> None:
    service, repo = wired
    # Given a training job
    job = job_in(service, repo, *TO_TRAINING)
    # When alice pauses it
    paused = service.pause(job.job_id, alice, save_checkpoint=True)
    # Then the status stays (the engine moves it once the checkpoint is saved), a pause is pending,
    # the request is in the history, and the run is stopped gracefully
    assert paused.status == S.TRAINING and paused.pending_action == PendingAction.PAUSE
    last = repo.history(job.job_id)[-1]
    assert (last.from_status, last.to_status, last.actor, last.reason) == (S.TRAINING, S.TRAINING, "user", "pause requested")
    assert workflow.calls[-1].method == "stop_run" and workflow.calls[-1].kwargs["graceful"] is True
    # And a second pause while the first is pending is a 409
    with pytest.raises(ConcurrentModification, match="already in progress"):
        service.pause(job.job_id, alice)


@pytest.mark.parametrize("path", [(), (S.QUEUED,), (*TO_TRAINING, S.PAUSED), (S.FAILED,)])
def test_pause_outside_pausable_states_is_a_409(wired: tuple[JobService, InMemoryJobRepository], path: tuple[JobStatus, ...]) -> None:
    service, repo = wired
    job = job_in(service, repo, *path)
    with pytest.raises(IllegalTransition, match="allowed from CHECKPOINTING, TRAINING"):
        service.pause(job.job_id, alice)


def test_a_pause_that_cannot_reach_the_run_is_withdrawn() -> None:
    # Given an engine that cannot stop runs
    service, repo = build(RecordingWorkflow(fail_on={"stop_run"}))
    job = job_in(service, repo, *TO_TRAINING)
    # When a pause is requested
    with pytest.raises(WorkflowUnavailable):
        service.pause(job.job_id, alice)
    # Then no pause is left pending (nothing would ever act on it) and the history says so
    assert repo.get(job.job_id).pending_action is None
    assert repo.history(job.job_id)[-1].reason == "pause withdrawn"


def test_verbs_without_a_workflow_still_validate_and_record() -> None:
    service, repo = build(None)
    job = job_in(service, repo, *TO_TRAINING)
    assert service.pause(job.job_id, alice).pending_action == PendingAction.PAUSE
    assert service.cancel(job.job_id, alice).status == S.CANCELLED
    with pytest.raises(IllegalTransition):
        service.resume(job.job_id, alice)
    assert [e.reason for e in repo.history(job.job_id)][-2:] == ["pause requested", "cancelled by request"]


# --- resume --------------------------------------------------------------------------------------------


def test_resume_from_the_latest_or_a_named_checkpoint(wired: tuple[JobService, InMemoryJobRepository], workflow: RecordingWorkflow) -> None:
    service, repo = wired
    # Given two paused jobs with checkpoints at steps 2 and 4
    a = with_checkpoints(repo, job_in(service, repo, *TO_TRAINING, S.PAUSED), 2, 4)
    b = with_checkpoints(repo, job_in(service, repo, *TO_TRAINING, S.PAUSED), 2, 4)
    # When one resumes with no id and the other names step 2
    ra = service.resume(a.job_id, alice)
    rb = service.resume(b.job_id, alice, checkpoint_id="step-000002")
    # Then both are QUEUED again from the right checkpoint, and their executions were answered "resume"
    assert (ra.status, ra.resume_checkpoint_id) == (S.QUEUED, "step-000004")
    assert (rb.status, rb.resume_checkpoint_id) == (S.QUEUED, "step-000002")
    answers = [c for c in workflow.calls if c.method == "answer_wait"]
    assert [(c.job_id, c.kwargs["decision"], c.kwargs["detail"]["checkpoint_id"]) for c in answers] == [
        (a.job_id, "resume", "step-000004"),
        (b.job_id, "resume", "step-000002"),
    ]
    assert repo.history(b.job_id)[-1].reason == "resumed from step-000002"


def test_resume_with_an_unknown_checkpoint_is_a_422_naming_checkpoint_id(wired: tuple[JobService, InMemoryJobRepository]) -> None:
    service, repo = wired
    job = with_checkpoints(repo, job_in(service, repo, *TO_TRAINING, S.PAUSED), 2)
    with pytest.raises(InvalidRequest) as err:
        service.resume(job.job_id, alice, checkpoint_id="step-999999")
    assert err.value.field == "checkpoint_id" and "step-000002" in err.value.message
    assert repo.get(job.job_id).status == S.PAUSED


def test_resume_of_a_job_that_is_not_paused_is_a_409(wired: tuple[JobService, InMemoryJobRepository]) -> None:
    service, repo = wired
    job = job_in(service, repo, *TO_TRAINING)
    with pytest.raises(IllegalTransition, match=r"cannot resume .* while it is TRAINING; allowed from PAUSED"):
        service.resume(job.job_id, alice)


# --- retry ---------------------------------------------------------------------------------------------


def test_retry_creates_a_started_child_from_the_latest_checkpoint_uri(
    wired: tuple[JobService, InMemoryJobRepository], workflow: RecordingWorkflow
) -> None:
    service, repo = wired
    # Given a failed job with checkpoints
    parent = with_checkpoints(repo, job_in(service, repo, *TO_TRAINING, S.FAILED), 2, 4)
    # When alice retries it
    child = service.retry(parent.job_id, alice, RetryRequest())
    # Then a new PENDING job points at its parent and resumes from the latest checkpoint's URI
    assert child.job_id != parent.job_id and child.parent_job_id == parent.job_id and child.status == S.PENDING
    assert child.training_config.resume_from_checkpoint == f"s3://trainplane-artifacts/jobs/{parent.job_id}/checkpoints/step-000004"
    assert child.resource_config == parent.resource_config and child.name == parent.name
    # And it was started like a submit, and both histories record the retry
    assert workflow.calls[-1].method == "start" and workflow.calls[-1].job_id == child.job_id
    assert repo.history(child.job_id)[0].reason == f"retry of {parent.job_id} from step-000004"
    assert repo.history(parent.job_id)[-1].reason == f"retried as {child.job_id}"


def test_retry_from_a_named_checkpoint_on_new_resources(wired: tuple[JobService, InMemoryJobRepository]) -> None:
    service, repo = wired
    parent = with_checkpoints(repo, job_in(service, repo, *TO_TRAINING, S.CANCELLED), 2, 4)
    request = RetryRequest(checkpoint_id="step-000002", modify_resources=True, new_resource_config={"gpu_count": 0, "cpu_cores": 4})
    child = service.retry(parent.job_id, alice, request)
    assert child.training_config.resume_from_checkpoint is not None and child.training_config.resume_from_checkpoint.endswith("step-000002")
    assert child.resource_config.cpu_cores == 4


def test_retry_without_checkpoints_starts_over_and_keeps_the_owner(wired: tuple[JobService, InMemoryJobRepository]) -> None:
    service, repo = wired
    parent = job_in(service, repo, S.FAILED)
    child = service.retry(parent.job_id, admin, RetryRequest())
    assert child.training_config.resume_from_checkpoint is None and child.owner == ALICE
    assert service.get(child.job_id, alice).parent_job_id == parent.job_id


def test_retry_refusals(wired: tuple[JobService, InMemoryJobRepository]) -> None:
    service, repo = wired
    running = job_in(service, repo, *TO_TRAINING)
    with pytest.raises(IllegalTransition, match="cannot retry"):
        service.retry(running.job_id, alice, RetryRequest())
    failed = job_in(service, repo, S.FAILED)
    with pytest.raises(InvalidRequest) as err:
        service.retry(failed.job_id, alice, RetryRequest(checkpoint_id="step-000001"))
    assert err.value.field == "checkpoint_id"
    with pytest.raises(JobNotFound):
        service.retry(failed.job_id, bob, RetryRequest())
    # A QLoRA parent cannot be retried onto a CPU
    body = submit_request().model_dump(mode="json")
    body["training_config"]["training_type"] = "QLORA"
    body["resource_config"] = {"gpu_count": 1}
    qlora = service.submit(submit_request(**body), alice)
    repo.transition(Transition(qlora.job_id, qlora.version, S.PENDING, S.FAILED))
    with pytest.raises(InvalidRequest) as err:
        service.retry(qlora.job_id, alice, RetryRequest(modify_resources=True, new_resource_config={"gpu_count": 0}))
    assert err.value.field == "new_resource_config"


class _PhaseChangeFirst:
    """A repository proxy: just before the verb's first write, the trainer reports a phase change."""

    def __init__(self, repo: InMemoryJobRepository, to: JobStatus) -> None:
        self._repo, self._to, self._fired = repo, to, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._repo, name)

    def _phase_change(self, job_id: str) -> None:
        if not self._fired:
            self._fired = True
            job = self._repo.get(job_id)
            self._repo.transition(Transition(job_id, job.version, job.status, self._to, "checkpoint started", "trainer"))

    def transition(self, t: Transition) -> Job:
        self._phase_change(t.job_id)
        return self._repo.transition(t)

    def update(self, job_id: str, *args: Any, **kwargs: Any) -> Job:
        self._phase_change(job_id)
        return self._repo.update(job_id, *args, **kwargs)


@pytest.mark.parametrize("verb", ["cancel", "pause"])
def test_a_verb_racing_a_trainer_phase_change_is_decided_not_refused(verb: str, workflow: RecordingWorkflow) -> None:
    # Given a training job whose trainer starts a checkpoint (TRAINING -> CHECKPOINTING, a new version)
    # between the user's read and the user's write
    service, repo = build(workflow)
    job = job_in(service, repo, *TO_TRAINING)
    service.repo = _PhaseChangeFirst(repo, S.CHECKPOINTING)  # type: ignore[assignment]
    # When the user cancels / pauses
    result = service.cancel(job.job_id, alice) if verb == "cancel" else service.pause(job.job_id, alice)
    # Then the verb re-reads and wins instead of failing with a spurious 409
    if verb == "cancel":
        assert result.status == S.CANCELLED
        assert [e.to_status for e in repo.history(job.job_id)][-2:] == [S.CHECKPOINTING, S.CANCELLED]
    else:
        assert result.status == S.CHECKPOINTING and result.pending_action == PendingAction.PAUSE


@pytest.mark.parametrize("alias", [{"gradient_accumulation_steps": "4"}, {"per_device_train_batch_size": "2"}, {"save_steps": "7"}])
def test_a_job_that_set_a_trainer_argument_alias_can_be_retried(
    wired: tuple[JobService, InMemoryJobRepository], alias: dict[str, str]
) -> None:
    service, repo = wired
    # Given a failed job that set data_config's / checkpoint's field by its TrainingArguments name (its stored
    # request carries every field, the aliased ones at their defaults)
    body = request_body()
    body["training_config"].setdefault("hyperparameters", {}).update(alias)
    parent = service.submit(SubmitJobRequest.model_validate(body), alice)
    repo.transition(Transition(parent.job_id, repo.get(parent.job_id).version, S.PENDING, S.FAILED))
    # When it is retried  Then the child keeps the alias (no conflict with the stored default it never set)
    child = service.retry(parent.job_id, alice, RetryRequest())
    assert child.training_config.hyperparameters.items() >= alias.items()
