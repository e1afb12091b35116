"""Bounded answers and bounded work (issue 21, point 4), through the API Lambda on moto.

5,000 unknown hyperparameter keys (a 70 KB request) once answered a 6.4 MB 422, over Lambda's 6 MB
response limit (API Gateway would answer 502): each error repeated the known names. 400,000 keys took
19 s of per-key validation. Now every free-form map is counted before any key is looked at, and every
error answer is capped (functions/handlers/errors.py).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from functions.handlers import api
from functions.handlers.errors import MAX_ERRORS
from schemas import bounds
from tests.helpers.api_lambda import Api
from tests.helpers.events import FakeLambdaContext, api_event
from tests.helpers.jobs import ALICE, request_body
from tests.helpers.retraining import policy_body

NO_KEY = {"Idempotency-Key": ""}
ONE_MB = 1_000_000


def _post_policy(body: dict[str, Any]) -> tuple[int, str]:
    """POST /retraining-policies (the jobs' recorded event, re-aimed), as the raw answer."""
    event = copy.deepcopy(api_event("api_list_jobs", user_arn=ALICE, query={}))
    event.update(resource="/retraining-policies", path="/retraining-policies", httpMethod="POST", pathParameters=None)
    event["requestContext"].update(resourcePath="/retraining-policies", httpMethod="POST", path="/prod/retraining-policies")
    event["body"] = json.dumps(body)
    raw = api.lambda_handler(event, FakeLambdaContext())
    return raw["statusCode"], raw["body"]


def _post_job(body: dict[str, Any]) -> tuple[int, str]:
    raw = api.lambda_handler(api_event("api_submit_job", body=body, headers=NO_KEY), FakeLambdaContext())
    return raw["statusCode"], raw["body"]


def _with_hyperparameters(count: int) -> dict[str, Any]:
    body = request_body()
    body["training_config"]["hyperparameters"] = {f"K_unknown_{i}": "1" for i in range(count)}
    return body


@pytest.mark.parametrize("route", ["jobs", "retraining-policies"])
def test_5000_unknown_hyperparameters_answer_under_1_mb(call: Api, route: str) -> None:
    # Given a job (or a policy's job template) with 5,000 unknown hyperparameter keys
    job = _with_hyperparameters(5000)
    # When it is posted
    status, raw = _post_job(job) if route == "jobs" else _post_policy(policy_body(job_template=job))
    # Then it is a 422 of a few hundred bytes, not megabytes, naming the map
    assert status == 422 and len(raw) < ONE_MB, (status, len(raw))
    fields = [e["field"] for e in json.loads(raw)["errors"]]
    assert fields and fields[0].endswith("training_config.hyperparameters"), fields


def test_many_errors_are_capped_and_the_known_names_said_once(call: Api) -> None:
    # Given unknown hyperparameters under the key cap (each its own error) and 50,000 unknown top-level fields
    body = _with_hyperparameters(bounds.MAX_HYPERPARAMETERS)
    # When it is posted
    status, raw = _post_job(body)
    # Then the errors are capped, and the known names appear in one error only
    answer = json.loads(raw)
    assert status == 422 and len(answer["errors"]) == MAX_ERRORS, answer["message"]
    assert sum("known: " in e["message"] for e in answer["errors"]) == 1
    assert f"and {bounds.MAX_HYPERPARAMETERS - 5} more" in answer["message"]
    # And a body of 50,000 unknown fields (one error each, unbounded before) is answered in a few KB
    flood = {**request_body(), **{f"field_{i}": 1 for i in range(50_000)}}
    status, raw = _post_job(flood)
    assert status == 422 and len(raw) < 64_000, len(raw)
    assert len(json.loads(raw)["errors"]) == MAX_ERRORS


def test_a_long_key_is_cut_in_the_answer(call: Api) -> None:
    body = request_body()
    body["training_config"]["hyperparameters"] = {"x" * 500_000: "1"}
    status, raw = _post_job(body)
    assert status == 422 and len(raw) < 16_000, len(raw)


MAPS = {
    "training_config.hyperparameters": lambda b, m: b["training_config"].__setitem__("hyperparameters", m),
    "training_config.environment": lambda b, m: b["training_config"].__setitem__("environment", m),
    "labels": lambda b, m: b.__setitem__("labels", m),
    "training_config.base_model.model_kwargs": lambda b, m: b["training_config"]["base_model"].__setitem__("model_kwargs", m),
    "training_config.framework.config": lambda b, m: b["training_config"].setdefault("framework", {}).__setitem__("config", m),
    "training_config.framework.distributed.config": lambda b, m: (
        b["training_config"].setdefault("framework", {}).__setitem__("distributed", {"config": m})
    ),
    "data_config.sources.0.filters": lambda b, m: b["data_config"]["sources"][0].__setitem__("filters", m),
}


@pytest.mark.parametrize("field", sorted(MAPS))
def test_a_400000_key_map_is_refused_by_its_key_count(call: Api, monkeypatch: pytest.MonkeyPatch, field: str) -> None:
    # Given the per-key validators of the maps, watched
    from schemas import hyperparameters, job

    looked_at: list[str] = []
    parse = hyperparameters.Hyperparameters.parse.__func__  # type: ignore[attr-defined]
    unknown_error = hyperparameters.unknown_error

    def watched_parse(cls: type, values: dict[str, Any], *args: Any) -> Any:
        looked_at.extend(key for key in values if key.startswith("K"))
        return parse(cls, values, *args)

    def watched_unknown(key: str, **kwargs: Any) -> Any:
        looked_at.append(key)
        return unknown_error(key, **kwargs)

    monkeypatch.setattr(hyperparameters.Hyperparameters, "parse", classmethod(watched_parse))
    monkeypatch.setattr(hyperparameters, "unknown_error", watched_unknown)
    assert job.SubmitJobRequest  # imported: the models are built
    if field == "training_config.hyperparameters":  # the watch sees keys that do reach the rules
        assert _post_job(_with_hyperparameters(3) | {"name": "x"})[0] == 422
        assert looked_at and looked_at.clear() is None
    # And a job whose map has 400,000 keys
    body = request_body()
    MAPS[field](body, {f"K{i}": "1" for i in range(400_000)})
    # When it is posted
    status, raw = _post_job(body)
    # Then one short 422 names the map, from the key count (it counted all 400,000 before looking at any)
    answer = json.loads(raw)
    assert status == 422 and len(raw) < 4_000, (status, len(raw))
    assert [(e["field"], e["type"]) for e in answer["errors"]] == [(field, "too_many_keys")], answer
    assert "not 400000" in answer["errors"][0]["message"]
    assert looked_at == []  # no key reached the per-key rules


# --- a tracker server's address (functions/catalog/address_guard.py) ------------------------------


@pytest.mark.parametrize(
    ("tracking", "field"),
    [
        ({"mlflow": {"tracking_uri": "http://127.0.0.1:5000"}}, "output_config.tracking.mlflow.tracking_uri"),
        ({"mlflow": {"tracking_uri": "http://169.254.169.254/latest"}}, "output_config.tracking.mlflow.tracking_uri"),
        ({"mlflow": {"tracking_uri": "https://10.0.0.8"}}, "output_config.tracking.mlflow.tracking_uri"),
        ({"mlflow": {"tracking_uri": "http://[::ffff:127.0.0.1]:80"}}, "output_config.tracking.mlflow.tracking_uri"),
        ({"mlflow": {"tracking_uri": "http://2130706433"}}, "output_config.tracking.mlflow.tracking_uri"),
        (
            {"wandb": {"project": "p", "mode": "offline", "base_url": "http://192.168.0.10:8080"}},
            "output_config.tracking.wandb.base_url",
        ),
    ],
)
def test_outside_local_mode_a_tracker_on_a_loopback_private_or_link_local_address_is_refused(
    call: Api, tracking: dict[str, Any], field: str
) -> None:
    # Given a deployment in the cloud (not local mode) and a job whose tracker names an internal address
    assert not call.settings.local_mode
    body = request_body(output_config={"tracking": tracking})
    # When it is submitted, then it is a 422 naming the field
    status, raw = _post_job(body)
    assert status == 422 and [e["field"] for e in json.loads(raw)["errors"]] == [field], raw


def test_a_public_tracker_is_accepted(call: Api) -> None:
    body = request_body(output_config={"tracking": {"mlflow": {"tracking_uri": "http://8.8.8.8:5000"}}})
    assert _post_job(body)[0] == 201


# --- a page of jobs stays far under Lambda's 6 MB ----------------------------------------------------


def test_a_page_of_large_jobs_ends_early_with_a_token_far_under_6_mb(call: Api) -> None:
    # Given 30 jobs of ~230 KB each (a CUSTOM script's own hyperparameters: up to 256 KB per submitted job)
    big = {f"arg_{i}": "x" * 7_500 for i in range(30)}
    for n in range(30):
        body = request_body(name=f"big-{n}")
        body["training_config"]["framework"] = {"type": "CUSTOM", "command": ["python", "train.py"]}
        body["training_config"]["hyperparameters"] = big
        assert _post_job(body)[0] == 201
    # When all are listed at the largest page size (200: 30 of them would answer ~7 MB)
    seen: list[str] = []
    token = None
    while True:
        query = {"limit": "200", **({"next_token": token} if token else {})}
        raw = api.lambda_handler(api_event("api_list_jobs", query=query), FakeLambdaContext())
        # Then every page is a 200 well under the limit, and the pages together hold every job once
        assert raw["statusCode"] == 200 and len(raw["body"]) < 4_000_000, len(raw["body"])
        page = json.loads(raw["body"])
        seen += [job["name"] for job in page["jobs"]]
        token = page.get("next_token")
        if not token:
            break
    assert sorted(seen) == sorted(f"big-{n}" for n in range(30))


def test_an_event_pattern_of_400000_keys_is_refused_before_its_grammar_is_checked(call: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given the pattern grammar's check, watched, and a policy whose pattern nests 400,000 keys
    from schemas import event_pattern

    checked: list[Any] = []
    monkeypatch.setattr(event_pattern, "validate_pattern", lambda value: checked.append(value))
    trigger = {"type": "event", "pattern": {"source": ["aws.sagemaker"], "detail": {f"K{i}": ["x"] for i in range(400_000)}}}
    # When it is posted
    status, raw = _post_policy(policy_body(trigger=trigger, input_mapping=[]))
    # Then one short 422 names the pattern, and the grammar never saw it
    errors = json.loads(raw)["errors"]
    assert status == 422 and len(raw) < 4_000, (status, len(raw))
    assert [(e["field"].rsplit(".", 1)[-1], e["type"]) for e in errors] == [("pattern", "too_many_keys")], errors
    assert checked == []
