"""DynamoJobRepository on moto (mock_aws), and the same contract checked on tests/fakes.py.

The contract tests run twice, once per implementation, so the fake that unit tests rely on cannot
drift from the real adapter.
"""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from typing import Any

import pytest

from functions import constants as c
from functions.adapters.aws import AwsClients
from functions.adapters.dynamodb import DynamoJobRepository
from functions.adapters.dynamodb_items import job_item
from functions.errors import ConcurrentModification, IllegalTransition, InvalidRequest, JobNotFound, NameTaken
from functions.service.ports import JobQuery, NameClaim, Transition
from schemas.job import CheckpointRef, Job, PendingAction, Progress, StatusEvent
from schemas.status import JobStatus
from tests.fakes import InMemoryJobRepository
from tests.helpers.aws import fresh_resources
from tests.helpers.jobs import ALICE, BOB, T0, make_job

S = JobStatus


@pytest.fixture
def table(aws: AwsClients) -> str:
    return fresh_resources(aws).jobs_table


@pytest.fixture
def dynamo(aws: AwsClients, table: str) -> DynamoJobRepository:
    return DynamoJobRepository(aws, table)


@pytest.fixture(params=["dynamodb", "fake"])
def repo(request: pytest.FixtureRequest) -> Any:
    if request.param == "fake":
        return InMemoryJobRepository()
    return request.getfixturevalue("dynamo")


def _created(repo: Any, **kwargs: Any) -> Job:
    job = make_job(**kwargs)
    repo.create(job, StatusEvent(at=job.created_at, from_status=None, to_status=job.status, reason="submitted", actor="user"))
    return job


def _move(repo: Any, job: Job, to: JobStatus, **changes: Any) -> Job:
    return repo.transition(Transition(job.job_id, job.version, job.status, to, reason=f"to {to}", actor="system", changes=changes))


# --- contract: both implementations ---------------------------------------------------------------


def test_create_then_get_round_trips_every_field_including_the_hub_token(repo: Any) -> None:
    # Given a job whose output config carries a hub token and whose metrics hold floats
    job = make_job(
        request={
            "output_config": {"push_to_hub": True, "hub_repo_id": "org/model", "hub_token": "hf_secret"},
        },
        progress=Progress(percent=12.5, step=3, loss=1.25),
    )
    # When it is stored and read back
    repo.create(job, StatusEvent(at=job.created_at, to_status=S.PENDING, reason="submitted", actor="user"))
    got = repo.get(job.job_id)
    # Then nothing is lost, the secret included (the API masks it, storage must not)
    assert got == job
    assert got.output_config.hub_token is not None
    assert got.output_config.hub_token.get_secret_value() == "hf_secret"


def test_create_refuses_a_duplicate_id(repo: Any) -> None:
    # Given a stored job
    job = _created(repo)
    # When the same id is created again
    # Then the second create loses, and the first stays as it was
    with pytest.raises(ConcurrentModification):
        repo.create(job.model_copy(update={"name": "other"}), StatusEvent(at=job.created_at, to_status=S.PENDING))
    assert repo.get(job.job_id).name == job.name


def test_a_name_claim_is_taken_with_the_job_and_only_from_the_holder_read(repo: Any) -> None:
    first, second, third = (make_job(job_id=f"job-claim-{n}") for n in range(3))

    def create(job: Job, previous: str | None) -> None:
        repo.create(job, StatusEvent(at=job.created_at, to_status=S.PENDING), NameClaim("train#alice#run", previous))

    # Given a name nobody holds: the first job takes it in its create
    assert repo.name_holder("train#alice#run") is None
    create(first, None)
    assert repo.name_holder("train#alice#run") == first.job_id
    # When another creator still believes nobody holds it, it loses and writes nothing (no job)
    with pytest.raises(NameTaken) as lost:
        create(second, None)
    assert lost.value.holder == first.job_id
    with pytest.raises(JobNotFound):
        repo.get(second.job_id)
    # And a creator that read the current holder takes it over
    create(third, first.job_id)
    assert repo.name_holder("train#alice#run") == third.job_id
    # While one that read a holder that is no longer the holder loses
    with pytest.raises(NameTaken):
        create(second, first.job_id)
    # And another name is another claim
    assert repo.name_holder("train#bob#run") is None


def test_get_of_an_unknown_job_is_not_found(repo: Any) -> None:
    with pytest.raises(JobNotFound):
        repo.get("nope")


