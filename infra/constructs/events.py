"""SageMaker and EC2 state changes (and the reconciler's tick) -> the events Lambda, with a dead-letter queue;
the trainer's reports (TRAINPLANE_EVENT lines of its log group) -> the same Lambda by a subscription filter.

Waiting in AWS is by task tokens: these events are what answers them. Deliveries that fail (the
Lambda throttled or erroring past its retries) land in the dead-letter queue, which has an alarm,
so a lost event is seen; the reconciler covers the ones that never arrived. CloudWatch Logs invokes
the Lambda asynchronously for the reports: a failed invocation ends in the same queue, and the
reconciler catches the job record up from S3 (docs/TRAINER.md, "Reports").
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Acknowledgment, Duration, Validations
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_logs_destinations as log_destinations
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from functions import constants
from functions.catalog.events import EC2_SOURCE, EC2_SPOT_WARNING, EC2_STATE_CHANGE, SAGEMAKER_SOURCE, SAGEMAKER_STATE_CHANGE
from infra.config import StageConfig
from infra.constructs.compute import Compute
from infra.constructs.function import FunctionSpec, TrainplaneFunction
from infra.constructs.lifecycle import Lifecycle
from infra.constructs.storage import Storage

EVENTS = FunctionSpec(
    name="events",
    handler="functions.handlers.events.lambda_handler",
    description="trainplane: SageMaker/EC2 state changes and spot interruptions answer the waiting executions; reconciler",
    memory_mb=512,
    timeout_s=60,
)
SAGEMAKER_PATTERN = events.EventPattern(source=[SAGEMAKER_SOURCE], detail_type=[SAGEMAKER_STATE_CHANGE])
EC2_PATTERN = events.EventPattern(source=[EC2_SOURCE], detail_type=[EC2_STATE_CHANGE, EC2_SPOT_WARNING])


def dead_letter_queue(scope: Construct, construct_id: str) -> sqs.Queue:
    queue = sqs.Queue(
        scope,
        construct_id,
        encryption=sqs.QueueEncryption.SQS_MANAGED,
        enforce_ssl=True,
        retention_period=Duration.days(14),  # SQS's maximum: time to look at what failed
    )
    Validations.of(queue).acknowledge(
        Acknowledgment(id="AwsSolutions-SQS3", reason="This queue is itself the dead-letter queue of failed event deliveries.")
    )
    return queue


def lambda_target(function: lambda_.IFunction, queue: sqs.IQueue) -> targets.LambdaFunction:
    # EventBridge retries for up to max_event_age, then puts the event in the DLQ.
    return targets.LambdaFunction(function, dead_letter_queue=queue, retry_attempts=8, max_event_age=Duration.hours(6))


class Events(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: StageConfig,
        storage: Storage,
        compute: Compute,
        lifecycle: Lifecycle,
        code: lambda_.Code,
        environment: Mapping[str, str],
    ) -> None:
        super().__init__(scope, construct_id)
        self.dead_letter_queue = dead_letter_queue(self, "DeadLetterQueue")
        self.handler = TrainplaneFunction(
            self,
            "Handler",
            spec=EVENTS,
            code=code,
            config=config,
            environment=environment,
            reserved_concurrency=config.reserved_concurrency.events,
            # Asynchronous invocations that still fail after Lambda's own two retries.
            dead_letter_queue=self.dead_letter_queue,
        )
        role = self.handler.role
        storage.grant_jobs(role, write=True)
        storage.grant_artifacts(role, prefixes=[f"{constants.JOBS_PREFIX}/"])  # latest checkpoint for a resume
        lifecycle.grant_answer_tasks(role)
        lifecycle.grant_start(role)  # the reconciler checks executions and restarts lost ones
        compute.grant_describe(role)
        compute.grant_stop(role)  # spot warnings tag the instance; the reconciler stops orphaned runs

        # The trainer's reports: only the TRAINPLANE_EVENT lines of the engine's log group. The destination
        # adds the function's resource policy: logs.amazonaws.com, from this group only (its ARN).
        self.trainer_reports = logs.SubscriptionFilter(
            self,
            "TrainerReports",
            log_group=compute.reports_log_group(),
            destination=log_destinations.LambdaDestination(self.handler.function),
            filter_pattern=logs.FilterPattern.literal(constants.TRAINER_REPORTS_FILTER_PATTERN),
            # The SageMaker group is the account's: the stage in the name keeps stages' filters apart.
            filter_name=config.name(constants.TRAINER_REPORTS_FILTER_NAME.removeprefix("trainplane-")),
        )

        target = lambda_target(self.handler.function, self.dead_letter_queue)
        self.rules = [
            events.Rule(
                self,
                "SageMakerTrainingJobs",
                description="SageMaker training job state changes",
                event_pattern=SAGEMAKER_PATTERN,
                targets=[target],
            ),
            events.Rule(
                self,
                "Ec2Instances",
                description="EC2 state changes and spot interruption warnings",
                event_pattern=EC2_PATTERN,
                targets=[target],
            ),
            events.Rule(
                self,
                "Reconciler",
                description="trainplane reconciler: jobs whose events were missed",
                schedule=events.Schedule.rate(Duration.minutes(config.reconcile_every_minutes)),
                targets=[target],
            ),
        ]
