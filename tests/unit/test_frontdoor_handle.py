"""FrontDoor.handle, called directly (no socket traffic): the dashboard's pages first, then SigV4, then the
handler with API Gateway's event and Lambda's context, each answer carrying its request id; a refusal or a
failed handler answered as API Gateway does."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from localmode.frontdoor import FrontDoor
from localmode.sigv4 import ArrivedRequest
from tests.unit.test_sigv4 import ALICE, HOST, REGION, sign

ACCOUNT = "123456789012"
SOURCE_IP = "127.0.0.9"


class Handler:
    def __init__(self, fail: bool = False) -> None:
        self.calls: list[tuple[dict[str, Any], Any]] = []
        self.fail = fail

    def __call__(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        self.calls.append((event, context))
        if self.fail:
            raise RuntimeError("the handler broke")
        return {"statusCode": 200, "body": "{}"}


class Site:
    """The dashboard's pages: answers GET /, nothing else."""

    def __init__(self) -> None:
        self.asked: list[tuple[ArrivedRequest, str]] = []

    def answer(self, request: ArrivedRequest, source_ip: str) -> tuple[int, list[tuple[str, str]], bytes] | None:
        self.asked.append((request, source_ip))
        return (200, [("Content-Type", "text/html")], b"<html>") if request.raw_path == "/" else None


@pytest.fixture
def make_door() -> Iterator[Any]:
    doors: list[FrontDoor] = []

    def make(handler: Handler, site: Site | None = None) -> FrontDoor:
        door = FrontDoor("127.0.0.1", 0, principals=[ALICE], region=REGION, account_id=ACCOUNT, handler=handler, site=site)
        doors.append(door)
        return door

    yield make
    for door in doors:
        door.stop()


def header(headers: list[tuple[str, str]], name: str) -> str | None:
    return next((v for k, v in headers if k.lower() == name.lower()), None)


def test_a_signed_request_reaches_the_handler_with_the_event_and_context_api_gateway_gives(make_door: Any) -> None:
    handler = Handler()
    door = make_door(handler)
    before = datetime.now(UTC)
    status, headers, _ = door.handle(sign("GET", f"http://{HOST}/jobs?limit=2"), SOURCE_IP)
    assert status == 200
    ((event, context),) = handler.calls
    request_id = header(headers, "x-amzn-RequestId")
    assert request_id is not None and str(uuid.UUID(request_id)) == request_id
    # The request id is the same in the answer, the event and the context
    assert event["requestContext"]["requestId"] == request_id == context.aws_request_id
    assert event["requestContext"]["accountId"] == ACCOUNT
    assert event["requestContext"]["identity"]["sourceIp"] == SOURCE_IP
    assert event["requestContext"]["identity"]["userArn"] == ALICE.arn
    assert event["requestContext"]["requestTimeEpoch"] >= int(before.timestamp() * 1000)
    assert context.invoked_function_arn.startswith(f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:")
    # And each request has its own id
    door.handle(sign("GET", f"http://{HOST}/jobs"), SOURCE_IP)
    assert handler.calls[1][1].aws_request_id != request_id


def test_a_refused_request_is_answered_with_its_error_type_and_request_id(make_door: Any) -> None:
    handler = Handler()
    status, headers, body = make_door(handler).handle(ArrivedRequest("GET", "/jobs", "", [("Host", HOST)], b""), SOURCE_IP)
    assert status == 403 and handler.calls == []
    assert header(headers, "x-amzn-ErrorType") == "MissingAuthenticationTokenException"
    request_id = header(headers, "x-amzn-RequestId")
    assert request_id is not None and str(uuid.UUID(request_id)) == request_id
    assert json.loads(body) == {"message": "Missing Authentication Token"}


def test_a_failing_handler_is_api_gateways_502(make_door: Any) -> None:
    handler = Handler(fail=True)
    status, headers, body = make_door(handler).handle(sign("GET", f"http://{HOST}/jobs"), SOURCE_IP)
    assert status == 502
    assert json.loads(body) == {"message": "Internal server error"}
    assert header(headers, "x-amzn-RequestId") == handler.calls[0][1].aws_request_id
    assert header(headers, "x-amzn-ErrorType") is None


def test_the_sites_pages_are_answered_before_the_api_and_the_rest_falls_through(make_door: Any) -> None:
    handler, site = Handler(), Site()
    door = make_door(handler, site)
    page = ArrivedRequest("GET", "/", "", [("Host", HOST)], b"")
    assert door.handle(page, SOURCE_IP) == (200, [("Content-Type", "text/html")], b"<html>")
    assert site.asked == [(page, SOURCE_IP)] and handler.calls == []
    signed = sign("GET", f"http://{HOST}/jobs")
    status, _, _ = door.handle(signed, SOURCE_IP)
    assert status == 200 and site.asked[1] == (signed, SOURCE_IP) and len(handler.calls) == 1


def test_the_request_time_is_utc_whatever_the_hosts_time_zone(make_door: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    monkeypatch.setenv("TZ", "Etc/GMT-9")  # nine hours east of UTC
    time.tzset()
    try:
        handler = Handler()
        before = datetime.now(UTC).replace(microsecond=0)
        make_door(handler).handle(sign("GET", f"http://{HOST}/jobs"), SOURCE_IP)
        after = datetime.now(UTC)
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    stamped = datetime.strptime(handler.calls[0][0]["requestContext"]["requestTime"], "%d/%b/%Y:%H:%M:%S %z")
    assert before <= stamped <= after
