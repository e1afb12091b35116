"""No input gets a 5xx (issue 11): each cause a fuzzer found, one test each, through the API Lambda on moto.

Every case was a 500 (or a wrong 404/201) before functions/handlers/edge.py and the schema bounds;
each reply is also checked against the committed OpenAPI document by the `call` fixture.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from functions import composition
from functions.adapters import dynamodb_items
from functions.handlers import api
from tests.helpers.api_lambda import DOCUMENT, Api
from tests.helpers.events import FakeLambdaContext, api_event
from tests.helpers.jobs import request_body

NO_KEY = {"Idempotency-Key": ""}


def raw_call(name: str, **changes: Any) -> tuple[int, dict[str, Any], dict[str, Any]]:
    """The handler's raw answer, for events the committed document cannot describe (a method a path lacks)."""
    event = api_event(name, **{k: v for k, v in changes.items() if k not in ("method", "base64")})
    if "method" in changes:
        event["httpMethod"] = event["requestContext"]["httpMethod"] = changes["method"]
    if "base64" in changes:
        event["body"], event["isBase64Encoded"] = base64.b64encode(changes["base64"]).decode(), True
    raw = api.lambda_handler(event, FakeLambdaContext())
    headers = {k: v[0] if isinstance(v, list) else v for k, v in (raw.get("multiValueHeaders") or raw.get("headers") or {}).items()}
    return raw["statusCode"], json.loads(raw["body"]) if raw.get("body") else {}, headers


def assert_nothing_created(call: Api) -> None:
    assert call("api_list_jobs", query={}).body["jobs"] == []


# --- max_cost_usd overflowed the Decimal conversion of a DynamoDB number --------------------------


@pytest.mark.parametrize("value", [1e-320, 1e-5, 1e308, 1e40, 1_000_000.01])
def test_a_tiny_or_huge_max_cost_is_422_naming_it(call: Api, value: float) -> None:
    # Given a max_cost_usd that DynamoDB cannot store (or no job could mean)
    body = request_body(scheduling_config={"max_cost_usd": value})
    # When it is submitted
    reply = call("api_submit_job", body=body, headers=NO_KEY)
    # Then it is a 422 naming the field, not a 500
    assert reply.status == 422, reply.body
    assert [e["field"] for e in reply.body["errors"]] == ["scheduling_config.max_cost_usd"]
    assert_nothing_created(call)


def test_max_cost_within_bounds_is_stored_and_read_back(call: Api) -> None:
    job = call.submit(scheduling_config={"max_cost_usd": 0.01})
    assert call("api_get_job", job_id=job["job_id"]).body["scheduling_config"]["max_cost_usd"] == 0.01


@pytest.mark.parametrize("literal", ["Infinity", "-Infinity", "NaN"])
def test_nan_and_infinity_are_refused_not_stored_as_null(call: Api, literal: str) -> None:
    # Given a body with a number JSON does not have (Python's json would read it)
    raw = json.dumps(request_body()).replace('"batch_size": 2', f'"batch_size": 2, "validation_split": {literal}')
    reply = call("api_submit_job", raw_body=raw, headers=NO_KEY)
    # Then it is refused as malformed JSON
    assert reply.status == 400 and literal in reply.body["message"], reply.body
    # And spelt as a string, a float field refuses it too
    spelt = call("api_submit_job", body=request_body(scheduling_config={"max_cost_usd": literal}), headers=NO_KEY)
    assert spelt.status == 422 and spelt.body["errors"][0]["field"] == "scheduling_config.max_cost_usd"
    assert_nothing_created(call)


# --- bodies that are not UTF-8 JSON ----------------------------------------------------------------


def test_a_body_that_is_not_utf8_is_400(call: Api) -> None:
    # Given a body of bytes that are not UTF-8 (local mode's front door hands them over base64-encoded,
    # as API Gateway does for binary media types)
    status, body, _ = raw_call("api_submit_job", headers=NO_KEY, base64=b'{"name": "\xff\xfe"}')
    # Then it is a 400 saying so
    assert status == 400 and "not UTF-8" in body["message"] and body["errors"][0]["field"] == "body"


