"""`Trainplane Job GPUs Idle` (issue 27.3) through the outbox (moto): the event and the job's mark of the idle
period in one transaction, once per period, also when two reporters race with the same stale read."""

from __future__ import annotations

import json

import pytest

from functions.adapters.aws import AwsClients
from functions.adapters.dynamodb import DynamoJobRepository
from functions.adapters.outbox import DynamoOutbox
from functions.catalog import own_events as et
from functions.errors import JobNotFound
from functions.service.ports import GpuIdle
from schemas.events import JobGpusIdle
from schemas.job import StatusEvent
from schemas.status import JobStatus
from tests.helpers.aws import fresh_resources
from tests.helpers.jobs import make_job

IDLE = GpuIdle(attempt=1, node=0, idle_since=1_767_225_600.0, idle_seconds=900.0, threshold_pct=20.0, devices=((0, "NVIDIA H100", 4.0),))


def _training(aws: AwsClients) -> tuple[DynamoJobRepository, str, str]:
    table = fresh_resources(aws).jobs_table
    repo = DynamoJobRepository(aws, table)
    job = make_job(status=JobStatus.TRAINING)
    repo.create(job, StatusEvent(at=job.created_at, from_status=None, to_status=job.status))
    return repo, table, job.job_id


def test_an_idle_period_is_one_event_in_the_jobs_sequence(aws: AwsClients) -> None:
    repo, table, job_id = _training(aws)

    # When the period is reported, then reported again (a repeated delivery, a later sample of it)
    assert repo.report_gpus_idle(job_id, IDLE) is True
    assert repo.report_gpus_idle(job_id, IDLE) is False

    # Then one event, the job's next sequence, saying which GPUs idled since when
    records = DynamoOutbox(aws, table).pending()
    assert [(r.sequence, r.detail_type) for r in records] == [(1, et.JOB_STATE_CHANGE.detail_type), (2, et.JOB_GPUS_IDLE.detail_type)]
    detail = JobGpusIdle.model_validate(json.loads(records[1].detail))
    assert (detail.job_id, detail.attempt, detail.node, detail.state) == (job_id, 1, 0, JobStatus.TRAINING)
    assert detail.idle_since.timestamp() == IDLE.idle_since and detail.idle_seconds == 900.0 and detail.threshold_pct == 20.0
    assert [(d.index, d.utilization_pct) for d in detail.devices] == [(0, 4.0)]
    assert detail.reason == "every GPU of node 0 under 20% utilization for 15 minutes" and detail.actor == "trainer"
    # And the job record still reads as before (the mark is bookkeeping, not a Job field)
    assert repo.get(job_id).status == JobStatus.TRAINING
    # And a new period (another first sample) is a new event
    assert repo.report_gpus_idle(job_id, GpuIdle(**{**IDLE.__dict__, "idle_since": IDLE.idle_since + 3600}))
    assert [r.sequence for r in DynamoOutbox(aws, table).pending()] == [1, 2, 3]


def test_two_reporters_with_the_same_stale_read_write_one_event(aws: AwsClients, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given two reporters (two Lambda invocations with the same batch) that both read the job before either wrote
    repo, table, job_id = _training(aws)
    stale = repo._get_item(job_id)
    real_get = repo._get_item
    reads = iter([stale, stale])
    monkeypatch.setattr(repo, "_get_item", lambda jid: next(reads, None) or real_get(jid))

    # When both write the period
    first, second = repo.report_gpus_idle(job_id, IDLE), repo.report_gpus_idle(job_id, IDLE)

    # Then the first wrote it; the second lost the sequence's condition, read again, found the mark: no second event
    assert (first, second) == (True, False)
    assert [r.detail_type for r in DynamoOutbox(aws, table).pending()].count(et.JOB_GPUS_IDLE.detail_type) == 1


def test_a_deleted_job_gets_no_event_and_no_item(aws: AwsClients) -> None:
    repo, _table, job_id = _training(aws)
    repo.delete(job_id)
    with pytest.raises(JobNotFound):
        repo.report_gpus_idle(job_id, IDLE)
