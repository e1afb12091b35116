"""The event outbox (issue 23, docs/EVENTS.md): events written with the change, a publisher that loses nothing.

The property test drives the real DynamoDB repository (moto) through random transitions while the
publisher is killed at each point it can die (before PutEvents, after PutEvents before removing what it
sent, half-way through the removal) and PutEvents refuses some entries; after a restart, every committed
event has reached the bus at least once, and each job's sequence is 1..n with no gap.
"""

from __future__ import annotations

import contextlib
import json
import random
from collections import defaultdict
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from functions import event_types as et
from functions.adapters.aws import AwsClients
from functions.adapters.dynamodb import DynamoJobRepository
from functions.adapters.outbox import DynamoOutbox
from functions.adapters.ports import Transition
from functions.errors import ConcurrentModification
from functions.service.event_publisher import EventPublisher
from localmode import moto_hooks
from schemas.events import MODELS, OutboxRecord
from schemas.job import CheckpointRef, Job, StatusEvent
from schemas.status import TRANSITIONS, JobStatus
from tests.helpers.aws import fresh_resources
from tests.helpers.jobs import ALICE, make_job

COMMITS_PER_EXAMPLE = 100
EXAMPLES = 10  # 10 x 100 = 1,000 random transitions


@pytest.fixture(scope="module", autouse=True)
def _item_level_transactions() -> Iterator[None]:
    # moto deep-copies a whole table for each item of a TransactWriteItems (its rollback backup): seconds
    # per hundred commits here. Local mode's hooks replace that backup by an item-level undo log
    # (localmode/moto_hooks.py, verified by tests/integration/test_journal.py); the semantics are the same.
    moto_hooks.install()
    yield
    moto_hooks.uninstall()


class Killed(BaseException):
    """The publisher's process dies here (BaseException: nothing in the code under test may swallow it)."""


class FlakyBus:
    """PutEvents that refuses entries and whose caller dies before or after it, as `rng` decides."""

    def __init__(self, rng: random.Random, faults: bool = True) -> None:
        self.rng = rng
        self.faults = faults
        self.received: list[dict[str, Any]] = []

    def put(self, records: Sequence[OutboxRecord]) -> list[str | None]:
        if self.faults and self.rng.random() < 0.15:
            raise Killed("before PutEvents")
        codes: list[str | None] = []
        for r in records:
            if self.faults and self.rng.random() < 0.2:
                codes.append("ThrottlingException")
            else:
                self.received.append({"detail-type": r.detail_type, "detail": json.loads(r.detail)})
                codes.append(None)
        if self.faults and self.rng.random() < 0.15:
            raise Killed("after PutEvents, before recording progress")
        return codes


class FlakyOutbox:
    def __init__(self, inner: DynamoOutbox, rng: random.Random, faults: bool = True) -> None:
        self.inner = inner
        self.rng = rng
        self.faults = faults

    def pending(self, limit: int = 100) -> list[OutboxRecord]:
        return self.inner.pending(limit)

    def remove(self, records: Sequence[OutboxRecord]) -> None:
        if self.faults and self.rng.random() < 0.15:
            self.inner.remove(records[: len(records) // 2])
            raise Killed("half-way through the removal")
        self.inner.remove(records)


def _run_publisher(bus: FlakyBus, outbox: FlakyOutbox) -> None:
    """One publisher process: a fresh EventPublisher (nothing carried over), killed or not."""
    with contextlib.suppress(Killed):
        EventPublisher(bus, outbox, put_attempts=2, sleep=lambda _s: None).drain(batch=25, max_rounds=3)


def _checkpoint(job: Job, n: int) -> CheckpointRef:
    return CheckpointRef(checkpoint_id=f"step-{n:06d}", step=n, uri=f"s3://b/jobs/{job.job_id}/checkpoints/step-{n:06d}/")


@pytest.mark.slow
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture], derandomize=False)
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_every_committed_event_reaches_the_bus_with_gap_free_sequences_whatever_kills_the_publisher(aws: AwsClients, seed: int) -> None:
    # Given: a fresh table, a publisher that is killed at random points and a bus that refuses entries
    rng = random.Random(seed)
    table = fresh_resources(aws).jobs_table
    try:
        _random_commits_under_a_dying_publisher(aws, table, rng, seed)
    finally:
        aws.dynamodb().delete_table(TableName=table)  # moto copies every table on each transaction: keep it to one


def _random_commits_under_a_dying_publisher(aws: AwsClients, table: str, rng: random.Random, seed: int) -> None:
    repo = DynamoJobRepository(aws, table)
    bus = FlakyBus(rng)
    outbox = FlakyOutbox(DynamoOutbox(aws, table), rng)
    jobs: list[Job] = []
    committed: dict[str, int] = defaultdict(int)  # job id -> its events committed

    # When: 100 random commits (submissions, status changes, checkpoints), the publisher run in between
    for _ in range(COMMITS_PER_EXAMPLE):
        live = [j for j in jobs if TRANSITIONS[j.status]]
        choice = rng.random()
        if not live or choice < 0.1:
            job = make_job(owner=ALICE, job_id=f"job-{seed}-{len(jobs)}")
            repo.create(job, StatusEvent(at=job.created_at, from_status=None, to_status=job.status, reason="submitted"))
            jobs.append(job)
        elif choice < 0.25:
            job = rng.choice(live)
            new = repo.add_checkpoint(job.job_id, _checkpoint(job, committed[job.job_id] + 1))
            jobs[jobs.index(job)] = new.model_copy(update={"version": job.version})
        else:
            job = rng.choice(live)
            target = rng.choice(sorted(TRANSITIONS[job.status]))
            new = repo.transition(Transition(job.job_id, job.version, job.status, target, reason=f"to {target}"))
            jobs[jobs.index(job)] = new
        committed[jobs[-1].job_id if choice < 0.1 or not live else job.job_id] += 1
        if rng.random() < 0.3:
            _run_publisher(bus, outbox)

    # ... and, at last, publishers restarted until one finishes without being killed
    bus.faults = outbox.faults = False
    _run_publisher(bus, outbox)

    # Then: every event arrived at least once; per job, sequences are exactly 1..n (no gap, none extra)
    seen: dict[str, set[int]] = defaultdict(set)
    ids: dict[tuple[str, int], str] = {}
    for event in bus.received:
        detail = event["detail"]
        key = (detail["job_id"], detail["sequence"])
        assert ids.setdefault(key, detail["event_id"]) == detail["event_id"], "a re-send must carry the first send's event_id"
        seen[detail["job_id"]].add(detail["sequence"])
    assert sum(committed.values()) == COMMITS_PER_EXAMPLE
    assert {job_id: sorted(s) for job_id, s in seen.items()} == {job_id: list(range(1, n + 1)) for job_id, n in committed.items()}
    assert DynamoOutbox(aws, table).pending() == []