def test_a_body_marked_base64_that_is_not_base64_is_400(call: Api) -> None:
    event = api_event("api_submit_job", headers=NO_KEY)
    event["body"], event["isBase64Encoded"] = "not base64!", True
    raw = api.lambda_handler(event, FakeLambdaContext())
    assert raw["statusCode"] == 400 and "not base64" in json.loads(raw["body"])["message"]


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/xml", "multipart/form-data", "multipart/form-data; boundary=x", "application/x-www-form-urlencoded"],
)
def test_json_sent_as_another_media_type_is_415(call: Api, content_type: str) -> None:
    # Given a valid job sent with a Content-Type that is not JSON (a multipart without boundary crashed the parser)
    reply = call("api_submit_job", body=request_body(), headers={**NO_KEY, "Content-Type": content_type})
    # Then it is 415, naming the header
    assert reply.status == 415, reply.body
    assert reply.body["errors"][0]["field"] == "Content-Type" and "application/json" in reply.body["message"]
    assert_nothing_created(call)


@pytest.mark.parametrize("content_type", ["application/json; charset=utf-8", "APPLICATION/JSON", "application/merge-patch+json"])
def test_json_media_types_with_parameters_are_json(call: Api, content_type: str) -> None:
    reply = call("api_submit_job", body=request_body(), headers={**NO_KEY, "Content-Type": content_type})
    assert reply.status == 201, reply.body


def test_a_lifecycle_verb_with_a_text_body_is_415(call: Api) -> None:
    job = call.submit()
    reply = call("api_cancel_job", job_id=job["job_id"], raw_body="stop it", headers={"Content-Type": "text/plain"})
    assert reply.status == 415


@pytest.mark.parametrize(
    "raw",
    [
        '{"name": ' + "[" * 1000 + "]" * 1000 + "}",
        '{"a":' * 1000 + "1" + "}" * 1000,
        # Shallow enough for the parser, deeper than any request of this API
        json.dumps(request_body()).replace('"hidden_size": 16', '"hidden_size": ' + "[" * 40 + "]" * 40),
    ],
    ids=["arrays-1000", "objects-1000", "model-kwargs-40"],
)
def test_json_nested_too_deeply_is_400(call: Api, raw: str) -> None:
    reply = call("api_submit_job", raw_body=raw, headers=NO_KEY)
    assert reply.status == 400 and "nested too deeply" in reply.body["message"], reply.body


def test_an_integer_too_long_to_convert_is_400(call: Api) -> None:
    raw = json.dumps(request_body()).replace('"batch_size": 2', '"batch_size": ' + "9" * 5000)
    reply = call("api_submit_job", raw_body=raw, headers=NO_KEY)
    assert reply.status == 400 and reply.body["errors"][0]["type"] == "json_invalid"


# --- a job over DynamoDB's 400 KB item limit --------------------------------------------------------


def _oversized(**overrides: Any) -> dict[str, Any]:
    body = request_body(**overrides)
    # 60 x 8 KB of environment: ~480 KB, valid for the schema, over the item limit.
    body["training_config"]["environment"] = {f"VAR_{i}": "x" * 8192 for i in range(60)}
    return body


@pytest.mark.parametrize("idempotency_key", ["", "big-1"])
def test_a_job_over_the_item_budget_is_413_saying_the_limit(call: Api, idempotency_key: str) -> None:
    # Given a job whose stored item would be over DynamoDB's 400 KB
    body = _oversized()
    # When it is submitted (with and without an Idempotency-Key)
    reply = call("api_submit_job", body=body, headers={"Idempotency-Key": idempotency_key})
    # Then it is a 413 that says the limit, and nothing was written
    assert reply.status == 413, reply.body
    assert f"{dynamodb_items.SUBMITTED_JOB_MAX_BYTES:,} bytes" in reply.body["message"]
    assert "400" in reply.body["message"] or f"{dynamodb_items.MAX_ITEM_BYTES:,}" in reply.body["message"]
    assert_nothing_created(call)


def test_a_job_just_under_the_budget_is_accepted_and_its_runs_still_fit(call: Api) -> None:
    # Given a job whose request part is just under the budget
    body = request_body()
    body["training_config"]["environment"] = {f"VAR_{i}": "x" * 8192 for i in range(30)}  # ~246 KB
    job = call.submit(**body)
    # Then it is stored, within the budget, and the whole item is hardly more (the rest of the 400 KB is
    # left for the checkpoint refs, costs and progress its runs record)
    item = call.clients.dynamodb().get_item(
        TableName=call.settings.jobs_table, Key={"pk": {"S": f"JOB#{job['job_id']}"}, "sk": {"S": "META"}}
    )["Item"]
    assert 240 * 1024 < dynamodb_items.submitted_size(item) <= dynamodb_items.SUBMITTED_JOB_MAX_BYTES
    assert dynamodb_items.item_size(item) < dynamodb_items.SUBMITTED_JOB_MAX_BYTES + 4096


