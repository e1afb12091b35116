"""The per-team queue index (by-team-queue, issue 24): a team's QUEUED jobs of one quota type, in every queue, by
(priority desc, submitted asc), however many other teams' jobs queue before them; on moto and on the fake."""

from __future__ import annotations

from typing import Any

import pytest

from functions import constants as c
from functions.adapters import dynamodb_batch as batch
from functions.adapters import dynamodb_items as items
from functions.adapters.aws import AwsClients
from functions.adapters.dynamodb import DynamoJobRepository
from functions.service.ports import Transition
from schemas.job import Job, StatusEvent
from schemas.status import JobStatus
from tests.fakes import InMemoryJobRepository
from tests.helpers.aws import fresh_resources
from tests.helpers.jobs import make_job

H100 = {"resource_config": {"gpu_count": 1, "gpu_type": "H100"}}
A100 = {"resource_config": {"gpu_count": 1, "gpu_type": "A100"}}


@pytest.fixture(params=["dynamodb", "fake"])
def repo(request: pytest.FixtureRequest, aws: AwsClients) -> Any:
    if request.param == "fake":
        return InMemoryJobRepository()
    return DynamoJobRepository(aws, fresh_resources(aws).jobs_table)


def _queued(repo: Any, team: str | None, gpu: dict[str, Any], **kwargs: Any) -> Job:
    job = make_job(request=gpu, team=team, **kwargs)
    repo.create(job, StatusEvent(at=job.created_at, to_status=job.status, reason="submitted"))
    return repo.transition(Transition(job.job_id, job.version, job.status, JobStatus.QUEUED, "admitted"))


def test_a_teams_head_is_one_read_away_behind_another_teams_deep_queue(repo: Any) -> None:
    # Given 12 queued H100 jobs of team a (the scheduler's test has 150; moto writes are slow), then team b's
    # jobs: an H100 one in another queue, a higher-priority H100 one, an A100 one; and a job of no team
    for _ in range(12):
        _queued(repo, "a", H100)
    late = _queued(repo, "b", H100, queue="research")
    urgent = _queued(repo, "b", H100, priority=9)
    other_type = _queued(repo, "b", A100)
    teamless = _queued(repo, None, H100)
    # When team b's H100 head is read
    head = repo.queued_of_team("b", "H100", limit=5)
    # Then it is b's H100 jobs alone, in every queue, priority first then FIFO, without reading a's 120
    assert [j.job_id for j in head] == [urgent.job_id, late.job_id]
    assert repo.queued("default", limit=1)[0].job_id == urgent.job_id  # the by-queue index is unchanged
    assert [j.job_id for j in repo.queued_of_team("b", "A100")] == [other_type.job_id]
    assert [j.job_id for j in repo.queued_of_team("default", "H100")] == [teamless.job_id]
    assert len(repo.queued_of_team("a", "H100", limit=7)) == 7
    # And a job leaves the index when it leaves QUEUED, and moves in it when its priority changes
    repo.transition(Transition(urgent.job_id, urgent.version, JobStatus.QUEUED, JobStatus.SCHEDULING, "granted"))
    repo.update(late.job_id, late.version, {"scheduling_config": {**late.scheduling_config.model_dump(), "priority": 3}})
    assert [j.job_id for j in repo.queued_of_team("b", "H100")] == [late.job_id]
    assert repo.queued_of_team("b", "H100")[0].priority == 3


def test_get_many_reads_the_jobs_that_exist_in_batches(repo: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given 5 jobs, and batches of 2 keys (standing for BatchGetItem's 100: moto writes are slow)
    monkeypatch.setattr(batch, "GET_BATCH_MAX", 2)
    jobs = [_queued(repo, "a", H100) for _ in range(5)]
    # When they are read by id, with an unknown id and a repeated one among them
    found = repo.get_many([*(j.job_id for j in jobs), "job-missing", jobs[0].job_id])
    # Then every existing job comes back once, as stored
    assert set(found) == {j.job_id for j in jobs}
    assert found[jobs[3].job_id].version == jobs[3].version and found[jobs[3].job_id].status == JobStatus.QUEUED


def test_a_jobs_table_made_before_the_per_team_index_gets_it(aws: AwsClients) -> None:
    # Given a jobs table created without by-team-queue (a local state dir's journal replays its old CreateTable)
    ddb = aws.dynamodb()
    definition = items.jobs_table_definition("old-jobs")
    definition["GlobalSecondaryIndexes"] = [i for i in definition["GlobalSecondaryIndexes"] if i["IndexName"] != c.GSI_TEAM_QUEUE]
    new_keys = {c.GSI_TEAM_QUEUE_PK, c.GSI_TEAM_QUEUE_SK}
    definition["AttributeDefinitions"] = [a for a in definition["AttributeDefinitions"] if a["AttributeName"] not in new_keys]
    ddb.create_table(**definition)
    # When the tables are ensured at start
    items.create_tables(ddb, "old-jobs", "old-idempotency")
    # Then the index is there, and a team's head is read from it
    repo = DynamoJobRepository(aws, "old-jobs")
    job = _queued(repo, "b", H100)
    assert [j.job_id for j in repo.queued_of_team("b", "H100")] == [job.job_id]
