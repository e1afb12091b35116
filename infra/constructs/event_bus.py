"""The control plane's own events (issue 23, docs/EVENTS.md): the bus, its archive, the schema registry,
and the publisher that moves the outbox (functions/adapters/outbox.py) onto the bus.

The jobs table's stream (NEW_IMAGE) feeds the publisher through an event source mapping filtered to
INSERTs of outbox items, so the function sees nothing else of the table. A record PutEvents keeps
refusing is reported as a batch item failure and the batch is sent again from there; after the stream's
retries the batch's position goes to the dead-letter queue while the outbox item itself stays, and the
scheduled drain sends it (an outbox item is deleted only once the bus accepted it).
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Duration
from aws_cdk import aws_events as events
from aws_cdk import aws_eventschemas as eventschemas
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from functions import constants
from functions.catalog import own_events as et
from infra.config import StageConfig
from infra.constructs.common import allow
from infra.constructs.events import lambda_target
from infra.constructs.function import FunctionSpec, TrainplaneFunction
from infra.constructs.storage import Storage
from schemas.events import SCHEMAS_DIR

EVENT_PUBLISHER = FunctionSpec(
    name="event-publisher",
    handler="functions.handlers.event_publisher.lambda_handler",
    description="trainplane events: the outbox (jobs table stream) onto the deployment's own EventBridge bus",
    memory_mb=256,
    timeout_s=60,
)
DRAIN_EVERY = Duration.minutes(5)
ARCHIVE_RETENTION = Duration.days(90)


def bus_name(config: StageConfig) -> str:
    return config.name(constants.TRAINPLANE_BUS_NAME.removeprefix("trainplane-"))


class EventBus(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, config: StageConfig) -> None:
        super().__init__(scope, construct_id)
        self.config = config
        self.bus = events.EventBus(self, "Bus", event_bus_name=bus_name(config))
        # Users replay from here (StartReplay) after a consumer's outage.
        self.archive = self.bus.archive(
            "Archive",
            archive_name=bus_name(config),
            description="every trainplane event, for replay",
            event_pattern=events.EventPattern(source=[et.SOURCE]),
            retention=ARCHIVE_RETENTION,
        )
        registry = eventschemas.CfnRegistry(
            self, "Registry", registry_name=config.name(et.SCHEMA_REGISTRY.removeprefix("trainplane-")), description="trainplane events"
        )
        for event_type in et.ALL:
            schema = eventschemas.CfnSchema(
                self,
                f"Schema{event_type.model}",
                registry_name=registry.attr_registry_name,
                schema_name=f"{et.SCHEMA_PREFIX}{event_type.model}",
                type="JSONSchemaDraft4",
                description=f"{et.SOURCE} / {event_type.detail_type}",
                content=(SCHEMAS_DIR / f"{event_type.model}.json").read_text(encoding="utf-8"),
            )
            schema.add_dependency(registry)

    def settings(self) -> dict[str, str]:
        return {"trainplane_bus_name": bus_name(self.config)}

    def add_publisher(
        self, *, storage: Storage, dead_letter_queue: sqs.IQueue, code: lambda_.Code, environment: Mapping[str, str]
    ) -> TrainplaneFunction:
        self.publisher = TrainplaneFunction(
            self,
            "Publisher",
            spec=EVENT_PUBLISHER,
            code=code,
            config=self.config,
            environment=environment,
            reserved_concurrency=self.config.reserved_concurrency.event_publisher,
            dead_letter_queue=dead_letter_queue,
        )
        role = self.publisher.role
        table = storage.jobs_table
        assert table.table_stream_arn is not None, "the jobs table has a stream (infra/constructs/storage.py)"
        allow(role, ["dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator"], [table.table_stream_arn])
        allow(
            role,
            ["dynamodb:ListStreams"],
            [f"{table.table_arn}/stream/*"],
            why="The jobs table's streams only; a stream's label is made when the table is created.",
        )
        # The outbox partition only: read what is pending, delete what the bus accepted.
        allow(
            role,
            ["dynamodb:Query", "dynamodb:BatchWriteItem"],
            [table.table_arn],
            conditions={"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [et.OUTBOX_PK]}},
        )
        storage.grant_key(role, "dynamodb")
        allow(role, ["events:PutEvents"], [self.bus.event_bus_arn])
        lambda_.EventSourceMapping(
            self,
            "Stream",
            target=self.publisher.function,
            event_source_arn=table.table_stream_arn,
            starting_position=lambda_.StartingPosition.TRIM_HORIZON,
            batch_size=100,
            max_batching_window=Duration.seconds(0),
            bisect_batch_on_error=True,
            retry_attempts=20,
            report_batch_item_failures=True,
            filters=[
                lambda_.FilterCriteria.filter(
                    {
                        "eventName": lambda_.FilterRule.is_equal("INSERT"),
                        "dynamodb": {"NewImage": {"entity": {"S": lambda_.FilterRule.is_equal(et.OUTBOX_ENTITY)}}},
                    }
                )
            ],
        )
        events.Rule(
            self,
            "Drain",
            description="send what the outbox still holds (covers a stream batch that exhausted its retries)",
            schedule=events.Schedule.rate(DRAIN_EVERY),
            targets=[lambda_target(self.publisher.function, dead_letter_queue)],
        )
        return self.publisher
