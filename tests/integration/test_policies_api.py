"""/retraining-policies through the API Lambda, on moto: the real composition (DynamoDB repository,
EventBridge Scheduler adapter on moto's Scheduler), a RecordingWorkflow as the engine.

Events are the recorded API Gateway event of tests/events/api_list_jobs.json with the method, path
and body of each case; every status code returned must be one the generated OpenAPI document lists.
"""

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
from functions.settings import Settings
from tests.fakes import RecordingWorkflow
from tests.helpers.aws import emulated_aws, fresh_resources
from tests.helpers.events import FakeLambdaContext, api_event
from tests.helpers.jobs import ADMIN, ALICE, BOB
from tests.helpers.retraining import policy_body

GROUP = "trainplane-test-retraining"
DISPATCHER = "arn:aws:lambda:us-east-1:123456789012:function:trainplane-test-retraining"
SCHEDULER_ROLE = "arn:aws:iam::123456789012:role/trainplane-test-scheduler"
COLLECTION = "/retraining-policies"
ITEM = "/retraining-policies/{policy_id}"


@dataclass
class Reply:
    status: int
    body: Any


@pytest.fixture(scope="module")
def aws() -> Iterator[AwsClients]:
    with emulated_aws() as clients:
        clients.client("scheduler").create_schedule_group(Name=GROUP)
        yield clients


@pytest.fixture(scope="module")
def documented() -> dict[str, Any]:
    return document()["paths"]


class Api:
    def __init__(self, aws: AwsClients, settings: Settings, documented: dict[str, Any]) -> None:
        self.aws = aws
        self.settings = settings
        self.documented = documented

    def __call__(
        self, method: str, policy_id: str | None = None, *, body: Any = None, user: str = ALICE, query: dict | None = None
    ) -> Reply:
        event = copy.deepcopy(api_event("api_list_jobs", user_arn=user, query=query or {}))
        resource = COLLECTION if policy_id is None else ITEM
        path = COLLECTION if policy_id is None else f"{COLLECTION}/{policy_id}"
        event.update(resource=resource, path=path, httpMethod=method, pathParameters={"policy_id": policy_id} if policy_id else None)
        event["requestContext"].update(resourcePath=resource, httpMethod=method, path=f"/prod{path}")
        event["body"] = None if body is None else json.dumps(body)
        raw = api.lambda_handler(event, FakeLambdaContext())
        codes = self.documented[resource][method.lower()]["responses"]
        assert str(raw["statusCode"]) in codes, f"{method} {resource} returned {raw['statusCode']}, documents {sorted(codes)}"
        return Reply(raw["statusCode"], json.loads(raw["body"]) if raw.get("body") else None)

    def create(self, **overrides: Any) -> dict[str, Any]:
        reply = self("POST", body=policy_body(**overrides))
        assert reply.status == 201, reply.body
        return reply.body  # type: ignore[no-any-return]

    def schedule(self, policy_id: str) -> dict[str, Any] | None:
        scheduler = self.aws.client("scheduler")
        try:
            return scheduler.get_schedule(Name=f"policy-{policy_id}", GroupName=GROUP)  # type: ignore[no-any-return]
        except scheduler.exceptions.ResourceNotFoundException:
            return None


@pytest.fixture
def call(aws: AwsClients, documented: dict[str, Any]) -> Iterator[Api]:
    settings = fresh_resources(
        aws,
        admin_arns=(ADMIN,),
        retraining_schedule_group=GROUP,
        retraining_scheduler_role_arn=SCHEDULER_ROLE,
        retraining_function_arn=DISPATCHER,
    )
    composition.configure(settings=settings, clients=aws, workflow=RecordingWorkflow())
    try:
        yield Api(aws, settings, documented)
    finally:
        composition.reset()


def _field_errors(reply: Reply) -> dict[str, str]:
    return {e["field"]: e["message"] for e in reply.body["errors"]}


# --- create, read, list ----------------------------------------------------------------------------


