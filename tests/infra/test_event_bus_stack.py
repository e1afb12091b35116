"""The control plane's own events in the stack (issue 23, infra/constructs/event_bus.py): the bus, its
archive, the schema registry with every committed schema, the jobs table's stream and the publisher with
least privilege; nag-clean (the session's synth fails on any unacknowledged finding)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from functions import constants
from functions.catalog import own_events as et
from schemas.events import SCHEMAS_DIR
from tests.infra.conftest import Synth, resolve_ref

pytestmark = pytest.mark.infra
STAGES = ["dev", "prod"]


def _only(synth: Synth, stage: str, kind: str) -> dict[str, Any]:
    found = synth.resources(stage, kind)
    assert len(found) == 1, f"{kind}: {list(found)}"
    return next(iter(found.values()))["Properties"]  # type: ignore[no-any-return]


def _publisher(synth: Synth, stage: str) -> tuple[str, dict[str, Any]]:
    functions = synth.resources(stage, "AWS::Lambda::Function")
    return next((k, v) for k, v in functions.items() if v["Properties"]["Handler"] == "functions.handlers.event_publisher.lambda_handler")


@pytest.mark.parametrize("stage", STAGES)
def test_the_bus_is_archived_and_every_schema_is_registered(synth: Synth, stage: str) -> None:
    bus = _only(synth, stage, "AWS::Events::EventBus")
    assert bus["Name"].endswith(constants.TRAINPLANE_BUS_NAME.removeprefix("trainplane-"))
    archive = _only(synth, stage, "AWS::Events::Archive")
    assert json.loads(json.dumps(archive["EventPattern"])) == {"source": [et.SOURCE]} and archive["RetentionDays"] >= 30
    _only(synth, stage, "AWS::EventSchemas::Registry")
    schemas = {s["Properties"]["SchemaName"]: s["Properties"] for s in synth.resources(stage, "AWS::EventSchemas::Schema").values()}
    assert set(schemas) == {f"{et.SCHEMA_PREFIX}{t.model}" for t in et.ALL}
    for t in et.ALL:
        schema = schemas[f"{et.SCHEMA_PREFIX}{t.model}"]
        assert schema["Type"] == "JSONSchemaDraft4"
        assert schema["Content"] == (SCHEMAS_DIR / f"{t.model}.json").read_text()  # the committed file, as is


@pytest.mark.parametrize("stage", STAGES)
def test_the_publisher_reads_only_outbox_inserts_of_the_jobs_table_stream(synth: Synth, stage: str) -> None:
    table = next(t for t in synth.resources(stage, "AWS::DynamoDB::Table").values() if "StreamSpecification" in t["Properties"])
    assert table["Properties"]["StreamSpecification"] == {"StreamViewType": "NEW_IMAGE"}
    key, _ = _publisher(synth, stage)
    mappings = synth.resources(stage, "AWS::Lambda::EventSourceMapping").values()
    streams = [m["Properties"] for m in mappings if "StartingPosition" in m["Properties"]]  # the webhooks' SQS mapping has none
    assert len(streams) == 1
    mapping = streams[0]
    assert resolve_ref(mapping["FunctionName"]) == key
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]  # a refused event is sent again
    filters = [json.loads(f["Pattern"]) for f in mapping["FilterCriteria"]["Filters"]]
    assert filters == [{"eventName": ["INSERT"], "dynamodb": {"NewImage": {"entity": {"S": [et.OUTBOX_ENTITY]}}}}]


@pytest.mark.parametrize("stage", STAGES)
def test_the_publishers_table_access_is_the_outbox_partition_and_its_bus_only(synth: Synth, stage: str) -> None:
    _, function = _publisher(synth, stage)
    role = function["Properties"]["Role"]["Fn::GetAtt"][0]
    statements = [
        s
        for p in synth.resources(stage, "AWS::IAM::Policy").values()
        if {"Ref": role} in p["Properties"]["Roles"]
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]
    by_action = {a: s for s in statements for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
    for action in ("dynamodb:Query", "dynamodb:BatchWriteItem"):
        assert by_action[action]["Condition"] == {"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [et.OUTBOX_PK]}}
    assert not {"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:GetItem"} & set(by_action)
    bus_key = next(iter(synth.resources(stage, "AWS::Events::EventBus")))
    assert by_action["events:PutEvents"]["Resource"] == {"Fn::GetAtt": [bus_key, "Arn"]}
    # Every function learns the bus's name from its settings
    assert (
        function["Properties"]["Environment"]["Variables"]["TRAINPLANE_TRAINPLANE_BUS_NAME"]
        == _only(synth, stage, "AWS::Events::EventBus")["Name"]
    )
