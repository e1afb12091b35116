"""The job repository's requests as real DynamoDB checks them, its events' contents and its retries.

Every request goes through tests/helpers/ddb_requests.py's checked client (placeholders defined and used,
functions and enum values DynamoDB knows), which moto alone does not check. Written against the
survivors of `make mutation`'s dynamodb module (docs/TESTING.md).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
from botocore.exceptions import ClientError

from functions import constants as c
from functions.adapters import dynamodb as dynamodb_module
from functions.adapters import dynamodb_items as items
from functions.adapters.aws import AwsClients
from functions.adapters.dynamodb import DynamoJobRepository
from functions.adapters.outbox import DynamoOutbox
from functions.catalog import own_events as et
from functions.errors import ConcurrentModification, IllegalTransition, JobNotFound
from functions.service.ports import NameClaim, Reclaim, Transition
from schemas.job import CheckpointRef, Job, Progress, StatusEvent
from schemas.status import JobStatus
from tests.helpers.aws import emulated_aws, fresh_resources
from tests.helpers.ddb_requests import CheckedClients
from tests.helpers.jobs import make_job
from tests.helpers.races import StaleRead

S = JobStatus
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
DASHBOARD = "https://dash.example"


@pytest.fixture(scope="module")
def aws() -> Iterator[AwsClients]:
    with emulated_aws() as clients:
        yield clients


@pytest.fixture
def checked(aws: AwsClients) -> CheckedClients:
    return CheckedClients(aws)


@pytest.fixture
def repo(aws: AwsClients, checked: CheckedClients) -> DynamoJobRepository:
    return DynamoJobRepository(checked, fresh_resources(aws).jobs_table, clock=lambda: NOW, dashboard_url=DASHBOARD)


def _created(repo: DynamoJobRepository, claim: NameClaim | None = None, **kwargs: Any) -> Job:
    job = make_job(**kwargs)
    repo.create(job, StatusEvent(at=job.created_at, to_status=job.status, reason="submitted by alice", actor="user"), claim)
    return job


def _queued(repo: DynamoJobRepository) -> Job:
    job = _created(repo)
    return repo.transition(Transition(job.job_id, job.version, job.status, S.QUEUED, "queued", "system"))


def _events(repo: DynamoJobRepository, job_id: str) -> list[tuple[str, dict[str, Any], str]]:
    records = DynamoOutbox(repo._clients, repo.table).pending(limit=1000)
    return [(r.detail_type, json.loads(r.detail), r.key) for r in records if r.subject_id == job_id]


def _ref(n: int) -> CheckpointRef:
    return CheckpointRef(checkpoint_id=f"ckpt-{n:08d}", step=n, uri=f"s3://b/jobs/x/checkpoints/ckpt-{n:08d}/")


def _ids(job: Job) -> list[str]:
    return [r.checkpoint_id for r in job.checkpoints]


# --- the first event and the name claim --------------------------------------------------------------


def test_create_writes_the_first_event_with_its_reason_link_and_sequence_one(repo: DynamoJobRepository) -> None:
    job = _created(repo)
    ((detail_type, detail, key),) = _events(repo, job.job_id)
    assert detail_type == et.JOB_STATE_CHANGE.detail_type
    assert (detail["sequence"], detail["reason"], detail["actor"]) == (1, "submitted by alice", "user")
    assert detail["dashboard_url"] is not None and detail["dashboard_url"].startswith(DASHBOARD)
    assert f"#{et.SUBJECT_JOB}#{job.job_id}#" in key


def test_a_name_claim_is_stored_as_a_claim_item_naming_the_job(repo: DynamoJobRepository, checked: CheckedClients) -> None:
    job = _created(repo, NameClaim(key="train#alice#run-1", previous_job_id=None))
    assert repo.name_holder("train#alice#run-1") == job.job_id
    item = checked.ddb._real.get_item(TableName=repo.table, Key=items.claim_key("train#alice#run-1"))["Item"]
    assert item["entity"] == {"S": "CLAIM"}  # TABLE_DESIGN.md: the claim item's entity
    second = _created(repo, NameClaim(key="train#alice#run-1", previous_job_id=job.job_id))
    assert repo.name_holder("train#alice#run-1") == second.job_id


# --- transitions -------------------------------------------------------------------------------------


def test_a_transition_decided_before_a_checkpoint_was_recorded_still_applies(repo: DynamoJobRepository) -> None:
    # Given a RUNNING job, and a checkpoint recorded between a transition's read and its write (only the
    # job's event counter moved): the decision stands, the transition retries and applies
    job = _queued(repo)
    job = repo.transition(Transition(job.job_id, job.version, S.QUEUED, S.SCHEDULING, "placed", "system"))
    move = Transition(job.job_id, job.version, S.SCHEDULING, S.CANCELLED, "cancelled", "user")
    outcomes = StaleRead(repo, "_get_item").run(lambda: repo.add_checkpoint(job.job_id, _ref(1)), lambda: repo.transition(move))
    assert [o.error for o in outcomes] == [None, None]
    stored = repo.get(job.job_id)
    assert (stored.status, _ids(stored)) == (S.CANCELLED, ["ckpt-00000001"])


# --- updates: the transaction's refusals, the reclaim event, the bookkeeping --------------------------


def test_an_update_stamps_updated_at_and_stores_it(repo: DynamoJobRepository) -> None:
    job = _created(repo)
    new = repo.update(job.job_id, job.version, {"description": "edited"})
    assert new.updated_at == NOW and repo.get(job.job_id).updated_at == NOW
    new = repo.update(job.job_id, new.version, {"description": "again"}, event=StatusEvent(at=NOW, to_status=job.status, reason="x"))
    assert repo.get(job.job_id).version == new.version == job.version + 2


def test_an_update_refused_by_the_status_names_the_default_action(repo: DynamoJobRepository) -> None:
    job = _created(repo)
    with pytest.raises(IllegalTransition) as refused:
        repo.update(job.job_id, job.version, {"description": "x"}, allowed=frozenset({S.QUEUED}))
    assert refused.value.action == "update"


@pytest.mark.parametrize("with_event", [True, False], ids=["event", "reclaim"])
def test_an_update_with_an_event_loses_to_a_status_change_as_an_illegal_transition(repo: DynamoJobRepository, with_event: bool) -> None:
    job = _queued(repo)
    extra: dict[str, Any] = {"event": StatusEvent(at=NOW, to_status=S.QUEUED, reason="edited")} if with_event else {"reclaim": _reclaim()}
    cancel = Transition(job.job_id, job.version, S.QUEUED, S.CANCELLED, "cancelled", "user")
    outcomes = StaleRead(repo, "_get_item").run(
        lambda: repo.transition(cancel),
        lambda: repo.update(job.job_id, job.version, {"description": "x"}, allowed=frozenset({S.QUEUED}), action="edit", **extra),
    )
    assert outcomes[0].won
    error = outcomes[1].error
    assert isinstance(error, IllegalTransition) and (error.current, error.action) == (S.CANCELLED, "edit")


def test_an_update_with_an_event_loses_to_another_edit_as_a_concurrent_modification(repo: DynamoJobRepository) -> None:
    job = _created(repo)
    event = StatusEvent(at=NOW, to_status=job.status, reason="edited")
    outcomes = StaleRead(repo, "_get_item").run(
        lambda: repo.update(job.job_id, job.version, {"description": "first"}),
        lambda: repo.update(job.job_id, job.version, {"description": "second"}, event=event),
    )
    assert outcomes[0].won and type(outcomes[1].error) is ConcurrentModification
    assert repo.get(job.job_id).description == "first"


@pytest.mark.parametrize("with_event", [True, False], ids=["event", "plain"])
def test_an_update_of_a_job_deleted_meanwhile(repo: DynamoJobRepository, with_event: bool) -> None:
    job = _created(repo)
    extra: dict[str, Any] = {"event": StatusEvent(at=NOW, to_status=job.status, reason="edited")} if with_event else {}
    outcomes = StaleRead(repo, "_get_item").run(
        lambda: repo.delete(job.job_id), lambda: repo.update(job.job_id, job.version, {"description": "x"}, **extra)
    )
    assert outcomes[0].won
    # the transaction's stored item tells a deleted job apart; the plain edit's single write cannot
    assert type(outcomes[1].error) is (JobNotFound if with_event else ConcurrentModification)


def _reclaim() -> Reclaim:
    return Reclaim(
        team="red",
        gpu_type="A100",
        gpus=2,
        beneficiary_job_id="job-lender",
        beneficiary_team="blue",
        rule="borrowed_beyond_nominal",
        work_lost_gpu_seconds=12.5,
    )


def test_a_reclaim_writes_its_event_with_the_next_sequence_in_the_same_transaction(repo: DynamoJobRepository) -> None:
    job = _queued(repo)
    before = len(_events(repo, job.job_id))
    new = repo.update(job.job_id, job.version, {"pending_reason": "reclaimed for blue"}, reclaim=_reclaim())
    events = _events(repo, job.job_id)
    assert len(events) == before + 1
    detail_type, detail, key = events[-1]
    assert detail_type == et.JOB_RECLAIMED.detail_type and f"#{et.SUBJECT_JOB}#{job.job_id}#" in key
    assert detail["sequence"] == before + 1 == max(d["sequence"] for _, d, _ in events)
    assert (detail["job_id"], detail["team"], detail["beneficiary_job_id"], detail["gpus"]) == (job.job_id, "red", "job-lender", 2)
    assert detail["reason"] == "reclaimed for blue" and datetime.fromisoformat(detail["at"]) == NOW
    assert detail["dashboard_url"].startswith(DASHBOARD)
    assert repo.get(job.job_id).version == new.version == job.version + 1
    # the job's event counter moved with it: the next transition's event follows on
    moved = repo.transition(Transition(job.job_id, new.version, S.QUEUED, S.CANCELLED, "cancelled", "user"))
    assert moved.status == S.CANCELLED
    assert _events(repo, job.job_id)[-1][1]["sequence"] == before + 2


# --- progress ----------------------------------------------------------------------------------------


def test_progress_reports_are_checked_requests(repo: DynamoJobRepository) -> None:
    job = _created(repo)
    assert repo.record_progress(job.job_id, Progress(percent=10.0, step=5))
    assert repo.record_progress(job.job_id, Progress(percent=20.0, step=10, attempt=1, updated_at=NOW))
    assert not repo.record_progress(job.job_id, Progress(percent=15.0, step=7, attempt=1))
    stored = repo.get(job.job_id).progress
    assert stored is not None and (stored.step, stored.updated_at) == (10, NOW)


# --- checkpoints -------------------------------------------------------------------------------------


def test_a_new_checkpoint_is_one_transaction_with_its_event_a_repeated_report_one_write_without(
    repo: DynamoJobRepository, checked: CheckedClients
) -> None:
    job = _created(repo)
    repo.add_checkpoint(job.job_id, _ref(1))
    checked.ddb.calls.clear()
    repo.add_checkpoint(job.job_id, _ref(2))
    assert checked.ddb.writes() == ["transact_write_items"]
    checked.ddb.calls.clear()
    repo.add_checkpoint(job.job_id, _ref(1))  # at-least-once delivery: the first again
    assert checked.ddb.writes() == ["update_item"]
    saved = [d["checkpoint_id"] for t, d, _ in _events(repo, job.job_id) if t == et.CHECKPOINT_SAVED.detail_type]
    assert saved == ["ckpt-00000001", "ckpt-00000002"]
    assert _ids(repo.get(job.job_id)) == ["ckpt-00000001", "ckpt-00000002"]


def test_a_repeated_report_decided_before_another_checkpoint_was_recorded_retries(repo: DynamoJobRepository) -> None:
    job = _created(repo)
    repo.add_checkpoint(job.job_id, _ref(1))
    outcomes = StaleRead(repo, "_get_item").run(
        lambda: repo.add_checkpoint(job.job_id, _ref(2)), lambda: repo.add_checkpoint(job.job_id, _ref(1))
    )
    assert [o.error for o in outcomes] == [None, None]
    assert _ids(repo.get(job.job_id)) == ["ckpt-00000001", "ckpt-00000002"]


def test_a_repeated_report_read_while_queued_does_not_put_a_moved_job_back_in_the_queue(repo: DynamoJobRepository) -> None:
    job = _queued(repo)
    repo.add_checkpoint(job.job_id, _ref(1))
    job = repo.get(job.job_id)
    place = Transition(job.job_id, job.version, S.QUEUED, S.SCHEDULING, "placed", "system")
    outcomes = StaleRead(repo, "_get_item").run(lambda: repo.transition(place), lambda: repo.add_checkpoint(job.job_id, _ref(1)))
    assert [o.error for o in outcomes] == [None, None]
    assert repo.get(job.job_id).status == S.SCHEDULING
    assert job.job_id not in [j.job_id for j in repo.queued(job.queue)]


def test_the_best_checkpoint_is_kept_until_dropped(repo: DynamoJobRepository) -> None:
    job = _created(repo)
    assert repo.add_checkpoint(job.job_id, _ref(1), best_checkpoint_id="ckpt-00000001").best_checkpoint_id == "ckpt-00000001"
    assert repo.get(job.job_id).best_checkpoint_id == "ckpt-00000001"
    repo.add_checkpoint(job.job_id, _ref(2))  # no new best: the stored one stays
    assert repo.get(job.job_id).best_checkpoint_id == "ckpt-00000001"
    repo.add_checkpoint(job.job_id, _ref(3), best_checkpoint_id="ckpt-00000003")
    assert repo.get(job.job_id).best_checkpoint_id == "ckpt-00000003"
    repo.add_checkpoint(job.job_id, _ref(4), keep=["ckpt-00000002"])  # retention dropped the best
    stored = repo.get(job.job_id)
    assert (_ids(stored), stored.best_checkpoint_id, stored.latest_checkpoint_id) == (
        ["ckpt-00000002", "ckpt-00000004"],
        None,
        "ckpt-00000004",
    )


@pytest.mark.parametrize("best", [None, "ckpt-00000001"])
def test_the_refs_are_capped_keeping_the_best_and_the_newest(
    repo: DynamoJobRepository, monkeypatch: pytest.MonkeyPatch, best: str | None
) -> None:
    monkeypatch.setattr(dynamodb_module, "MAX_CHECKPOINT_REFS", 3)
    job = _created(repo)
    repo.add_checkpoint(job.job_id, _ref(1), best_checkpoint_id=best)
    repo.add_checkpoint(job.job_id, _ref(2))
    repo.add_checkpoint(job.job_id, _ref(3))
    assert _ids(repo.get(job.job_id)) == ["ckpt-00000001", "ckpt-00000002", "ckpt-00000003"]  # at the cap: all kept
    repo.add_checkpoint(job.job_id, _ref(4))
    stored = repo.get(job.job_id)
    # one place is the best's, whether or not there is one: the newest MAX - 1 others stay
    expected = ["ckpt-00000003", "ckpt-00000004"] if best is None else ["ckpt-00000001", "ckpt-00000003", "ckpt-00000004"]
    assert (_ids(stored), stored.best_checkpoint_id, stored.latest_checkpoint_id) == (expected, best, "ckpt-00000004")


def _without_checkpoints(repo: DynamoJobRepository, checked: CheckedClients) -> Job:
    """A job item written before checkpoints were stored: no `checkpoints` attribute at all."""
    job = _created(repo)
    key = {c.PK: {"S": items.job_pk(job.job_id)}, c.SK: {"S": items.META}}
    checked.ddb._real.update_item(TableName=repo.table, Key=key, UpdateExpression="REMOVE checkpoints")
    assert "checkpoints" not in checked.ddb._real.get_item(TableName=repo.table, Key=key)["Item"]
    return job


def test_the_first_checkpoint_of_an_item_without_the_list(repo: DynamoJobRepository, checked: CheckedClients) -> None:
    job = _without_checkpoints(repo, checked)
    outcomes = StaleRead(repo, "_get_item").run(
        lambda: repo.add_checkpoint(job.job_id, _ref(1)), lambda: repo.add_checkpoint(job.job_id, _ref(2))
    )
    assert [o.error for o in outcomes] == [None, None]  # the second was refused once, then recomputed
    assert _ids(repo.get(job.job_id)) == ["ckpt-00000001", "ckpt-00000002"]


def test_the_first_checkpoint_of_a_deleted_job_is_not_written(repo: DynamoJobRepository, checked: CheckedClients) -> None:
    job = _without_checkpoints(repo, checked)
    outcomes = StaleRead(repo, "_get_item").run(lambda: repo.delete(job.job_id), lambda: repo.add_checkpoint(job.job_id, _ref(1)))
    assert outcomes[0].won and isinstance(outcomes[1].error, JobNotFound)
    assert (
        checked.ddb._real.query(
            TableName=repo.table,
            KeyConditionExpression="#pk = :pk",
            ExpressionAttributeNames={"#pk": c.PK},
            ExpressionAttributeValues={":pk": {"S": items.job_pk(job.job_id)}},
        )["Items"]
        == []
    )


# --- _transact's retries -----------------------------------------------------------------------------


class _Canceling:
    """A client whose transactions are cancelled with `codes` (one list per call; the last repeats)."""

    def __init__(self, real: Any, codes: Sequence[list[str] | None]) -> None:
        self.exceptions = real.exceptions
        self._codes = codes
        self.attempts = 0

    def transact_write_items(self, **_: Any) -> None:
        codes = self._codes[min(self.attempts, len(self._codes) - 1)]
        self.attempts += 1
        if codes == []:
            return
        response: dict[str, Any] = {"Error": {"Code": "TransactionCanceledException", "Message": "cancelled"}}
        if codes is not None:
            response["CancellationReasons"] = [{"Code": code} for code in codes]
        raise self.exceptions.TransactionCanceledException(response, "TransactWriteItems")


@pytest.fixture
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    slept: list[float] = []
    monkeypatch.setattr(dynamodb_module.time, "sleep", slept.append)
    return slept


def _transact_on(
    aws: AwsClients, monkeypatch: pytest.MonkeyPatch, codes: Sequence[list[str] | None]
) -> tuple[DynamoJobRepository, _Canceling]:
    fake = _Canceling(aws.dynamodb(), codes)
    repo = DynamoJobRepository(aws, "unused")
    monkeypatch.setattr(DynamoJobRepository, "_ddb", property(lambda _self: fake))
    return repo, fake


def test_a_transaction_conflict_is_retried_until_it_goes_through(
    aws: AwsClients, monkeypatch: pytest.MonkeyPatch, no_sleep: list[float]
) -> None:
    conflict = ["None", "TransactionConflict"]
    repo, fake = _transact_on(aws, monkeypatch, [conflict] * 5 + [[]])
    assert repo._transact([]) is None
    assert fake.attempts == 6 and len(no_sleep) == 5


def test_a_transaction_conflict_to_the_last_attempt_is_raised(
    aws: AwsClients, monkeypatch: pytest.MonkeyPatch, no_sleep: list[float]
) -> None:
    repo, fake = _transact_on(aws, monkeypatch, [["TransactionConflict"]])
    with pytest.raises(ClientError) as raised:
        repo._transact([])
    assert raised.value.response["Error"]["Code"] == "TransactionCanceledException"
    assert fake.attempts == dynamodb_module._TRANSACTION_ATTEMPTS == 6


@pytest.mark.parametrize("codes", [["ThrottlingError"], ["ValidationError", "None"], None], ids=["throttled", "invalid", "no-reasons"])
def test_other_cancellations_are_raised_at_once(
    aws: AwsClients, monkeypatch: pytest.MonkeyPatch, no_sleep: list[float], codes: list[str] | None
) -> None:
    repo, fake = _transact_on(aws, monkeypatch, [codes, []])
    with pytest.raises(ClientError):
        repo._transact([])
    assert fake.attempts == 1 and no_sleep == []


def test_a_failed_condition_returns_its_reasons_without_retrying(
    aws: AwsClients, monkeypatch: pytest.MonkeyPatch, no_sleep: list[float]
) -> None:
    repo, fake = _transact_on(aws, monkeypatch, [["ConditionalCheckFailed", "TransactionConflict"], []])
    assert repo._transact([]) == [{"Code": "ConditionalCheckFailed"}, {"Code": "TransactionConflict"}]
    assert fake.attempts == 1
