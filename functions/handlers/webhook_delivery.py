"""The webhook delivery Lambda (docs/EVENTS.md): makes the attempts that are due.

Invoked on a schedule (every minute) and by the jobs table's stream when a delivery is queued (the
stream filter names the queue partition), it runs the delivery worker until nothing is due or its
time is nearly up; what it leaves stays queued for the next invocation (the queue is DynamoDB items,
durable; a lease cut short by a timeout ends and the attempt is made again, same webhook-id).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

from functions import composition, constants

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

logger = Logger(service=constants.SERVICE_NAME)
metrics = Metrics(namespace=constants.METRICS_NAMESPACE, service=constants.SERVICE_NAME)

# An attempt takes at most 15 s (its timeout): stop starting passes when less than this is left.
RESERVE_MS = 20_000


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    worker = composition.current().webhook_delivery
    attempted = 0
    while context.get_remaining_time_in_millis() > RESERVE_MS:
        made = worker.deliver_due()
        attempted += made
        if not made:
            break
    metrics.add_metric(name="WebhookAttempts", unit=MetricUnit.Count, value=attempted)
    return {"attempted": attempted}
