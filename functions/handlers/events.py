"""The events Lambda: EventBridge events from SageMaker and EC2, and the reconciler's scheduled tick.

Thin: Powertools parses the EventBridge envelope (a malformed event is a validation error, retried
and then dead-lettered by EventBridge), one service call decides, the outcome is returned and logged.
Rules (infra/constructs/events.py): "SageMaker Training Job State Change", "EC2 Instance
State-change Notification", "EC2 Spot Instance Interruption Warning", and a schedule ("Scheduled
Event") that runs one reconciler sweep, so a missed event never strands a job.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.parser.models import EventBridgeModel

from functions import constants

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from functions.service.cloud_events import CloudEventsService

SCHEDULED_EVENT = "Scheduled Event"

logger = Logger(service=constants.SERVICE_NAME)


def service() -> CloudEventsService:
    from functions import composition  # the composition root wires it (tests: composition.configure(cloud_events=...))

    return composition.current().cloud_events


def reconcile_once() -> dict[str, Any]:
    from functions import composition

    report = composition.current().new_reconciler().run_once()
    return {"action": "reconciled", **{k: v for k, v in vars(report).items() if v}}


@logger.inject_lambda_context(clear_state=True)
@event_parser(model=EventBridgeModel)
def lambda_handler(event: EventBridgeModel, context: LambdaContext) -> dict[str, Any]:
    logger.append_keys(detail_type=event.detail_type, event_id=event.id)
    scheduled = event.detail_type == SCHEDULED_EVENT
    detail = event.detail if isinstance(event.detail, dict) else {}
    result = reconcile_once() if scheduled else service().handle(event.detail_type, detail).as_dict()
    if result.get("job_id"):
        logger.append_keys(job_id=result["job_id"])
    logger.info("event handled", extra={"outcome": result})
    return result
