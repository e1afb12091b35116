"""The event publisher Lambda: the jobs table's DynamoDB stream in, the deployment's own bus out (docs/EVENTS.md).

Two kinds of invocation, one publisher (functions/service/event_publisher.py):
- a DynamoDB stream batch (the event source mapping filters it to INSERTs of outbox items): those
  records are put on the bus and removed from the outbox. Records PutEvents still refuses after its
  retries are reported as batch item failures (ReportBatchItemFailures): Lambda sends the batch again
  from the first of them, so the stream's progress never passes an unsent event.
- anything else (the scheduled sweep, `{"drain": true}`): drain the outbox, for what the stream gave
  up on (a stream keeps records 24 h) or what was written while the mapping was off.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

from functions import composition, constants
from functions.adapters.outbox import is_outbox_item, record_from_item

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

logger = Logger(service=constants.SERVICE_NAME)
metrics = Metrics(namespace=constants.METRICS_NAMESPACE, service=constants.SERVICE_NAME)


def publish_stream_batch(event: dict[str, Any]) -> dict[str, Any]:
    """The stream batch's outbox records onto the bus; the answer names the first record to send again."""
    records, stream_position = [], {}
    for record in event.get("Records", []):
        image = record.get("dynamodb", {}).get("NewImage")
        if record.get("eventName") != "INSERT" or not image or not is_outbox_item(image):
            continue
        outbox_record = record_from_item(image)
        records.append(outbox_record)
        stream_position[outbox_record.key] = record["dynamodb"]["SequenceNumber"]
    failed = composition.current().event_publisher.publish(records)
    metrics.add_metric(name="EventsPublished", unit=MetricUnit.Count, value=len(records) - len(failed))
    if not failed:
        return {"batchItemFailures": []}
    metrics.add_metric(name="EventsRefused", unit=MetricUnit.Count, value=len(failed))
    first = min((stream_position[r.key] for r in failed), key=int)
    return {"batchItemFailures": [{"itemIdentifier": first}]}


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    if isinstance(event, dict) and "Records" in event:
        return publish_stream_batch(event)
    result = composition.current().event_publisher.drain()
    logger.info("outbox drained", extra={"sent": result.sent, "failed": result.failed})
    metrics.add_metric(name="EventsPublished", unit=MetricUnit.Count, value=result.sent)
    if result.failed:
        raise RuntimeError(f"{result.failed} events were refused by PutEvents; they stay in the outbox")
    return {"sent": result.sent}
