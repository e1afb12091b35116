"""Local deployer: retraining triggers without AWS - the same rules, the same dispatcher, schedules that tick.

What the cloud stack has (infra/constructs/retraining.py), in the emulated AWS:
- the dispatcher Lambda (`functions.handlers.retraining.lambda_handler`, run in-process by
  localmode.moto_lambda), and a schedule group + role for EventBridge Scheduler, published as
  the settings the API uses to create one schedule per schedule-policy - the same adapter as in AWS;
- the dispatcher's rules on the local bus, from THE patterns (functions/catalog/events.py).
  moto matches rules but cannot deliver to a Lambda target (docs/LOCAL_AWS.md), so the rules' target is an
  SQS queue and `EventPump` hands each event to the dispatcher: objects written to the artifacts bucket
  (S3 -> EventBridge notifications, as in the cloud) and custom events put on the bus both arrive so;
- moto stores schedules but never fires them: `ScheduleTicker` reads the group's schedules and invokes
  their target with their input, as Scheduler would. Its clock can run fast for demos and tests
  (TRAINPLANE_LOCAL_SCHEDULE_TIME_SCALE=60: a minute of schedule time per second).

Queued events do not survive a restart (the journal keeps tables and buckets); schedules are rebuilt
from the policies at start-up.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from pydantic import BaseModel, ConfigDict, Field

from functions.catalog.events import S3_SOURCE, dispatcher_rules
from functions.settings import PREFIX
from localmode import iam_calls
from schemas.schedule_expr import Cron, Rate, next_fire, parse_schedule_expression

if TYPE_CHECKING:
    from localmode.deploy import LocalContext

logger = logging.getLogger(__name__)

FUNCTION_NAME = "trainplane-retraining"
HANDLER = "functions.handlers.retraining.lambda_handler"
QUEUE_NAME = "trainplane-retraining-events"
SCHEDULE_GROUP = "trainplane-retraining"
RULE_PREFIX = "trainplane-retraining-"
# moto gives every S3 -> EventBridge event this same id (a constant in moto.events.utils), which would
# make every object after the first a "duplicate". In AWS each event has its own id; local mode gives
# each delivery its own, derived from the SQS message id, so a redelivered message keeps it.
# tests/integration/test_policies_local.py fails if moto stops doing this.
MOTO_S3_EVENT_ID = "17793124-05d4-b198-2fde-7ededc63b103"
_ID_NAMESPACE = uuid.UUID("0f5a1c1e-7a43-4c57-9a0e-5b1f3c7d2e10")
_LAMBDA_TRUST = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Principal": {"Service": ["lambda.amazonaws.com"]}, "Action": "sts:AssumeRole"}],
}
_SCHEDULER_TRUST = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Principal": {"Service": ["scheduler.amazonaws.com"]}, "Action": "sts:AssumeRole"}],
}


class LocalOptions(BaseModel):
    """Local-only knobs, from TRAINPLANE_LOCAL_* (not Settings: no handler reads them)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    schedule_tick_seconds: float = Field(default=1.0, gt=0, le=60)
    schedule_time_scale: float = Field(default=1.0, ge=1, le=86_400)
    event_wait_seconds: int = Field(default=1, ge=0, le=20)  # SQS long poll: how soon a stop is noticed
    event_max_receives: int = Field(default=3, ge=1, le=100)  # then the event is logged and dropped (the DLQ's part)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> LocalOptions:
        values = {name: env[PREFIX + "LOCAL_" + name.upper()] for name in cls.model_fields if PREFIX + "LOCAL_" + name.upper() in env}
        return cls.model_validate(values)


