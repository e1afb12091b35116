"""DynamoSweepRepository's writes one by one on moto: what each conditional write refuses and what it leaves
stored (the races themselves: tests/integration/test_sweeps_guards.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest

from functions.adapters import dynamodb_batch as batch
from functions.adapters import sweeps as layout
from functions.adapters.aws import AwsClients
from schemas.sweeps import SweepStatus, Trial, TrialState
from tests.helpers.aws import emulated_aws, fresh_resources
from tests.helpers.sweeps import Plane


@pytest.fixture(scope="module")
def aws() -> Iterator[AwsClients]:
    with emulated_aws() as clients:
        yield clients


@pytest.fixture
def plane(aws: AwsClients) -> Plane:
    return Plane(aws, fresh_resources(aws))


def _partition(plane: Plane, sweep_id: str) -> list[dict[str, Any]]:
    ddb = plane.repo._ddb
    values = {":pk": {"S": layout.SWEEP_PREFIX + sweep_id}}
    return list(ddb.query(TableName=plane.repo.table, KeyConditionExpression="pk = :pk", ExpressionAttributeValues=values)["Items"])


def _trial(plane: Plane, number: int) -> Trial:
    return Trial(number=number, state=TrialState.SUBMITTING, params={"lr": 0.1}, created_at=plane.jobs.clock())


def test_a_claim_on_a_sweep_not_running_is_refused_and_writes_nothing(plane: Plane) -> None:
    sweep_id = plane.create()
    read = plane.repo.get(sweep_id)
    assert plane.repo.update(read.model_copy(update={"status": SweepStatus.PAUSED}), read.version) is True
    assert plane.repo.claim_trial(sweep_id, _trial(plane, 0)) == "not_running"
    assert plane.trials(sweep_id) == []
    # and on a running one it is claimed, once
    paused = plane.repo.get(sweep_id)
    assert plane.repo.update(paused.model_copy(update={"status": SweepStatus.RUNNING}), paused.version) is True
    assert plane.repo.claim_trial(sweep_id, _trial(plane, 0)) == "claimed"
    assert plane.repo.claim_trial(sweep_id, _trial(plane, 0)) == "taken"
    (stored,) = plane.trials(sweep_id)
    assert (stored.number, stored.state, stored.version, stored.intermediate_values) == (
        0,
        TrialState.SUBMITTING,
        _trial(plane, 0).version,
        {},
    )


def test_a_sweep_is_created_once() -> None:
    with emulated_aws() as aws:
        plane = Plane(aws, fresh_resources(aws))
        sweep_id = plane.create()
        sweep = plane.repo.get(sweep_id)
        with pytest.raises(plane.repo._ddb.exceptions.TransactionCanceledException):
            plane.repo.create(sweep.model_copy(update={"status": SweepStatus.CANCELLED}))
        assert plane.repo.get(sweep_id).status == sweep.status


def test_an_update_without_a_change_of_status_is_guarded_by_the_version_too(plane: Plane) -> None:
    sweep_id = plane.create()
    read = plane.repo.get(sweep_id)
    first = read.model_copy(update={"status_reason": "first"})
    assert plane.repo.update(first, read.version) is True
    assert plane.repo.update(read.model_copy(update={"status_reason": "second"}), read.version) is False
    stored = plane.repo.get(sweep_id)
    assert (stored.status_reason, stored.version, stored.status) == ("first", read.version + 1, read.status)
    assert plane.repo.update(stored, read.version + 5) is False
    assert plane.repo.update(stored, stored.version) is True and plane.repo.get(sweep_id).version == read.version + 2


def test_a_delete_removes_the_whole_partition(plane: Plane) -> None:
    # Given a sweep with more items in its partition than one batch deletes (25)
    sweep_id = plane.create(maxTrials=40)
    for n in range(30):
        assert plane.repo.claim_trial(sweep_id, _trial(plane, n)) == "claimed"
    read = plane.repo.get(sweep_id)
    # When it is deleted on its version
    assert plane.repo.delete(sweep_id, read.version + 1) is False and len(_partition(plane, sweep_id)) == 31
    assert plane.repo.delete(sweep_id, read.version) is True
    # Then nothing of it is left
    assert _partition(plane, sweep_id) == []


def test_an_ended_trial_with_values_reported_since_the_read_is_not_moved(plane: Plane) -> None:
    sweep_id = plane.create()
    assert plane.repo.claim_trial(sweep_id, _trial(plane, 0)) == "claimed"
    read = plane.trials(sweep_id)[0]
    running = read.model_copy(update={"state": TrialState.RUNNING, "job_id": "job-0"})
    assert plane.repo.update_trial(sweep_id, running, read.version) is True
    assert plane.repo.record_value(sweep_id, 0, "job-0", 1, 0.5) is True
    assert plane.repo.record_value(sweep_id, 0, "job-1", 1, 9.0) is False
    seen = plane.trials(sweep_id)[0]
    assert seen.intermediate_values == {1: 0.5} and seen.job_id == "job-0"
    assert plane.repo.record_value(sweep_id, 0, "job-0", 2, 0.7) is True  # reported after `seen` was read
    ended = seen.model_copy(update={"state": TrialState.COMPLETE, "value": 0.5, "ended_at": plane.jobs.clock()})
    assert plane.repo.update_trial(sweep_id, ended, seen.version) is False
    again = plane.trials(sweep_id)[0]
    assert again.state == TrialState.RUNNING and again.intermediate_values == {1: 0.5, 2: 0.7}
    done = again.model_copy(update={"state": TrialState.COMPLETE, "value": 0.7, "ended_at": plane.jobs.clock()})
    assert plane.repo.update_trial(sweep_id, done, again.version) is True
    assert [(t.state, t.intermediate_values, t.value) for t in plane.trials(sweep_id)] == [(TrialState.COMPLETE, {1: 0.5, 2: 0.7}, 0.7)]
    assert plane.repo.record_value(sweep_id, 0, "job-0", 3, 0.9) is False  # an ended trial takes no value


def test_a_delete_pages_through_a_partition_larger_than_a_query_page(plane: Plane) -> None:
    # Given a sweep with 30 trials, read back in pages of 7 (DynamoDB pages at 1 MB, which moto's partition of
    # a test never reaches: the page size is forced on the delete's Query)
    sweep_id = plane.create(maxTrials=40)
    for n in range(30):
        assert plane.repo.claim_trial(sweep_id, _trial(plane, n)) == "claimed"
    ddb, pages = plane.repo._ddb, []
    real_query = ddb.query

    def paged(**kwargs: Any) -> Any:
        page = real_query(**{"Limit": 7, **kwargs})
        pages.append(len(page["Items"]))
        return page

    # When it is deleted
    with mock.patch.object(ddb, "query", paged):
        assert plane.repo.delete(sweep_id, plane.repo.get(sweep_id).version) is True
    # Then every page was followed and nothing of it is left
    assert pages == [7, 7, 7, 7, 2]  # the 30 trials' items (the sweep's own went first, on its version)
    assert _partition(plane, sweep_id) == []


def test_an_update_decides_on_a_strongly_consistent_read(plane: Plane) -> None:
    # An eventually consistent read may be a version behind: a writer that read the current version would
    # then be refused (or, a status behind, number its event from a stale sequence).
    sweep_id = plane.create()
    ddb, reads = plane.repo._ddb, []
    real_get = ddb.get_item

    def recording(**kwargs: Any) -> Any:
        reads.append(kwargs)
        return real_get(**kwargs)

    with mock.patch.object(ddb, "get_item", recording):
        read = plane.repo.get(sweep_id)
        assert plane.repo.update(read.model_copy(update={"status_reason": "same status"}), read.version) is True
        again = plane.repo.get(sweep_id)
        assert plane.repo.update(again.model_copy(update={"status": SweepStatus.PAUSED}), again.version) is True
    assert len(reads) == 4 and all(r.get("ConsistentRead") is True for r in reads), reads


def test_an_update_of_a_deleted_sweep_is_refused(plane: Plane) -> None:
    sweep_id = plane.create()
    read = plane.repo.get(sweep_id)
    assert plane.repo.delete(sweep_id, read.version) is True
    assert plane.repo.update(read.model_copy(update={"status": SweepStatus.PAUSED}), read.version) is False
    assert plane.repo.update(read, read.version) is False
    assert _partition(plane, sweep_id) == []


def test_a_delete_that_cannot_finish_says_which_sweep(plane: Plane, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a table that leaves every delete request unprocessed (throttled throughout)
    sweep_id = plane.create()
    assert plane.repo.claim_trial(sweep_id, _trial(plane, 0)) == "claimed"
    ddb = plane.repo._ddb
    monkeypatch.setattr(batch.time, "sleep", lambda _s: None)

    def throttled(RequestItems: dict[str, Any]) -> dict[str, Any]:
        return {"UnprocessedItems": RequestItems}

    # When the sweep is deleted, the error names it and what is left
    with (
        mock.patch.object(ddb, "batch_write_item", throttled),
        pytest.raises(RuntimeError, match=f"could not delete 1 items of sweep {sweep_id}"),
    ):
        plane.repo.delete(sweep_id, plane.repo.get(sweep_id).version)
    assert len(_partition(plane, sweep_id)) == 1
