"""JobService with in-memory fakes: submit, ownership, listing, edit, delete, summary, metrics, logs."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from functions import constants
from functions.errors import ConcurrentModification, IllegalTransition, InvalidRequest, JobNotFound
from functions.service.controls import WorkflowUnavailable
from functions.service.jobs import JobService, new_job_id
from functions.service.ports import Transition
from functions.service.principal import Principal, role_arn_of
from functions.settings import Settings
from schemas.api import PatchJobRequest
from schemas.job import ErrorType, Job
from schemas.status import JobStatus
from tests.fakes import InMemoryArtifactStore, InMemoryJobRepository, RecordingWorkflow
from tests.helpers.jobs import ADMIN, ALICE, BOB, submit_request

S = JobStatus


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 3, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


@pytest.fixture
def repo() -> InMemoryJobRepository:
    return InMemoryJobRepository()


@pytest.fixture
def store() -> InMemoryArtifactStore:
    return InMemoryArtifactStore()


@pytest.fixture
def workflow() -> RecordingWorkflow:
    return RecordingWorkflow()


def make_service(repo: Any, store: Any, workflow: Any) -> JobService:
    counter = itertools.count(1)
    return JobService(repo, store, workflow, Settings(admin_arns=(ADMIN,)), clock=Clock(), ids=lambda: f"job-{next(counter):04d}")


@pytest.fixture
def service(repo: InMemoryJobRepository, store: InMemoryArtifactStore, workflow: RecordingWorkflow) -> JobService:
    return make_service(repo, store, workflow)


alice = Principal(ALICE)
bob = Principal(BOB)
admin = Principal(ADMIN, is_admin=True)


def force(repo: InMemoryJobRepository, job_id: str, *path: JobStatus) -> Job:
    """Walk a job through statuses as the engine would."""
    job = repo.get(job_id)
    for status in path:
        job = repo.transition(Transition(job_id, job.version, job.status, status, actor="system"))
    return job


# --- submit ------------------------------------------------------------------------------------------


def test_submit_creates_a_pending_job_with_history_and_starts_the_workflow(
    service: JobService, repo: Any, workflow: RecordingWorkflow
) -> None:
    # Given a valid request whose priority is only set in training_config
    request = submit_request(training_config={**submit_request().training_config.model_dump(mode="json"), "priority": 8})
    # When alice submits it
    job = service.submit(request, alice)
    # Then it is stored PENDING, owned by alice, with the effective priority in both places
    assert job.status == S.PENDING and job.owner == ALICE and job.version == 1
    assert job.scheduling_config.priority == 8 and job.training_config.priority == 8
    # And the history starts with None -> PENDING by the user, and the execution is started and stored
    [event] = repo.history(job.job_id)
    assert (event.from_status, event.to_status, event.actor, event.reason) == (None, S.PENDING, "user", "submitted")
    assert workflow.methods() == ["start"]
    assert job.execution_arn is not None and job.execution_arn.endswith(f"{job.job_id}-1")


def test_submit_without_a_workflow_leaves_the_job_pending(repo: Any, store: Any) -> None:
    service = make_service(repo, store, None)
    job = service.submit(submit_request(), alice)
    assert job.status == S.PENDING and job.execution_arn is None


def test_a_workflow_that_cannot_start_fails_the_job_and_says_so(repo: Any, store: Any) -> None:
    # Given a workflow whose start fails
    service = make_service(repo, store, RecordingWorkflow(fail_on={"start"}))
    # When a job is submitted
    # Then the caller gets a clear 503-class error and the job is recorded FAILED, not left hanging
    with pytest.raises(WorkflowUnavailable, match="recorded as FAILED"):
        service.submit(submit_request(), alice)
    [job] = repo.jobs.values()
    assert job.status == S.FAILED and job.error_type == ErrorType.INTERNAL


def test_job_ids_are_unique_and_readable() -> None:
    ids = {new_job_id() for _ in range(500)}
    assert len(ids) == 500 and all(i.startswith("job-") and len(i) <= 40 for i in ids)


# --- ownership -----------------------------------------------------------------------------------------


def test_another_principals_job_is_not_found_but_admins_see_it(service: JobService) -> None:
    # Given alice's job
    job = service.submit(submit_request(), alice)
    # When bob asks for it, or for its history, metrics or logs, or edits or deletes it
    # Then it does not exist for him (404, never 403)
    for call in (
        lambda: service.get(job.job_id, bob),
        lambda: service.events(job.job_id, bob),
        lambda: service.metrics(job.job_id, bob),
        lambda: service.logs(job.job_id, bob),
        lambda: service.patch(job.job_id, bob, PatchJobRequest(name="x")),
        lambda: service.delete(job.job_id, bob),
        lambda: service.cancel(job.job_id, bob),
    ):
        with pytest.raises(JobNotFound):
            call()
    # And an admin sees it
    assert service.get(job.job_id, admin).job_id == job.job_id


def test_principal_from_arn_recognises_admins_by_user_or_role() -> None:
    session = "arn:aws:sts::123456789012:assumed-role/Ops/alice-session"
    assert role_arn_of(session) == "arn:aws:iam::123456789012:role/Ops"
    assert Principal.from_arn(session, ["arn:aws:iam::123456789012:role/Ops"]).is_admin
    assert Principal.from_arn(ADMIN, [ADMIN]).is_admin
    assert not Principal.from_arn(ALICE, [ADMIN]).is_admin
    assert role_arn_of(ALICE) == ALICE
    assert Principal(ALICE).owner_scope == ALICE and admin.owner_scope is None


# --- list ----------------------------------------------------------------------------------------------


def test_list_is_scoped_to_the_caller_filtered_and_paged(service: JobService, repo: Any) -> None:
    # Given jobs of alice (two labelled gpu-team, one queued) and of bob
    a1 = service.submit(submit_request(name="alpha", labels={"team": "gpu"}), alice)
    service.submit(submit_request(name="beta", labels={"team": "gpu"}), alice)
    service.submit(submit_request(name="gamma"), alice)
    service.submit(submit_request(name="bob-job"), bob)
    force(repo, a1.job_id, S.QUEUED)
    # When alice lists with filters
    assert [j.name for j in service.list_jobs(alice, labels={"team": "gpu"}).jobs] == ["beta", "alpha"]
    assert [j.name for j in service.list_jobs(alice, status=S.QUEUED).jobs] == ["alpha"]
    assert [j.name for j in service.list_jobs(alice, name="amm").jobs] == ["gamma"]
    # Then pages follow one another, and bob never sees alice's jobs while the admin sees all
    first = service.list_jobs(alice, limit=2)
    second = service.list_jobs(alice, limit=2, next_token=first.next_token)
    assert len(first.jobs) == 2 and first.next_token and [j.name for j in second.jobs] == ["alpha"] and second.next_token is None
    assert [j.name for j in service.list_jobs(bob).jobs] == ["bob-job"]
    assert len(service.list_jobs(admin).jobs) == 4


def test_list_limit_is_bounded(service: JobService) -> None:
    for bad in (0, 201):
        with pytest.raises(InvalidRequest) as err:
            service.list_jobs(alice, limit=bad)
        assert err.value.field == "limit"


# --- patch ---------------------------------------------------------------------------------------------


def test_patch_edits_name_priority_merged_hyperparameters_and_resources(service: JobService, repo: Any) -> None:
    # Given a queued job with hyperparameters
    job = service.submit(submit_request(), alice)
    force(repo, job.job_id, S.QUEUED)
    # When alice edits it
    edited = service.patch(
        job.job_id,
        alice,
        PatchJobRequest(
            name="renamed",
            description="d",
            priority=9,
            hyperparameters={"learning_rate": "0.01", "lora_rank": "4"},
            resource_config={"gpu_count": 0, "cpu_cores": 2},
        ),
    )
    # Then the fields changed, hyperparameters were merged key by key, the version moved on
    assert edited.name == "renamed" and edited.description == "d"
    assert edited.scheduling_config.priority == 9 and edited.training_config.priority == 9
    assert edited.training_config.hyperparameters == {"max_steps": "4", "learning_rate": "0.01", "lora_rank": "4"}
    assert edited.resource_config.cpu_cores == 2
    assert repo.get(job.job_id) == edited and edited.version == job.version + 2
    # And the queue order follows the new priority
    assert repo.queued("default")[0].scheduling_config.priority == 9


def test_patch_of_only_nulls_for_fields_a_job_cannot_clear_is_a_no_op(service: JobService, repo: Any) -> None:
    # Given a queued job (found by the fuzzer: {"resource_config": null} is valid in openapi.json, was a 422)
    job = service.submit(submit_request(), alice)
    force(repo, job.job_id, S.QUEUED)
    before = repo.get(job.job_id)
    # When a patch gives only nulls for fields a job must have
    unchanged = service.patch(job.job_id, alice, PatchJobRequest.model_validate({"name": None, "resource_config": None}))
    # Then it answers the job as it is, and nothing was written
    assert unchanged == before and repo.get(job.job_id).version == before.version


def test_patch_outside_editable_states_is_a_409_naming_them(service: JobService, repo: Any) -> None:
    job = service.submit(submit_request(), alice)
    force(repo, job.job_id, S.QUEUED, S.SCHEDULING)
    with pytest.raises(IllegalTransition, match=r"cannot edit .* while it is SCHEDULING; allowed from FAILED, PENDING, QUEUED"):
        service.patch(job.job_id, alice, PatchJobRequest(name="late"))


def test_patch_that_would_make_the_job_invalid_is_refused_naming_the_field(service: JobService) -> None:
    # Given a QLoRA job on a GPU
    body = submit_request().model_dump(mode="json")
    body["training_config"]["training_type"] = "QLORA"
    body["resource_config"] = {"gpu_count": 1}
    job = service.submit(submit_request(**body), alice)
    # When its resources are edited to CPU only
    with pytest.raises(InvalidRequest) as err:
        service.patch(job.job_id, alice, PatchJobRequest(resource_config={"gpu_count": 0}))
    # Then the edit is refused naming resource_config and why
    assert err.value.field == "resource_config" and "QLORA needs a GPU" in err.value.message


def test_patch_at_a_stale_version_loses(service: JobService, repo: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a job that another writer changes between our read and our write
    job = service.submit(submit_request(), alice)
    real_get = repo.get

    def get_then_race(job_id: str) -> Job:
        seen = real_get(job_id)
        monkeypatch.setattr(repo, "get", real_get)  # race once
        repo.update(job_id, seen.version, {"description": "theirs"})
        return seen

    monkeypatch.setattr(repo, "get", get_then_race)
    # When we patch
    # Then our write loses with a 409, theirs stays
    with pytest.raises(ConcurrentModification):
        service.patch(job.job_id, alice, PatchJobRequest(name="ours"))
    assert real_get(job.job_id).description == "theirs"


# --- delete --------------------------------------------------------------------------------------------


def test_delete_only_terminal_jobs_and_remove_their_prefix(service: JobService, repo: Any, store: InMemoryArtifactStore) -> None:
    # Given a running job and a failed job, each with objects on S3, and a job whose id shares a prefix
    running = service.submit(submit_request(), alice)
    failed = service.submit(submit_request(), alice)
    force(repo, running.job_id, S.QUEUED, S.SCHEDULING)
    force(repo, failed.job_id, S.FAILED)
    for job_id in (running.job_id, failed.job_id, failed.job_id + "0"):
        store.put_text(f"jobs/{job_id}/metrics.jsonl", "{}")
    # When both are deleted
    with pytest.raises(IllegalTransition, match="allowed from CANCELLED, COMPLETED, FAILED, PREEMPTED"):
        service.delete(running.job_id, alice)
    service.delete(failed.job_id, alice)
    # Then only the terminal one is gone, with its objects and none of anyone else's
    with pytest.raises(JobNotFound):
        service.get(failed.job_id, alice)
    assert sorted(store.objects) == sorted([f"jobs/{failed.job_id}0/metrics.jsonl", f"jobs/{running.job_id}/metrics.jsonl"])
    assert service.summary(alice).total == 1


# --- summary, events, metrics, logs --------------------------------------------------------------------


def test_summary_counts_by_status_for_the_caller(service: JobService, repo: Any) -> None:
    # Given alice's jobs in several states and one of bob's
    ids = [service.submit(submit_request(), alice).job_id for _ in range(5)]
    service.submit(submit_request(), bob)
    force(repo, ids[0], S.QUEUED)
    force(repo, ids[1], S.QUEUED, S.SCHEDULING, S.PREPARING, S.TRAINING)
    force(repo, ids[2], S.QUEUED, S.SCHEDULING, S.PREPARING, S.TRAINING, S.PAUSED)
    force(repo, ids[3], S.FAILED)
    # When the summaries are read
    mine = service.summary(alice)
    everyone = service.summary(admin)
    # Then the cards add up
    assert mine.total == 5 and mine.queued == 2 and mine.running == 1 and mine.paused == 1 and mine.failed == 1
    assert mine.counts[S.TRAINING] == 1 and mine.counts[S.COMPLETED] == 0
    assert everyone.total == 6 and everyone.queued == 3


def test_events_are_the_history(service: JobService, repo: Any) -> None:
    job = service.submit(submit_request(), alice)
    force(repo, job.job_id, S.QUEUED)
    assert [(e.from_status, e.to_status) for e in service.events(job.job_id, alice).events] == [(None, S.PENDING), (S.PENDING, S.QUEUED)]


def test_metrics_skip_torn_lines(service: JobService, store: InMemoryArtifactStore) -> None:
    # Given a metrics file with a torn last line and a custom metric
    job = service.submit(submit_request(), alice)
    lines = [json.dumps({"step": 1, "loss": 2.5}), "", json.dumps({"step": 2, "loss": 2.0, "perplexity": 7.4}), '{"step": 3, "lo']
    store.put_text(constants.metrics_key(job.job_id), "\n".join(lines))
    # When the metrics are read
    points = service.metrics(job.job_id, alice).points
    # Then the good points come back, extra metric names included
    assert [p.step for p in points] == [1, 2] and points[1].model_dump()["perplexity"] == 7.4


def test_logs_in_attempt_order_paged_and_after_since(service: JobService, store: InMemoryArtifactStore) -> None:
    # Given two attempts' logs (attempt 10 must sort after attempt 2) with stamped and unstamped lines
    job = service.submit(submit_request(), alice)
    prefix = constants.logs_prefix(job.job_id)
    store.put_text(
        prefix + "attempt-002.log",
        "1767225600.5 starting\nplain line\nTRAINPLANE_EVENT " + json.dumps({"kind": "phase", "time": 1767225700.0}),
    )
    store.put_text(prefix + "attempt-010.log", "2026-01-01T00:10:00Z resumed\ntraceback line")
    store.put_text(prefix + "notes.txt", "not a log")
    # When all lines are read in pages of 2
    first = service.logs(job.job_id, alice, limit=2)
    second = service.logs(job.job_id, alice, limit=2, next_token=first.next_token)
    third = service.logs(job.job_id, alice, limit=2, next_token=second.next_token)
    lines = first.lines + second.lines + third.lines
    # Then every line comes once, in order, with non-decreasing stamps and its attempt
    assert [line.attempt for line in lines] == [2, 2, 2, 10, 10]
    assert lines[0].message == "1767225600.5 starting" and lines[0].timestamp == 1767225600.5
    assert lines[1].timestamp == pytest.approx(1767225600.5 + 1e-6)
    assert lines[3].timestamp == datetime(2026, 1, 1, 0, 10, tzinfo=UTC).timestamp()
    assert all(a.timestamp < b.timestamp for a, b in itertools.pairwise(lines))
    assert third.next_token is None
    # And `since` (exclusive) resumes after the last line seen
    after = service.logs(job.job_id, alice, since=lines[2].timestamp)
    assert [line.message for line in after.lines] == ["2026-01-01T00:10:00Z resumed", "traceback line"]


def test_log_cursor_resumes_after_the_last_line_even_as_the_log_grows(service: JobService, store: InMemoryArtifactStore) -> None:
    # Given an attempt that has written two lines so far
    job = service.submit(submit_request(), alice)
    prefix = constants.logs_prefix(job.job_id)
    store.put_text(prefix + "attempt-001.log", "one\ntwo")
    # When a follower reads them, the log grows (same attempt, then a new one), and it asks from its cursor
    first = service.logs(job.job_id, alice)
    store.put_text(prefix + "attempt-001.log", "one\ntwo\nthree")
    store.put_text(prefix + "attempt-002.log", "four")
    second = service.logs(job.job_id, alice, next_token=first.cursor)
    third = service.logs(job.job_id, alice, next_token=second.cursor)
    # Then each line comes exactly once, and an empty page keeps the cursor where it was
    assert first.next_token is None and first.cursor is not None
    assert [line.message for line in first.lines + second.lines] == ["one", "two", "three", "four"]
    assert third.lines == [] and third.cursor == second.cursor
    # And a full page's cursor is its next_token; `since` moves the cursor past the lines it skipped
    paged = service.logs(job.job_id, alice, limit=1)
    assert paged.cursor == paged.next_token
    after = service.logs(job.job_id, alice, since=first.lines[-1].timestamp)
    assert [line.message for line in after.lines] == ["three", "four"]
    assert service.logs(job.job_id, alice, next_token=after.cursor).lines == []


def test_each_line_says_its_stream_and_a_stream_filter_follows_without_loss_or_repeat(
    service: JobService, store: InMemoryArtifactStore
) -> None:
    # Given a local run's log as the launcher stores it: stderr lines tagged, a stamped stderr line
    job = service.submit(submit_request(), alice)
    key = constants.log_key(job.job_id, 1)
    out, err = (lambda m: constants.tag_log_line(m, "stdout")), (lambda m: constants.tag_log_line(m, "stderr"))
    store.put_text(key, "\n".join([out("o1"), err("1767225600 e1"), out("\x02 odd"), err("e2")]))
    # When read whole
    whole = service.logs(job.job_id, alice)
    # Then each line is as printed, with its stream, and a stderr line's own stamp is read under its tag
    expected = [("stdout", "o1"), ("stderr", "1767225600 e1"), ("stdout", "\x02 odd"), ("stderr", "e2")]
    assert [(line.stream, line.message) for line in whole.lines] == expected
    assert whole.lines[1].timestamp == 1767225600.0
    # When a follower of stderr alone pages one line at a time, and the log grows between its reads
    page = service.logs(job.job_id, alice, stream="stderr", limit=1)
    seen = list(page.lines)
    store.put_text(key, "\n".join([out("o1"), err("1767225600 e1"), out("\x02 odd"), err("e2"), out("o3"), err("e3")]))
    store.put_text(constants.log_key(job.job_id, 2), "\n".join([err("e4"), out("o4")]))
    while page.next_token:
        page = service.logs(job.job_id, alice, stream="stderr", limit=1, next_token=page.next_token)
        seen += page.lines
    later = service.logs(job.job_id, alice, stream="stderr", next_token=page.cursor)
    # Then it saw every stderr line once, in order, and its cursor moved past the stdout lines it skipped
    assert [line.message for line in seen] == ["1767225600 e1", "e2", "e3", "e4"]
    assert later.lines == [] and later.cursor == page.cursor
    assert [line.message for line in service.logs(job.job_id, alice, stream="stdout").lines] == ["o1", "\x02 odd", "o3", "o4"]


def test_logs_refuse_bad_tokens_and_limits(service: JobService) -> None:
    job = service.submit(submit_request(), alice)
    with pytest.raises(InvalidRequest) as err:
        service.logs(job.job_id, alice, next_token="%%%")
    assert err.value.field == "next_token"
    with pytest.raises(InvalidRequest):
        service.logs(job.job_id, alice, limit=0)
    assert service.logs(job.job_id, alice).lines == []


def test_cloud_compute_refuses_what_it_cannot_run_at_submit_and_edit(repo: Any, store: Any) -> None:
    # Given a control plane whose compute is SageMaker
    counter = itertools.count(1)
    service = JobService(repo, store, None, Settings(compute="sagemaker"), clock=Clock(), ids=lambda: f"job-{next(counter):04d}")
    # When a job reads its data from a local path
    body = submit_request().model_dump(mode="json")
    body["data_config"]["sources"] = [{"path": "/tmp/train.jsonl"}]
    # Then it is refused now, naming the field, and nothing is stored
    with pytest.raises(InvalidRequest) as err:
        service.submit(submit_request(**body), alice)
    assert err.value.field == "data_config.sources[0].path" and repo.jobs == {}
    # And an S3 job is accepted
    assert service.submit(submit_request(), alice).status == S.PENDING


def test_logs_come_from_the_log_source_when_one_is_configured(repo: Any, store: Any, workflow: Any) -> None:
    from schemas.api import LogLine, LogsResponse

    # Given a job service whose engine logs elsewhere (CloudWatch in the cloud)
    calls: list[tuple[str, float | None, str | None, int]] = []

    class Source:
        def read(self, job: Job, *, since: float | None = None, next_token: str | None = None, limit: int = 1000) -> LogsResponse:
            calls.append((job.job_id, since, next_token, limit))
            return LogsResponse(lines=[LogLine(timestamp=1.0, attempt=1, message="from cloudwatch")], next_token="t2")

    service = JobService(repo, store, workflow, Settings(admin_arns=(ADMIN,)), log_source=Source())
    job = service.submit(submit_request(), alice)
    # When the owner reads the logs
    page = service.logs(job.job_id, alice, since=5.0, next_token="t1", limit=10)
    # Then the source answered for that job with the same paging
    assert [line.message for line in page.lines] == ["from cloudwatch"] and page.next_token == "t2"
    assert calls == [(job.job_id, 5.0, "t1", 10)]
    # And the lines carry no stream there, so a stream filter is refused naming it
    assert page.lines[0].stream is None
    with pytest.raises(InvalidRequest) as err:
        service.logs(job.job_id, alice, stream="stderr")
    assert err.value.field == "stream" and "one CloudWatch stream" in str(err.value)
    # And another principal still cannot see them
    with pytest.raises(JobNotFound):
        service.logs(job.job_id, bob)


@pytest.mark.parametrize(("compute", "refused"), [("local", True), ("ec2", False), ("sagemaker", False)])
def test_multi_node_is_refused_only_where_the_compute_runs_one_node(repo: Any, store: Any, compute: str, refused: bool) -> None:
    # Given a 2-node CPU job (one process per node) reading from S3
    service = JobService(repo, store, None, Settings(compute=compute), clock=Clock(), ids=lambda: "job-0001")
    body = submit_request().model_dump(mode="json")
    body["resource_config"] = {"gpu_count": 0, "node_count": 2}
    body["training_config"]["framework"] = {"distributed": {"world_size": 2, "backend": "gloo"}}
    # When submitted / Then compute 'local' refuses it naming the field; the cloud computes take it
    if refused:
        with pytest.raises(InvalidRequest) as err:
            service.submit(submit_request(**body), alice)
        assert err.value.field == "resource_config.node_count" and "--compute ec2" in str(err.value)
    else:
        assert service.submit(submit_request(**body), alice).resource_config.node_count == 2
