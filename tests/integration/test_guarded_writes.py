"""Every conditional write that guards a job or the capacity ledger, raced deterministically on moto.

Each test makes both writers pass the pre-read (tests/helpers/races.py: the later writer reads what the
first one read, before it wrote), so only the write's condition can refuse the loser: exactly one wins,
every run. The thread-storm tests beside the adapters' own tests stay, as smoke tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from functions.adapters.aws import AwsClients
from functions.adapters.capacity import DynamoDBCapacityLedger
from functions.adapters.dynamodb import DynamoJobRepository
from functions.errors import ConcurrentModification, IllegalTransition, JobNotFound
from functions.service.ports import Transition
from schemas.job import Job, StatusEvent
from schemas.status import EDITABLE, JobStatus
from tests.helpers.aws import emulated_aws, fresh_resources
from tests.helpers.jobs import ALICE, make_job
from tests.helpers.races import StaleRead, winners

S = JobStatus
LOST = (ConcurrentModification, IllegalTransition)


@pytest.fixture(scope="module")
def aws() -> Iterator[AwsClients]:
    with emulated_aws() as clients:
        yield clients


@pytest.fixture
def repo(aws: AwsClients) -> DynamoJobRepository:
    return DynamoJobRepository(aws, fresh_resources(aws).jobs_table)


def _queued(repo: DynamoJobRepository) -> Job:
    job = make_job()
    repo.create(job, StatusEvent(at=job.created_at, to_status=job.status, reason="submitted", actor="user"))
    return repo.transition(Transition(job.job_id, job.version, job.status, S.QUEUED, "queued", "system"))


def _move(repo: DynamoJobRepository, job: Job, to: JobStatus) -> Any:
    return lambda: repo.transition(Transition(job.job_id, job.version, job.status, to, f"to {to}", "system"))


# --- job transitions and edits (functions/adapters/dynamodb.py) --------------------------------------


@pytest.mark.parametrize("second", [S.SCHEDULING, S.CANCELLED], ids=["same-move", "another-move"])
def test_two_transitions_decided_on_one_read_exactly_one_wins(repo: DynamoJobRepository, second: JobStatus) -> None:
    # Given a QUEUED job that two writers read before either moved it
    job = _queued(repo)
    # When both move it (the second's read is the one from before the first wrote)
    outcomes = StaleRead(repo, "_get_item").run(_move(repo, job, S.SCHEDULING), _move(repo, job, second))
    # Then the first wins and the second is refused as a lost race (409), not applied
    assert winners(outcomes) == [0] and isinstance(outcomes[1].error, LOST), outcomes
    stored = repo.get(job.job_id)
    assert (stored.status, stored.version) == (S.SCHEDULING, job.version + 1)
    assert [e.to_status for e in repo.history(job.job_id)] == [S.PENDING, S.QUEUED, S.SCHEDULING]
    counts = repo.counts(ALICE)
    assert counts[S.SCHEDULING] == 1 and sum(counts.values()) == 1


def test_an_edit_and_a_transition_on_one_read_exactly_one_wins(repo: DynamoJobRepository) -> None:
    # Given a QUEUED job read by an edit (PATCH) and by the scheduler
    job = _queued(repo)
    edit = lambda: repo.update(job.job_id, job.version, {"name": "renamed"}, EDITABLE, action="edit")  # noqa: E731
    # When the scheduler moves it first, then the edit writes on its read
    outcomes = StaleRead(repo, "_get_item").run(_move(repo, job, S.SCHEDULING), edit)
    # Then the edit is refused: a job that left QUEUED is not edited behind the scheduler's back
    assert winners(outcomes) == [0] and isinstance(outcomes[1].error, LOST), outcomes
    assert repo.get(job.job_id).name == job.name


def test_two_edits_on_one_read_exactly_one_wins(repo: DynamoJobRepository) -> None:
    job = _queued(repo)

    def edit(name: str) -> Any:
        return lambda: repo.update(job.job_id, job.version, {"name": name}, EDITABLE, action="edit")

    outcomes = StaleRead(repo, "_get_item").run(edit("first"), edit("second"))
    assert winners(outcomes) == [0] and isinstance(outcomes[1].error, ConcurrentModification), outcomes
    stored = repo.get(job.job_id)
    assert (stored.name, stored.version) == ("first", job.version + 1)


def test_a_transition_decided_before_an_edit_is_refused(repo: DynamoJobRepository) -> None:
    # Given a QUEUED job read by the scheduler, then edited (still QUEUED, its version moved on)
    job = _queued(repo)
    edit = lambda: repo.update(job.job_id, job.version, {"resource_config": job.resource_config.model_copy(update={"gpu_count": 0})})  # noqa: E731
    # When the scheduler moves it on its read
    outcomes = StaleRead(repo, "_get_item").run(edit, _move(repo, job, S.SCHEDULING))
    # Then the move is refused: it was decided on the job before the edit
    assert winners(outcomes) == [0] and isinstance(outcomes[1].error, ConcurrentModification), outcomes
    assert repo.get(job.job_id).status == S.QUEUED


def test_a_delete_decided_before_a_change_deletes_nothing(repo: DynamoJobRepository) -> None:
    # Given a CANCELLED job read for a delete, and changed before the delete writes (its version moves on)
    job = _queued(repo)
    job = repo.transition(Transition(job.job_id, job.version, S.QUEUED, S.CANCELLED, "cancelled", "user"))
    change = lambda: repo.update(job.job_id, job.version, {"name": "still here"})  # noqa: E731
    delete = lambda: repo.delete(job.job_id, expected_version=job.version)  # noqa: E731
    # When the delete writes on its read
    outcomes = StaleRead(repo, "_get_item").run(change, delete)
    # Then it is refused and the job is all there
    assert winners(outcomes) == [0] and isinstance(outcomes[1].error, ConcurrentModification), outcomes
    assert repo.get(job.job_id).name == "still here" and len(repo.history(job.job_id)) == 3


def test_a_write_to_a_deleted_job_is_not_found_not_a_new_item(repo: DynamoJobRepository) -> None:
    job = _queued(repo)
    outcomes = StaleRead(repo, "_get_item").run(lambda: _delete_after_cancel(repo, job), _move(repo, job, S.SCHEDULING))
    assert winners(outcomes) == [0] and isinstance(outcomes[1].error, JobNotFound | ConcurrentModification | IllegalTransition)
    with pytest.raises(JobNotFound):
        repo.get(job.job_id)


def _delete_after_cancel(repo: DynamoJobRepository, job: Job) -> None:
    cancelled = repo.transition(Transition(job.job_id, job.version, S.QUEUED, S.CANCELLED, "cancelled", "user"))
    repo.delete(job.job_id, expected_version=cancelled.version)


# --- the capacity ledger (functions/adapters/capacity.py) --------------------------------------------


@pytest.fixture
def ledger(aws: AwsClients) -> DynamoDBCapacityLedger:
    return DynamoDBCapacityLedger(aws, fresh_resources(aws).jobs_table)


def test_two_claims_that_each_fit_but_not_both_exactly_one_wins(ledger: DynamoDBCapacityLedger) -> None:
    # Given a pool of 4 GPUs with 1 held, and two jobs of 2 each decided on "3 free"
    assert ledger.claim("q/H100", "held", 1, 4)
    # When both claim
    outcomes = [ledger.claim("q/H100", job, 2, 4) for job in ("a", "b")]
    # Then one holds its units, the other none: the pool is never over-booked
    assert outcomes == [True, False]
    assert ledger.holders("q/H100") == {"held": 1, "a": 2}
    # And the same job's second claim is no second booking
    assert ledger.claim("q/H100", "a", 1, 4) is False and ledger.holders("q/H100")["a"] == 2


def test_two_releases_on_one_read_give_the_units_back_once(ledger: DynamoDBCapacityLedger) -> None:
    # Given a job holding 3 of 4 units, and two releases (the run's end and a cancel) that both read it
    ledger.claim("q/H100", "a", 3, 4)
    outcomes = StaleRead(ledger, "holders").run(lambda: ledger.release("q/H100", "a"), lambda: ledger.release("q/H100", "a"))
    # Then one gave the units back; the pool's count is exact, not below zero
    assert [o.value for o in outcomes] == [True, False]
    assert ledger.holders("q/H100") == {}
    assert ledger.claim("q/H100", "b", 4, 4) is True and ledger.claim("q/H100", "c", 1, 4) is False


def test_a_release_on_a_stale_read_never_frees_another_claims_units(ledger: DynamoDBCapacityLedger) -> None:
    # Given job a's release that read "a holds 3", while a was released and claimed again with 1
    ledger.claim("q/H100", "a", 3, 4)
    stale = StaleRead(ledger, "holders")

    def release_and_reclaim() -> bool:
        released = ledger.release("q/H100", "a")
        return released and ledger.claim("q/H100", "a", 1, 4)

    outcomes = stale.run(release_and_reclaim, lambda: ledger.release("q/H100", "a"))
    # Then the stale release is refused: a still holds its 1 unit, and the pool counts it
    assert [o.value for o in outcomes] == [True, False]
    assert ledger.holders("q/H100") == {"a": 1}
    assert ledger.claim("q/H100", "b", 3, 4) is True and ledger.claim("q/H100", "c", 1, 4) is False