def test_create_returns_201_with_the_policy_and_masks_the_templates_hub_token(call: Api) -> None:
    # Given a policy whose job template pushes to the hub with a token
    body = policy_body()
    body["job_template"]["output_config"] = {"push_to_hub": True, "hub_repo_id": "org/m", "hub_token": "hf_secret"}
    # When alice creates it
    reply = call("POST", body=body)
    # Then 201 with her policy, never the token
    assert reply.status == 201
    policy = reply.body
    assert policy["policy_id"].startswith("pol-") and policy["owner"] == ALICE and policy["version"] == 1
    assert policy["job_template"]["output_config"]["hub_token"] == "**********"
    assert call("GET", policy["policy_id"]).body == policy


def test_another_principals_policy_is_404_for_every_verb(call: Api) -> None:
    policy_id = call.create()["policy_id"]
    for method, body in (("GET", None), ("PATCH", {"enabled": False}), ("DELETE", None)):
        reply = call(method, policy_id, body=body, user=BOB)
        assert reply.status == 404 and reply.body["message"] == f"retraining policy {policy_id} not found", method
    assert call("GET", policy_id, user=ADMIN).status == 200
    assert call("GET", "pol-nope").status == 404


def test_listing_is_scoped_to_the_caller_and_pages(call: Api) -> None:
    mine = {call.create()["policy_id"] for _ in range(3)}
    bobs = call("POST", body=policy_body(), user=BOB).body["policy_id"]
    first = call("GET", query={"limit": "2"})
    second = call("GET", query={"limit": "2", "next_token": first.body["next_token"]})
    assert first.status == second.status == 200
    assert {p["policy_id"] for p in first.body["policies"] + second.body["policies"]} == mine
    assert second.body["next_token"] is None or call("GET", query={"next_token": second.body["next_token"]}).body["policies"] == []
    assert [p["policy_id"] for p in call("GET", user=BOB).body["policies"]] == [bobs]
    assert len(call("GET", user=ADMIN).body["policies"]) == 4
    unknown = call("GET", query={"enabled": "true"})
    assert unknown.status == 422 and "enabled" in _field_errors(unknown)


# --- refused at creation, naming the field ---------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        (
            {"job_template": {**policy_body()["job_template"], "training_config": {"training_type": "NOPE"}}},
            "job_template.training_config.training_type",
            "Input should be",
        ),
        ({"trigger": {"type": "schedule", "expression": "cron(0 25 ? * * *)"}}, "trigger.schedule.expression", "hours: 25"),
        ({"trigger": {"type": "schedule", "expression": "rate(1 day)", "timezone": "Mars/Olympus"}}, "trigger.schedule.timezone", "IANA"),
        ({"input_mapping": [{"source": "id", "target": "training_config.nope"}]}, "input_mapping", "no field 'nope'"),
        ({"input_mapping": [{"source": "id", "target": "labels.retraining_policy"}]}, "input_mapping", "sets this label itself"),
        ({"concurrency_policy": "sometimes"}, "concurrency_policy", "Input should be"),
        ({"surprise": 1}, "surprise", "unknown field"),
        ({"trigger": {"type": "s3", "prefix": "jobs/"}}, "trigger.prefix", "only objects under datasets/"),
        ({"trigger": {"type": "event", "pattern": {"source": ["aws.ec2"]}}}, "trigger.pattern.source", "never reach the dispatcher"),
    ],
)
def test_an_invalid_policy_is_refused_at_creation_naming_the_field(call: Api, overrides: dict, field: str, message: str) -> None:
    # Given a policy with one thing wrong / When it is created
    reply = call("POST", body=policy_body(**overrides))
    # Then 422 names the field and says what is wrong; nothing was stored
    assert reply.status == 422, reply.body
    errors = _field_errors(reply)
    assert field in errors and message in errors[field], errors
    assert call("GET").body["policies"] == []


# --- edit and delete -------------------------------------------------------------------------------


def test_patch_edits_and_validates_the_whole_policy(call: Api) -> None:
    policy_id = call.create()["policy_id"]
    edited = call("PATCH", policy_id, body={"enabled": False, "min_interval_seconds": 3600, "daily_cap": 4})
    assert edited.status == 200
    assert (edited.body["enabled"], edited.body["min_interval_seconds"], edited.body["daily_cap"], edited.body["version"]) == (
        False,
        3600,
        4,
        2,
    )
    bad = call("PATCH", policy_id, body={"input_mapping": [{"source": "id", "target": "data_config.sources[5].path"}]})
    assert bad.status == 422 and "index [5] does not exist" in _field_errors(bad)["input_mapping"]
    assert call("PATCH", policy_id, body={}).status == 422
    assert call("PATCH", policy_id, body={"name": "renamed"}).status == 422  # names are fixed: unknown field
    assert call("GET", policy_id).body["version"] == 2


