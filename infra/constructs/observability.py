"""Alarms (failed executions, dead letters, API 5xx, function errors), their topic, and one dashboard."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Duration, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.config import StageConfig
from infra.constructs.api import Api
from infra.constructs.function import TrainplaneFunction
from infra.constructs.lifecycle import Lifecycle
from infra.constructs.storage import Storage

PERIOD = Duration.minutes(5)


class Observability(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: StageConfig,
        storage: Storage,
        api: Api,
        lifecycle: Lifecycle,
        dead_letter_queue: sqs.IQueue,
        functions: Sequence[TrainplaneFunction],
    ) -> None:
        super().__init__(scope, construct_id)
        self.topic = sns.Topic(
            self, "AlarmTopic", display_name=f"trainplane {config.stage} alarms", master_key=storage.key, enforce_ssl=True
        )
        # CloudWatch publishes to the encrypted topic with the key, as a service of this account only.
        storage.key.add_to_resource_policy(
            iam.PolicyStatement(
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["kms:Decrypt", "kms:GenerateDataKey"],
                resources=["*"],  # in a key policy "*" is this key
                conditions={"StringEquals": {"aws:SourceAccount": Stack.of(self).account}},
            )
        )
        if config.alarm_email:
            self.topic.add_subscription(subscriptions.EmailSubscription(config.alarm_email))

        state_machine = lifecycle.state_machine
        rest_api = api.rest_api
        self.alarms: list[cloudwatch.Alarm] = [
            self._alarm("ExecutionsFailed", state_machine.metric_failed(period=PERIOD, statistic="Sum"), 1, "lifecycle executions failed"),
            self._alarm(
                "ExecutionsTimedOut", state_machine.metric_timed_out(period=PERIOD, statistic="Sum"), 1, "lifecycle executions timed out"
            ),
            self._alarm(
                "DeadLetters",
                dead_letter_queue.metric_approximate_number_of_messages_visible(period=PERIOD, statistic="Maximum"),
                1,
                "events that could not be delivered are waiting in the dead-letter queue",
            ),
            self._alarm(
                "Api5xx", rest_api.metric_server_error(period=PERIOD, statistic="Sum"), config.api_5xx_alarm_threshold, "API answered 5xx"
            ),
        ]
        for function in functions:
            self.alarms.append(
                self._alarm(
                    f"{function.spec.name.title()}Errors",
                    function.function.metric_errors(period=PERIOD, statistic="Sum"),
                    1,
                    f"{function.spec.name} function errors",
                )
            )

        self.dashboard = cloudwatch.Dashboard(
            self, "Dashboard", dashboard_name=config.name("control-plane"), default_interval=Duration.hours(6)
        )
        self.dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="API requests and errors",
                left=[
                    rest_api.metric_count(period=PERIOD),
                    rest_api.metric_client_error(period=PERIOD),
                    rest_api.metric_server_error(period=PERIOD),
                ],
                width=12,
            ),
            cloudwatch.GraphWidget(
                title="API latency (p50, p99)",
                left=[rest_api.metric_latency(period=PERIOD, statistic="p50"), rest_api.metric_latency(period=PERIOD, statistic="p99")],
                width=12,
            ),
        )
        self.dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Lifecycle executions",
                left=[
                    state_machine.metric_started(period=PERIOD),
                    state_machine.metric_succeeded(period=PERIOD),
                    state_machine.metric_failed(period=PERIOD),
                    state_machine.metric_timed_out(period=PERIOD),
                ],
                width=12,
            ),
            cloudwatch.GraphWidget(
                title="Dead letters", left=[dead_letter_queue.metric_approximate_number_of_messages_visible(period=PERIOD)], width=12
            ),
        )
        self.dashboard.add_widgets(
            cloudwatch.GraphWidget(title="Function errors", left=[f.function.metric_errors(period=PERIOD) for f in functions], width=8),
            cloudwatch.GraphWidget(
                title="Function throttles", left=[f.function.metric_throttles(period=PERIOD) for f in functions], width=8
            ),
            cloudwatch.GraphWidget(
                title="Function duration p99", left=[f.function.metric_duration(period=PERIOD, statistic="p99") for f in functions], width=8
            ),
        )
        self.dashboard.add_widgets(cloudwatch.AlarmStatusWidget(title="Alarms", alarms=self.alarms, width=24))

    def _alarm(self, construct_id: str, metric: cloudwatch.Metric, threshold: float, description: str) -> cloudwatch.Alarm:
        alarm = metric.create_alarm(
            self,
            construct_id,
            threshold=threshold,
            evaluation_periods=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description=f"trainplane: {description}",
        )
        alarm.add_alarm_action(actions.SnsAction(self.topic))
        return alarm
