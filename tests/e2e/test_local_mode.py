"""`trainplane up` as a user meets it: a real process, real HTTP, SigV4, restarts and kill -9.

The front door's own behaviour (event shape, API Gateway's refusals and failures) is checked against
`echo_api` below, a stand-in handler that returns the event it got; everything about jobs runs against
the real API.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import stat
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import requests
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from requests_aws4auth import AWS4Auth

from functions import constants
from tests.e2e.conftest import REPO_ROOT, LocalPlane, PlaneFactory
from tests.helpers.jobs import request_body

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
def echo_plane(module_plane_factory: PlaneFactory) -> LocalPlane:
    return module_plane_factory(api_handler=ECHO_API)


def botocore_signed(plane: LocalPlane, method: str, path: str, *, secret: str | None = None, key: str | None = None) -> requests.Response:
    p = plane.principal("alice")
    request = AWSRequest(method=method, url=plane.api_url + path, headers={})
    SigV4Auth(Credentials(key or p["access_key_id"], secret or p["secret_access_key"]), "execute-api", plane.region).add_auth(request)
    prepared = request.prepare()
    return requests.request(method, prepared.url, headers=dict(prepared.headers), timeout=30)


# --- endpoint.json and the process's life ------------------------------------------------------------


def test_endpoint_json_has_the_contract_shape(echo_plane: LocalPlane) -> None:
    # Given `trainplane up --port 0`, once it is ready
    doc = echo_plane.endpoint
    # Then endpoint.json has exactly the contract's shape, two principals, and only its owner can read it
    assert set(doc) == {"api_url", "region", "aws_endpoint_url", "bucket", "stack", "event_bus", "credentials", "pid", "hostname"}
    assert doc["event_bus"] == constants.TRAINPLANE_BUS_NAME
    assert doc["pid"] == echo_plane.process.pid  # type: ignore[union-attr] (who wrote it: stale detection)
    assert doc["region"] == constants.LOCAL_REGION
    assert doc["bucket"] == constants.ARTIFACTS_BUCKET
    assert [c["name"] for c in doc["credentials"]] == ["admin", "alice"]
    for c in doc["credentials"]:
        assert set(c) == {"name", "access_key_id", "secret_access_key", "arn"}
        assert c["arn"] == f"arn:aws:iam::{constants.LOCAL_ACCOUNT_ID}:user/{c['name']}"
    assert stat.S_IMODE(echo_plane.endpoint_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(echo_plane.state_dir.stat().st_mode) == 0o700
    assert doc["api_url"].startswith("http://127.0.0.1:") and not doc["api_url"].endswith(":0")
    # And the API and the emulated AWS both answer on the ports it names, the bucket and tables exist
    assert echo_plane.request("GET", "/jobs").status_code == 200
    assert {constants.JOBS_TABLE, constants.IDEMPOTENCY_TABLE} <= set(echo_plane.client("dynamodb").list_tables()["TableNames"])
    echo_plane.client("s3").head_bucket(Bucket=doc["bucket"])
    # And the local deployment's stack names its resources, as a cloud stack's outputs do (trainplane doctor)
    stack = echo_plane.client("cloudformation").describe_stacks(StackName=doc["stack"])["Stacks"][0]
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack["Outputs"]}
    assert outputs["ApiUrl"] == doc["api_url"] and outputs["JobsTableName"] == constants.JOBS_TABLE
    assert outputs["ArtifactsBucketName"] == doc["bucket"] and outputs["StateMachineArn"].endswith(constants.STATE_MACHINE_NAME)


def test_after_kill_9_a_stale_endpoint_json_is_detected_and_replaced_by_the_next_up(plane_factory: PlaneFactory, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from trainplane.cli import app
    from trainplane.client import Client
    from trainplane.errors import StaleEndpoint

    # Given a state dir someone made readable by all, and a plane started on it
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    state.chmod(0o755)
    plane = plane_factory(api_handler=ECHO_API, state_dir=state)
    # Then the state dir is owner-only now, endpoint.json too
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert stat.S_IMODE(plane.endpoint_path.stat().st_mode) == 0o600
    # When the plane is killed with -9 (no shutdown code runs: its endpoint.json stays behind)
    old = plane.endpoint
    plane.kill()
    assert plane.endpoint_path.exists()
    # Then the SDK and the CLI say it is stale instead of retrying a dead port: the client refuses to be
    # built at all (no request is ever sent), the CLI exits 1 naming the fix
    with pytest.raises(StaleEndpoint, match=f"pid {old['pid']}"):
        Client(state_dir=state)
    result = CliRunner().invoke(app, ["--state-dir", str(state), "jobs", "list"], env={"COLUMNS": "250"})
    assert result.exit_code == 1 and "is stale" in result.output and "trainplane up --state-dir" in result.output, result.output
    # When `up` runs again on that state dir
    plane.start()
    # Then it replaced the stale file with its own (its pid, its ports), and clients work again
    assert plane.endpoint["pid"] == plane.process.pid != old["pid"]  # type: ignore[union-attr]
    assert stat.S_IMODE(plane.endpoint_path.stat().st_mode) == 0o600
    assert Client(state_dir=state).resolved.url == plane.api_url
    assert "replacing the stale" in plane.log_tail()


def test_a_second_up_on_the_same_state_dir_is_refused(echo_plane: LocalPlane, plane_factory: PlaneFactory) -> None:
    # Given a running plane, when another `up` is pointed at its state dir
    with pytest.raises(RuntimeError, match="is in use by a running `trainplane up`"):
        plane_factory(api_handler=ECHO_API, state_dir=echo_plane.state_dir)
    # Then the running one is unharmed: still serving, its endpoint.json still its own
    assert echo_plane.request("GET", "/jobs").status_code == 200
    assert json.loads(echo_plane.endpoint_path.read_text()) == echo_plane.endpoint


def test_a_busy_port_is_refused_at_once(echo_plane: LocalPlane, plane_factory: PlaneFactory) -> None:
    # Given a port in use (the running plane's), when `up` is asked for it
    busy = int(echo_plane.api_url.rsplit(":", 1)[1])
    with pytest.raises(RuntimeError) as refused:
        plane_factory(api_handler=ECHO_API, port=busy)
    # Then it exits with a message saying what to do, and the running plane is unharmed
    assert f"error: port {busy} on 127.0.0.1 is in use: pick another with --port" in str(refused.value)
    assert echo_plane.request("GET", "/jobs").status_code == 200


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


# --- the real API --------------------------------------------------------------------------------------

# A job no machine can place (64 GPUs): the control plane fails it at once, so it reaches a terminal
# state with a real history without ever starting a trainer.
UNPLACEABLE = {"gpu_count": 64}


def runs_until_stopped() -> dict[str, Any]:
    """A tiny LoRA on examples/ data with 100,000 steps: it trains (and checkpoints) until it is stopped, so it
    is still there to cancel however loaded the machine (an UNPLACEABLE job is FAILED ~150 ms after submit)."""
    body = job_body("runs-until-stopped")
    body["training_config"]["hyperparameters"] = {"max_steps": "100000", "learning_rate": "0.001"}
    body["training_config"]["base_model"]["model_kwargs"] |= {"num_attention_heads": 2, "num_key_value_heads": 2, "intermediate_size": 32}
    body["data_config"] = {"sources": [{"path": str(REPO_ROOT / "examples" / "data" / "tiny-qa.jsonl")}], "batch_size": 2}
    return {"training_config": body["training_config"], "data_config": body["data_config"]}


def job_body(name: str, **overrides: Any) -> dict[str, Any]:
    return request_body(name=name, labels={"suite": "local-mode"}, **overrides)


def submit(plane: LocalPlane, name: str, **overrides: Any) -> dict[str, Any]:
    response = plane.request("POST", "/jobs", json=job_body(name, **overrides))
    assert response.status_code == 201, response.text
    return response.json()


def test_bad_input_over_real_http_is_a_4xx_never_a_5xx(local_plane: LocalPlane) -> None:
    # Given the real API behind local mode's front door (the same handler API Gateway invokes)
    def post(body: bytes, content_type: str) -> requests.Response:
        return local_plane.request("POST", "/jobs", data=body, headers={"Content-Type": content_type})

    valid = json.dumps(job_body("edge")).encode()
    # When bodies that used to crash the handler arrive / Then each is the 4xx that says why
    assert post(valid, "text/plain").status_code == 415
    assert post(valid, "multipart/form-data").status_code == 415
    assert post(b'{"name": "\xff\xfe"}', "application/json").status_code == 400  # not UTF-8: handed over base64
    assert post(b"[" * 1000 + b"]" * 1000, "application/json").status_code == 400
    assert post(valid.replace(b'"batch_size": 2', b'"batch_size": NaN'), "application/json").status_code == 400
    big = job_body("edge-big")
    big["training_config"]["environment"] = {f"V{i}": "x" * 8192 for i in range(60)}
    too_big = local_plane.request("POST", "/jobs", json=big)
    assert too_big.status_code == 413 and "262,144 bytes" in too_big.json()["message"]
    # And a method the path lacks is 405 with Allow
    wrong = local_plane.request("PUT", "/summary")
    assert wrong.status_code == 405 and wrong.headers["Allow"] == "GET"


def wait_status(plane: LocalPlane, job_id: str, statuses: set[str], timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        job = plane.request("GET", f"/jobs/{job_id}").json()
        if job["status"] in statuses or time.monotonic() > deadline:
            assert job["status"] in statuses, f"{job_id} is {job['status']}, expected one of {statuses}"
            return job
        time.sleep(0.2)


def history(plane: LocalPlane, job_id: str) -> list[dict[str, Any]]:
    response = plane.request("GET", f"/jobs/{job_id}/events")
    assert response.status_code == 200, response.text
    return list(response.json()["events"])


def assert_complete_history(events: list[dict[str, Any]]) -> None:
    """Starts at submission, and every entry leaves the status the previous one entered."""
    assert events[0]["from"] is None and events[0]["to"] == "PENDING"
    for before, after in itertools.pairwise(events):
        assert after["from"] == before["to"], events


def test_the_real_api_is_served_behind_sigv4(local_plane: LocalPlane) -> None:
    # Given the real API behind the front door: signed requests are served, unsigned ones refused
    listed = local_plane.request("GET", "/jobs?limit=1")
    assert listed.status_code == 200 and "jobs" in listed.json()
    assert local_plane.request("GET", "/openapi.json").status_code == 200
    unsigned = local_plane.request("GET", "/jobs", principal=None)
    assert (unsigned.status_code, unsigned.json()) == (403, {"message": "Missing Authentication Token"})
    # And the owner is the verified caller: alice's job is hers, not admin's
    job = submit(local_plane, "owned", resource_config=UNPLACEABLE)
    assert job["owner"] == local_plane.principal("alice")["arn"]


@pytest.mark.slow
def test_20_concurrent_cancels_of_one_job_have_exactly_one_winner(local_plane: LocalPlane) -> None:
    # Given a training job, and 20 clients with their own connections ready to cancel it at the same moment
    job_id = submit(local_plane, "cancel-race", **runs_until_stopped())["job_id"]
    wait_status(local_plane, job_id, {"TRAINING", "CHECKPOINTING"})
    start = threading.Barrier(20)
    answers: list[int] = []

    def cancel(n: int) -> None:
        session = requests.Session()
        start.wait()
        response = session.post(
            local_plane.api_url + f"/jobs/{job_id}/cancel", json={"reason": f"racer {n}"}, auth=local_plane.auth(), timeout=120
        )
        answers.append(response.status_code)

    threads = [threading.Thread(target=cancel, args=(n,)) for n in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)

    # Then every client got an answer: exactly one cancel won, the others were told 409
    assert sorted(answers) == [200] + [409] * 19
    # And the job is CANCELLED once, by one racer, with its whole history intact
    job = wait_status(local_plane, job_id, {"CANCELLED"})
    events = history(local_plane, job_id)
    assert_complete_history(events)
    cancels = [e for e in events if e["to"] == "CANCELLED"]
    assert len(cancels) == 1 and cancels[0]["reason"].startswith("racer ")
    assert events[-1]["to"] == job["status"] == "CANCELLED"


@pytest.mark.slow
def test_endpoint_json_goes_on_sigterm_and_jobs_history_objects_survive_restarts_and_kill_9(plane_factory: PlaneFactory) -> None:
    plane = plane_factory()
    # Given jobs that reached terminal states (one cancelled by its user, one failed by the control
    # plane), their history, and objects in the bucket
    cancelled = submit(plane, "to-cancel", resource_config=UNPLACEABLE)["job_id"]
    assert plane.request("POST", f"/jobs/{cancelled}/cancel", json={"reason": "not needed"}).status_code == 200
    failed = submit(plane, "unplaceable", resource_config=UNPLACEABLE)["job_id"]
    wait_status(plane, failed, {"FAILED"})
    s3 = plane.client("s3")
    s3.put_object(Bucket=plane.bucket, Key="datasets/train.jsonl", Body=b'{"text": "hello"}\n', ContentType="application/jsonl")

    def snapshot() -> dict[str, Any]:
        jobs = {j: plane.request("GET", f"/jobs/{j}").json() for j in (cancelled, failed)}
        events = {j: history(plane, j) for j in (cancelled, failed)}
        obj = plane.client("s3").get_object(Bucket=plane.bucket, Key="datasets/train.jsonl")
        return {"jobs": jobs, "events": events, "object": (obj["Body"].read(), obj["ContentType"], obj["ETag"])}

    before = snapshot()
    for events in before["events"].values():
        assert_complete_history(events)
    listed_before = plane.request("GET", "/jobs?labels.suite=local-mode").json()["jobs"]

    # When local mode gets SIGTERM
    old_endpoint = plane.endpoint
    assert plane.stop() == 0
    # Then it exits cleanly, endpoint.json is gone and its port no longer answers
    assert not plane.endpoint_path.exists()
    with pytest.raises(requests.ConnectionError):
        requests.get(old_endpoint["api_url"] + "/jobs", timeout=5)

    # When it starts again on the same state dir
    plane.start()
    # Then the principals' keys are the same, and the jobs, their history, the listing (GSIs) and the
    # objects are all back
    assert plane.endpoint["credentials"] == old_endpoint["credentials"]
    assert snapshot() == before
    assert plane.request("GET", "/jobs?labels.suite=local-mode").json()["jobs"] == listed_before

    # When more jobs and an object are written, and the process is killed (-9) right after the last answer
    more = [submit(plane, f"before-kill-{n}", resource_config=UNPLACEABLE)["job_id"] for n in range(5)]
    plane.client("s3").put_object(Bucket=plane.bucket, Key="datasets/last.jsonl", Body=b"{}\n")
    plane.kill()
    plane.start()
    # Then every job that was answered exists, with its first history entry
    for job_id in [cancelled, failed, *more]:
        response = plane.request("GET", f"/jobs/{job_id}")
        assert response.status_code == 200, (job_id, response.text)
        assert history(plane, job_id)[0]["to"] == "PENDING"
    assert snapshot()["events"] == before["events"]
    assert plane.client("s3").get_object(Bucket=plane.bucket, Key="datasets/last.jsonl")["Body"].read() == b"{}\n"
