"""The events Lambda: EventBridge events from SageMaker and EC2, the reconciler's scheduled tick, and
the trainer's reports from the CloudWatch Logs subscription.

Thin: Powertools parses the envelope (EventBridge, or CloudWatch Logs' gzip+base64 `awslogs.data`;
a malformed event is a validation error, retried and then dead-lettered), one service call decides,
the outcome is returned and logged. Rules and filters (infra/constructs/events.py): "SageMaker
Training Job State Change", "EC2 Instance State-change Notification", "EC2 Spot Instance
Interruption Warning", a schedule ("Scheduled Event") that runs one reconciler sweep, so a missed
event never strands a job, and the `TRAINPLANE_EVENT` lines of the trainer's log group.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.parser.models import CloudWatchLogsModel, EventBridgeModel

from functions import constants
from functions.catalog.events import SCHEDULED_EVENT

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from functions.service.cloud_events import CloudEventsService
    from functions.service.trainer_reports import TrainerLogReports

logger = Logger(service=constants.SERVICE_NAME)


def service() -> CloudEventsService:
    from functions import composition  # the composition root wires it (tests: composition.configure(cloud_events=...))

    return composition.current().cloud_events


def reports() -> TrainerLogReports:
    from functions import composition  # tests: composition.configure(trainer_reports=...)

    return composition.current().trainer_reports


def reconcile_once() -> dict[str, Any]:
    from functions import composition

    root = composition.current()
    report = root.new_reconciler().run_once()
    metered = root.budget_meter.tick()  # the budgets' meter runs on the reconciler's schedule (docs/BUDGETS.md)
    budgets = {"budgets_metered": metered.budgets, "budget_pauses": metered.paused or [], "budget_cancels": metered.cancelled or []}
    return {"action": "reconciled", **{k: v for k, v in vars(report).items() if v}, **{k: v for k, v in budgets.items() if v}}


@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    if isinstance(event, dict) and "awslogs" in event:
        return _trainer_reports(parse(event=event, model=CloudWatchLogsModel))
    return _eventbridge(parse(event=event, model=EventBridgeModel))


def _eventbridge(event: EventBridgeModel) -> dict[str, Any]:
    logger.append_keys(detail_type=event.detail_type, event_id=event.id)
    scheduled = event.detail_type == SCHEDULED_EVENT
    detail = event.detail if isinstance(event.detail, dict) else {}
    result = reconcile_once() if scheduled else service().handle(event.detail_type, detail).as_dict()
    if result.get("job_id"):
        logger.append_keys(job_id=result["job_id"])
    logger.info("event handled", extra={"outcome": result})
    return result


def _trainer_reports(event: CloudWatchLogsModel) -> dict[str, Any]:
    from functions.service.trainer_reports import LogLine

    batch = event.awslogs.decoded_data
    logger.append_keys(log_group=batch.logGroup, log_stream=batch.logStream)
    if batch.messageType != "DATA_MESSAGE":
        # CloudWatch Logs sends a CONTROL_MESSAGE when the subscription is created: nothing to apply.
        return {"action": "ignored", "reason": f"{batch.messageType} from the log subscription"}
    lines = [LogLine(id=e.id, timestamp_ms=int(e.timestamp.timestamp() * 1000), message=str(e.message)) for e in batch.logEvents]
    result = reports().handle(batch.logGroup, batch.logStream, lines).as_dict()
    logger.info("trainer reports handled", extra={"outcome": result})
    return result
