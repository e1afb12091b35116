"""The retraining dispatcher Lambda: events and schedule ticks in, jobs out (infra/constructs/retraining.py).

Two kinds of invocation, told apart by shape:
- an EventBridge event from the dispatcher's rules: S3 "Object Created" (the artifacts bucket's
  datasets/ prefix, or another bucket with EventBridge notifications), a CloudWatch alarm entering
  ALARM, or a custom event with source "trainplane.retraining". Every policy it matches fires once.
- an EventBridge Scheduler invocation {"policy_id", "scheduled_time", "execution_id"}: that policy fires.

Thin: the shape is validated here (a malformed invocation raises, so the Lambda service retries it
and then dead-letters it), one service call decides, each policy's outcome is logged and counted.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from pydantic import BaseModel, ConfigDict, Field

from functions import composition, constants

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

logger = Logger(service=constants.SERVICE_NAME)
metrics = Metrics(namespace=constants.METRICS_NAMESPACE, service=constants.SERVICE_NAME)


class ScheduledInvocation(BaseModel):
    """What our EventBridge Scheduler schedules send (functions/adapters/schedules.py)."""

    model_config = ConfigDict(extra="ignore")
    policy_id: str = Field(min_length=1, max_length=64)
    scheduled_time: datetime | None = None
    execution_id: str | None = None


class EventBridgeEvent(BaseModel):
    """The envelope fields the dispatcher relies on; the event itself is matched as it came."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    id: str = Field(min_length=1, max_length=256)
    source: str = Field(min_length=1)
    detail_type: str = Field(alias="detail-type")
    detail: dict[str, Any] = Field(default_factory=dict)


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    service = composition.retraining_service()
    metrics.add_metric(name="RetrainingInvocations", unit=MetricUnit.Count, value=1)
    if isinstance(event, dict) and "policy_id" in event and "detail-type" not in event:
        tick = ScheduledInvocation.model_validate(event)
        logger.append_keys(policy_id=tick.policy_id, scheduled_time=str(tick.scheduled_time))
        results = service.fire_scheduled(tick.policy_id, tick.scheduled_time, tick.execution_id)
    else:
        envelope = EventBridgeEvent.model_validate(event)
        logger.append_keys(event_id=envelope.id, source=envelope.source, detail_type=envelope.detail_type)
        results = service.dispatch(event)
    for result in results:
        logger.info("retraining policy fired", extra={"result": result.model_dump(mode="json")})
        metrics.add_metric(name=f"RetrainingFire_{result.outcome}", unit=MetricUnit.Count, value=1)
    if not results:
        logger.info("no retraining policy matches")
    return {"results": [r.model_dump(mode="json") for r in results]}
