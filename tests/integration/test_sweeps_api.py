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
from tests.helpers.jobs import ADMIN, ALICE, BOB, request_body
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
            "hyperParameterTuningConfig.parameters.learning_rate",
            "min (1) is greater than max (0.1)",
        ),
        (
            {"parameters": {"lr": {"type": "double", "min": 0.1, "max": 1}}},
            "hyperParameterTuningConfig.parameters.lr.target",
            "'lr' is not a hyperparameter",
        ),
        (
            {"parameters": {"x": {"type": "int", "min": 1, "max": 2, "target": NOPE}}},
            "hyperParameterTuningConfig.parameters.x.target",
            "no field 'nope' there in a SubmitJobRequest",
        ),
        (
            {"parameters": {"g": {"type": "int", "values": [-1, 1], "target": GPUS}}},
            "job_template.resource_config.gpu_count",
            "a trial's job is invalid with {'g': -1}: Input should be greater than or equal to 0",
        ),
        (
            {"method": "grid", "maxTrials": 2, "parameters": {"n": {"type": "int", "min": 1, "max": 3}}},
            "hyperParameterTuningConfig",
            "the grid has 3 points, more than maxTrials=2",
        ),
        (
            {"earlyStopping": {"type": "hyperband", "minResource": 4, "maxResource": 2}},
            "hyperParameterTuningConfig.earlyStopping.maxResource",
            "maxResource (2) is smaller than minResource (4)",
        ),
    ],
)
def test_invalid_sweeps_are_422_naming_the_field(call: Any, change: dict[str, Any], field: str, message: str) -> None:
    reply = call("POST", body=sweep_body(**change))
    assert reply.status == 422, reply.body
    # The field named exactly (not a prefix or a piece of another), with the message saying what is wrong
    errors = {e["field"]: e["message"] for e in reply.body["errors"]}
    assert field in errors, reply.body
    assert message in errors[field] and message in reply.body["message"], reply.body


def test_a_template_post_jobs_would_refuse_is_refused(call: Any) -> None:
    body = sweep_body()
    body["job_template"]["resource_config"] = {"gpu_count": -3}
    reply = call("POST", body=body)
    assert reply.status == 422, reply.body
    errors = {e["field"]: e["message"] for e in reply.body["errors"]}
    assert "greater than or equal to 0" in errors["job_template.resource_config.gpu_count"], reply.body


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


# --- every value a sweep can give is checked at create (issue 21, point 4) -------------------------


def test_a_middle_categorical_value_naming_another_principals_path_is_refused(call: Any) -> None:
    # Given a categorical parameter over data sources: alice's shared data first and last, bob's data area between
    from functions.service.paths import principal_key

    bucket = composition.current().settings.artifacts_bucket
    shared = request_body()["data_config"]["sources"][0]["path"]
    bobs = f"s3://{bucket}/data/{principal_key(BOB)}/private.jsonl"
    source = {"type": "categorical", "values": [shared, bobs, shared + ".2"], "target": "data_config.sources[0].path"}
    # When alice creates the sweep
    reply = call("POST", body=sweep_body(parameters={"source": source}))
    # Then it is refused at create, naming the field and the value (it used to be accepted; its trial failed later)
    assert reply.status == 422, reply.body
    assert reply.body["errors"][0]["field"] == "job_template.data_config.sources[0].path", reply.body
    assert bobs in reply.body["message"]


def test_every_grid_point_is_checked_not_only_each_parameters_ends(call: Any) -> None:
    # Given a grid whose every value is valid alone, but one point (warmup_steps and warmup_ratio both set) is not
    steps = {"type": "int", "values": [0, 10]}
    ratio = {"type": "double", "values": [0, 0.1]}
    reply = call("POST", body=sweep_body(method="grid", parameters={"warmup_steps": steps, "warmup_ratio": ratio}))
    # Then the sweep is refused at create, naming that point's field
    field = "job_template.training_config.hyperparameters.warmup_ratio"
    assert reply.status == 422 and reply.body["errors"][0]["field"] == field, reply.body
    # And each of them alone is a valid sweep
    assert call("POST", body=sweep_body(method="grid", parameters={"warmup_steps": steps})).status == 201


def test_a_step_that_rounds_the_range_to_nothing_is_refused(call: Any) -> None:
    tiny = {"type": "double", "min": 0, "max": 1e-10, "step": 1, "target": "training_config.hyperparameters.weight_decay"}
    reply = call("POST", body=sweep_body(method="grid", parameters={"wd": tiny}))
    assert reply.status == 422 and "rounds the range" in reply.body["message"], reply.body


def test_a_metric_the_template_never_reports_is_refused(call: Any) -> None:
    # Given a sweep on eval_loss whose template has no validation data (every trial ran to FAILED)
    body = sweep_body(metric={"name": "eval_loss", "goal": "minimize"})
    reply = call("POST", body=body)
    assert reply.status == 422, reply.body
    assert reply.body["errors"][0]["field"] == "hyperParameterTuningConfig.metric.name" and "validation" in reply.body["message"]
    # And with validation data it is accepted
    body["job_template"]["data_config"]["validation_split"] = 0.1
    assert call("POST", body=body).status == 201
