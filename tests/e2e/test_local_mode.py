"""`trainplane up` as a user meets it: a real process, real HTTP, SigV4, restarts and kill -9.

The front door's own behaviour (event shape, API Gateway's refusals and failures) is checked against
`echo_api` below, a stand-in handler that returns the event it got; everything about jobs runs against
the real API.
"""

from __future__ import annotations

import base64
import json
import os
import stat
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import requests
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from requests_aws4auth import AWS4Auth

from functions import constants
from tests.e2e.conftest import LocalPlane, PlaneFactory

pytestmark = pytest.mark.e2e

ECHO_API = "tests.e2e.test_local_mode:echo_api"


def echo_api(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Stand-in API handler (runs inside `trainplane up`): answers with what it was given."""
    path = event["path"]
    if path == "/boom":
        raise RuntimeError("the handler failed")
    if path == "/malformed":
        return {"body": "no statusCode"}
    if path == "/binary":
        return {"statusCode": 200, "headers": {"Content-Type": "application/octet-stream"}, "body": "AP8=", "isBase64Encoded": True}
    seen = {
        "event": event,
        "context": {
            "function_name": context.function_name,
            "aws_request_id": context.aws_request_id,
            "remaining_ms": context.get_remaining_time_in_millis(),
        },
        "env": {k: v for k, v in os.environ.items() if k.startswith("TRAINPLANE_")},
    }
    return {
        "statusCode": 200,
        "headers": {"Content-Type": "application/json"},
        "multiValueHeaders": {"Set-Cookie": ["a=1", "b=2"]},
        "body": json.dumps(seen),
    }


@pytest.fixture(scope="module")
def echo_plane(local_plane_factory: PlaneFactory) -> LocalPlane:
    return local_plane_factory(api_handler=ECHO_API)


def botocore_signed(plane: LocalPlane, method: str, path: str, *, secret: str | None = None, key: str | None = None) -> requests.Response:
    p = plane.principal("alice")
    request = AWSRequest(method=method, url=plane.api_url + path, headers={})
    SigV4Auth(Credentials(key or p["access_key_id"], secret or p["secret_access_key"]), "execute-api", plane.region).add_auth(request)
    prepared = request.prepare()
    return requests.request(method, prepared.url, headers=dict(prepared.headers), timeout=30)


# --- endpoint.json and the process's life ------------------------------------------------------------


@pytest.mark.slow
def test_endpoint_json_appears_when_ready_and_goes_on_sigterm(local_plane_factory: PlaneFactory) -> None:
    # Given `trainplane up --port 0`, once it is ready
    plane = local_plane_factory(api_handler=ECHO_API)
    doc = plane.endpoint
    # Then endpoint.json has exactly the contract's shape, two principals, and only its owner can read it
    assert set(doc) == {"api_url", "region", "aws_endpoint_url", "bucket", "credentials"}
    assert doc["region"] == constants.LOCAL_REGION
    assert doc["bucket"] == constants.ARTIFACTS_BUCKET
    assert [c["name"] for c in doc["credentials"]] == ["admin", "alice"]
    for c in doc["credentials"]:
        assert set(c) == {"name", "access_key_id", "secret_access_key", "arn"}
        assert c["arn"] == f"arn:aws:iam::{constants.LOCAL_ACCOUNT_ID}:user/{c['name']}"
    assert stat.S_IMODE(plane.endpoint_path.stat().st_mode) == 0o600
    assert doc["api_url"].startswith("http://127.0.0.1:") and not doc["api_url"].endswith(":0")
    # And the API and the emulated AWS both answer on the ports it names
    assert plane.request("GET", "/jobs").status_code == 200
    assert constants.JOBS_TABLE in plane.client("dynamodb").list_tables()["TableNames"]

    # When it gets SIGTERM
    assert plane.stop() == 0
    # Then endpoint.json is gone, and the port no longer answers
    assert not plane.endpoint_path.exists()
    with pytest.raises(requests.ConnectionError):
        requests.get(doc["api_url"] + "/jobs", timeout=5)

    # And when it starts again on the same state dir, the principals' keys are the same
    plane.start()
    assert plane.endpoint["credentials"] == doc["credentials"]


def test_a_second_up_on_the_same_state_dir_is_refused(echo_plane: LocalPlane, local_plane_factory: PlaneFactory) -> None:
    # Given a running plane, when another `up` is pointed at its state dir
    with pytest.raises(RuntimeError, match="is in use by a running `trainplane up`"):
        local_plane_factory(api_handler=ECHO_API, state_dir=echo_plane.state_dir)
    # Then the running one is unharmed: still serving, its endpoint.json still its own
    assert echo_plane.request("GET", "/jobs").status_code == 200
    assert json.loads(echo_plane.endpoint_path.read_text()) == echo_plane.endpoint


# --- the front door ----------------------------------------------------------------------------------


def test_signed_request_reaches_the_handler_as_an_api_gateway_proxy_event(echo_plane: LocalPlane) -> None:
    # Given a signed POST with a JSON body, a repeated query parameter and a form-encoded space
    body = {"reason": "testing"}
    response = echo_plane.request("POST", "/jobs/j-1/cancel?x=1&x=2&name=a+b", json=body, headers={"X-Custom": "v"})
    # Then the handler got API Gateway's REST proxy event, with the verified caller's identity
    assert response.status_code == 200, response.text
    seen = response.json()
    event = seen["event"]
    alice = echo_plane.principal("alice")
    assert (event["httpMethod"], event["path"], event["resource"]) == ("POST", "/jobs/j-1/cancel", "/{proxy+}")
    assert event["pathParameters"] == {"proxy": "jobs/j-1/cancel"}
    assert event["queryStringParameters"] == {"x": "2", "name": "a b"}
    assert event["multiValueQueryStringParameters"] == {"x": ["1", "2"], "name": ["a b"]}
    assert json.loads(event["body"]) == body and event["isBase64Encoded"] is False
    assert event["headers"]["X-Custom"] == "v" and event["multiValueHeaders"]["X-Custom"] == ["v"]
    identity = event["requestContext"]["identity"]
    assert identity["userArn"] == alice["arn"]
    assert identity["accessKey"] == alice["access_key_id"]
    assert identity["accountId"] == constants.LOCAL_ACCOUNT_ID
    assert identity["user"].startswith("AIDA") and identity["caller"] == identity["user"]
    assert identity["sourceIp"] == "127.0.0.1"
    assert event["requestContext"]["requestId"] == response.headers["x-amzn-RequestId"] == seen["context"]["aws_request_id"]
    assert event["requestContext"]["httpMethod"] == "POST" and event["requestContext"]["stage"]
    assert seen["context"]["function_name"] and 0 < seen["context"]["remaining_ms"] <= 30_000
    # And the handler's environment names the emulated AWS, the resources and the admin
    env = seen["env"]
    assert env["TRAINPLANE_AWS_ENDPOINT_URL"] == echo_plane.aws_endpoint_url
    assert env["TRAINPLANE_ADMIN_ARNS"] == echo_plane.principal("admin")["arn"]
    assert env["TRAINPLANE_JOBS_TABLE"] == constants.JOBS_TABLE and env["TRAINPLANE_COMPUTE"] == "local"
    # And multi-value response headers come back as separate headers
    assert response.raw.headers.getlist("Set-Cookie") == ["a=1", "b=2"]


def test_binary_bodies_both_ways(echo_plane: LocalPlane) -> None:
    # Given a body that is not UTF-8
    response = echo_plane.request("PUT", "/upload", data=b"\xff\x00\xfe", headers={"Content-Type": "application/octet-stream"})
    event = response.json()["event"]
    # Then it reaches the handler base64-encoded, flagged
    assert event["isBase64Encoded"] is True and base64.b64decode(event["body"]) == b"\xff\x00\xfe"
    # And a base64 result goes back to the client as bytes
    assert echo_plane.request("GET", "/binary").content == b"\x00\xff"


def test_admin_is_its_own_principal(echo_plane: LocalPlane) -> None:
    event = echo_plane.request("GET", "/jobs", principal="admin").json()["event"]
    assert event["requestContext"]["identity"]["userArn"] == echo_plane.principal("admin")["arn"]


def test_unsigned_request_is_403_missing_authentication_token(echo_plane: LocalPlane) -> None:
    response = echo_plane.request("GET", "/jobs", principal=None)
    assert response.status_code == 403
    assert response.json() == {"message": "Missing Authentication Token"}
    assert response.headers["x-amzn-ErrorType"] == "MissingAuthenticationTokenException"


def test_wrongly_signed_requests_are_403_with_aws_messages(echo_plane: LocalPlane) -> None:
    alice = echo_plane.principal("alice")
    # A wrong secret for a real key
    wrong_secret = botocore_signed(echo_plane, "GET", "/jobs", secret="x" * 40)
    assert wrong_secret.status_code == 403
    assert wrong_secret.json()["message"].startswith("The request signature we calculated does not match the signature you provided.")
    # A key nobody issued
    unknown = botocore_signed(echo_plane, "GET", "/jobs", key="AKIAUNKNOWNUNKNOWN00")
    assert (unknown.status_code, unknown.json()) == (403, {"message": "The security token included in the request is invalid."})
    # A body changed after signing
    prepared = requests.Request("POST", echo_plane.api_url + "/jobs", data=b'{"a": 1}', auth=echo_plane.auth()).prepare()
    prepared.body = b'{"a": 2}'
    tampered = requests.Session().send(prepared, timeout=30)
    assert tampered.status_code == 403
    # A signature for another region
    eu_auth = AWS4Auth(alice["access_key_id"], alice["secret_access_key"], "eu-west-1", "execute-api")
    other_region = requests.get(echo_plane.api_url + "/jobs", auth=eu_auth, timeout=30)
    assert other_region.status_code == 403 and "region" in other_region.json()["message"]


def test_expired_signature_is_403(echo_plane: LocalPlane, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a request signed 20 minutes ago (botocore reads the clock through this function)
    past = datetime.now(UTC) - timedelta(minutes=20)
    monkeypatch.setattr("botocore.auth.get_current_datetime", lambda: past.replace(tzinfo=None))
    response = botocore_signed(echo_plane, "GET", "/jobs")
    assert response.status_code == 403
    assert response.json()["message"].startswith("Signature expired")


def test_handler_failures_are_api_gateway_502s(echo_plane: LocalPlane) -> None:
    for path in ("/boom", "/malformed"):
        response = echo_plane.request("GET", path)
        assert (response.status_code, response.json()) == (502, {"message": "Internal server error"})
    # And the plane keeps serving
    assert echo_plane.request("GET", "/jobs").status_code == 200


def test_body_over_10_mb_is_413(echo_plane: LocalPlane) -> None:
    response = echo_plane.request("POST", "/jobs", data=b"x" * (10 * 1024 * 1024 + 1))
    assert (response.status_code, response.json()) == (413, {"message": "Request Too Long"})


# --- durability (through the emulated AWS directly) --------------------------------------------------


def _write_some_state(plane: LocalPlane, tag: str) -> None:
    ddb, s3 = plane.client("dynamodb"), plane.client("s3")
    ddb.put_item(TableName=constants.JOBS_TABLE, Item={"pk": {"S": f"JOB#{tag}"}, "sk": {"S": "JOB"}, "tag": {"S": tag}})
    s3.put_object(Bucket=plane.bucket, Key=f"jobs/{tag}/metrics.jsonl", Body=f'{{"step": 1, "tag": "{tag}"}}\n'.encode())


def _state(plane: LocalPlane) -> tuple[list[str], dict[str, bytes]]:
    ddb, s3 = plane.client("dynamodb"), plane.client("s3")
    items = sorted(i["pk"]["S"] for i in ddb.scan(TableName=constants.JOBS_TABLE)["Items"])
    objects = {
        o["Key"]: s3.get_object(Bucket=plane.bucket, Key=o["Key"])["Body"].read()
        for o in s3.list_objects_v2(Bucket=plane.bucket).get("Contents", [])
    }
    return items, objects


@pytest.mark.slow
def test_sigterm_then_restart_restores_items_and_objects(local_plane_factory: PlaneFactory) -> None:
    # Given items and objects written to the emulated AWS
    plane = local_plane_factory(api_handler=ECHO_API)
    for tag in ("a", "b"):
        _write_some_state(plane, tag)
    before = _state(plane)
    # When local mode is stopped and started on the same state dir
    plane.restart()
    # Then all of it is back
    expected_objects = {f"jobs/{t}/metrics.jsonl": f'{{"step": 1, "tag": "{t}"}}\n'.encode() for t in ("a", "b")}
    assert _state(plane) == before == (["JOB#a", "JOB#b"], expected_objects)


@pytest.mark.slow
def test_kill_9_loses_nothing_that_was_answered(local_plane_factory: PlaneFactory) -> None:
    # Given writes that were each answered, the last one just now
    plane = local_plane_factory(api_handler=ECHO_API)
    tags = [f"k{n}" for n in range(10)]
    for tag in tags:
        _write_some_state(plane, tag)
    # When the process is killed without any chance to clean up, and started again
    plane.kill()
    plane.start()
    # Then every answered write is there
    items, objects = _state(plane)
    assert items == sorted(f"JOB#{t}" for t in tags)
    assert sorted(objects) == sorted(f"jobs/{t}/metrics.jsonl" for t in tags)