def test_transition_writes_status_version_history_and_counters(repo: Any) -> None:
    # Given a PENDING job
    job = _created(repo)
    # When it is queued, then scheduled
    queued = _move(repo, job, S.QUEUED)
    scheduled = _move(repo, queued, S.SCHEDULING, attempt=1)
    # Then each step bumped the version and was recorded, and the counters follow the status
    assert (queued.version, scheduled.version) == (2, 3)
    assert repo.get(job.job_id).status == S.SCHEDULING
    assert repo.get(job.job_id).attempt == 1
    history = repo.history(job.job_id)
    assert [(e.from_status, e.to_status) for e in history] == [(None, S.PENDING), (S.PENDING, S.QUEUED), (S.QUEUED, S.SCHEDULING)]
    assert history[1].reason == "to QUEUED" and history[1].actor == "system"
    counts = repo.counts(ALICE)
    assert counts[S.SCHEDULING] == 1 and counts[S.PENDING] == 0 and counts[S.QUEUED] == 0
    assert repo.counts(None)[S.SCHEDULING] == 1


def test_a_move_the_table_forbids_is_an_illegal_transition(repo: Any) -> None:
    # Given a PENDING job
    job = _created(repo)
    # When it is moved straight to TRAINING
    # Then the table refuses it and nothing is written
    with pytest.raises(IllegalTransition):
        _move(repo, job, S.TRAINING)
    assert repo.get(job.job_id).version == 1
    assert len(repo.history(job.job_id)) == 1


def test_a_stale_version_loses_the_race(repo: Any) -> None:
    # Given a job moved on by another writer
    job = _created(repo)
    _move(repo, job, S.QUEUED)
    # When a writer still holding version 1 tries PENDING -> CANCELLED
    # Then its stale view is refused: the job is no longer PENDING, and CANCELLED from QUEUED would be
    # legal, so this is a lost race (ConcurrentModification), not an illegal move
    with pytest.raises(ConcurrentModification):
        _move(repo, job, S.CANCELLED)
    assert repo.get(job.job_id).status == S.QUEUED


def test_a_stale_writer_whose_move_is_now_forbidden_gets_illegal_transition(repo: Any) -> None:
    # Given a job that was cancelled by another writer
    job = _created(repo)
    _move(repo, job, S.CANCELLED)
    # When a writer with the old view tries PENDING -> QUEUED
    # Then the move is forbidden from where the job now is
    with pytest.raises(IllegalTransition) as err:
        _move(repo, job, S.QUEUED)
    assert err.value.current == S.CANCELLED


def test_changes_with_none_remove_the_attribute(repo: Any) -> None:
    # Given a TRAINING job with a pending pause
    job = _created(repo, status=S.TRAINING, pending_action=PendingAction.PAUSE, pending_reason="user")
    # When it reaches PAUSED and the pending action is cleared
    paused = _move(repo, job, S.PAUSED, pending_action=None, pending_reason=None)
    # Then the stored job has none
    stored = repo.get(job.job_id)
    assert stored.pending_action is None and stored.pending_reason is None
    assert paused == stored


def test_unknown_or_protected_changes_are_refused(repo: Any) -> None:
    job = _created(repo)
    with pytest.raises(ValueError, match="not fields"):
        _move(repo, job, S.QUEUED, colour="blue")
    with pytest.raises(ValueError, match="cannot be changed"):
        repo.update(job.job_id, job.version, {"owner": BOB})


def test_update_is_conditional_on_version_and_allowed_status(repo: Any) -> None:
    # Given a QUEUED job
    job = _move(repo, _created(repo), S.QUEUED)
    # When it is edited at its version
    edited = repo.update(job.job_id, job.version, {"name": "renamed"}, frozenset({S.PENDING, S.QUEUED}))
    # Then the version moved on and the edit is stored
    assert edited.version == job.version + 1
    assert repo.get(job.job_id).name == "renamed"
    # And an edit at the old version loses; one outside the allowed statuses is illegal
    with pytest.raises(ConcurrentModification):
        repo.update(job.job_id, job.version, {"name": "again"})
    with pytest.raises(IllegalTransition) as err:
        repo.update(job.job_id, edited.version, {"name": "x"}, frozenset({S.FAILED}), action="edit")
    assert "cannot edit" in str(err.value)


