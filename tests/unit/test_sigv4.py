"""SigV4 verification at the local front door, signed by requests-aws4auth (not botocore, which verifies)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

import pytest
import requests
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from requests_aws4auth import AWS4Auth

from localmode.credentials import Principal, new_principal
from localmode.sigv4 import MISSING_TOKEN, ArrivedRequest, AuthError, canonical_query, verify

REGION = "us-east-1"
HOST = "127.0.0.1:8080"
ALICE = new_principal("alice")
BOB = new_principal("bob")
KEYS = {p.access_key_id: p for p in (ALICE, BOB)}


def lookup(key: str) -> Principal | None:
    return KEYS.get(key)


def sign(
    method: str, url: str, *, body: bytes = b"", headers: dict[str, str] | None = None, principal: Principal = ALICE, **auth_kw
) -> ArrivedRequest:
    """Sign with requests-aws4auth and return what the server would see arriving."""
    auth = AWS4Auth(
        principal.access_key_id, principal.secret_access_key, auth_kw.pop("region", REGION), auth_kw.pop("service", "execute-api")
    )
    prepared = requests.Request(method, url, data=body or None, headers=headers or {}).prepare()
    prepared = auth(prepared)
    return arrived(prepared)


def arrived(prepared: requests.PreparedRequest) -> ArrivedRequest:
    parts = urlsplit(prepared.url)
    # requests adds Host when it sends; the signer signed the same value.
    headers = [("Host", parts.netloc), *((k, v) for k, v in prepared.headers.items())]
    body = prepared.body or b""
    return ArrivedRequest(prepared.method or "GET", parts.path, parts.query, headers, body if isinstance(body, bytes) else body.encode())


def with_header(req: ArrivedRequest, name: str, value: str) -> ArrivedRequest:
    headers = [(k, v) for k, v in req.headers if k.lower() != name.lower()] + [(name, value)]
    return ArrivedRequest(req.method, req.raw_path, req.raw_query, headers, req.body)


def refused(req: ArrivedRequest, **kw) -> AuthError:
    with pytest.raises(AuthError) as info:
        verify(req, lookup, region=REGION, **kw)
    assert info.value.status == 403
    return info.value


def test_good_get_with_query_is_the_signers_principal() -> None:
    # Given a GET with filters, signed by alice
    req = sign("GET", f"http://{HOST}/jobs?status=QUEUED&labels.team=support&limit=5")
    # When it is verified
    principal = verify(req, lookup, region=REGION)
    # Then it is alice
    assert principal == ALICE


def test_good_post_with_body_and_other_principal() -> None:
    # Given a POST with a JSON body signed by bob
    body = json.dumps({"name": "x", "labels": {"a": "b"}}).encode()
    req = sign("POST", f"http://{HOST}/jobs", body=body, headers={"Content-Type": "application/json"}, principal=BOB)
    # Then it verifies as bob
    assert verify(req, lookup, region=REGION) == BOB


def test_spaces_repeated_params_and_encoded_path_verify() -> None:
    # Given a query with a form-encoded space, a repeated key, reserved characters, and a percent-encoded path
    req = sign("GET", f"http://{HOST}/jobs/a%20b%2Fc?name=my+job&labels.k=v%2Fw&labels.k=a&empty=")
    # Then the canonical forms agree with the signer's
    assert verify(req, lookup, region=REGION) == ALICE


def test_botocore_signed_request_verifies_too() -> None:
    # Given the same kind of request signed by botocore (the SDK's signer) over a prepared URL
    request = AWSRequest(method="GET", url=f"http://{HOST}/jobs?name=a%20b&limit=3", headers={})
    SigV4Auth(Credentials(ALICE.access_key_id, ALICE.secret_access_key), "execute-api", REGION).add_auth(request)
    prepared = request.prepare()
    parts = urlsplit(prepared.url)
    req = ArrivedRequest("GET", parts.path, parts.query, [("Host", HOST), *prepared.headers.items()], b"")
    # Then it verifies
    assert verify(req, lookup, region=REGION) == ALICE


@pytest.mark.parametrize("path", ["/jobs/a%20b%2Fc", "/jobs/./x/../y", "/jobs//double", "/jobs/%7Etilde~", "/"])
def test_botocore_signed_headers_paths_and_bodies_verify(path: str) -> None:
    # Given botocore signing extra x-amz headers (runs of spaces, a repeated one), an odd path and a body
    request = AWSRequest(
        method="POST", url=f"http://{HOST}{path}?b=2&a=1", data=b'{"x": 1}', headers={"X-Amz-Meta-Note": "  spaced   out  "}
    )
    request.headers.add_header("X-Amz-Meta-Twice", "one")
    request.headers.add_header("X-Amz-Meta-Twice", "two")
    SigV4Auth(Credentials(ALICE.access_key_id, ALICE.secret_access_key), "execute-api", REGION).add_auth(request)
    prepared = request.prepare()
    parts = urlsplit(prepared.url)
    headers = [("Host", HOST), *request.headers.items()]  # email-style: repeated headers stay repeated
    assert sum(1 for k, _ in headers if k.lower() == "x-amz-meta-twice") == 2
    req = ArrivedRequest("POST", parts.path, parts.query, headers, b'{"x": 1}')
    # Then the rebuilt canonical request agrees with botocore's, and a changed body does not
    assert verify(req, lookup, region=REGION) == ALICE
    assert refused(ArrivedRequest("POST", parts.path, parts.query, headers, b'{"x": 2}')).error_type == "InvalidSignatureException"


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(lambda r: ArrivedRequest(r.method, r.raw_path, r.raw_query, r.headers, r.body + b" "), id="body"),
        pytest.param(lambda r: ArrivedRequest(r.method, "/jobs/other", r.raw_query, r.headers, r.body), id="path"),
        pytest.param(lambda r: ArrivedRequest(r.method, r.raw_path, "status=FAILED", r.headers, r.body), id="query"),
        pytest.param(lambda r: ArrivedRequest("PUT", r.raw_path, r.raw_query, r.headers, r.body), id="method"),
        pytest.param(lambda r: with_header(r, "Content-Type", "text/plain"), id="signed-header"),
        pytest.param(lambda r: with_header(r, "Host", "127.0.0.1:9999"), id="host"),
    ],
)
def test_tampered_request_is_refused_with_aws_message(tamper) -> None:
    # Given a good signed POST
    body = b'{"reason": "done"}'
    good = sign("POST", f"http://{HOST}/jobs/j1/cancel?status=QUEUED", body=body, headers={"Content-Type": "application/json"})
    assert verify(good, lookup, region=REGION) == ALICE
    # When one signed part is changed in transit
    bad = tamper(good)
    # Then it is refused as API Gateway refuses it
    error = refused(bad)
    assert error.error_type == "InvalidSignatureException"
    assert error.message.startswith(("The request signature we calculated does not match", "The provided 'x-amz-content-sha256'"))


def test_changed_body_without_signed_hash_is_a_signature_mismatch() -> None:
    # Given a request whose client did not sign x-amz-content-sha256 (botocore signs the body hash implicitly)
    request = AWSRequest(method="POST", url=f"http://{HOST}/jobs", data=b'{"a": 1}', headers={})
    SigV4Auth(Credentials(ALICE.access_key_id, ALICE.secret_access_key), "execute-api", REGION).add_auth(request)
    prepared = request.prepare()
    req = ArrivedRequest("POST", "/jobs", "", [("Host", HOST), *prepared.headers.items()], b'{"a": 1}')
    assert verify(req, lookup, region=REGION) == ALICE
    # When the body changes
    tampered = ArrivedRequest("POST", "/jobs", "", req.headers, b'{"a": 2}')
    # Then the signature no longer matches, and the message shows the canonical request AWS would show
    error = refused(tampered)
    assert "The Canonical String for this request should have been" in error.message


def test_unsigned_header_may_be_added() -> None:
    # Given a signed request to which a proxy added a header the client did not sign
    req = with_header(sign("GET", f"http://{HOST}/jobs"), "X-Forwarded-For", "10.0.0.1")
    # Then it still verifies
    assert verify(req, lookup, region=REGION) == ALICE


def test_body_hash_header_must_match_body() -> None:
    # Given a signed request whose x-amz-content-sha256 does not describe the body
    req = sign("POST", f"http://{HOST}/jobs", body=b"{}")
    req = with_header(req, "x-amz-content-sha256", "UNSIGNED-PAYLOAD")
    # Then it is refused with AWS's message for that header
    assert refused(req).message == "The provided 'x-amz-content-sha256' header does not match what was computed."


def test_unsigned_request_is_missing_authentication_token() -> None:
    # Given a request with no signature at all
    req = ArrivedRequest("GET", "/jobs", "", [("Host", HOST)], b"")
    # Then API Gateway's answer
    error = refused(req)
    assert (error.error_type, error.message) == ("MissingAuthenticationTokenException", MISSING_TOKEN)


def test_wrong_secret_is_a_signature_mismatch() -> None:
    # Given alice's key id signed with someone else's secret
    impostor = Principal("alice", ALICE.access_key_id, BOB.secret_access_key, ALICE.arn, ALICE.user_id)
    error = refused(sign("GET", f"http://{HOST}/jobs", principal=impostor))
    assert error.error_type == "InvalidSignatureException"


def test_unknown_key_is_an_invalid_security_token() -> None:
    # Given a key the front door never issued
    stranger = new_principal("mallory")
    error = refused(sign("GET", f"http://{HOST}/jobs", principal=stranger))
    assert (error.error_type, error.message) == ("UnrecognizedClientException", "The security token included in the request is invalid.")


def test_session_token_is_refused() -> None:
    # Given alice's signature plus a session token local mode never issued
    req = with_header(sign("GET", f"http://{HOST}/jobs"), "X-Amz-Security-Token", "FQoG...")
    assert refused(req).error_type == "UnrecognizedClientException"


@pytest.mark.parametrize("minutes, phrase", [(16, "Signature expired"), (-16, "Signature not yet current")])
def test_clock_skew_over_15_minutes_is_refused(minutes: int, phrase: str) -> None:
    # Given a request signed now, verified 16 minutes later (or earlier)
    req = sign("GET", f"http://{HOST}/jobs")
    later = datetime.now(UTC) + timedelta(minutes=minutes)
    # Then it is refused with AWS's message
    error = refused(req, now=later)
    assert error.message.startswith(phrase)
    assert "15 min." in error.message


def test_skew_within_15_minutes_is_accepted() -> None:
    req = sign("GET", f"http://{HOST}/jobs")
    assert verify(req, lookup, region=REGION, now=datetime.now(UTC) + timedelta(minutes=14)) == ALICE


def test_wrong_service_is_refused() -> None:
    # Given a request signed for another service (s3) with a valid key
    error = refused(sign("GET", f"http://{HOST}/jobs", service="s3"))
    assert error.message == "Credential should be scoped to correct service: 'execute-api'. "


def test_wrong_region_is_refused() -> None:
    error = refused(sign("GET", f"http://{HOST}/jobs", region="eu-west-1"))
    assert error.message == "Credential should be scoped to a valid region, not 'eu-west-1'. "


def test_scope_date_must_match_amz_date() -> None:
    # Given a signed request whose X-Amz-Date was moved to another day (still within the skew window)
    req = sign("GET", f"http://{HOST}/jobs")
    amz = req.header("X-Amz-Date")
    assert amz is not None
    moved = (datetime.strptime(amz, "%Y%m%dT%H%M%SZ") + timedelta(days=1)).strftime("%Y%m%dT%H%M%SZ")
    error = refused(with_header(req, "X-Amz-Date", moved), now=datetime.strptime(moved, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC))
    assert error.message.startswith("Date in Credential scope does not match YYYYMMDD")


@pytest.mark.parametrize(
    "authorization, needle",
    [
        ("Bearer abc", "Authorization header requires 'Credential' parameter."),
        ("AWS4-HMAC-SHA256 Credential=AKIA/20240101/us-east-1/execute-api/aws4_request, SignedHeaders=host", "requires 'Signature'"),
        ("AWS4-HMAC-SHA256 Credential=AKIA/20240101/us-east-1, SignedHeaders=host, Signature=00", "exactly 5 slash-delimited elements"),
        ("AWS4-HMAC-SHA256 Credential=AKIA/20240101/us-east-1/execute-api/aws4_request, SignedHeaders=x-amz-date, Signature=00", "'Host'"),
        ("AWS4-HMAC-SHA256 Credential=AKIA/20240101/us-east-1/execute-api/aws4_requests, SignedHeaders=host, Signature=00", "terminator"),
    ],
)
def test_malformed_authorization_is_an_incomplete_signature(authorization: str, needle: str) -> None:
    req = ArrivedRequest("GET", "/jobs", "", [("Host", HOST), ("X-Amz-Date", "20240101T000000Z"), ("Authorization", authorization)], b"")
    error = refused(req)
    assert error.error_type == "IncompleteSignatureException"
    assert needle in error.message


def test_missing_amz_date_is_an_incomplete_signature() -> None:
    req = sign("GET", f"http://{HOST}/jobs")
    req = ArrivedRequest(req.method, req.raw_path, req.raw_query, [(k, v) for k, v in req.headers if k.lower() != "x-amz-date"], b"")
    assert "X-Amz-Date" in refused(req).message


def test_presigned_query_auth_is_refused_clearly() -> None:
    req = ArrivedRequest("GET", "/jobs", "X-Amz-Credential=a&X-Amz-Signature=b", [("Host", HOST)], b"")
    assert "presigned" in refused(req).message


def test_canonical_query_sorts_and_encodes() -> None:
    assert canonical_query("b=2&a=%7e&a=1&c=x+y") == "a=1&a=~&b=2&c=x%20y"
    assert canonical_query("c=x+y", plus_is_space=False) == "c=x%2By"


@pytest.mark.parametrize("amz_date", ["2026-11-23T12:00:00Z", "20261123T120000", "20261323T120000Z", "20261123T12000xZ", ""])
def test_amz_date_not_in_iso_basic_format_is_an_incomplete_signature(amz_date: str) -> None:
    error = refused(with_header(sign("GET", f"http://{HOST}/jobs"), "X-Amz-Date", amz_date))
    assert error.error_type == "IncompleteSignatureException"
    assert "ISO-8601 'basic format'" in error.message or "X-Amz-Date" in error.message


def test_signing_keys_kept_between_requests_stay_per_principal() -> None:
    # Given alice's derived key in use (kept for the day), when an impostor signs with alice's key id
    # and bob's secret, and bob signs his own
    assert verify(sign("GET", f"http://{HOST}/jobs"), lookup, region=REGION) is ALICE
    impostor = Principal("alice", ALICE.access_key_id, BOB.secret_access_key, ALICE.arn, ALICE.user_id)
    # Then the impostor is refused and bob is bob, whatever was kept before
    assert refused(sign("GET", f"http://{HOST}/jobs", principal=impostor)).error_type == "InvalidSignatureException"
    assert verify(sign("GET", f"http://{HOST}/jobs", principal=BOB), lookup, region=REGION) is BOB
    assert verify(sign("GET", f"http://{HOST}/jobs"), lookup, region=REGION) is ALICE