def test_a_patch_that_grows_the_job_over_the_budget_is_413(call: Api) -> None:
    job = call.submit()
    # (a valid hyperparameter, ~350 KB long: the trainer's rules allow any number of module names)
    reply = call("api_patch_job", job_id=job["job_id"], body={"hyperparameters": {"lora_target_modules": ",".join(["q_proj"] * 50_000)}})
    assert reply.status == 413, reply.body
    stored = call("api_get_job", job_id=job["job_id"]).body["training_config"]["hyperparameters"]
    assert stored == {"max_steps": "4", "learning_rate": "0.001"}


def test_item_size_counts_as_dynamodb_does() -> None:
    # Attribute names and values; numbers by significant digits; maps and lists with their overhead.
    item = {"pk": {"S": "JOB#é"}, "n": {"N": "123.45"}, "b": {"B": b"abc"}, "t": {"BOOL": True}, "m": {"M": {"k": {"S": "v"}}}}
    assert dynamodb_items.item_size(item) == (2 + 6) + (1 + 4) + (1 + 3) + (1 + 1) + (1 + 3 + 1 + 1 + 1)


# --- a method a path does not have ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "method", "allow"),
    [
        ("api_summary", "DELETE", "GET"),
        ("api_get_job", "PUT", "DELETE, GET, PATCH"),
        ("api_job_events", "POST", "GET"),
        ("api_cancel_job", "GET", "POST"),
        ("api_list_jobs", "DELETE", "GET, POST"),
    ],
)
def test_a_method_the_path_does_not_have_is_405_with_allow(call: Api, name: str, method: str, allow: str) -> None:
    status, body, headers = raw_call(name, method=method)
    assert status == 405, body
    assert headers["Allow"] == allow and method in body["message"]


def test_a_path_that_does_not_exist_is_still_404(call: Api) -> None:
    event = api_event("api_summary")
    event["path"] = "/nope"
    assert api.lambda_handler(event, FakeLambdaContext())["statusCode"] == 404


# --- numeric bounds, labels ----------------------------------------------------------------------


def _set(body: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    node = body
    *parents, last = dotted.split(".")
    for part in parents:
        node = node.setdefault(part, {}) if not part.isdigit() else node[int(part)]
    node[last] = value
    return body


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("data_config.seed", 2**32),
        ("data_config.seed", -1),
        ("data_config.sources.0.sampling.seed", 2**32),
        ("checkpoint_save_steps", 10**40),
        ("checkpoint_save_total_limit", 10**40),
        ("resource_config.cpu_cores", 10**40),
        ("resource_config.gpu_memory_min_mb", 10**40),
        ("resource_config.ram_min_mb", 10**40),
        ("resource_config.storage_min_mb", 10**40),
        ("data_config.sources.0.sampling.max_samples", 2**64),
    ],
)
def test_numbers_out_of_bounds_are_422_naming_the_field(call: Api, field: str, value: int) -> None:
    body = request_body()
    if field.startswith("checkpoint_"):
        field = "output_config.checkpoint." + field.removeprefix("checkpoint_")
    reply = call("api_submit_job", body=_set(body, field, value), headers=NO_KEY)
    assert reply.status == 422, reply.body
    assert [e["field"] for e in reply.body["errors"]] == [field]


def test_the_largest_seed_is_accepted(call: Api) -> None:
    job = call.submit(data_config={"sources": [{"path": "s3://trainplane-artifacts/shared/train.jsonl"}], "seed": 2**32 - 1})
    assert job["data_config"]["seed"] == 2**32 - 1


@pytest.mark.parametrize("value", ["line\nbreak", "nul\x00", "bell\x07", "del\x7f"])
def test_label_values_refuse_control_characters(call: Api, value: str) -> None:
    reply = call("api_submit_job", body=request_body(labels={"team": value}), headers=NO_KEY)
    assert reply.status == 422 and reply.body["errors"][0]["field"] == "labels.team", reply.body


def test_too_many_labels_is_an_error_naming_labels(call: Api) -> None:
    reply = call("api_submit_job", body=request_body(labels={f"k{i}": "v" for i in range(33)}), headers=NO_KEY)
    assert reply.status == 422 and [e["field"] for e in reply.body["errors"]] == ["labels"], reply.body


# --- openapi.json says what the server does ------------------------------------------------------------


def _schemas() -> dict[str, Any]:
    return DOCUMENT["components"]["schemas"]  # type: ignore[no-any-return]


