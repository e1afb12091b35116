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
