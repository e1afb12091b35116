"""Dashboard users signed in through the Cognito identity pool share one role and one session name: each
is still a principal of their own (functions/service/principal.py caller_arn), never seeing another's jobs."""

from __future__ import annotations

import json
from typing import Any

from functions.handlers import api
from functions.service.principal import caller_arn
from tests.helpers.api_lambda import Api
from tests.helpers.events import FakeLambdaContext, api_event
from tests.helpers.jobs import request_body

SESSION = "arn:aws:sts::123456789012:assumed-role/trainplane-dev-dashboard-users/CognitoIdentityCredentials"
ANA = "us-east-1:11111111-2222-3333-4444-555555555555"
BEN = "us-east-1:99999999-8888-7777-6666-555555555555"


def as_dashboard_user(name: str, identity_id: str, **changes: Any) -> dict[str, Any]:
    event = api_event(name, user_arn=SESSION, **changes)
    identity = event["requestContext"]["identity"]
    identity.update(
        {"cognitoIdentityId": identity_id, "cognitoAuthenticationType": "authenticated", "cognitoIdentityPoolId": "us-east-1:pool"}
    )
    return event


def reply(event: dict[str, Any]) -> tuple[int, Any]:
    raw = api.lambda_handler(event, FakeLambdaContext())
    return raw["statusCode"], json.loads(raw["body"]) if raw.get("body") else None


def test_each_signed_in_person_is_a_principal_of_their_own(call: Api) -> None:
    status, ana_job = reply(as_dashboard_user("api_submit_job", ANA, body=request_body(name="ana-job"), headers={"Idempotency-Key": ""}))
    assert status == 201 and ana_job["owner"] == f"arn:aws:sts::123456789012:assumed-role/trainplane-dev-dashboard-users/{ANA}"
    status, ben_job = reply(as_dashboard_user("api_submit_job", BEN, body=request_body(name="ben-job"), headers={"Idempotency-Key": ""}))
    assert status == 201 and ben_job["owner"] != ana_job["owner"]
    # Ben lists only his job; Ana's is "not found" for him
    status, listing = reply(as_dashboard_user("api_list_jobs", BEN, query={}))
    assert status == 200 and [j["job_id"] for j in listing["jobs"]] == [ben_job["job_id"]]
    status, _ = reply(as_dashboard_user("api_get_job", BEN, job_id=ana_job["job_id"]))
    assert status == 404


def test_caller_arn_changes_only_authenticated_identity_pool_sessions() -> None:
    assert caller_arn(SESSION, ANA, "authenticated").endswith(f"/trainplane-dev-dashboard-users/{ANA}")  # type: ignore[union-attr]
    user = "arn:aws:iam::123456789012:user/alice"
    assert caller_arn(user, None, None) == user
    assert caller_arn(user, ANA, "authenticated") == user  # not a role session: unchanged
    assert caller_arn(SESSION, ANA, "unauthenticated") == SESSION
    assert caller_arn(None, ANA, "authenticated") is None
