"""Webhook delivery in the stack (issue 23.4, docs/EVENTS.md): a rule on the deployment's own bus sends
every trainplane event to an SQS queue; the delivery function fans each out to the webhooks it goes to
(the queue's records, with batch item failures; after 5 receipts a record goes to the dead-letter
queue) and makes the attempts due, also every minute on a schedule (retries wait in the jobs table's
queue partition for up to 24 h, beyond SQS's 15-minute delays).

Least privilege: the function reaches the jobs table's webhook partitions (the webhooks, one per
webhook, the delivery queue) and the outbox partition (a disabled webhook's event), nothing else of it.
It calls receivers on the internet (not in a VPC: receivers are public by rule, functions/catalog/address_guard.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Duration
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from functions import constants
from functions.catalog import own_events as et
from infra.config import StageConfig
from infra.constructs.common import allow
from infra.constructs.events import lambda_target
from infra.constructs.function import FunctionSpec, TrainplaneFunction
from infra.constructs.storage import Storage

WEBHOOK_DELIVERY = FunctionSpec(
    name="webhook-delivery",
    handler="functions.handlers.webhook_delivery.lambda_handler",
    description="trainplane webhooks: the bus's events fanned out to the webhooks, and the signed attempts that are due",
    memory_mb=256,
    timeout_s=300,  # many 15-second attempts per invocation; the queue's visibility timeout is above it
)
TICK_EVERY = Duration.minutes(1)
# The partitions of the jobs table the function may touch (dynamodb:LeadingKeys).
PARTITIONS = [constants.WEBHOOKS_PK, f"{constants.WEBHOOK_PK_PREFIX}*", constants.WEBHOOK_QUEUE_PK, et.OUTBOX_PK]
TABLE_ACTIONS = [
    "dynamodb:GetItem",
    "dynamodb:Query",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:ConditionCheckItem",
]


class WebhookDelivery(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: StageConfig,
        bus: events.IEventBus,
        storage: Storage,
        dead_letter_queue: sqs.IQueue,
        code: lambda_.Code,
        environment: Mapping[str, str],
    ) -> None:
        super().__init__(scope, construct_id)
        self.queue = sqs.Queue(
            self,
            "FanOut",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            visibility_timeout=Duration.seconds(WEBHOOK_DELIVERY.timeout_s * 6),  # AWS's advice for an SQS event source
            retention_period=Duration.days(4),
            dead_letter_queue=sqs.DeadLetterQueue(max_receive_count=5, queue=dead_letter_queue),
        )
        events.Rule(
            self,
            "Events",
            event_bus=bus,
            description="every trainplane event to the webhook fan-out",
            event_pattern=events.EventPattern(source=[et.SOURCE]),
            targets=[targets.SqsQueue(self.queue, dead_letter_queue=dead_letter_queue, retry_attempts=8, max_event_age=Duration.hours(6))],
        )
        self.function = TrainplaneFunction(
            self,
            "Function",
            spec=WEBHOOK_DELIVERY,
            code=code,
            config=config,
            environment=environment,
            reserved_concurrency=config.reserved_concurrency.webhook_delivery,
            dead_letter_queue=dead_letter_queue,
        )
        role = self.function.role
        allow(
            role,
            TABLE_ACTIONS,
            [storage.jobs_table.table_arn],
            conditions={"ForAllValues:StringLike": {"dynamodb:LeadingKeys": PARTITIONS}},
        )
        storage.grant_key(role, "dynamodb")
        self.queue.grant_consume_messages(role)
        self.function.function.add_event_source(sources.SqsEventSource(self.queue, batch_size=10, report_batch_item_failures=True))
        events.Rule(
            self,
            "Tick",
            description="make the webhook attempts that are due (retries wait up to 24 h)",
            schedule=events.Schedule.rate(TICK_EVERY),
            targets=[lambda_target(self.function.function, dead_letter_queue)],
        )