def deploy(ctx: LocalContext) -> None:
    from localmode import moto_lambda

    moto_lambda.install()
    options = LocalOptions.from_env(ctx.env)
    settings = ctx.settings()
    iam = ctx.client("iam")
    role = iam.create_role(RoleName=FUNCTION_NAME, AssumeRolePolicyDocument=json.dumps(_LAMBDA_TRUST))["Role"]["Arn"]
    function_arn = ctx.client("lambda").create_function(
        FunctionName=FUNCTION_NAME,
        Runtime="python3.12",
        Role=role,
        Handler=HANDLER,
        Code={"ZipFile": b"run in-process by localmode.moto_lambda"},
        Timeout=60,
    )["FunctionArn"]

    sqs = ctx.client("sqs")
    queue_url = sqs.create_queue(QueueName=QUEUE_NAME, Attributes={"VisibilityTimeout": "5"})["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    events = ctx.client("events")
    for name, rule in dispatcher_rules(settings.artifacts_bucket).items():
        events.put_rule(
            Name=RULE_PREFIX + name,
            EventPattern=json.dumps(rule.pattern),
            EventBusName=settings.event_bus_name,
            Description=rule.description,
        )
        events.put_targets(Rule=RULE_PREFIX + name, EventBusName=settings.event_bus_name, Targets=[{"Id": "dispatcher", "Arn": queue_arn}])

    ctx.client("scheduler").create_schedule_group(Name=SCHEDULE_GROUP)
    scheduler_role = iam.create_role(RoleName=FUNCTION_NAME + "-scheduler", AssumeRolePolicyDocument=json.dumps(_SCHEDULER_TRUST))
    ctx.set_setting("retraining_schedule_group", SCHEDULE_GROUP)
    ctx.set_setting("retraining_scheduler_role_arn", scheduler_role["Role"]["Arn"])
    ctx.set_setting("retraining_function_arn", function_arn)

    invoke = _invoker(ctx)
    pump = EventPump(sqs, queue_url, lambda event: invoke(function_arn, json.dumps(event)), options)
    # The schedules' invocations are EventBridge Scheduler's, as the stack's scheduler role (make iam-check).
    scheduled = iam_calls.as_role("Scheduler", invoke)
    ticker = ScheduleTicker(ctx.client("scheduler"), SCHEDULE_GROUP, scheduled, time_scale=options.schedule_time_scale)
    ctx.add_background("retraining-events", pump.run)
    ctx.add_background("retraining-schedules", lambda stop: ticker.run(stop, options.schedule_tick_seconds, resync=_resync))


class InvocationFailed(RuntimeError):
    pass


def _invoker(ctx: LocalContext) -> Callable[[str, str], dict[str, Any]]:
    lambda_client = ctx.client("lambda")

    def invoke(function_arn: str, payload: str) -> dict[str, Any]:
        response = lambda_client.invoke(FunctionName=function_arn, Payload=payload.encode())
        body = json.loads(response["Payload"].read() or b"{}")
        if response.get("FunctionError"):
            raise InvocationFailed(f"{body.get('errorType')}: {body.get('errorMessage')}")
        return body if isinstance(body, dict) else {}

    return invoke


def _resync() -> None:
    from functions import composition

    # Re-creating the schedules after a restart is local mode's own upkeep (the cloud's schedules persist).
    with iam_calls.local_only():
        counts = composition.retraining_service().sync_schedules()
    if counts["put"] or counts["deleted"]:
        logger.info("retraining schedules re-created from the policies: %s", counts)


# --- events ----------------------------------------------------------------------------------------


class EventPump:
    """The rules' SQS queue -> the dispatcher, at least once (a failed invocation is received again)."""

    def __init__(self, sqs: Any, queue_url: str, invoke: Callable[[dict[str, Any]], dict[str, Any]], options: LocalOptions) -> None:
        self.sqs = sqs
        self.queue_url = queue_url
        self.invoke = invoke
        self.options = options

    def pump_once(self) -> int:
        """Receive and dispatch one batch; returns how many events were handed over successfully."""
        response = self.sqs.receive_message(
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=10,
            WaitTimeSeconds=self.options.event_wait_seconds,
            MessageSystemAttributeNames=["ApproximateReceiveCount"],
        )
        handled = 0
        for message in response.get("Messages", []):
            event = local_event(json.loads(message["Body"]), message["MessageId"])
            receives = int(message.get("Attributes", {}).get("ApproximateReceiveCount", "1"))
            try:
                self.invoke(event)
                handled += 1
            except Exception as exc:
                if receives < self.options.event_max_receives:
                    logger.warning("retraining dispatcher failed on event %s (attempt %d), retrying: %s", event.get("id"), receives, exc)
                    continue  # visible again after the queue's visibility timeout
                logger.error("retraining dispatcher failed on event %s %d times; dropped: %s", event.get("id"), receives, exc)
            self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"])
        return handled

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.pump_once()
            except Exception:
                logger.exception("retraining event pump: receive failed; retrying")
                stop.wait(1.0)


def local_event(event: dict[str, Any], message_id: str) -> dict[str, Any]:
    """The event as EventBridge delivers it, with moto's shared S3 event id made unique per event."""
    if event.get("source") == S3_SOURCE and event.get("id") == MOTO_S3_EVENT_ID:
        return {**event, "id": str(uuid.uuid5(_ID_NAMESPACE, message_id))}
    return event


# --- schedules -------------------------------------------------------------------------------------


@dataclass
class _Schedule:
    modified: Any
    expression: Cron | Rate
    timezone: ZoneInfo
    target_arn: str
    input: str
    enabled: bool
    anchor: datetime  # when the ticker first saw this version: a rate counts from here
    checked: datetime  # up to when its firings have been considered


class ScheduleTicker:
    """EventBridge Scheduler's part in local mode: fire each schedule of the group at its times.

    A schedule's first firing is its first due time after the ticker saw it (no backfill of the time
    before); when several due times pass between two ticks (a fast clock) only the latest fires.
    """

    def __init__(
        self,
        scheduler: Any,
        group: str,
        invoke: Callable[[str, str], Any],
        *,
        clock: Callable[[], datetime] | None = None,
        time_scale: float = 1.0,
    ) -> None:
        self.scheduler = scheduler
        self.group = group
        self.invoke = invoke
        self._clock = clock or (lambda: datetime.now(UTC))
        self.time_scale = time_scale
        self._origin = self._clock()
        self._schedules: dict[str, _Schedule] = {}

    def now(self) -> datetime:
        """Schedule time: the wall clock, running `time_scale` times faster since the ticker started."""
        real = self._clock()
        return self._origin + (real - self._origin) * self.time_scale

    def tick(self) -> list[tuple[str, datetime]]:
        """One pass: (schedule name, scheduled time) for each firing, invoked already."""
        now = self.now()
        listed = self._list()
        for name in set(self._schedules) - set(listed):
            del self._schedules[name]
        fired = []
        for name, summary in listed.items():
            known = self._schedules.get(name)
            if known is None or known.modified != summary.get("LastModificationDate"):
                self._schedules[name] = self._load(name, now)
                continue
            due = self._due(known, now)
            known.checked = now
            if due is None or not known.enabled:
                continue
            self._fire(name, known, due)
            fired.append((name, due))
        return fired

    def run(self, stop: threading.Event, period: float, resync: Callable[[], None] | None = None) -> None:
        while resync is not None and not stop.is_set():
            try:
                resync()
                break
            except Exception:
                logger.exception("retraining schedules: re-sync from the policies failed; retrying")
                stop.wait(1.0)
        while not stop.is_set():
            try:
                self.tick()
            except Exception:
                logger.exception("retraining schedule tick failed")
            stop.wait(period)

    def _list(self) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        kwargs: dict[str, Any] = {"GroupName": self.group}
        while True:
            page = self.scheduler.list_schedules(**kwargs)
            found.update({s["Name"]: s for s in page.get("Schedules", [])})
            if not page.get("NextToken"):
                return found
            kwargs["NextToken"] = page["NextToken"]

    def _load(self, name: str, now: datetime) -> _Schedule:
        detail = self.scheduler.get_schedule(Name=name, GroupName=self.group)
        target = detail["Target"]
        return _Schedule(
            modified=detail.get("LastModificationDate"),
            expression=parse_schedule_expression(detail["ScheduleExpression"]),
            timezone=ZoneInfo(detail.get("ScheduleExpressionTimezone") or "UTC"),
            target_arn=target["Arn"],
            input=target.get("Input", "{}"),
            enabled=detail.get("State", "ENABLED") == "ENABLED",
            anchor=now,
            checked=now,
        )

    @staticmethod
    def _due(schedule: _Schedule, now: datetime) -> datetime | None:
        """The latest firing in (checked, now], if any."""
        due = None
        after = schedule.checked.astimezone(schedule.timezone)
        anchor = schedule.anchor.astimezone(schedule.timezone)
        while True:
            following = next_fire(schedule.expression, after, anchor)
            if following is None or following > now:
                return due
            due, after = following, following

    def _fire(self, name: str, schedule: _Schedule, due: datetime) -> None:
        stamp = due.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        payload = (
            schedule.input.replace("<aws.scheduler.scheduled-time>", stamp)
            .replace("<aws.scheduler.execution-id>", uuid.uuid4().hex)
            .replace("<aws.scheduler.attempt-number>", "1")
            .replace("<aws.scheduler.schedule-arn>", f"arn:aws:scheduler:::schedule/{self.group}/{name}")
        )
        try:
            self.invoke(schedule.target_arn, payload)
        except Exception:
            logger.exception("retraining schedule %s: invoking its target for %s failed", name, stamp)
