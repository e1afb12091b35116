"""GET /queues: each queue's waiting jobs, the capacity it draws on and an estimated wait (a Router of the API).

Also `with_position(job)` and `with_positions(jobs)`, which the job detail and job list routes use to fill
queue_position, estimated_wait_seconds and wait_reason for a QUEUED job (read at request time by Query on the queue index: no write
per scheduler pass, no Scan).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_lambda_powertools.event_handler.api_gateway import Router

from functions import composition
from functions.handlers.errors import principal_of, responses
from functions.handlers.models import LazyModels

if TYPE_CHECKING:
    from functions.service import queues as models
    from schemas.job import Job
else:
    # The queue view and its answers (with the teams' wait reasons) load on first use (functions/handlers/models.py)
    models = LazyModels("functions.service.queues")

router = Router()


def queue_view() -> models.QueueView:
    return composition.current().queue_view


def with_position(job: Job) -> Job:
    return queue_view().with_position(job)


def with_positions(jobs: list[Job]) -> list[Job]:
    return queue_view().with_positions(jobs)


@router.get(
    "/queues",
    summary="Queues: waiting jobs, capacity in use, estimated wait",
    responses=responses(200, "Every queue jobs were submitted to"),
    tags=["reports"],
)
def list_queues() -> models.QueueList:
    principal = principal_of(router)
    return queue_view().list(principal.can_see)
