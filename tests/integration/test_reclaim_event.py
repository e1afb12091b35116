"""A reclaim is an event (issues 23 and 24.4): `Trainplane Job Reclaimed` is written through the outbox in the
same DynamoDB transaction as the update that marks the borrower for its checkpointed pause (moto)."""

from __future__ import annotations

import json

import pytest

from functions.adapters.aws import AwsClients
from functions.adapters.dynamodb import DynamoJobRepository
from functions.adapters.outbox import DynamoOutbox
from functions.catalog import own_events as et
from functions.errors import ConcurrentModification
from functions.service.ports import Reclaim, Transition
from functions.service.scheduler import RECLAIM_RULE
from schemas.events import JobReclaimed
from schemas.job import PendingAction, StatusEvent
from schemas.status import PAUSABLE, JobStatus
from tests.helpers.aws import fresh_resources
from tests.helpers.jobs import make_job

WHY = Reclaim(
    team="b", gpu_type="H100", gpus=2, beneficiary_job_id="job-lender", beneficiary_team="a", rule=RECLAIM_RULE, work_lost_gpu_seconds=240.0
)


def test_the_reclaim_event_goes_with_the_pause_mark_or_not_at_all(aws: AwsClients) -> None:
    # Given: a borrower training (its submission is event 1)
    table = fresh_resources(aws).jobs_table
    repo = DynamoJobRepository(aws, table)
    job = make_job(status=JobStatus.TRAINING)
    repo.create(job, StatusEvent(at=job.created_at, from_status=None, to_status=job.status))
    marked = {"pending_action": PendingAction.PREEMPT, "pending_reason": "reclaimed by team a", "reclaims": 1}

    # When: a scheduler pass that read a stale version marks it: nothing is written, no event either
    with pytest.raises(ConcurrentModification):
        repo.update(job.job_id, job.version + 7, marked, allowed=PAUSABLE, action="preempt", reclaim=WHY)
    assert [r.sequence for r in DynamoOutbox(aws, table).pending()] == [1]

    # When: the pass that wins marks it
    new = repo.update(job.job_id, job.version, marked, allowed=PAUSABLE, action="preempt", reclaim=WHY)

    # Then: the mark and its event, the job's next sequence, naming victim, beneficiary, rule and work lost
    assert new.pending_action == PendingAction.PREEMPT and new.reclaims == 1
    records = DynamoOutbox(aws, table).pending()
    assert [(r.sequence, r.detail_type) for r in records] == [(1, et.JOB_STATE_CHANGE.detail_type), (2, et.JOB_RECLAIMED.detail_type)]
    detail = JobReclaimed.model_validate(json.loads(records[1].detail))
    victim = (detail.job_id, detail.team, detail.gpus)
    assert victim == (job.job_id, "b", 2) and (detail.beneficiary_job_id, detail.beneficiary_team) == ("job-lender", "a")
    assert detail.rule == RECLAIM_RULE and detail.work_lost_gpu_seconds == 240.0 and detail.reclaims == 1
    assert detail.state == JobStatus.TRAINING and detail.reason == "reclaimed by team a" and detail.owner == job.owner
    # and the pause that follows continues the same gap-free sequence
    paused = repo.update(job.job_id, new.version, {"pending_reason": "still"})  # no event: the sequence does not move
    repo.transition(Transition(job.job_id, paused.version, JobStatus.TRAINING, JobStatus.CHECKPOINTING, reason="reclaim"))
    assert [r.sequence for r in DynamoOutbox(aws, table).pending()] == [1, 2, 3]