def test_the_document_documents_405_everywhere_and_413_415_where_a_body_is_read() -> None:
    for path, operations in DOCUMENT["paths"].items():
        for method, operation in operations.items():
            codes = set(operation["responses"])
            assert "405" in codes, (method, path)
            if "requestBody" in operation:
                assert {"400", "413", "415"} <= codes, (method, path)


def test_refused_training_types_and_frameworks_are_not_offered(call: Api) -> None:
    schemas = _schemas()
    assert "MEGATRON" not in schemas["FrameworkType"]["enum"] and "MEGATRON" in schemas["FrameworkType"]["description"]
    assert "RLHF" in schemas["TrainingType"]["enum"] and "description" not in schemas["TrainingType"]  # every type is offered
    # And the server does refuse them
    body = request_body()
    body["training_config"]["framework"] = {"type": "MEGATRON"}
    assert call("api_submit_job", body=body, headers=NO_KEY).status == 422


def test_label_keys_the_server_refuses_are_not_allowed_by_the_document(call: Api) -> None:
    labels = next(s for name, s in _schemas().items() if name.startswith("SubmitJobRequest"))["properties"]["labels"]
    names = labels["propertyNames"]
    assert "patternProperties" not in labels and names["pattern"] == "^[A-Za-z0-9_.\\-/]+$" and names["maxLength"] == 63
    reply = call("api_submit_job", body=request_body(labels={"no spaces": "x"}), headers=NO_KEY)
    assert reply.status == 422 and reply.body["errors"][0]["field"].startswith("labels")


def test_the_trigger_type_discriminator_is_required() -> None:
    for trigger in ("S3Trigger", "ScheduleTrigger", "EventPatternTrigger"):
        schema = _schemas()[trigger]
        assert "type" in schema["required"] and "default" not in schema["properties"]["type"], trigger


def test_a_bad_hyperparameter_or_architecture_is_422_naming_it_through_the_api(call: Api) -> None:
    body = request_body()
    body["training_config"]["hyperparameters"] = {"learning_rat": "1e-3"}
    body["training_config"]["base_model"]["model_kwargs"]["architecture"] = "LlamaForCausalLM"  # accepted
    reply = call("api_submit_job", body=body, headers=NO_KEY)
    assert reply.status == 422 and [e["field"] for e in reply.body["errors"]] == ["training_config.hyperparameters.learning_rat"]
    assert "unknown hyperparameter" in reply.body["message"]
    body["training_config"]["hyperparameters"] = {"max_steps": "4"}
    assert call("api_submit_job", body=body, headers=NO_KEY).status == 201
    # And PATCH names the key too
    job = call.submit()
    patched = call("api_patch_job", job_id=job["job_id"], body={"hyperparameters": {"warmup_steps": "1.5"}})
    assert patched.status == 422 and patched.body["errors"][0]["field"] == "training_config.hyperparameters.warmup_steps"


def test_a_job_stored_before_the_submit_rules_still_reads_and_its_retry_is_a_422(call: Api) -> None:
    # Given a FAILED job stored before submit checked hyperparameters (one the trainer refused)
    from functions.service.ports import Transition
    from schemas.status import JobStatus

    job = call.submit()
    repo = composition.current().repository
    stored = repo.get(job["job_id"])
    old_training = stored.training_config.model_construct(
        **{**dict(stored.training_config), "hyperparameters": {"learning_rat": "1e-3"}}  # as written back then
    )
    item = dynamodb_items.job_item(stored.model_copy(update={"training_config": old_training}))
    call.clients.dynamodb().put_item(TableName=call.settings.jobs_table, Item=item)
    for status in (JobStatus.QUEUED, JobStatus.FAILED):
        current = repo.get(job["job_id"])
        repo.transition(Transition(job["job_id"], current.version, current.status, status, actor="system"))
    # When it is read, listed and retried
    got = call("api_get_job", job_id=job["job_id"])
    listed = call("api_list_jobs", query={})
    retried = call("api_retry_job", job_id=job["job_id"], body={})
    # Then it reads as it is (no 5xx), and the retry, a new submission, is refused naming the key
    assert got.status == 200 and got.body["training_config"]["hyperparameters"] == {"learning_rat": "1e-3"}
    assert listed.status == 200 and [j["job_id"] for j in listed.body["jobs"]] == [job["job_id"]]
    assert retried.status == 422, retried.body
    assert retried.body["errors"][0]["field"] == "training_config.hyperparameters.learning_rat"