def test_update_with_an_event_records_it(repo: Any) -> None:
    # Given a TRAINING job
    job = _created(repo, status=S.TRAINING)
    # When a pause request is recorded with the pending action
    at = job.created_at + timedelta(minutes=1)
    event = StatusEvent(at=at, from_status=S.TRAINING, to_status=S.TRAINING, reason="pause requested", actor="user")
    repo.update(job.job_id, job.version, {"pending_action": PendingAction.PAUSE}, event=event)
    # Then the status is unchanged, the action is pending and the history shows the request
    stored = repo.get(job.job_id)
    assert stored.status == S.TRAINING and stored.pending_action == PendingAction.PAUSE
    assert repo.history(job.job_id)[-1].reason == "pause requested"


def test_annotate_and_progress_do_not_bump_the_version(repo: Any) -> None:
    # Given a job
    job = _created(repo, status=S.TRAINING)
    # When bookkeeping and progress are written without a version
    repo.annotate(job.job_id, {"execution_arn": "arn:exec", "run_handle": {"launcher": "local", "run_id": "1", "attempt": "1"}})
    repo.record_progress(job.job_id, Progress(percent=50.0, step=2, total_steps=4, loss=0.5))
    # Then both are stored and the version is untouched, so a concurrent transition still wins
    stored = repo.get(job.job_id)
    assert stored.execution_arn == "arn:exec" and stored.run_handle == {"launcher": "local", "run_id": "1", "attempt": "1"}
    assert stored.progress.step == 2 and stored.progress.loss == 0.5
    assert stored.version == job.version
    assert _move(repo, stored, S.CHECKPOINTING).version == job.version + 1


def test_progress_of_an_unknown_job_is_not_found(repo: Any) -> None:
    with pytest.raises(JobNotFound):
        repo.record_progress("nope", Progress())


def test_progress_only_moves_forward_whatever_order_reports_arrive_in(repo: Any) -> None:
    # Given a job with attempt 2's progress at step 5
    job = _created(repo, status=S.TRAINING)
    assert repo.record_progress(job.job_id, Progress(percent=50.0, step=5, total_steps=10, attempt=2))
    # When a repeated report, an older one and one of an earlier attempt arrive
    assert not repo.record_progress(job.job_id, Progress(percent=50.0, step=5, total_steps=10, attempt=2))
    assert not repo.record_progress(job.job_id, Progress(percent=40.0, step=4, total_steps=10, attempt=2))
    assert not repo.record_progress(job.job_id, Progress(percent=90.0, step=9, total_steps=10, attempt=1))
    # Then nothing changed; a newer step, the same step completed, and a new attempt do
    assert repo.get(job.job_id).progress.step == 5
    assert repo.record_progress(job.job_id, Progress(percent=60.0, step=6, total_steps=10, attempt=2))
    assert repo.record_progress(job.job_id, Progress(percent=100.0, step=6, total_steps=6, attempt=2))
    assert repo.record_progress(job.job_id, Progress(percent=10.0, step=1, total_steps=10, attempt=3))
    assert (repo.get(job.job_id).progress.step, repo.get(job.job_id).progress.attempt) == (1, 3)


def test_checkpoints_reported_out_of_order_keep_step_order_and_latest(repo: Any) -> None:
    job = _created(repo, status=S.TRAINING)
    for step in (8, 4, 8):
        repo.add_checkpoint(job.job_id, CheckpointRef(checkpoint_id=f"step-{step:06d}", step=step, uri=f"s3://b/jobs/x/step-{step}"))
    stored = repo.get(job.job_id)
    assert [r.step for r in stored.checkpoints] == [4, 8] and stored.latest_checkpoint_id == "step-000008"


def test_add_checkpoint_sets_latest_best_and_drops_what_is_not_kept(repo: Any) -> None:
    # Given a training job
    job = _created(repo, status=S.TRAINING)

    def ref(step: int) -> CheckpointRef:
        return CheckpointRef(checkpoint_id=f"step-{step:06d}", step=step, metrics={"loss": 1.0 / step}, uri=f"s3://b/jobs/x/step-{step}")

    # When three checkpoints arrive and retention keeps the last two, the first being best
    repo.add_checkpoint(job.job_id, ref(1), best_checkpoint_id="step-000001")
    repo.add_checkpoint(job.job_id, ref(2))
    last = repo.add_checkpoint(job.job_id, ref(3), keep=["step-000002"])
    # Then only the kept ones remain, latest is the newest, and the dropped best is no longer named
    stored = repo.get(job.job_id)
    assert [r.checkpoint_id for r in stored.checkpoints] == ["step-000002", "step-000003"]
    assert stored.latest_checkpoint_id == "step-000003"
    assert stored.best_checkpoint_id is None
    assert last == stored
    assert stored.checkpoints[1].metrics["loss"] == pytest.approx(1 / 3)


