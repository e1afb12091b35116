"""localmode/sigv4.py's details that a mutation run found untested: the presigned-query refusal, the date's
exact format and the skew boundary to the second, the Authorization parse, the canonical query's edge
cases, a '+' signed as a literal plus, and the derived signing keys (fresh and kept)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from requests_aws4auth.aws4signingkey import AWS4SigningKey

from localmode import sigv4
from localmode.sigv4 import ArrivedRequest, AuthError, canonical_query, verify
from tests.unit.test_sigv4 import ALICE, BOB, HOST, REGION, lookup, refused, sign, with_header

SIGNED_AT = "20240101T120059Z"
SIGNED_AT_TIME = datetime(2024, 1, 1, 12, 0, 59, tzinfo=UTC)


def test_an_auth_error_reads_as_its_message() -> None:
    error = AuthError("InvalidSignatureException", "the message")
    assert str(error) == "the message" and error.status == 403


@pytest.mark.parametrize(
    "query",
    [
        "X-Amz-Credential=a%2Fb",  # one of the two presigned parameters is enough
        "X-Amz-Signature=abc",
        "limit=5&x-amz-signature=abc",  # not first, any case
        "X-Amz-Signature=abc=def",  # an '=' in the value: the name ends at the first one
    ],
)
def test_a_presigned_looking_query_without_authorization_is_refused_as_presigned(query: str) -> None:
    error = refused(ArrivedRequest("GET", "/jobs", query, [("Host", HOST)], b""))
    assert error.error_type == "IncompleteSignatureException"
    assert error.message.startswith("Query-string (presigned URL) SigV4 is not supported here")


def test_a_query_merely_mentioning_the_names_is_a_missing_token() -> None:
    error = refused(ArrivedRequest("GET", "/jobs", "name=X-Amz-Signature", [("Host", HOST)], b""))
    assert error.error_type == "MissingAuthenticationTokenException"


@pytest.mark.parametrize(
    "amz_date",
    [
        "2024 101T120000Z",  # int() reads " 1", the format does not
        "20240101T 20000Z",
        "20240101X120000Z",  # not a 'T' between date and time
        "20240101T120000z",
    ],
)
def test_amz_date_must_be_digits_t_digits_z_exactly(amz_date: str) -> None:
    error = refused(with_header(sign("GET", f"http://{HOST}/jobs"), "X-Amz-Date", amz_date))
    assert error.error_type == "IncompleteSignatureException"
    assert error.message == (f"Date must be in ISO-8601 'basic format'. Got '{amz_date}'. See http://en.wikipedia.org/wiki/ISO_8601")


def test_skew_counts_the_seconds_of_the_signing_time() -> None:
    req = sign("GET", f"http://{HOST}/jobs", headers={"X-Amz-Date": SIGNED_AT})
    # 15 minutes after 12:00:59 is 12:15:59: at 12:15:30 it is still current, at 12:16:00 it has expired
    assert verify(req, lookup, region=REGION, now=datetime(2024, 1, 1, 12, 15, 30, tzinfo=UTC)) == ALICE
    # Exactly at the limit, either side, it is still accepted
    assert verify(req, lookup, region=REGION, now=SIGNED_AT_TIME + timedelta(minutes=15)) == ALICE
    assert verify(req, lookup, region=REGION, now=SIGNED_AT_TIME - timedelta(minutes=15)) == ALICE
    error = refused(req, now=datetime(2024, 1, 1, 12, 16, 0, tzinfo=UTC))
    assert error.error_type == "InvalidSignatureException"
    assert error.message == "Signature expired: 20240101T120059Z is now earlier than 20240101T120100Z (20240101T121600Z - 15 min.)"


def test_wrong_algorithm_is_named_only_when_nothing_else_is_missing() -> None:
    base = "Credential=AKIA/20240101/us-east-1/execute-api/aws4_request, SignedHeaders=host, Signature=00"
    headers = [("Host", HOST), ("X-Amz-Date", "20240101T000000Z")]
    wrong = refused(ArrivedRequest("GET", "/jobs", "", [*headers, ("Authorization", f"AWS4-HMAC-SHA1 {base}")], b""))
    assert wrong.error_type == "IncompleteSignatureException"
    assert wrong.message.startswith("Unsupported Authorization Type: 'AWS4-HMAC-SHA1'; only AWS4-HMAC-SHA256 is accepted.")
    # Missing parts are what is named, with or without the right algorithm
    for algorithm in ("AWS4-HMAC-SHA1", "AWS4-HMAC-SHA256"):
        partial = f"{algorithm} Credential=AKIA/20240101/us-east-1/execute-api/aws4_request, SignedHeaders=host"
        error = refused(ArrivedRequest("GET", "/jobs", "", [*headers, ("Authorization", partial)], b""))
        assert error.message.startswith("Authorization header requires 'Signature' parameter.") and "Unsupported" not in error.message
    # No X-Amz-Date: the message says so in AWS's words
    error = refused(ArrivedRequest("GET", "/jobs", "", [("Host", HOST), ("Authorization", f"AWS4-HMAC-SHA256 {base}")], b""))
    assert error.message.startswith("Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header.")


def test_a_key_id_is_everything_up_to_the_first_slash_of_the_credential() -> None:
    # An '=' inside the credential stays in it: an unknown key id, not a missing Credential
    authorization = "AWS4-HMAC-SHA256 Credential=AK=X/20240101/us-east-1/execute-api/aws4_request, SignedHeaders=host, Signature=00"
    now = datetime(2024, 1, 1, tzinfo=UTC)
    req = ArrivedRequest("GET", "/jobs", "", [("Host", HOST), ("X-Amz-Date", "20240101T000000Z"), ("Authorization", authorization)], b"")
    assert refused(req, now=now).error_type == "UnrecognizedClientException"


def test_canonical_query_edge_cases() -> None:
    assert canonical_query("a=1&&b=2") == "a=1&b=2"  # an empty pair is skipped, not the end
    assert canonical_query("a=b=c") == "a=b%3Dc"  # the name ends at the first '='
    assert canonical_query("a%2Fb=1&c=/") == "a%2Fb=1&c=%2F"  # '/' is encoded in names and values alike
    assert canonical_query("flag") == "flag="


def test_a_plus_signed_as_a_literal_plus_verifies() -> None:
    # Given a client that signed the value 'a+b' RFC 3986-style ('%2B', botocore's reading of its params)
    # but sent the '+' unencoded on the wire
    request = AWSRequest(method="GET", url=f"http://{HOST}/jobs", params={"name": "a+b", "limit": "3"}, headers={})
    SigV4Auth(Credentials(ALICE.access_key_id, ALICE.secret_access_key), "execute-api", REGION).add_auth(request)
    headers = [("Host", HOST), *((k, v) for k, v in request.headers.items())]
    req = ArrivedRequest("GET", "/jobs", "name=a+b&limit=3", headers, b"")
    # Then the second reading of the '+' verifies it
    assert verify(req, lookup, region=REGION) == ALICE
    # And requests-aws4auth, which reads '+' as a space, verifies by the first reading
    assert verify(sign("GET", f"http://{HOST}/jobs?name=a+b"), lookup, region=REGION) == ALICE
    # While a query without '+' has one reading only: the same signature over another value is refused
    assert refused(ArrivedRequest("GET", "/jobs", "name=a%20b&limit=3", headers, b"")).error_type == "InvalidSignatureException"


def test_a_fresh_signing_key_is_sigv4s_derivation(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given no key kept (a fresh process)
    monkeypatch.setattr(sigv4, "_signing_keys", {})
    # Then the derived key is requests-aws4auth's (an independent implementation) and a request verifies
    key = sigv4._signing_key(BOB.secret_access_key, "20240101", REGION, "execute-api")
    assert key == AWS4SigningKey(BOB.secret_access_key, REGION, "execute-api", "20240101").key
    monkeypatch.setattr(sigv4, "_signing_keys", {})
    assert verify(sign("GET", f"http://{HOST}/jobs", principal=BOB), lookup, region=REGION) is BOB
    # And the key is kept for the next request of that secret, day, region and service
    day = datetime.now(UTC).strftime("%Y%m%d")
    assert sigv4._signing_keys == {
        (BOB.secret_access_key, day, REGION, "execute-api"): AWS4SigningKey(BOB.secret_access_key, REGION, "execute-api", day).key
    }


def test_the_kept_key_is_the_one_used(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a wrong key kept for alice's secret today (as if derived wrongly), her request no longer verifies:
    # proof that verification uses the kept key rather than deriving one each time
    day = datetime.now(UTC).strftime("%Y%m%d")
    monkeypatch.setattr(sigv4, "_signing_keys", {(ALICE.secret_access_key, day, REGION, "execute-api"): b"\0" * 32})
    assert refused(sign("GET", f"http://{HOST}/jobs")).error_type == "InvalidSignatureException"


def test_kept_keys_are_cleared_when_the_limit_is_reached(monkeypatch: pytest.MonkeyPatch) -> None:
    full = {(f"secret{i}", "20240101", REGION, "execute-api"): b"k" for i in range(sigv4._SIGNING_KEYS_KEPT)}
    monkeypatch.setattr(sigv4, "_signing_keys", full)
    assert verify(sign("GET", f"http://{HOST}/jobs"), lookup, region=REGION) is ALICE
    assert len(sigv4._signing_keys) == 1
    # One under the limit: nothing is cleared
    almost = {(f"secret{i}", "20240101", REGION, "execute-api"): b"k" for i in range(sigv4._SIGNING_KEYS_KEPT - 1)}
    monkeypatch.setattr(sigv4, "_signing_keys", almost)
    assert verify(sign("GET", f"http://{HOST}/jobs"), lookup, region=REGION) is ALICE
    assert len(sigv4._signing_keys) == sigv4._SIGNING_KEYS_KEPT
