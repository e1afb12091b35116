"""The sweep repository's requests as real DynamoDB checks them, its events' contents, its refusals after a
stale read, an ended trial kept apart, and the legacy job condition of record_value.

Every request goes through tests/helpers/ddb_requests.py's checked client. Written against the survivors
of `make mutation`'s sweeps module (docs/TESTING.md).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from functions import constants as c
from functions.adapters import dynamodb_items as items
from functions.adapters import sweeps as layout
from functions.adapters.aws import AwsClients
from functions.adapters.outbox import DynamoOutbox
from functions.adapters.sweeps import DynamoSweepRepository
from functions.catalog import own_events as et
from functions.errors import TooLarge
from schemas.sweeps import Sweep, SweepStatus, Trial, TrialState
from tests.helpers.aws import emulated_aws, fresh_resources
from tests.helpers.ddb_requests import CheckedClient, CheckedClients
from tests.helpers.sweeps import Plane

DASHBOARD = "https://dash.example"
AT = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def aws() -> Iterator[AwsClients]:
    with emulated_aws() as clients:
        yield clients


@pytest.fixture
def plane(aws: AwsClients) -> Plane:
    return Plane(aws, fresh_resources(aws))


@pytest.fixture
def checked(aws: AwsClients) -> CheckedClients:
    return CheckedClients(aws)


@pytest.fixture
def repo(plane: Plane, checked: CheckedClients) -> DynamoSweepRepository:
    return DynamoSweepRepository(checked, plane.repo.table, dashboard_url=DASHBOARD)


_n = iter(range(10**6))


def _new_sweep(plane: Plane, repo: DynamoSweepRepository) -> Sweep:
    """A sweep as the service builds it, stored through the checked repository."""
    template = plane.repo.get(plane.create(maxTrials=4, maxParallelTrials=2))
    sweep = template.model_copy(update={"sweep_id": f"sw-mut-{next(_n):06d}", "version": 1, "status": SweepStatus.RUNNING})
    repo.create(sweep)
    return sweep


def _events(repo: DynamoSweepRepository, sweep_id: str) -> list[tuple[dict[str, Any], str]]:
    records = DynamoOutbox(repo._clients, repo.table).pending(limit=1000)
    ours = [r for r in records if r.subject_id == sweep_id and r.detail_type == et.SWEEP_STATE_CHANGE.detail_type]
    return sorted(((json.loads(r.detail), r.key) for r in ours), key=lambda e: e[0]["sequence"])


def _raw(checked: CheckedClients, table: str, key: dict[str, Any]) -> dict[str, Any] | None:
    item: dict[str, Any] | None = checked.ddb._real.get_item(TableName=table, Key=key).get("Item")
    return item


def _stale(client: CheckedClient, monkeypatch: pytest.MonkeyPatch, table: str, key: dict[str, Any], first: Any, then: Any) -> Any:
    """`then` decided on the item `key` as it was before `first` wrote (a writer that read first)."""
    snapshot = client._real.get_item(TableName=table, Key=key, ConsistentRead=True)
    first()
    real = client.get_item
    answers = [snapshot]
    monkeypatch.setattr(client, "get_item", lambda **request: answers.pop() if answers else real(**request))
    return then()


# --- a sweep's creation and updates --------------------------------------------------------------------


def test_create_writes_the_first_event_with_sequence_one_and_its_link(plane: Plane, repo: DynamoSweepRepository) -> None:
    sweep = _new_sweep(plane, repo)
    ((detail, key),) = _events(repo, sweep.sweep_id)
    assert (detail["sequence"], detail["state"], detail["previous_state"]) == (1, "RUNNING", None)
    assert detail["dashboard_url"].startswith(DASHBOARD) and sweep.sweep_id in detail["dashboard_url"]
    assert f"#{et.SUBJECT_SWEEP}#{sweep.sweep_id}#" in key


def test_a_sweep_of_exactly_the_size_limit_is_stored_one_byte_more_is_not(
    plane: Plane, repo: DynamoSweepRepository, monkeypatch: pytest.MonkeyPatch
) -> None:
    template = plane.repo.get(plane.create(maxTrials=4, maxParallelTrials=2))
    sweep = template.model_copy(update={"sweep_id": "sw-size-limit", "version": 1})
    size = len(layout._doc(sweep).encode())
    monkeypatch.setattr(items, "SUBMITTED_JOB_MAX_BYTES", size - 1)
    with pytest.raises(TooLarge):
        repo.create(sweep)
    monkeypatch.setattr(items, "SUBMITTED_JOB_MAX_BYTES", size)
    repo.create(sweep)
    assert repo.get("sw-size-limit").sweep_id == "sw-size-limit"


def test_a_status_change_writes_the_next_event_naming_the_previous_state(plane: Plane, repo: DynamoSweepRepository) -> None:
    sweep = _new_sweep(plane, repo)
    assert repo.update(sweep.model_copy(update={"name": "renamed"}), 1)  # no status change: no event
    assert len(_events(repo, sweep.sweep_id)) == 1
    paused = repo.get(sweep.sweep_id).model_copy(update={"status": SweepStatus.PAUSED, "updated_at": AT})
    assert repo.update(paused, 2)
    events = _events(repo, sweep.sweep_id)
    assert len(events) == 2
    detail, key = events[-1]
    assert (detail["sequence"], detail["previous_state"], detail["state"]) == (2, "RUNNING", "PAUSED")
    assert detail["dashboard_url"].startswith(DASHBOARD) and f"#{et.SUBJECT_SWEEP}#{sweep.sweep_id}#" in key
    assert repo.get(sweep.sweep_id).version == 3


@pytest.mark.parametrize("status", [SweepStatus.RUNNING, SweepStatus.PAUSED], ids=["same-status", "status-change"])
def test_an_update_decided_on_a_stale_read_is_refused(
    plane: Plane, repo: DynamoSweepRepository, checked: CheckedClients, monkeypatch: pytest.MonkeyPatch, status: SweepStatus
) -> None:
    # Given a sweep that another writer updated after this writer read it (its pre-read passes)
    sweep = _new_sweep(plane, repo)
    first = lambda: repo.update(sweep.model_copy(update={"name": "first"}), 1)  # noqa: E731
    # When this writer writes what it decided on that read
    second = sweep.model_copy(update={"name": "second", "status": status, "updated_at": AT})
    written = _stale(checked.ddb, monkeypatch, repo.table, layout._meta_key(sweep.sweep_id), first, lambda: repo.update(second, 1))
    # Then the write's own condition refuses it: the first writer's sweep stands, no second event
    assert written is False
    stored = repo.get(sweep.sweep_id)
    assert (stored.name, stored.status, stored.version) == ("first", SweepStatus.RUNNING, 2)
    assert len(_events(repo, sweep.sweep_id)) == 1


# --- trials ----------------------------------------------------------------------------------------------


def _claimed(repo: DynamoSweepRepository, sweep_id: str, number: int = 0, **fields: Any) -> Trial:
    trial = Trial(number=number, state=TrialState.RUNNING, params={"lr": 0.1}, created_at=AT, **fields)
    assert repo.claim_trial(sweep_id, trial) == "claimed"
    return trial


def _padded(trial: Trial, pad: int) -> Trial:
    return trial.model_copy(
        update={"state": TrialState.COMPLETE, "value": 0.5, "ended_at": AT, "system_attrs": {"pad": "x" * pad}, "intermediate_values": {}}
    )


def test_an_ended_trial_over_its_share_of_a_block_is_kept_apart(plane: Plane, repo: DynamoSweepRepository, checked: CheckedClients) -> None:
    sweep = _new_sweep(plane, repo)
    ended = _padded(_claimed(repo, sweep.sweep_id), 8000)
    assert repo.end_trial(sweep.sweep_id, ended, 1)
    block = _raw(checked, repo.table, layout._block_key(sweep.sweep_id, 0))
    apart = _raw(checked, repo.table, layout._ended_key(sweep.sweep_id, 0))
    assert block is not None and block["t0"] == {"S": layout.APART}
    assert apart is not None and apart["doc"] == {"S": layout._entry(ended, 2)}
    assert _raw(checked, repo.table, layout._trial_key(sweep.sweep_id, 0)) is None
    (loaded,) = repo.load(sweep.sweep_id)[1]
    assert (loaded.state, loaded.system_attrs, loaded.version) == (TrialState.COMPLETE, {"pad": "x" * 8000}, 2)
    assert not repo.end_trial(sweep.sweep_id, ended, 1)  # moved once


def test_an_ended_trial_of_exactly_its_share_stays_in_its_block(plane: Plane, repo: DynamoSweepRepository, checked: CheckedClients) -> None:
    sweep = _new_sweep(plane, repo)
    trial = _claimed(repo, sweep.sweep_id)
    base = len(layout._entry(_padded(trial, 0), 2).encode())
    ended = _padded(trial, layout.ENTRY_MAX_BYTES - base)
    assert len(layout._entry(ended, 2).encode()) == layout.ENTRY_MAX_BYTES
    assert repo.end_trial(sweep.sweep_id, ended, 1)
    block = _raw(checked, repo.table, layout._block_key(sweep.sweep_id, 0))
    assert block is not None and block["t0"] == {"S": layout._entry(ended, 2)}
    assert _raw(checked, repo.table, layout._ended_key(sweep.sweep_id, 0)) is None
    assert repo.load(sweep.sweep_id)[1][0].system_attrs == ended.system_attrs


def test_every_item_of_a_sweep_names_its_entity(plane: Plane, repo: DynamoSweepRepository, checked: CheckedClients) -> None:
    # The `entity` attribute tells the single table's item kinds apart for whoever reads the table raw
    sweep = _new_sweep(plane, repo)
    _claimed(repo, sweep.sweep_id, 0)
    assert repo.end_trial(sweep.sweep_id, _padded(_claimed(repo, sweep.sweep_id, 1), 8000), 1)
    page = checked.ddb._real.query(
        TableName=repo.table,
        KeyConditionExpression="#pk = :pk",
        ExpressionAttributeNames={"#pk": c.PK},
        ExpressionAttributeValues={":pk": {"S": layout.SWEEP_PREFIX + sweep.sweep_id}},
    )
    kinds = {i[c.SK]["S"]: i.get("entity", {}).get("S") for i in page["Items"]}
    assert kinds == {"META": "SWEEP", "TRIAL#00000": "TRIAL", "DONE#0000": "TRIAL_BLOCK", "ENDED#00001": "TRIAL"}


def test_a_trial_without_a_native_job_takes_values_only_from_the_job_its_doc_names(plane: Plane, repo: DynamoSweepRepository) -> None:
    # A trial claimed with its job in its doc only (as written before the native `job_id`): the doc's
    # exact "job_id":"<id>" decides, not a job id it merely starts with or ends with
    sweep = _new_sweep(plane, repo)
    trial = Trial(number=0, state=TrialState.RUNNING, params={"source_job_id": "job-1"}, job_id="job-10", created_at=AT)
    assert repo.claim_trial(sweep.sweep_id, trial) == "claimed"
    assert not repo.record_value(sweep.sweep_id, 0, "job-1", 1, 99.0)
    assert not repo.record_value(sweep.sweep_id, 0, "ob-10", 1, 99.0)
    assert repo.record_value(sweep.sweep_id, 0, "job-10", 1, 0.5)
    assert repo.load(sweep.sweep_id)[1][0].intermediate_values == {1: 0.5}