def test_history_of_a_verb_without_status_change(repo: Any) -> None:
    job = _created(repo, status=S.FAILED)
    repo.append_event(job.job_id, StatusEvent(at=T0 + timedelta(days=1), from_status=S.FAILED, to_status=S.FAILED, reason="retried as x"))
    assert repo.history(job.job_id)[-1].reason == "retried as x"


def test_queued_orders_by_priority_then_submission_and_is_sparse(repo: Any) -> None:
    # Given jobs in two queues, some QUEUED with various priorities, some not queued
    low_old = _move(repo, _created(repo, priority=2, created_at=T0), S.QUEUED)
    high_new = _move(repo, _created(repo, priority=9, created_at=T0 + timedelta(hours=2)), S.QUEUED)
    high_old = _move(repo, _created(repo, priority=9, created_at=T0 + timedelta(hours=1)), S.QUEUED)
    _created(repo, priority=10)  # PENDING: not in the queue index
    _move(repo, _created(repo, priority=10, queue="gpu"), S.QUEUED)
    started = _move(repo, _move(repo, _created(repo, priority=10), S.QUEUED), S.SCHEDULING)  # left the queue
    # When the default queue is read
    order = [j.job_id for j in repo.queued("default")]
    # Then highest priority first, oldest first within a priority, only QUEUED jobs of that queue
    assert order == [high_old.job_id, high_new.job_id, low_old.job_id]
    assert started.job_id not in order
    assert len(repo.queued("default", limit=2)) == 2


def test_patching_priority_reorders_the_queue(repo: Any) -> None:
    # Given two queued jobs, the older one first at equal priority
    first = _move(repo, _created(repo, created_at=T0), S.QUEUED)
    second = _move(repo, _created(repo, created_at=T0 + timedelta(minutes=1)), S.QUEUED)
    # When the newer one's priority is raised
    sc = second.scheduling_config.model_copy(update={"priority": 8})
    repo.update(second.job_id, second.version, {"scheduling_config": sc})
    # Then it comes first
    assert [j.job_id for j in repo.queued("default")] == [second.job_id, first.job_id]


def test_list_filters_and_pages_newest_first(repo: Any) -> None:
    # Given 18 jobs of alice with labels and statuses, and some of bob
    for i in range(18):
        labels = {"team": "a" if i % 2 else "b", "exp": "x" if i % 3 == 0 else "y"}
        job = _created(repo, created_at=T0 + timedelta(minutes=i), request={"name": f"run-{i:02d}", "labels": labels})
        if i % 5 == 0:
            _move(repo, job, S.QUEUED)
    for i in range(3):
        _created(repo, owner=BOB, created_at=T0 + timedelta(minutes=100 + i))
    # When alice lists with labels (ANDed) in pages of 2
    seen: list[Job] = []
    token = None
    while True:
        page, token = repo.list_jobs(JobQuery(owner=ALICE, labels={"team": "a", "exp": "x"}, limit=2, next_token=token))
        seen.extend(page)
        if token is None:
            break
    # Then exactly the matching jobs come back, newest first, none twice
    expected = [f"run-{i:02d}" for i in reversed(range(18)) if i % 2 and i % 3 == 0]
    assert [j.name for j in seen] == expected
    # And status, name and queue filters work, alone and together
    queued, _ = repo.list_jobs(JobQuery(owner=ALICE, status=S.QUEUED, limit=50))
    assert sorted(j.name for j in queued) == [f"run-{i:02d}" for i in range(0, 18, 5)]
    named, _ = repo.list_jobs(JobQuery(owner=ALICE, name_contains="run-1", queue="default", limit=50))
    assert len(named) == 8
    assert repo.list_jobs(JobQuery(owner=ALICE, queue="gpu", limit=50)) == ([], None)
    # And bob sees only his, an admin (owner None) sees all
    assert len(repo.list_jobs(JobQuery(owner=BOB, limit=50))[0]) == 3
    everyone, _ = repo.list_jobs(JobQuery(owner=None, limit=100))
    assert len(everyone) == 21 and everyone[0].owner == BOB


