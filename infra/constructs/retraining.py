"""Retraining triggers (issue 7): the dispatcher Lambda, the EventBridge rules that feed it, and the
EventBridge Scheduler group and role that schedule-triggered policies use.

One rule per trigger kind (not one per policy): a bus allows a limited number of rules (300 by
default) and policies come and go at run time, so the dispatcher matches events to policies itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aws_cdk import Stack
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from functions.catalog.areas import DATA_PREFIX
from functions.catalog.events import dispatcher_rules
from infra.config import StageConfig
from infra.constructs.common import allow, arn
from infra.constructs.compute import Compute
from infra.constructs.events import lambda_target
from infra.constructs.function import FunctionSpec, TrainplaneFunction
from infra.constructs.lifecycle import Lifecycle
from infra.constructs.storage import Storage

RETRAINING = FunctionSpec(
    name="retraining",
    handler="functions.handlers.retraining.lambda_handler",
    description="trainplane retraining dispatcher: new data, schedules and alarms start jobs from policies",
    memory_mb=512,
    timeout_s=60,
)


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
        compute: Compute,
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
        storage.grant_jobs(role, write=True)  # policies, routes, event decisions, and the jobs they submit
        lifecycle.grant_start(role)  # a submitted job's execution
        # A fired job's paths get submit's check: an output_path in a data area is probed (read-only).
        storage.grant_artifacts(role, prefixes=[DATA_PREFIX])
        # The "cancel the running job" concurrency policy cancels through the same service as the API.
        lifecycle.grant_answer_tasks(role)
        compute.grant_stop(role)
        # Schedules whose invocation fails land in the same dead-letter queue as failed event deliveries.
        allow(self.scheduler_role, ["sqs:SendMessage"], [dead_letter_queue.queue_arn])

        # The very rules the dispatcher's route matching assumes (and local mode puts on its bus).
        target = lambda_target(self.dispatcher.function, dead_letter_queue)
        self.rules = [
            events.Rule(self, rule_id, description=rule.description, event_pattern=_event_pattern(rule.pattern), targets=[target])
            for rule_id, rule in dispatcher_rules(storage.artifacts_bucket.bucket_name).items()
        ]
        return self.dispatcher

    def grant_manage_schedules(self, role: iam.IRole) -> None:
        """Create, change and delete the schedules of schedule-triggered policies (the API does, on policy CRUD)."""
        allow(
            role,
            ["scheduler:CreateSchedule", "scheduler:UpdateSchedule", "scheduler:DeleteSchedule"],
            [arn(self, "scheduler", f"schedule/{self.schedule_group_name}/*")],
            why="Schedules of this stage's retraining schedule group only; one per policy, named at run time.",
        )
        # Finding schedules whose policy is gone (RetrainingService.sync_schedules).
        allow(
            role,
            ["scheduler:ListSchedules"],
            ["*"],
            why="scheduler:ListSchedules (finding orphaned schedules) supports no resource-level permissions.",
        )
        allow(
            role,
            ["iam:PassRole"],
            [self.scheduler_role.role_arn],
            conditions={"StringEquals": {"iam:PassedToService": "scheduler.amazonaws.com"}},
        )


_PATTERN_KEYS = {
    "source": "source",
    "detail-type": "detail_type",
    "detail": "detail",
    "account": "account",
    "region": "region",
    "resources": "resources",
}


def _event_pattern(pattern: Mapping[str, Any]) -> events.EventPattern:
    unknown = set(pattern) - set(_PATTERN_KEYS)
    if unknown:
        raise ValueError(f"event pattern keys the stack cannot express: {sorted(unknown)}")
    return events.EventPattern(**{_PATTERN_KEYS[key]: value for key, value in pattern.items()})
