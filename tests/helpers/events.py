"""Recorded API Gateway REST proxy events (tests/events/api_*.json) and a Lambda context for them.

Each file is a full event as API Gateway sends it with AWS_IAM authorization; tests load one and
change only what the case is about (the caller, the job id in the path, the body, the query).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

EVENTS_DIR = Path(__file__).resolve().parents[1] / "events"
_RECORDED_JOB_ID = "job-20260101-0123456789ab"


@cache
def _load(name: str) -> dict[str, Any]:
    return json.loads((EVENTS_DIR / f"{name}.json").read_text())


def api_event(
    name: str,
    *,
    job_id: str | None = None,
    user_arn: str | None = None,
    body: Any = ...,
    raw_body: str | None = None,
    query: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    """tests/events/<name>.json with the given changes; `body` is JSON-encoded, `raw_body` sent as is."""
    event = copy.deepcopy(_load(name))
    if job_id is not None:
        event["path"] = event["path"].replace(_RECORDED_JOB_ID, job_id)
        event["requestContext"]["path"] = event["requestContext"]["path"].replace(_RECORDED_JOB_ID, job_id)
        event["pathParameters"] = {"job_id": job_id}
    if user_arn is not None:
        event["requestContext"]["identity"]["userArn"] = user_arn or None
    if body is not ...:
        event["body"] = None if body is None else json.dumps(body)
    if raw_body is not None:
        event["body"] = raw_body
    if query is not None:
        event["queryStringParameters"] = query or None
        event["multiValueQueryStringParameters"] = {k: [v] for k, v in query.items()} or None
    if headers:
        event["headers"].update(headers)
        event["multiValueHeaders"].update({k: [v] for k, v in headers.items()})
    return event


@dataclass(frozen=True)
class Caller:
    """Who signs a request, as API Gateway's IAM authorizer puts it in requestContext.identity.

    An IAM user (`user_arn` alone), or a dashboard user signed in through the Cognito identity pool: a
    session of the pool's role whose session name is the same for everyone (CognitoIdentityCredentials),
    told apart only by `cognito_identity_id`.
    """

    name: str
    user_arn: str
    cognito_identity_id: str | None = None
    unique_id: str = "AIDAEXAMPLE"  # identity.caller / identity.user: the key's principal id
    # A dashboard user's user pool and sub as API Gateway reports them (cognitoAuthenticationProvider).
    cognito_provider: str | None = None

    @property
    def principal(self) -> str:
        """The principal the API must treat this caller as (the owner of what it creates)."""
        if self.cognito_identity_id is None:
            return self.user_arn
        return f"{self.user_arn.rpartition('/')[0]}/{self.cognito_identity_id}"

    def sign(self, event: dict[str, Any]) -> dict[str, Any]:
        identity = event["requestContext"]["identity"]
        identity.update(userArn=self.user_arn, caller=self.unique_id, user=self.unique_id)
        if self.cognito_identity_id is not None:
            identity.update(
                cognitoIdentityId=self.cognito_identity_id,
                cognitoAuthenticationType="authenticated",
                cognitoIdentityPoolId="us-east-1:00000000-0000-0000-0000-000000000000",
                cognitoAuthenticationProvider=self.cognito_provider,
            )
        return event


DASHBOARD_SESSION = "arn:aws:sts::123456789012:assumed-role/trainplane-dev-dashboard-users/CognitoIdentityCredentials"


def dashboard_user(name: str, identity_id: str, user_pool_id: str | None = None, sub: str | None = None) -> Caller:
    """A person signed in to the dashboard: the pool role's one shared session, their own identity id (and,
    given a user pool and sub, the provider string API Gateway reports for a user-pool sign-in)."""
    provider = None
    if user_pool_id and sub:
        issuer = f"cognito-idp.us-east-1.amazonaws.com/{user_pool_id}"
        provider = f"{issuer},{issuer}:CognitoSignIn:{sub}"
    return Caller(
        name, DASHBOARD_SESSION, identity_id, unique_id="AROAEXAMPLEDASHBOARD:CognitoIdentityCredentials", cognito_provider=provider
    )


def route_event(
    method: str,
    resource: str,
    path_parameters: dict[str, str] | None = None,
    *,
    caller: Caller | None = None,
    body: Any = None,
    query: dict[str, str] | None = None,
) -> dict[str, Any]:
    """An API Gateway event for any route (`resource` as OpenAPI spells it, e.g. /sweeps/{sweep_id}),
    built from the recorded GET /jobs event with the path, method, body and query replaced."""
    event = copy.deepcopy(_load("api_list_jobs"))
    path = resource
    for name, value in (path_parameters or {}).items():
        path = path.replace("{" + name + "}", value)
    event.update(resource=resource, path=path, httpMethod=method, pathParameters=dict(path_parameters) if path_parameters else None)
    event["requestContext"].update(resourcePath=resource, httpMethod=method, path=f"/prod{path}")
    event["body"] = None if body is None else json.dumps(body)
    event["queryStringParameters"] = dict(query) if query else None
    event["multiValueQueryStringParameters"] = {k: [v] for k, v in query.items()} if query else None
    return caller.sign(event) if caller is not None else event


@dataclass
class FakeLambdaContext:
    function_name: str = "trainplane-api"
    memory_limit_in_mb: int = 512
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:trainplane-api"
    aws_request_id: str = "c6af9ac6-7b61-11e6-9a41-93e8deadbeef"
    function_version: str = "$LATEST"
    log_group_name: str = "/aws/lambda/trainplane-api"
    log_stream_name: str = "2026/01/01/[$LATEST]abcdef"

    def get_remaining_time_in_millis(self) -> int:
        return 29_000