def test_priority_filter_is_inclusive_and_pages_across_the_whole_listing(repo: Any) -> None:
    # Given 30 jobs of alice with priorities 0..10 in turn (newest last), and a high one of bob's
    for i in range(30):
        _created(repo, created_at=T0 + timedelta(minutes=i), priority=i % 11, request={"name": f"p-{i:02d}"})
    _created(repo, owner=BOB, created_at=T0 + timedelta(hours=1), priority=9)
    # When alice lists the High band (7-10) in pages of 2
    seen: list[Job] = []
    token = None
    while True:
        page, token = repo.list_jobs(JobQuery(owner=ALICE, priority_min=7, priority_max=10, limit=2, next_token=token))
        assert len(page) <= 2
        seen.extend(page)
        if token is None:
            break
    # Then every matching job of the whole listing comes back, newest first, none twice, bob's never
    assert [j.name for j in seen] == [f"p-{i:02d}" for i in reversed(range(30)) if i % 11 >= 7]
    # And each bound works alone, with the other filters ANDed
    low, _ = repo.list_jobs(JobQuery(owner=ALICE, priority_max=0, limit=50))
    assert sorted(j.name for j in low) == ["p-00", "p-11", "p-22"]
    top, _ = repo.list_jobs(JobQuery(owner=ALICE, priority_min=10, name_contains="p-2", limit=50))
    assert [j.name for j in top] == ["p-21"]


def test_an_exactly_full_last_page_has_no_token(repo: Any) -> None:
    for i in range(4):
        _created(repo, created_at=T0 + timedelta(minutes=i))
    first, token = repo.list_jobs(JobQuery(owner=ALICE, limit=2))
    second, token2 = repo.list_jobs(JobQuery(owner=ALICE, limit=2, next_token=token))
    assert token is not None and token2 is None
    assert len({j.job_id for j in first + second}) == 4


def test_tokens_are_checked(repo: Any) -> None:
    # Given a token from alice's listing
    for i in range(3):
        _created(repo, created_at=T0 + timedelta(minutes=i))
    _, token = repo.list_jobs(JobQuery(owner=ALICE, limit=1))
    # When bob replays it, or a garbled token is sent
    # Then both are refused naming next_token
    with pytest.raises(InvalidRequest) as err:
        repo.list_jobs(JobQuery(owner=BOB, limit=1, next_token=token))
    assert err.value.field == "next_token"
    with pytest.raises(InvalidRequest):
        repo.list_jobs(JobQuery(owner=ALICE, limit=1, next_token="not-a-token!"))
    with pytest.raises(InvalidRequest) as err:
        repo.list_jobs(JobQuery(owner=ALICE, limit=0))
    assert err.value.field == "limit"


def test_delete_removes_the_job_history_and_counts(repo: Any) -> None:
    # Given two completed... one failed job of alice with history, and another job
    job = _move(repo, _created(repo), S.FAILED)
    other = _created(repo)
    # When the failed job is deleted at a stale version, then at its version
    with pytest.raises(ConcurrentModification):
        repo.delete(job.job_id, expected_version=1)
    repo.delete(job.job_id, expected_version=job.version)
    # Then it is gone with its history, the counters no longer count it, the other job is untouched
    with pytest.raises(JobNotFound):
        repo.get(job.job_id)
    assert repo.history(job.job_id) == []
    assert repo.counts(ALICE)[S.FAILED] == 0 and repo.counts(ALICE)[S.PENDING] == 1
    assert repo.get(other.job_id) == other
    with pytest.raises(JobNotFound):
        repo.delete(job.job_id)


