"""GET /queues and a job's queue position (functions/service/scheduler.py QueueView, functions/handlers/queues.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from functions.service.ports import Transition
from functions.service.queues import QueueView
from functions.service.scheduler import LocalCapacity
from schemas.job import StatusEvent
from schemas.status import JobStatus
from tests.fakes import InMemoryJobRepository
from tests.lifecycle_support import InMemoryLedger, make_job, make_request

S = JobStatus
ALICE = "arn:aws:iam::123456789012:user/alice"
BOB = "arn:aws:iam::123456789012:user/bob"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _queued(
    repo: InMemoryJobRepository, ledger: InMemoryLedger, n: int, owner: str, queue: str = "default", runtime: int | None = 600
) -> Any:
    job = make_job(
        make_request(f"j{n}", scheduling_config={"queue": queue, "max_runtime_seconds": runtime}),
        owner=owner,
        created_at=T0 + timedelta(seconds=n),
    )
    repo.create(job, StatusEvent(at=job.created_at, to_status=S.PENDING))
    ledger.register_queue(queue)
    return repo.transition(Transition(job.job_id, 1, S.PENDING, S.QUEUED, "admitted"))


@pytest.fixture
def view() -> tuple[QueueView, InMemoryJobRepository, InMemoryLedger]:
    repo, ledger = InMemoryJobRepository(), InMemoryLedger()
    return QueueView(repo, ledger, LocalCapacity(gpu_slots=0, cpu_slots=2)), repo, ledger


def test_job_detail_gets_its_position_and_estimated_wait(view: Any) -> None:
    qv, repo, ledger = view
    jobs = [_queued(repo, ledger, n, ALICE) for n in range(5)]
    # When the fifth job is read, Then four are ahead of it: two waves over two slots of 600 s
    shown = qv.with_position(repo.get(jobs[4].job_id))
    assert shown.queue_position == 4 and shown.estimated_wait_seconds == 1200.0
    # And a job that is not queued is returned as it is
    running = repo.transition(Transition(jobs[0].job_id, jobs[0].version, S.QUEUED, S.SCHEDULING, "go"))
    assert qv.with_position(running).queue_position is None
    assert qv.with_position(repo.get(jobs[1].job_id)).queue_position == 0


def test_a_page_of_jobs_gets_each_queued_jobs_wait_with_one_read_per_queue(view: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given: four jobs queued in two queues and one that is not queued
    qv, repo, ledger = view
    default = [_queued(repo, ledger, n, ALICE) for n in range(3)]
    research = _queued(repo, ledger, 10, BOB, queue="research")
    running = repo.transition(Transition(default[0].job_id, default[0].version, S.QUEUED, S.SCHEDULING, "go"))
    page = [running, *default[1:], research]
    one_by_one = [qv.with_position(job) for job in page]
    reads: list[str] = []
    queued = repo.queued

    def counted(queue: str, limit: int = 100) -> list[Any]:
        reads.append(queue)
        return queued(queue, limit)

    monkeypatch.setattr(repo, "queued", counted)
    # When the page is explained at once (GET /jobs)
    shown = qv.with_positions(page)
    # Then each job is as GET /jobs/{id} shows it, in the page's order, and each queue was read once
    assert shown == one_by_one and [j.job_id for j in shown] == [j.job_id for j in page]
    assert [(j.queue_position, j.estimated_wait_seconds, j.wait_reason) for j in shown] == [
        (None, None, None), (0, 0.0, "COHORT_FULL"), (1, 600.0, "COHORT_FULL"), (0, 0.0, "COHORT_FULL")
    ]  # fmt: skip
    assert sorted(reads) == ["default", "research"]
    # And a page without a queued job reads nothing
    reads.clear()
    assert qv.with_positions([running]) == [running] and reads == []


def test_queue_list_counts_and_shows_only_the_callers_jobs(view: Any) -> None:
    qv, repo, ledger = view
    mine = [_queued(repo, ledger, n, ALICE) for n in range(3)]
    _queued(repo, ledger, 10, BOB)
    _queued(repo, ledger, 11, BOB, queue="research")
    ledger.claim("local/cpu", "someone", 1, 2)
    listed = qv.list(lambda job: job.owner == ALICE)
    by_name = {q.queue: q for q in listed.queues}
    assert sorted(by_name) == ["default", "research"]
    default = by_name["default"]
    assert default.queued == 4 and default.head == [j.job_id for j in mine]
    assert default.oldest_queued_at == T0
    assert [(p.pool, p.capacity, p.in_use) for p in default.pools] == [("local/cpu", 2, 1)]
    assert default.estimated_wait_seconds == 1200.0
    assert by_name["research"].head == []


def test_the_route_answers_with_the_queue_list(view: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from aws_lambda_powertools.event_handler import APIGatewayRestResolver

    from functions import composition
    from functions.handlers import queues
    from functions.settings import Settings

    qv, repo, ledger = view
    _queued(repo, ledger, 1, ALICE)
    composition.configure(settings=Settings(), repository=repo, workflow=None)
    monkeypatch.setattr(queues, "queue_view", lambda: qv)
    app = APIGatewayRestResolver(enable_validation=True)
    app.include_router(queues.router)
    event = {
        "resource": "/queues",
        "path": "/queues",
        "httpMethod": "GET",
        "headers": {},
        "multiValueHeaders": {},
        "queryStringParameters": None,
        "requestContext": {"resourcePath": "/queues", "httpMethod": "GET", "identity": {"userArn": ALICE}, "stage": "prod"},
        "body": None,
        "isBase64Encoded": False,
    }
    try:
        response = app.resolve(event, None)
    finally:
        composition.reset()
    assert response["statusCode"] == 200, response
    body = json.loads(response["body"])
    assert body["queues"][0]["queue"] == "default" and body["queues"][0]["queued"] == 1
