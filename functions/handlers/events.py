"""The events Lambda: EventBridge events from SageMaker and EC2, and the reconciler's scheduled tick.

Thin: Powertools parses the EventBridge envelope (a malformed event is a validation error, retried
and then dead-lettered by EventBridge), one service call decides, the outcome is returned and logged.
Rules (infra/constructs/events.py): "SageMaker Training Job State Change", "EC2 Instance
State-change Notification", "EC2 Spot Instance Interruption Warning", and a schedule ("Scheduled
Event") that runs one reconciler sweep, so a missed event never strands a job.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
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

_factory: Callable[[], CloudEventsService] | None = None
_reconcile: Callable[[], dict[str, Any]] | None = None
_service: CloudEventsService | None = None
_lock = threading.Lock()


def use(factory: Callable[[], CloudEventsService] | None, reconcile: Callable[[], dict[str, Any]] | None = None) -> None:
    """Wire the service and the reconciler sweep (tests); None goes back to the composition root's."""
    global _factory, _reconcile, _service
    with _lock:
        _factory, _reconcile, _service = factory, reconcile, None


def service() -> CloudEventsService:
    global _service
    if _service is None:
        with _lock:
            if _service is None:
                if _factory is not None:
                    _service = _factory()
                else:
                    from functions import composition
                    from functions.service.cloud_events import CloudEventsService

                    root = composition.current()
                    _service = CloudEventsService(root.repository, root.lifecycle, root.launchers)
    return _service


def reconcile_once() -> dict[str, Any]:
    if _reconcile is not None:
        return _reconcile()
    from functions import composition
    from functions.service.reconciler import Reconciler

    root = composition.current()
    report = Reconciler(root.repository, root.lifecycle, root.workflow, root.launchers).run_once()  # type: ignore[arg-type]
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
