"""The webhook delivery Lambda (docs/EVENTS.md): the fan-out of the bus's events, and the due attempts.

Two kinds of invocation:
- an SQS batch from the queue a rule on the deployment's own bus fills (every `trainplane` event): each
  event is held and queued for the webhooks it goes to (idempotent per webhook and event id, so SQS's
  at-least-once redelivery queues nothing twice); a record that fails is reported as a batch item
  failure and SQS sends it again (then to its dead-letter queue). Then the due attempts are made.
- a scheduled tick (every minute): the due attempts only (retries wait in the queue up to 24 h, which
  SQS delays, at 15 minutes at most, cannot hold).

Attempts run until nothing is due or the invocation's time nearly ends; what is left stays queued (a
lease cut short by a timeout ends, and the attempt is made again with the same webhook-id).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

from functions import composition, constants
from schemas.events import OutboxRecord

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

logger = Logger(service=constants.SERVICE_NAME)
metrics = Metrics(namespace=constants.METRICS_NAMESPACE, service=constants.SERVICE_NAME)

# An attempt takes at most 15 s (its timeout): stop starting passes when less than this is left.
RESERVE_MS = 20_000


def record_of(event: dict[str, Any]) -> OutboxRecord:
    """An EventBridge event (as the rule's SQS target delivers it) as the record the fan-out reads."""
    detail = event["detail"]
    return OutboxRecord(
        key=event.get("id", ""),
        event_id=detail["event_id"],
        detail_type=event["detail-type"],
        subject_id=str(detail.get("job_id") or detail.get("sweep_id") or detail.get("policy_id") or detail.get("webhook_id") or ""),
        sequence=int(detail["sequence"]),
        detail=json.dumps(detail),
    )


def fan_out(records: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Queue each SQS record's event for its webhooks; the ids of the records to send again."""
    failures = []
    webhooks = composition.current().webhooks
    for record in records:
        try:
            webhooks.fan_out([record_of(json.loads(record["body"]))])
        except Exception:
            logger.exception("webhook fan-out failed; SQS sends the event again", extra={"message_id": record.get("messageId")})
            failures.append({"itemIdentifier": record["messageId"]})
    return failures


def deliver(context: LambdaContext) -> int:
    worker = composition.current().webhook_delivery
    attempted = 0
    while context.get_remaining_time_in_millis() > RESERVE_MS:
        made = worker.deliver_due()
        attempted += made
        if not made:
            break
    return attempted


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    failures: list[dict[str, str]] = []
    if isinstance(event, dict) and event.get("Records"):
        failures = fan_out(event["Records"])
    attempted = deliver(context)
    metrics.add_metric(name="WebhookAttempts", unit=MetricUnit.Count, value=attempted)
    return {"batchItemFailures": failures, "attempted": attempted}
