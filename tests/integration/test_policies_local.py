"""Local mode's retraining pieces on moto (localmode/deploy/retraining.py): THE dispatcher rules on the bus,
the SQS-to-dispatcher pump (ids, retries), and the schedule ticker on an injected clock.

Also pins what local mode relies on moto for: S3 -> EventBridge notifications matched by rules and
delivered to SQS, and every S3 event carrying the same id (which the pump makes unique).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from moto import mock_aws

from functions.adapters.schedules import target_input
from functions.catalog.events import dispatcher_rules
from localmode.deploy.retraining import MOTO_S3_EVENT_ID, EventPump, LocalOptions, ScheduleTicker, local_event

ARTIFACTS = "trainplane-artifacts"
TEAM = "team-datasets"
GROUP = "trainplane-retraining"
TARGET = "arn:aws:lambda:us-east-1:123456789012:function:trainplane-retraining"


@dataclass
class Bus:
    s3: Any
    sqs: Any
    events: Any
    scheduler: Any
    queue_url: str

    def drain(self) -> list[dict[str, Any]]:
        bodies = []
        while True:
            got = self.sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0).get("Messages", [])
            if not got:
                return bodies
            for m in got:
                bodies.append(json.loads(m["Body"]))
                self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=m["ReceiptHandle"])


@pytest.fixture(scope="module")
def bus() -> Iterator[Bus]:
    with mock_aws():
        region = {"region_name": "us-east-1"}
        s3, sqs, events = boto3.client("s3", **region), boto3.client("sqs", **region), boto3.client("events", **region)
        for bucket in (ARTIFACTS, TEAM):
            s3.create_bucket(Bucket=bucket)
            s3.put_bucket_notification_configuration(Bucket=bucket, NotificationConfiguration={"EventBridgeConfiguration": {}})
        url = sqs.create_queue(QueueName="retraining", Attributes={"VisibilityTimeout": "0"})["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        for name, rule in dispatcher_rules(ARTIFACTS).items():
            events.put_rule(Name=name, EventPattern=json.dumps(rule.pattern))
            events.put_targets(Rule=name, Targets=[{"Id": "q", "Arn": arn}])
        scheduler = boto3.client("scheduler", **region)
        scheduler.create_schedule_group(Name=GROUP)
        yield Bus(s3, sqs, events, scheduler, url)


# --- the rules -------------------------------------------------------------------------------------


def test_the_rules_pass_new_data_alarms_and_custom_events_and_nothing_else(bus: Bus) -> None:
    bus.drain()
    # Given objects written to the artifacts bucket (in and out of datasets/) and to another bucket
    bus.s3.put_object(Bucket=ARTIFACTS, Key="datasets/fresh/a.jsonl", Body=b"{}\n")
    bus.s3.put_object(Bucket=ARTIFACTS, Key="jobs/job-1/checkpoints/step-1/model.safetensors", Body=b"x")
    bus.s3.put_object(Bucket=TEAM, Key="raw/b.csv", Body=b"x")
    # And events put on the bus: custom, an alarm entering ALARM and one leaving it, an EC2 event
    alarm = {"alarmName": "drift", "state": {"value": "ALARM"}}
    bus.events.put_events(
        Entries=[
            {"Source": "trainplane.retraining", "DetailType": "Drift detected", "Detail": json.dumps({"score": 0.4})},
            {"Source": "aws.cloudwatch", "DetailType": "CloudWatch Alarm State Change", "Detail": json.dumps(alarm)},
            {
                "Source": "aws.cloudwatch",
                "DetailType": "CloudWatch Alarm State Change",
                "Detail": json.dumps({**alarm, "state": {"value": "OK"}}),
            },
            {"Source": "aws.ec2", "DetailType": "EC2 Instance State-change Notification", "Detail": "{}"},
        ]
    )
    # Then the dispatcher's queue got exactly the new data, the custom event and the alarm
    seen = {
        (e["source"], e["detail-type"], e["detail"].get("object", {}).get("key") or e["detail"].get("alarmName", "")) for e in bus.drain()
    }
    assert seen == {
        ("aws.s3", "Object Created", "datasets/fresh/a.jsonl"),
        ("aws.s3", "Object Created", "raw/b.csv"),
        ("trainplane.retraining", "Drift detected", ""),
        ("aws.cloudwatch", "CloudWatch Alarm State Change", "drift"),
    }


def test_moto_gives_every_s3_event_one_id_and_the_pump_makes_each_its_own(bus: Bus) -> None:
    # Given two objects written (moto 5.2.5 sends both with the same constant id)
    bus.drain()
    for key in ("datasets/fresh/1.jsonl", "datasets/fresh/2.jsonl"):
        bus.s3.put_object(Bucket=ARTIFACTS, Key=key, Body=b"{}\n")
    delivered: list[dict[str, Any]] = []
    failing = {"on": True}

    def invoke(event: dict[str, Any]) -> dict[str, Any]:
        delivered.append(event)
        if failing["on"]:
            raise RuntimeError("dispatcher down")
        return {}

    pump = EventPump(bus.sqs, bus.queue_url, invoke, LocalOptions(event_wait_seconds=0, event_max_receives=3))
    # When the pump hands them over and the dispatcher fails once, then succeeds
    assert pump.pump_once() == 0
    failing["on"] = False
    assert pump.pump_once() == 2
    # Then each event got its own id, the same on its redelivery (so the dispatcher dedupes it)
    raw_ids = {e["id"] for e in delivered}
    assert MOTO_S3_EVENT_ID not in raw_ids
    by_key: dict[str, set[str]] = {}
    for e in delivered:
        by_key.setdefault(e["detail"]["object"]["key"], set()).add(e["id"])
    assert all(len(ids) == 1 for ids in by_key.values()) and len(raw_ids) == 2
    assert pump.pump_once() == 0  # handled messages are gone


def test_the_pump_drops_an_event_after_its_last_allowed_failure(bus: Bus) -> None:
    bus.drain()
    bus.events.put_events(Entries=[{"Source": "trainplane.retraining", "DetailType": "poison", "Detail": "{}"}])
    attempts: list[str] = []

    def invoke(event: dict[str, Any]) -> dict[str, Any]:
        attempts.append(event["id"])
        raise RuntimeError("always fails")

    pump = EventPump(bus.sqs, bus.queue_url, invoke, LocalOptions(event_wait_seconds=0, event_max_receives=2))
    for _ in range(4):
        pump.pump_once()
    assert len(attempts) == 2 and len(set(attempts)) == 1
    assert bus.drain() == []


def test_local_event_keeps_real_ids() -> None:
    custom = {"id": "f03cd4ec", "source": "trainplane.retraining"}
    assert local_event(custom, "m-1") is custom
    s3 = {"id": MOTO_S3_EVENT_ID, "source": "aws.s3"}
    assert local_event(s3, "m-1")["id"] == local_event(s3, "m-1")["id"] != local_event(s3, "m-2")["id"]


# --- the ticker ------------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 3, 2, 8, 0, 30, tzinfo=UTC)  # a Monday

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


@pytest.fixture
def schedules(bus: Bus) -> Iterator[Any]:
    yield bus.scheduler
    for s in bus.scheduler.list_schedules(GroupName=GROUP).get("Schedules", []):
        bus.scheduler.delete_schedule(Name=s["Name"], GroupName=GROUP)


def _schedule(scheduler: Any, name: str, expression: str, *, timezone: str = "UTC", state: str = "ENABLED", update: bool = False) -> None:
    params = {
        "Name": name,
        "GroupName": GROUP,
        "ScheduleExpression": expression,
        "ScheduleExpressionTimezone": timezone,
        "FlexibleTimeWindow": {"Mode": "OFF"},
        "State": state,
        "Target": {"Arn": TARGET, "RoleArn": "arn:aws:iam::123456789012:role/s", "Input": target_input(name.removeprefix("policy-"))},
    }
    (scheduler.update_schedule if update else scheduler.create_schedule)(**params)


def _ticker(scheduler: Any, clock: Clock, scale: float = 1.0) -> tuple[ScheduleTicker, list[tuple[str, dict[str, Any]]]]:
    fired: list[tuple[str, dict[str, Any]]] = []
    ticker = ScheduleTicker(scheduler, GROUP, lambda arn, payload: fired.append((arn, json.loads(payload))), clock=clock, time_scale=scale)
    return ticker, fired


def test_a_rate_fires_every_period_after_the_ticker_saw_it_with_scheduler_placeholders_filled(schedules: Any) -> None:
    # Given rate(5 minutes), first seen at 08:00:30
    clock = Clock()
    _schedule(schedules, "policy-pol-a", "rate(5 minutes)")
    ticker, fired = _ticker(schedules, clock)
    assert ticker.tick() == []
    # When four minutes pass, then two more
    clock.advance(minutes=4)
    assert ticker.tick() == []
    clock.advance(minutes=2)
    ticks = ticker.tick()
    # Then it fired once, for 08:05:30, invoking the dispatcher with the policy and that time
    assert ticks == [("policy-pol-a", datetime(2026, 3, 2, 8, 5, 30, tzinfo=UTC))]
    ((arn, payload),) = fired
    assert arn == TARGET and payload["policy_id"] == "pol-a" and payload["scheduled_time"] == "2026-03-02T08:05:30Z"
    assert payload["execution_id"] and "<aws.scheduler" not in json.dumps(payload)


def test_cron_fires_at_its_minutes_in_its_time_zone(schedules: Any) -> None:
    # Given 09:00 on weekdays in Paris (08:00 UTC in March), seen at 07:59 UTC
    clock = Clock()
    clock.now = datetime(2026, 3, 2, 7, 59, tzinfo=UTC)
    _schedule(schedules, "policy-pol-b", "cron(0 9 ? * MON-FRI *)", timezone="Europe/Paris")
    ticker, fired = _ticker(schedules, clock)
    ticker.tick()
    clock.advance(minutes=2)
    assert [t for _, t in ticker.tick()] == [datetime(2026, 3, 2, 8, 0, tzinfo=UTC)]  # 09:00 in Paris (UTC+1)
    clock.advance(hours=23)
    assert ticker.tick() == []
    clock.advance(hours=1)
    assert len(ticker.tick()) == 1 and len(fired) == 2


def test_disabled_changed_and_deleted_schedules(schedules: Any) -> None:
    clock = Clock()
    _schedule(schedules, "policy-pol-c", "rate(1 minute)", state="DISABLED")
    ticker, fired = _ticker(schedules, clock)
    ticker.tick()
    clock.advance(minutes=3)
    assert ticker.tick() == []  # disabled: nothing
    # Enabled: counted from when the ticker saw the change, no backfill of the disabled time
    _schedule(schedules, "policy-pol-c", "rate(1 minute)", update=True)
    ticker.tick()
    clock.advance(seconds=61)
    assert len(ticker.tick()) == 1
    # Deleted: forgotten
    schedules.delete_schedule(Name="policy-pol-c", GroupName=GROUP)
    clock.advance(minutes=5)
    assert ticker.tick() == [] and len(fired) == 1


def test_a_fast_clock_ticks_schedule_time_and_fires_only_the_latest_missed_time(schedules: Any) -> None:
    # Given a ticker whose schedule time runs 60 times faster than the wall clock
    clock = Clock()
    _schedule(schedules, "policy-pol-d", "rate(1 minute)")
    ticker, fired = _ticker(schedules, clock, scale=60)
    start = ticker.now()
    ticker.tick()
    # When 3.5 real seconds pass (3.5 schedule minutes: three due times)
    clock.advance(seconds=3.5)
    (tick,) = ticker.tick()
    # Then one firing, for the latest due time
    assert ticker.now() - start == timedelta(minutes=3.5)
    assert tick[1] == start + timedelta(minutes=3) and len(fired) == 1
