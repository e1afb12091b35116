"""Retraining triggers (issue 7): the dispatcher Lambda, the EventBridge rules that feed it, and the
EventBridge Scheduler group and role that schedule-triggered policies use.

One rule per trigger kind (not one per policy): a bus allows a limited number of rules (300 by
default) and policies come and go at run time, so the dispatcher matches events to policies itself.
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Stack
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.config import StageConfig
from infra.constructs.common import allow, arn
from infra.constructs.events import lambda_target
from infra.constructs.function import FunctionSpec, TrainplaneFunction
from infra.constructs.lifecycle import Lifecycle
from infra.constructs.storage import DATASETS_PREFIX, Storage

RETRAINING = FunctionSpec(
    name="retraining",
    handler="functions.handlers.retraining.lambda_handler",
    description="trainplane retraining dispatcher: new data, schedules and alarms start jobs from policies",
    memory_mb=512,
    timeout_s=60,
)
CUSTOM_EVENT_SOURCE = "trainplane.retraining"


class Retraining(Construct):
    """Built in two steps: the schedule group and the scheduler's role first (their names go into
    every function's settings: the API creates schedules), then the dispatcher and its rules."""

    def __init__(self, scope: Construct, construct_id: str, *, config: StageConfig) -> None:
        super().__init__(scope, construct_id)
        self.config = config
        self.schedule_group_name = config.name("retraining")
        self.schedule_group = scheduler.CfnScheduleGroup(self, "ScheduleGroup", name=self.schedule_group_name)
        # From the name, not the resource: the dispatcher's own settings carry it too.
        self.dispatcher_arn = arn(self, "lambda", f"function:{config.name(RETRAINING.name)}")
        self.scheduler_role = iam.Role(
            self,
            "SchedulerRole",
            assumed_by=iam.ServicePrincipal(
                "scheduler.amazonaws.com", conditions={"StringEquals": {"aws:SourceAccount": Stack.of(self).account}}
            ),
            description=f"trainplane {config.stage}: EventBridge Scheduler invokes the retraining dispatcher",
        )
        allow(self.scheduler_role, ["lambda:InvokeFunction"], [self.dispatcher_arn])

    def settings(self) -> dict[str, str]:
        return {
            "retraining_schedule_group": self.schedule_group_name,
            "retraining_scheduler_role_arn": self.scheduler_role.role_arn,
            "retraining_function_arn": self.dispatcher_arn,
        }

    def add_dispatcher(
        self,
        *,
        storage: Storage,
        lifecycle: Lifecycle,
        dead_letter_queue: sqs.IQueue,
        code: lambda_.Code,
        environment: Mapping[str, str],
    ) -> TrainplaneFunction:
        config = self.config
        self.dispatcher = TrainplaneFunction(
            self,
            "Dispatcher",
            spec=RETRAINING,
            code=code,
            config=config,
            environment=environment,
            reserved_concurrency=config.reserved_concurrency.retraining,
            dead_letter_queue=dead_letter_queue,
        )
        role = self.dispatcher.role
        storage.grant_jobs(role, write=True)  # policies and the jobs they submit
        storage.grant_idempotency(role)  # the same event delivered twice starts one job
        lifecycle.grant_start(role)
        # Schedules whose invocation fails land in the same dead-letter queue as failed event deliveries.
        allow(self.scheduler_role, ["sqs:SendMessage"], [dead_letter_queue.queue_arn])

        bucket = storage.artifacts_bucket.bucket_name
        target = lambda_target(self.dispatcher.function, dead_letter_queue)
        object_created = {"source": ["aws.s3"], "detail_type": ["Object Created"]}
        self.rules = [
            # The artifacts bucket writes checkpoints all day: only its datasets/ prefix is a trigger.
            events.Rule(
                self,
                "DatasetsLanded",
                description="new training data under the artifacts bucket's datasets/ prefix",
                event_pattern=events.EventPattern(
                    **object_created, detail={"bucket": {"name": [bucket]}, "object": {"key": [{"prefix": f"{DATASETS_PREFIX}/"}]}}
                ),
                targets=[target],
            ),
            # Other buckets with EventBridge notifications on (the team's data lake).
            events.Rule(
                self,
                "DataLanded",
                description="new objects in other buckets that send events to EventBridge",
                event_pattern=events.EventPattern(**object_created, detail={"bucket": {"name": [{"anything-but": [bucket]}]}}),
                targets=[target],
            ),
            events.Rule(
                self,
                "Alarms",
                description="CloudWatch alarms entering ALARM (e.g. a model-monitor drift alarm)",
                event_pattern=events.EventPattern(
                    source=["aws.cloudwatch"], detail_type=["CloudWatch Alarm State Change"], detail={"state": {"value": ["ALARM"]}}
                ),
                targets=[target],
            ),
            events.Rule(
                self,
                "Custom",
                description=f"custom retraining events (source {CUSTOM_EVENT_SOURCE})",
                event_pattern=events.EventPattern(source=[CUSTOM_EVENT_SOURCE]),
                targets=[target],
            ),
        ]

        return self.dispatcher

    def grant_manage_schedules(self, role: iam.IRole) -> None:
        """Create, change and delete the schedules of schedule-triggered policies (the API does, on policy CRUD)."""
        allow(
            role,
            ["scheduler:CreateSchedule", "scheduler:UpdateSchedule", "scheduler:DeleteSchedule", "scheduler:GetSchedule"],
            [arn(self, "scheduler", f"schedule/{self.schedule_group_name}/*")],
            why="Schedules of this stage's retraining schedule group only; one per policy, named at run time.",
        )
        allow(
            role,
            ["iam:PassRole"],
            [self.scheduler_role.role_arn],
            conditions={"StringEquals": {"iam:PassedToService": "scheduler.amazonaws.com"}},
        )
