"""EventBridge Scheduler: one schedule per schedule-triggered policy, created, updated and deleted with it.

Each schedule lives in the stack's retraining group, runs as the scheduler role and invokes the
dispatcher with {"policy_id", "scheduled_time", "execution_id"} (Scheduler fills the <aws.scheduler.*>
placeholders at each invocation). The dispatcher dedupes on the scheduled time: Scheduler retries an
invocation with the same scheduled time, so a retried tick starts one job.

Local mode uses this very adapter against the emulated Scheduler (moto stores schedules but never
fires them); localmode/deploy/retraining.py ticks them.
"""

from __future__ import annotations

import json
from typing import Any

from functions.adapters.aws import AwsClients
from schemas.retraining import RetrainingPolicy, ScheduleTrigger

NAME_PREFIX = "policy-"
# Scheduler retries a failed invocation for up to a day by default (185 attempts); a retraining tick
# that could not start within an hour is better skipped than run late, and the next tick comes anyway.
MAX_EVENT_AGE_SECONDS = 3600
MAX_RETRY_ATTEMPTS = 3
TARGET_INPUT = {
    "scheduled_time": "<aws.scheduler.scheduled-time>",
    "execution_id": "<aws.scheduler.execution-id>",
}


def schedule_name(policy_id: str) -> str:
    return NAME_PREFIX + policy_id


def target_input(policy_id: str) -> str:
    return json.dumps({"policy_id": policy_id, **TARGET_INPUT})


class EventBridgeSchedules:
    def __init__(self, clients: AwsClients, group: str, role_arn: str, target_arn: str) -> None:
        self._clients = clients
        self.group = group
        self.role_arn = role_arn
        self.target_arn = target_arn

    @property
    def _scheduler(self) -> Any:
        return self._clients.client("scheduler")

    def put(self, policy: RetrainingPolicy) -> None:
        trigger = policy.trigger
        if not isinstance(trigger, ScheduleTrigger):
            raise ValueError(f"policy {policy.policy_id} is not schedule-triggered")
        params = {
            "Name": schedule_name(policy.policy_id),
            "GroupName": self.group,
            "ScheduleExpression": trigger.expression,
            "ScheduleExpressionTimezone": trigger.timezone,
            "FlexibleTimeWindow": {"Mode": "OFF"},
            "State": "ENABLED" if policy.enabled else "DISABLED",
            "Description": f"trainplane retraining policy {policy.name}"[:512],
            "Target": {
                "Arn": self.target_arn,
                "RoleArn": self.role_arn,
                "Input": target_input(policy.policy_id),
                "RetryPolicy": {"MaximumEventAgeInSeconds": MAX_EVENT_AGE_SECONDS, "MaximumRetryAttempts": MAX_RETRY_ATTEMPTS},
            },
        }
        scheduler = self._scheduler
        # UpdateSchedule replaces the whole schedule; it is the common case (a PATCH), creation the other.
        try:
            scheduler.update_schedule(**params)
            return
        except scheduler.exceptions.ResourceNotFoundException:
            pass
        try:
            scheduler.create_schedule(**params)
        except scheduler.exceptions.ConflictException:
            scheduler.update_schedule(**params)  # created by a concurrent request meanwhile: ours is newer

    def delete(self, policy_id: str) -> None:
        scheduler = self._scheduler
        try:
            scheduler.delete_schedule(Name=schedule_name(policy_id), GroupName=self.group)
        except scheduler.exceptions.ResourceNotFoundException:
            return

    def policy_ids(self) -> list[str]:
        found: list[str] = []
        kwargs: dict[str, Any] = {"GroupName": self.group, "NamePrefix": NAME_PREFIX}
        while True:
            page = self._scheduler.list_schedules(**kwargs)
            found.extend(s["Name"].removeprefix(NAME_PREFIX) for s in page.get("Schedules", []))
            if not page.get("NextToken"):
                return found
            kwargs["NextToken"] = page["NextToken"]