class _Interleaved(DynamoJobRepository):
    """Records a checkpoint right after the transition read the job: the transition's event counter is stale."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.interleave: Any = None

    def _get_item(self, job_id: str) -> dict[str, Any] | None:
        item = super()._get_item(job_id)
        if self.interleave is not None:
            step, self.interleave = self.interleave, None
            step()
        return item


def test_a_checkpoint_between_a_transitions_read_and_write_neither_loses_the_decision_nor_reuses_a_sequence(
    aws: AwsClients,
) -> None:
    # Given: a training job, and a checkpoint that lands between the transition's read and its write
    table = fresh_resources(aws).jobs_table
    repo = _Interleaved(aws, table)
    job = make_job(status=JobStatus.TRAINING)
    repo.create(job, StatusEvent(at=job.created_at, from_status=None, to_status=job.status))
    other = DynamoJobRepository(aws, table)
    repo.interleave = lambda: other.add_checkpoint(job.job_id, _checkpoint(job, 1))

    # When: the status decision is written
    new = repo.transition(Transition(job.job_id, job.version, JobStatus.TRAINING, JobStatus.CHECKPOINTING, reason="saving"))

    # Then: it won (a checkpoint is no rival of a status decision) and the events are 1, 2, 3
    assert new.status is JobStatus.CHECKPOINTING
    records = DynamoOutbox(aws, table).pending()
    assert sorted((r.sequence, r.detail_type) for r in records) == [
        (1, et.JOB_STATE_CHANGE.detail_type),
        (2, et.CHECKPOINT_SAVED.detail_type),
        (3, et.JOB_STATE_CHANGE.detail_type),
    ]


def test_a_lost_race_writes_no_event_and_a_repeated_checkpoint_report_writes_none_either(aws: AwsClients) -> None:
    table = fresh_resources(aws).jobs_table
    repo = DynamoJobRepository(aws, table, dashboard_url="https://dash.example.com")
    job = make_job(status=JobStatus.QUEUED)
    repo.create(job, StatusEvent(at=job.created_at, from_status=None, to_status=job.status))
    repo.transition(Transition(job.job_id, job.version, JobStatus.QUEUED, JobStatus.SCHEDULING))
    with pytest.raises(ConcurrentModification):
        repo.transition(Transition(job.job_id, job.version, JobStatus.QUEUED, JobStatus.CANCELLED))
    repo.add_checkpoint(job.job_id, _checkpoint(job, 5))
    repo.add_checkpoint(job.job_id, _checkpoint(job, 5))  # the same report, delivered twice

    records = sorted(DynamoOutbox(aws, table).pending(), key=lambda r: r.sequence)
    assert [r.sequence for r in records] == [1, 2, 3]
    change = MODELS["JobStateChange"].model_validate_json(records[1].detail)
    assert (change.previous_state, change.state) == (JobStatus.QUEUED, JobStatus.SCHEDULING)  # type: ignore[attr-defined]
    assert change.dashboard_url == f"https://dash.example.com/#/jobs/{job.job_id}"
    assert change.owner == job.owner and change.schema_version == "1"
    assert all(len(r.detail.encode()) < 4096 for r in records)  # a few KB at most


def test_a_policys_creation_enabling_disabling_and_deletion_are_its_events_1_to_4(aws: AwsClients) -> None:
    from functions.adapters.policies import DynamoPolicyRepository
    from schemas.events import RetrainingPolicyStateChange
    from tests.integration.test_policies_repository import make_policy, routes_of

    table = fresh_resources(aws).jobs_table
    repo = DynamoPolicyRepository(aws, table)
    policy = make_policy()
    routes = routes_of(policy)
    repo.create(policy, routes)
    disabled = repo.update(policy.model_copy(update={"enabled": False}), policy.version, routes, routes)
    renamed = repo.update(disabled.model_copy(update={"daily_cap": 3}), disabled.version, routes, routes)  # no state change
    enabled = repo.update(renamed.model_copy(update={"enabled": True}), renamed.version, routes, routes)
    repo.delete(policy.policy_id, enabled.version, routes)

    details = sorted(
        (RetrainingPolicyStateChange.model_validate_json(r.detail) for r in DynamoOutbox(aws, table).pending()), key=lambda d: d.sequence
    )
    assert [(d.sequence, d.previous_state, d.state) for d in details] == [
        (1, None, "ENABLED"),
        (2, "ENABLED", "DISABLED"),
        (3, "DISABLED", "ENABLED"),
        (4, "ENABLED", "DELETED"),
    ]