def _serialize_moto_calls(repo: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # moto's DynamoDB backend is not thread-safe (docs/LOCAL_AWS.md); DynamoDB itself applies each call
    # atomically. One lock per API call restores that, and keeps the read-then-conditional-write race.
    if isinstance(repo, DynamoJobRepository):
        client = repo._ddb
        real = client._make_api_call
        lock = threading.Lock()

        def locked(*args: Any, **kwargs: Any) -> Any:
            with lock:
                return real(*args, **kwargs)

        monkeypatch.setattr(client, "_make_api_call", locked)


def test_twenty_threads_racing_one_transition_exactly_one_wins(repo: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a QUEUED job read by 20 workers
    _serialize_moto_calls(repo, monkeypatch)
    job = _move(repo, _created(repo), S.QUEUED)
    barrier = threading.Barrier(20)
    outcomes: list[str] = []
    lock = threading.Lock()

    def worker(i: int) -> None:
        target = S.CANCELLED if i % 2 else S.SCHEDULING
        barrier.wait()
        try:
            _move(repo, job, target)
            result = "won"
        except (ConcurrentModification, IllegalTransition) as exc:
            result = type(exc).__name__
        with lock:
            outcomes.append(result)

    # When all of them try to move it at once
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Then exactly one wins; the history holds exactly that one move; counters are consistent
    assert outcomes.count("won") == 1, outcomes
    stored = repo.get(job.job_id)
    assert stored.version == job.version + 1
    assert len(repo.history(job.job_id)) == 3
    counts = repo.counts(ALICE)
    assert counts[stored.status] == 1 and sum(counts.values()) == 1


# --- DynamoDB specifics ------------------------------------------------------------------------------


def test_no_scan_is_ever_issued(dynamo: DynamoJobRepository, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a repository whose client refuses Scan
    client = dynamo._ddb

    def refuse(**_: Any) -> None:
        raise AssertionError("Scan used")

    monkeypatch.setattr(client, "scan", refuse, raising=False)
    # When every read path runs
    job = _created(dynamo)
    _move(dynamo, job, S.QUEUED)
    dynamo.list_jobs(JobQuery(owner=ALICE, status=S.QUEUED, labels={"team": "support"}, name_contains="tiny"))
    dynamo.list_jobs(JobQuery(owner=None))
    dynamo.queued("default")
    dynamo.counts(None)
    dynamo.history(job.job_id)
    # Then nothing scanned (the refusal above would have raised)


def test_items_and_index_keys_follow_the_table_design(dynamo: DynamoJobRepository, aws: AwsClients) -> None:
    # Given a queued job
    job = _move(dynamo, _created(dynamo, priority=7), S.QUEUED)
    # When the raw items are read
    ddb = aws.dynamodb()
    rows = ddb.query(
        TableName=dynamo.table,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": f"JOB#{job.job_id}"}},
    )["Items"]
    # Then there is one META item with the GSI keys and one EVENT item per history entry
    sks = sorted(r["sk"]["S"] for r in rows)
    assert sks[-1] == "META" and all(s.startswith("EVENT#") for s in sks[:-1]) and len(sks) == 3
    meta = next(r for r in rows if r["sk"]["S"] == "META")
    assert meta[c.GSI_OWNER_PK]["S"] == f"OWNER#{ALICE}"
    assert meta[c.GSI_QUEUE_PK]["S"] == "QUEUE#default" and meta[c.GSI_QUEUE_SK]["S"].startswith("03#")
    # And documents nothing filters on are packed (one attribute each); filterable maps stay native
    assert json.loads(meta["training_config"]["B"])["training_type"] == "LORA"
    assert meta["labels"]["M"]["team"]["S"] == "support" and meta["scheduling_config"]["M"]["queue"]["S"] == "default"
    assert meta["status"]["S"] == "QUEUED" and meta["version"]["N"] == "2"
    # And leaving QUEUED removes the job from the sparse index
    _move(dynamo, job, S.SCHEDULING)
    meta = ddb.get_item(TableName=dynamo.table, Key={"pk": {"S": f"JOB#{job.job_id}"}, "sk": {"S": "META"}})["Item"]
    assert c.GSI_QUEUE_PK not in meta and c.GSI_QUEUE_SK not in meta


def test_filtered_listing_reads_ahead_over_many_pages(dynamo: DynamoJobRepository, aws: AwsClients) -> None:
    # Given 120 jobs of which only the oldest 3 match (put directly: moto's transactions deep-copy
    # the whole table each time, which would make seeding quadratic)
    for i in range(120):
        job = make_job(created_at=T0 + timedelta(seconds=i), request={"labels": {"k": "hit" if i < 3 else "miss"}})
        aws.dynamodb().put_item(TableName=dynamo.table, Item=job_item(job))
    # When one match is asked per page
    page, token = dynamo.list_jobs(JobQuery(owner=ALICE, labels={"k": "hit"}, limit=1))
    rest, _ = dynamo.list_jobs(JobQuery(owner=ALICE, labels={"k": "hit"}, limit=5, next_token=token))
    # Then the listing looped over the pages until it found them
    assert len(page) == 1 and len(rest) == 2


def test_a_transaction_conflict_is_retried(dynamo: DynamoJobRepository, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a client whose first transaction is cancelled by a conflict on a counter item
    client = dynamo._ddb
    real = client.transact_write_items
    calls = {"n": 0}

    def flaky(**kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise client.exceptions.TransactionCanceledException(
                {
                    "Error": {"Code": "TransactionCanceledException", "Message": "conflict"},
                    "CancellationReasons": [{"Code": "None"}, {"Code": "TransactionConflict"}],
                },
                "TransactWriteItems",
            )
        return real(**kwargs)

    monkeypatch.setattr(client, "transact_write_items", flaky)
    # When a job is created
    job = _created(dynamo)
    # Then the retry went through
    assert calls["n"] == 2 and dynamo.get(job.job_id) == job


def test_free_form_numbers_keep_their_type_through_storage(repo: Any) -> None:
    # Given a job whose free-form model_kwargs hold floats, ints and a bool
    kwargs = {"architecture": "llama", "rope_theta": 10000.5, "hidden_size": 16, "vocab_size": 260, "tie_word_embeddings": True}
    body = _request_with_model_kwargs(kwargs)
    job = _created(repo, request=body)
    # When it is read back
    stored = repo.get(job.job_id)
    # Then each value has its own type (a float read back as text would reach the model config as a string)
    assert stored.training_config.base_model.model_kwargs == kwargs
    assert isinstance(stored.training_config.base_model.model_kwargs["rope_theta"], float)


def _request_with_model_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    from tests.helpers.jobs import request_body

    body = request_body()
    body["training_config"]["base_model"]["model_kwargs"] = kwargs
    return {"training_config": body["training_config"]}


def test_annotate_with_only_removals(repo: Any) -> None:
    # Given a job with an annotation / When every annotated field is cleared at once
    job = _created(repo)
    repo.annotate(job.job_id, {"execution_arn": "arn:aws:states:us-east-1:123456789012:execution:x:y"})
    repo.annotate(job.job_id, {"execution_arn": None})
    # Then it is gone (no empty ExpressionAttributeValues refused by DynamoDB)
    assert repo.get(job.job_id).execution_arn is None


def test_two_concurrent_post_train_of_one_run_make_exactly_one_job(dynamo: DynamoJobRepository, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given /train over the DynamoDB repository (each moto call atomic, as DynamoDB's are), where both
    # requests read "nobody holds the run" before either writes
    _serialize_moto_calls(dynamo, monkeypatch)
    from functions.errors import RunActive
    from functions.service.compat.deepfinery import TrainApi
    from functions.service.jobs import JobService
    from functions.service.principal import Principal
    from functions.settings import Settings
    from schemas.access import BucketGrant
    from schemas.train import TrainRequest
    from tests.fakes import InMemoryArtifactStore

    grants = (BucketGrant(uri="s3://runs/", access="read-write"), BucketGrant(uri="s3://data/", access="read"))
    api = TrainApi(JobService(dynamo, InMemoryArtifactStore(), None, Settings(compute="local", bucket_grants=grants)))
    both_read = threading.Barrier(2)
    real_holder = dynamo.name_holder

    def holder_after_both_read(key: str) -> str | None:
        holder = real_holder(key)
        both_read.wait(timeout=10)
        return holder

    monkeypatch.setattr(dynamo, "name_holder", holder_after_both_read)
    request = TrainRequest(
        framework="hf", model_id="sshleifer/tiny-gpt2", run_id="race", checkpoint_base_uri="s3://runs/base", dataset_uri="s3://data/d.jsonl"
    )
    outcomes: list[object] = []

    def post() -> None:
        try:
            outcomes.append(api.submit(request, Principal(ALICE)))
        except RunActive as exc:
            outcomes.append(exc)

    # When two POST /train of the same run_id race
    threads = [threading.Thread(target=post) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    # Then exactly one made a job (201) and the other was refused as the run being active (409), naming the winner
    made = [o for o in outcomes if not isinstance(o, RunActive)]
    refused = [o for o in outcomes if isinstance(o, RunActive)]
    assert len(made) == 1 and len(refused) == 1
    assert refused[0].job_id == made[0].job_id  # type: ignore[attr-defined]
    jobs, _ = dynamo.list_jobs(JobQuery(owner=None))
    assert [(j.job_id, j.labels["train_run_id"]) for j in jobs] == [(made[0].job_id, "race")]  # type: ignore[attr-defined]
