"""The front door in-process (real HTTP on loopback, a stand-in handler): what API Gateway would do."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from requests_aws4auth import AWS4Auth

from localmode.credentials import COGNITO_SESSION, new_dashboard_user, new_principal
from localmode.frontdoor import FrontDoor
from localmode.sigv4 import SIGNATURE_MISMATCH

REGION = "us-east-1"
ALICE = new_principal("alice")


class Recorder:
    """A handler that records its events and how many invocations overlapped."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.active = 0
        self.max_active = 0
        self.guard = threading.Lock()

    def __call__(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        with self.guard:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        try:
            if event["path"] == "/slow":
                time.sleep(0.05)
            self.events.append(event)
            return {"statusCode": 201, "headers": {"X-Seen": event["httpMethod"]}, "body": json.dumps({"ok": True})}
        finally:
            with self.guard:
                self.active -= 1


@pytest.fixture
def door() -> Iterator[tuple[FrontDoor, Recorder]]:
    recorder = Recorder()
    front = FrontDoor("127.0.0.1", 0, principals=[ALICE], handler=recorder, region=REGION, account_id="123456789012")
    front.start()
    yield front, recorder
    front.stop()


def url(front: FrontDoor, path: str) -> str:
    return f"http://127.0.0.1:{front.port}{path}"


AUTH = AWS4Auth(ALICE.access_key_id, ALICE.secret_access_key, REGION, "execute-api")


def test_signed_request_is_handed_over_and_the_result_returned(door) -> None:
    front, recorder = door
    # When alice POSTs a JSON body
    response = requests.post(url(front, "/jobs?a=1"), json={"x": 1}, auth=AUTH, timeout=10)
    # Then the handler's status, headers and body come back, with API Gateway's request id and default type
    assert response.status_code == 201
    assert response.json() == {"ok": True}
    assert response.headers["X-Seen"] == "POST"
    assert response.headers["Content-Type"] == "application/json"
    event = recorder.events[0]
    assert event["requestContext"]["requestId"] == response.headers["x-amzn-RequestId"]
    assert event["requestContext"]["identity"]["userArn"] == ALICE.arn
    assert event["queryStringParameters"] == {"a": "1"}
    assert event["headers"]["X-Forwarded-Proto"] == "http"


def test_a_dashboard_user_is_reported_as_api_gateway_reports_an_identity_pool_session() -> None:
    # Given two people signed in to the dashboard: one role session name, two identity ids
    ana, ben = new_dashboard_user("ana"), new_dashboard_user("ben")
    recorder = Recorder()
    front = FrontDoor("127.0.0.1", 0, principals=[ALICE, ana, ben], handler=recorder, region=REGION, account_id="123456789012")
    # Ana is a user of local mode's user pool (localmode/deploy/user_pool.py); ben's pool user is unknown
    provider = "cognito-idp.us-east-1.amazonaws.com/us-east-1_Local,cognito-idp.us-east-1.amazonaws.com/us-east-1_Local:CognitoSignIn:s-1"
    front.cognito_providers.update({"ana": provider, "alice": provider})
    front.start()
    try:
        for person in (ana, ben, ALICE):
            auth = AWS4Auth(person.access_key_id, person.secret_access_key, REGION, "execute-api")
            assert requests.get(url(front, "/jobs"), auth=auth, timeout=10).status_code == 201
    finally:
        front.stop()
    # Then each request carries the shared session ARN and the person's own identity id; alice has none
    identities = [e["requestContext"]["identity"] for e in recorder.events]
    assert [i["userArn"] for i in identities[:2]] == [ana.arn, ben.arn] and ana.arn == ben.arn and ana.arn.endswith("/" + COGNITO_SESSION)
    assert [i["cognitoIdentityId"] for i in identities] == [ana.cognito_identity_id, ben.cognito_identity_id, None]
    assert [i["cognitoAuthenticationType"] for i in identities] == ["authenticated", "authenticated", None]
    assert identities[0]["cognitoIdentityPoolId"].startswith(REGION + ":") and identities[2]["cognitoIdentityPoolId"] is None
    # Only a dashboard user is reported with a user-pool login, as API Gateway does (never an IAM user)
    assert [i["cognitoAuthenticationProvider"] for i in identities] == [provider, None, None]


def test_root_path_has_no_proxy_parameter(door) -> None:
    front, recorder = door
    requests.get(url(front, "/"), auth=AUTH, timeout=10)
    event = recorder.events[0]
    assert (event["resource"], event["pathParameters"], event["body"], event["queryStringParameters"]) == ("/", None, None, None)


def test_percent_encoded_path_is_decoded_for_the_handler(door) -> None:
    front, recorder = door
    assert requests.get(url(front, "/jobs/a%20b"), auth=AUTH, timeout=10).status_code == 201
    assert recorder.events[0]["path"] == "/jobs/a b"


def test_unsigned_request_never_reaches_the_handler(door) -> None:
    front, recorder = door
    response = requests.get(url(front, "/jobs"), timeout=10)
    assert (response.status_code, response.json()) == (403, {"message": "Missing Authentication Token"})
    assert recorder.events == []


def test_a_forged_signature_with_a_known_key_id_never_reaches_the_handler(door) -> None:
    # Given alice's real access key id, signed with a secret that is not hers
    front, recorder = door
    secret = ALICE.secret_access_key
    wrong = ("y" if secret[0] == "x" else "x") + secret[1:]  # never her own (a generated secret may start with x)
    forged = AWS4Auth(ALICE.access_key_id, wrong, REGION, "execute-api")
    # When it calls
    response = requests.post(url(front, "/jobs"), json={"x": 1}, auth=forged, timeout=10)
    # Then API Gateway's refusal comes back, naming the signature, and the handler never ran
    assert response.status_code == 403 and response.headers["x-amzn-ErrorType"].startswith("InvalidSignatureException")
    assert response.json()["message"].startswith(SIGNATURE_MISMATCH)
    # And so does alice's own signature over another body (tampered after signing, its declared hash dropped)
    signed = requests.Request("POST", url(front, "/jobs"), json={"x": 1}, auth=AUTH).prepare()
    signed.body = b'{"x": 2}'
    del signed.headers["X-Amz-Content-SHA256"]
    with requests.Session() as session:
        tampered = session.send(signed, timeout=10)
    assert tampered.status_code == 403 and tampered.json()["message"].startswith(SIGNATURE_MISMATCH)
    assert recorder.events == []
    # While her real signature passes (the refusals above are the signature's, not the key's)
    assert requests.post(url(front, "/jobs"), json={"x": 1}, auth=AUTH, timeout=10).status_code == 201


def test_invocations_never_overlap_but_connections_do(door) -> None:
    # Given 8 clients at once on a handler that takes a while
    front, recorder = door
    results: list[int] = []

    def call() -> None:
        results.append(requests.get(url(front, "/slow"), auth=AUTH, timeout=30).status_code)

    threads = [threading.Thread(target=call) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Then all are served, one invocation at a time (one Lambda execution environment)
    assert results == [201] * 8
    assert recorder.max_active == 1


def test_chunked_body_is_read_whole(door) -> None:
    # Given a body sent with Transfer-Encoding: chunked (requests does that for a generator)
    front, recorder = door
    payload = b'{"chunked": true}'
    prepared = requests.Request("POST", url(front, "/jobs"), data=payload, auth=AUTH).prepare()
    with socket.create_connection(("127.0.0.1", front.port), timeout=10) as sock:
        head = f"POST /jobs HTTP/1.1\r\nHost: 127.0.0.1:{front.port}\r\nTransfer-Encoding: chunked\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in prepared.headers.items() if k.lower() not in ("content-length", "host"))
        body = (
            f"{len(payload[:5]):x}\r\n".encode()
            + payload[:5]
            + b"\r\n"
            + f"{len(payload[5:]):x}\r\n".encode()
            + payload[5:]
            + b"\r\n0\r\n\r\n"
        )
        sock.sendall(head.encode() + b"\r\n" + body)
        reply = sock.recv(4096)
    # Then the handler got the whole body, and the signature (over the whole body) verified
    assert reply.startswith(b"HTTP/1.1 201")
    assert json.loads(recorder.events[0]["body"]) == {"chunked": True}


def test_head_gets_headers_only(door) -> None:
    front, _ = door
    response = requests.head(url(front, "/jobs"), auth=AUTH, timeout=10)
    assert response.status_code == 201 and response.content == b""


def test_bad_content_length_is_400(door) -> None:
    front, _ = door
    with socket.create_connection(("127.0.0.1", front.port), timeout=10) as sock:
        sock.sendall(b"POST /jobs HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n")
        assert sock.recv(4096).startswith(b"HTTP/1.1 400")


def test_a_busy_port_fails_at_once_with_a_clear_message(door) -> None:
    from localmode.frontdoor import PortInUse

    # Given a port already served, when a second front door is built on it
    front, _ = door
    with pytest.raises(PortInUse, match=f"port {front.port} on 127.0.0.1 is in use"):
        FrontDoor("127.0.0.1", front.port, principals=[ALICE], region=REGION, account_id="1")


def test_a_front_door_never_started_stops_at_once() -> None:
    # A partial start-up (a deployer failed) still shuts down cleanly
    front = FrontDoor("127.0.0.1", 0, principals=[ALICE], region=REGION, account_id="1")
    with pytest.raises(ValueError, match="no handler"):
        front.start()
    front.stop()


def raw_request(front: FrontDoor, method: str, path: str, body: bytes = b"", extra: str = "", version: str = "HTTP/1.1") -> bytes:
    """A signed request as bytes on the wire (requests-aws4auth signs; we write the HTTP ourselves)."""
    prepared = requests.Request(method, url(front, path), data=body or None, auth=AUTH).prepare()
    head = f"{method} {path} {version}\r\nHost: 127.0.0.1:{front.port}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in prepared.headers.items() if k.lower() not in ("content-length", "host"))
    head += f"Content-Length: {len(body)}\r\n" + extra
    return head.encode() + b"\r\n" + body


def read_until_closed(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def test_pipelined_requests_are_answered_in_order_on_one_connection(door) -> None:
    # Given three signed requests sent at once on one keep-alive connection, the last asking to close
    front, recorder = door
    wire = (
        raw_request(front, "GET", "/a")
        + raw_request(front, "POST", "/b", b'{"n": 2}')
        + raw_request(front, "GET", "/c", extra="Connection: close\r\n")
    )
    with socket.create_connection(("127.0.0.1", front.port), timeout=10) as sock:
        sock.sendall(wire)
        replies = read_until_closed(sock)
    # Then three answers came back in order, and the server closed after the one that asked
    assert replies.count(b"HTTP/1.1 201 Created\r\n") == 3
    assert [e["path"] for e in recorder.events] == ["/a", "/b", "/c"]
    assert json.loads(recorder.events[1]["body"]) == {"n": 2}
    assert replies.rstrip().endswith(b'{"ok": true}') and b"Connection: close" in replies


def test_http_1_0_closes_unless_kept_alive(door) -> None:
    front, _ = door
    with socket.create_connection(("127.0.0.1", front.port), timeout=10) as sock:
        sock.sendall(raw_request(front, "GET", "/old", version="HTTP/1.0"))
        reply = read_until_closed(sock)  # returns only because the server closed
    assert reply.startswith(b"HTTP/1.1 201")


def test_a_body_over_the_payload_limit_is_413_before_it_is_sent(door) -> None:
    # Given a request that announces 11 MB (API Gateway's limit is 10 MB) and sends none of it
    front, recorder = door
    with socket.create_connection(("127.0.0.1", front.port), timeout=10) as sock:
        sock.sendall(b"POST /jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 11534336\r\n\r\n")
        reply = read_until_closed(sock)
    # Then it is refused at once and the connection closed; the handler never ran
    assert reply.startswith(b"HTTP/1.1 413") and recorder.events == []


def test_expect_100_continue_gets_the_interim_answer_then_the_result(door) -> None:
    front, recorder = door
    body = b'{"big": "enough"}'
    request = raw_request(front, "POST", "/jobs", body, extra="Expect: 100-continue\r\n")
    head, body_part = request[: -len(body)], request[-len(body) :]
    with socket.create_connection(("127.0.0.1", front.port), timeout=10) as sock:
        sock.sendall(head)
        assert sock.recv(4096) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(body_part)
        assert sock.recv(4096).startswith(b"HTTP/1.1 201")
    assert json.loads(recorder.events[0]["body"]) == {"big": "enough"}


def test_malformed_request_line_is_400_and_closed(door) -> None:
    front, _ = door
    with socket.create_connection(("127.0.0.1", front.port), timeout=10) as sock:
        sock.sendall(b"NONSENSE\r\n\r\n")
        assert read_until_closed(sock).startswith(b"HTTP/1.1 400")


def test_stop_lets_the_request_in_flight_finish() -> None:
    # Given a slow request in flight when the front door is stopped
    recorder = Recorder()
    front = FrontDoor("127.0.0.1", 0, principals=[ALICE], handler=recorder, region=REGION, account_id="123456789012")
    front.start()
    answers: list[int] = []
    caller = threading.Thread(target=lambda: answers.append(requests.get(url(front, "/slow"), auth=AUTH, timeout=30).status_code))
    caller.start()
    while recorder.active == 0 and not recorder.events:
        time.sleep(0.005)
    front.stop()
    caller.join(30)
    # Then it was answered, and nothing listens any more
    assert answers == [201]
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", front.port), timeout=2).close()


def test_a_chunked_body_arriving_in_pieces_then_a_pipelined_request(door) -> None:
    # Given a signed POST whose 200 KB body comes in 400 chunks, written a few bytes at a time,
    # followed on the same connection by another request
    front, recorder = door
    payload = json.dumps({"data": "x" * 200_000}).encode()
    prepared = requests.Request("POST", url(front, "/jobs"), data=payload, auth=AUTH).prepare()
    head = f"POST /jobs HTTP/1.1\r\nHost: 127.0.0.1:{front.port}\r\nTransfer-Encoding: chunked\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in prepared.headers.items() if k.lower() not in ("content-length", "host"))
    step = len(payload) // 400 + 1
    body = b"".join(f"{len(payload[i : i + step]):x}\r\n".encode() + payload[i : i + step] + b"\r\n" for i in range(0, len(payload), step))
    wire = head.encode() + b"\r\n" + body + b"0\r\n\r\n" + raw_request(front, "GET", "/after", extra="Connection: close\r\n")
    with socket.create_connection(("127.0.0.1", front.port), timeout=30) as sock:
        for i in range(0, len(wire), 1500):
            sock.sendall(wire[i : i + 1500])
        replies = read_until_closed(sock)
    # Then both were answered, the body whole and verified against its signature
    assert replies.count(b"HTTP/1.1 201 Created\r\n") == 2
    assert json.loads(recorder.events[0]["body"]) == {"data": "x" * 200_000}
    assert recorder.events[1]["path"] == "/after"
