"""GET /queues: each queue's waiting jobs, the capacity it draws on and an estimated wait (a Router of the API).

Also `with_position(job)`, which the job detail route uses to fill queue_position and
estimated_wait_seconds for a QUEUED job (read at request time by Query on the queue index: no write
per scheduler pass, no Scan).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from aws_lambda_powertools.event_handler.api_gateway import Router

from functions import composition
from functions.handlers.errors import Forbidden, responses
from functions.service.principal import caller_arn
from functions.service.queues import QueueList, QueueView
from functions.service.scheduler import capacity_model
from schemas.job import Job

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEvent

router = Router()
_views: dict[int, QueueView] = {}


def queue_view() -> QueueView:
    root = composition.current()
    view = _views.get(id(root))
    if view is None:
        from functions.adapters.capacity import DynamoDBCapacityLedger

        view = QueueView(root.repository, DynamoDBCapacityLedger(root.clients, root.settings.jobs_table), capacity_model(root.settings))
        _views.clear()
        _views[id(root)] = view
    return view


def with_position(job: Job) -> Job:
    return queue_view().with_position(job)


@router.get(
    "/queues",
    summary="Queues: waiting jobs, capacity in use, estimated wait",
    responses=responses(200, "Every queue jobs were submitted to"),
    tags=["reports"],
)
def list_queues() -> QueueList:
    event = cast("APIGatewayProxyEvent", router.current_event)
    identity = event.request_context.identity
    arn = caller_arn(identity.user_arn, identity.cognito_identity_id, identity.cognito_authentication_type)
    if not arn:
        raise Forbidden("no IAM caller in the request context: the API requires AWS_IAM (SigV4) authorization")
    principal = composition.job_service().principal(arn)
    return queue_view().list(principal.can_see)
