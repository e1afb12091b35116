"""The API Lambda driven by recorded API Gateway events on moto, each reply checked against the committed
OpenAPI document: a status code the route does not document fails the test that got it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from functions import composition
from functions.adapters.aws import AwsClients
from functions.adapters.ports import Transition
from functions.handlers import api
from functions.handlers.openapi import COMMITTED
from functions.settings import Settings
from schemas.status import JobStatus
from tests.fakes import RecordingWorkflow
from tests.helpers.events import Caller, FakeLambdaContext, api_event, route_event
from tests.helpers.jobs import ALICE, request_body

DOCUMENT = json.loads(COMMITTED.read_text())


@dataclass
class Reply:
    status: int
    body: Any
    headers: dict[str, Any]


@dataclass
class Api:
    clients: AwsClients
    workflow: RecordingWorkflow
    settings: Settings

    def __call__(self, name: str, **changes: Any) -> Reply:
        return self.send(api_event(name, **changes))

    def route(
        self,
        method: str,
        resource: str,
        path_parameters: dict[str, str] | None = None,
        *,
        caller: Caller | None = None,
        body: Any = None,
        query: dict[str, str] | None = None,
    ) -> Reply:
        """Any route by its method and OpenAPI path (tests/helpers/events.py route_event)."""
        return self.send(route_event(method, resource, path_parameters, caller=caller, body=body, query=query))

    def send(self, event: dict[str, Any]) -> Reply:
        raw = api.lambda_handler(event, FakeLambdaContext())
        resource, method = event["resource"], event["httpMethod"].lower()
        documented = DOCUMENT["paths"].get(resource, {}).get(method, {}).get("responses", {})
        if resource in DOCUMENT["paths"]:
            assert str(raw["statusCode"]) in documented, (
                f"{method.upper()} {resource} returned {raw['statusCode']}, documents {sorted(documented)}"
            )
        body = json.loads(raw["body"]) if raw.get("body") else None
        return Reply(raw["statusCode"], body, raw.get("multiValueHeaders") or raw.get("headers") or {})

    def submit(self, *, user: str = ALICE, **overrides: Any) -> dict[str, Any]:
        reply = self("api_submit_job", body=request_body(**overrides), user_arn=user, headers={"Idempotency-Key": ""})
        assert reply.status == 201, reply.body
        return reply.body  # type: ignore[no-any-return]

    def move(self, job_id: str, *path: JobStatus) -> None:
        """The engine's part: walk the stored job through statuses."""
        repo = composition.current().repository
        for status in path:
            job = repo.get(job_id)
            repo.transition(Transition(job_id, job.version, job.status, status, actor="system"))
