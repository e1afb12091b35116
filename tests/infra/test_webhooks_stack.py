"""Webhook delivery in the stack (infra/constructs/webhooks.py): a rule on the own bus feeds the fan-out
queue, the delivery function consumes it (batch item failures) and ticks every minute, and its table
access is the webhook and outbox partitions only; nag-clean (the session's synth fails otherwise)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from functions import constants
from functions.catalog import own_events as et
from tests.infra.conftest import Synth, resolve_ref

pytestmark = pytest.mark.infra
STAGES = ["dev", "prod"]
HANDLER = "functions.handlers.webhook_delivery.lambda_handler"


def _delivery(synth: Synth, stage: str) -> tuple[str, dict[str, Any]]:
    functions = synth.resources(stage, "AWS::Lambda::Function")
    return next((k, v) for k, v in functions.items() if v["Properties"]["Handler"] == HANDLER)


def _statements(synth: Synth, stage: str, function: dict[str, Any]) -> list[dict[str, Any]]:
    role = function["Properties"]["Role"]["Fn::GetAtt"][0]
    return [
        s
        for p in synth.resources(stage, "AWS::IAM::Policy").values()
        if {"Ref": role} in p["Properties"]["Roles"]
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]


@pytest.mark.parametrize("stage", STAGES)
def test_the_bus_feeds_the_fan_out_queue_which_the_delivery_function_consumes(synth: Synth, stage: str) -> None:
    key, function = _delivery(synth, stage)
    bus_key = next(iter(synth.resources(stage, "AWS::Events::EventBus")))
    rules = synth.resources(stage, "AWS::Events::Rule").values()
    to_queue = [
        r["Properties"]
        for r in rules
        if resolve_ref(r["Properties"].get("EventBusName")) == bus_key and r["Properties"].get("EventPattern") == {"source": [et.SOURCE]}
    ]
    assert len(to_queue) == 1
    queue_key = resolve_ref(to_queue[0]["Targets"][0]["Arn"])
    mapping = next(
        m["Properties"]
        for m in synth.resources(stage, "AWS::Lambda::EventSourceMapping").values()
        if resolve_ref(m["Properties"]["FunctionName"]) == key
    )
    assert resolve_ref(mapping["EventSourceArn"]) == queue_key and mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    queue = synth.resources(stage, "AWS::SQS::Queue")[queue_key]["Properties"]
    assert queue["VisibilityTimeout"] >= function["Properties"]["Timeout"] and queue["RedrivePolicy"]["maxReceiveCount"] == 5
    ticks = [r["Properties"] for r in rules if r["Properties"].get("ScheduleExpression") == "rate(1 minute)"]
    assert any(resolve_ref(t["Targets"][0]["Arn"]) == key for t in ticks)


@pytest.mark.parametrize("stage", STAGES)
def test_the_delivery_functions_table_access_is_the_webhook_and_outbox_partitions_only(synth: Synth, stage: str) -> None:
    _, function = _delivery(synth, stage)
    statements = _statements(synth, stage, function)
    dynamo = [
        s
        for s in statements
        if any(str(a).startswith("dynamodb:") for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"]))
    ]
    assert len(dynamo) == 1
    assert dynamo[0]["Condition"] == {
        "ForAllValues:StringLike": {
            "dynamodb:LeadingKeys": [constants.WEBHOOKS_PK, f"{constants.WEBHOOK_PK_PREFIX}*", constants.WEBHOOK_QUEUE_PK, et.OUTBOX_PK]
        }
    }
    assert "dynamodb:Scan" not in json.dumps(dynamo) and "dynamodb:BatchWriteItem" not in json.dumps(dynamo)


@pytest.mark.parametrize("stage", STAGES)
def test_held_events_and_attempts_expire_by_the_jobs_tables_ttl(synth: Synth, stage: str) -> None:
    table = next(t for t in synth.resources(stage, "AWS::DynamoDB::Table").values() if "StreamSpecification" in t["Properties"])
    assert table["Properties"]["TimeToLiveSpecification"] == {"AttributeName": constants.JOBS_TTL_ATTR, "Enabled": True}