def test_delete_is_204_then_404(call: Api) -> None:
    policy_id = call.create()["policy_id"]
    assert call("DELETE", policy_id).status == 204
    assert call("GET", policy_id).status == 404
    assert call("DELETE", policy_id).status == 404


# --- schedules follow their policy -----------------------------------------------------------------


def test_a_schedule_policy_owns_an_eventbridge_schedule_for_its_life(call: Api) -> None:
    # Given a nightly schedule policy in Paris time
    trigger = {"type": "schedule", "expression": "cron(0 3 * * ? *)", "timezone": "Europe/Paris"}
    policy_id = call.create(trigger=trigger, input_mapping=[])["policy_id"]
    # Then its schedule invokes the dispatcher with the policy id and Scheduler's scheduled time
    schedule = call.schedule(policy_id)
    assert schedule is not None
    assert (schedule["ScheduleExpression"], schedule["ScheduleExpressionTimezone"], schedule["State"]) == (
        "cron(0 3 * * ? *)",
        "Europe/Paris",
        "ENABLED",
    )
    target = schedule["Target"]
    assert (target["Arn"], target["RoleArn"]) == (DISPATCHER, SCHEDULER_ROLE)
    assert json.loads(target["Input"]) == {
        "policy_id": policy_id,
        "scheduled_time": "<aws.scheduler.scheduled-time>",
        "execution_id": "<aws.scheduler.execution-id>",
    }
    # When it is disabled and its rate changed / Then the schedule follows
    call("PATCH", policy_id, body={"enabled": False, "trigger": {"type": "schedule", "expression": "rate(6 hours)"}})
    schedule = call.schedule(policy_id)
    assert schedule is not None and (schedule["State"], schedule["ScheduleExpression"]) == ("DISABLED", "rate(6 hours)")
    # When it becomes an S3 policy, and is deleted / Then the schedule is gone
    call("PATCH", policy_id, body={"trigger": {"type": "s3", "prefix": "datasets/x/"}})
    assert call.schedule(policy_id) is None
    assert call("DELETE", policy_id).status == 204


def test_without_scheduler_settings_a_schedule_is_refused_naming_what_to_configure(aws: AwsClients, documented: dict) -> None:
    settings = fresh_resources(aws)
    composition.configure(settings=settings, clients=aws, workflow=RecordingWorkflow())
    try:
        reply = Api(aws, settings, documented)("POST", body=policy_body(trigger={"type": "schedule", "expression": "rate(1 day)"}))
    finally:
        composition.reset()
    assert reply.status == 422 and "retraining_schedule_group" in _field_errors(reply)["trigger.type"]


def test_a_policy_over_the_item_budget_is_413_and_a_text_body_415(call: Api) -> None:
    # Given a template too large to store as a job (environment of ~480 KB)
    body = policy_body()
    body["job_template"]["training_config"]["environment"] = {f"VAR_{i}": "x" * 8192 for i in range(60)}
    # When it is created, or an existing policy is patched to it
    created = call("POST", body=body)
    policy_id = call.create()["policy_id"]
    patched = call("PATCH", policy_id, body={"job_template": body["job_template"]})
    # Then both are 413 saying the limit, and nothing changed
    assert created.status == 413 and "262,144 bytes" in created.body["message"], created.body
    assert patched.status == 413 and call("GET", policy_id).body["version"] == 1
    # And a body that is not JSON is 415; a method the path lacks 405 with Allow
    event = api_event("api_list_jobs", headers={"Content-Type": "text/plain"})
    event.update(resource=COLLECTION, path=COLLECTION, httpMethod="POST", body="name=x")
    assert api.lambda_handler(event, FakeLambdaContext())["statusCode"] == 415
    event.update(httpMethod="PUT", body=None)
    raw = api.lambda_handler(event, FakeLambdaContext())
    assert raw["statusCode"] == 405 and raw["multiValueHeaders"]["Allow"] == ["GET, POST"]
