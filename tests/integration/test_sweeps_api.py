"""/sweeps through the API Lambda on moto: the real composition, a RecordingWorkflow as the engine.
Every status code returned must be one the generated OpenAPI document lists."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from functions import composition
from functions.adapters.aws import AwsClients
from functions.handlers import api
from functions.handlers.openapi import document
from tests.fakes import RecordingWorkflow
from tests.helpers.aws import emulated_aws, fresh_resources
from tests.helpers.events import FakeLambdaContext, api_event
from tests.helpers.jobs import ADMIN, ALICE, BOB
from tests.helpers.sweeps import sweep_body

NOPE = "training_config.nope"
GPUS = "resource_config.gpu_count"
COLLECTION = "/sweeps"
ITEM = "/sweeps/{sweep_id}"


@dataclass
class Reply:
    status: int
    body: Any


@pytest.fixture(scope="module")
def aws() -> Iterator[AwsClients]:
    with emulated_aws() as clients:
        yield clients


@pytest.fixture
def call(aws: AwsClients) -> Iterator[Any]:
    documented = document()["paths"]
    settings = fresh_resources(aws, admin_arns=(ADMIN,), sweep_controller_function="local")
    composition.configure(settings=settings, clients=aws, workflow=RecordingWorkflow())

    def request(method: str, sweep_id: str | None = None, verb: str | None = None, *, body: Any = None, user: str = ALICE) -> Reply:
        event = copy.deepcopy(api_event("api_list_jobs", user_arn=user, query={}))
        resource = COLLECTION if sweep_id is None else ITEM + (f"/{verb}" if verb else "")
        path = COLLECTION if sweep_id is None else f"{COLLECTION}/{sweep_id}" + (f"/{verb}" if verb else "")
        event.update(resource=resource, path=path, httpMethod=method, pathParameters={"sweep_id": sweep_id} if sweep_id else None)
        event["requestContext"].update(resourcePath=resource, httpMethod=method, path=f"/prod{path}")
        event["body"] = None if body is None else json.dumps(body)
        raw = api.lambda_handler(event, FakeLambdaContext())
        codes = documented[resource][method.lower()]["responses"]
        assert str(raw["statusCode"]) in codes, f"{method} {resource} returned {raw['statusCode']}, documents {sorted(codes)}"
        return Reply(raw["statusCode"], json.loads(raw["body"]) if raw.get("body") else None)

    try:
        yield request
    finally:
        composition.reset()


def test_create_get_list_cancel_delete(call: Any) -> None:
    reply = call("POST", body=sweep_body())
    assert reply.status == 201, reply.body
    sweep = reply.body
    assert sweep["sweep_id"].startswith("swp-") and sweep["status"] == "RUNNING" and sweep["owner"] == ALICE
    # The config is echoed as OME spells it
    assert sweep["hyperParameterTuningConfig"]["maxTrials"] == 4 and sweep["hyperParameterTuningConfig"]["seed"] == 7
    got = call("GET", sweep["sweep_id"])
    assert got.status == 200 and got.body["counts"]["total"] == 0
    assert [s["sweep_id"] for s in call("GET").body["sweeps"]] == [sweep["sweep_id"]]
    assert call("DELETE", sweep["sweep_id"]).status == 409  # not finished
    assert call("POST", sweep["sweep_id"], "pause").body["status"] == "PAUSED"
    assert call("POST", sweep["sweep_id"], "pause").status == 409
    assert call("POST", sweep["sweep_id"], "resume").body["status"] == "RUNNING"
    assert call("POST", sweep["sweep_id"], "cancel", body={"reason": "enough"}).body["status_reason"] == "enough"
    assert call("DELETE", sweep["sweep_id"]).status == 204
    assert call("GET", sweep["sweep_id"]).status == 404


def test_another_principals_sweep_is_404_for_every_verb(call: Any) -> None:
    sweep_id = call("POST", body=sweep_body()).body["sweep_id"]
    for method, verb in (("GET", None), ("POST", "pause"), ("POST", "resume"), ("POST", "cancel"), ("DELETE", None)):
        reply = call(method, sweep_id, verb, user=BOB)
        assert reply.status == 404 and reply.body["message"] == f"sweep {sweep_id} not found", (method, verb)
    assert call("GET", sweep_id, user=ADMIN).status == 200
    assert call("GET", user=BOB).body["sweeps"] == []


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        (
            {"parameters": {"learning_rate": {"type": "double", "min": 1, "max": 0.1}}},
            "TuningConfig.parameters.learning_rate",
            "greater than",
        ),
        ({"parameters": {"lr": {"type": "double", "min": 0.1, "max": 1}}}, "parameters.lr.target", "not a hyperparameter"),
        ({"parameters": {"x": {"type": "int", "min": 1, "max": 2, "target": NOPE}}}, "parameters.x.target", "no field 'nope'"),
        ({"parameters": {"g": {"type": "int", "values": [-1, 1], "target": GPUS}}}, "job_template.resource_config.gpu_count", ""),
        ({"method": "grid", "maxTrials": 2, "parameters": {"n": {"type": "int", "min": 1, "max": 3}}}, "TuningConfig", "maxTrials"),
        ({"earlyStopping": {"type": "hyperband", "minResource": 4, "maxResource": 2}}, "earlyStopping.maxResource", "smaller than"),
    ],
)
def test_invalid_sweeps_are_422_naming_the_field(call: Any, change: dict[str, Any], field: str, message: str) -> None:
    reply = call("POST", body=sweep_body(**change))
    assert reply.status == 422, reply.body
    fields = " ".join(e["field"] for e in reply.body["errors"])
    assert field in fields, reply.body
    assert message in reply.body["message"]


def test_a_template_post_jobs_would_refuse_is_refused(call: Any) -> None:
    body = sweep_body()
    body["job_template"]["resource_config"] = {"gpu_count": -3}
    reply = call("POST", body=body)
    assert reply.status == 422 and any(e["field"].startswith("job_template.resource_config") for e in reply.body["errors"])


def test_without_a_sweep_controller_sweeps_are_refused_not_left_waiting(aws: AwsClients) -> None:
    composition.configure(settings=fresh_resources(aws), clients=aws, workflow=RecordingWorkflow())
    try:
        event = copy.deepcopy(api_event("api_list_jobs", user_arn=ALICE, query={}))
        event.update(resource=COLLECTION, path=COLLECTION, httpMethod="POST", pathParameters=None, body=json.dumps(sweep_body()))
        event["requestContext"].update(resourcePath=COLLECTION, httpMethod="POST", path=f"/prod{COLLECTION}")
        raw = api.lambda_handler(event, FakeLambdaContext())
        assert raw["statusCode"] == 422 and "sweep controller" in json.loads(raw["body"])["message"]
    finally:
        composition.reset()


def test_each_status_change_of_a_sweep_is_an_event_numbered_without_gap(call: Any, aws: AwsClients) -> None:
    # Given a sweep created, paused, resumed and cancelled through the API
    from functions.adapters.outbox import DynamoOutbox
    from schemas.events import SweepStateChange

    sweep_id = call("POST", body=sweep_body()).body["sweep_id"]
    for verb in ("pause", "resume", "cancel"):
        call("POST", sweep_id, verb, body={"reason": "enough"} if verb == "cancel" else None)
    # Then the outbox holds its four state changes, 1..4, each with the state before and after
    records = [r for r in DynamoOutbox(aws, composition.current().settings.jobs_table).pending() if r.subject_id == sweep_id]
    details = sorted((SweepStateChange.model_validate_json(r.detail) for r in records), key=lambda d: d.sequence)
    assert [(d.sequence, d.previous_state, d.state) for d in details] == [
        (1, None, "RUNNING"),
        (2, "RUNNING", "PAUSED"),
        (3, "PAUSED", "RUNNING"),
        (4, "RUNNING", "CANCELLED"),
    ]
    assert details[-1].reason == "enough" and details[0].owner == ALICE
