"""SigV4 verification at the local front door, as API Gateway's AWS_IAM authorization does it.

The canonical request is rebuilt from what arrived (method, path, query, the headers the client says
it signed, the body) and signed again with the caller's secret, by SigV4's rules as botocore applies
them (its path normalisation included); the two signatures are compared in constant time. The tests
sign with requests-aws4auth and with botocore, so neither side is only this code. The refusals carry API Gateway's status (403), its
x-amzn-ErrorType and its messages, so a client written against local mode meets the same answers in AWS.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cached_property
from urllib.parse import quote, unquote, unquote_plus

from botocore.utils import normalize_url_path

from localmode.credentials import Principal

ALGORITHM = "AWS4-HMAC-SHA256"
SERVICE = "execute-api"
TERMINATOR = "aws4_request"
AMZ_DATE_FORMAT = "%Y%m%dT%H%M%SZ"
# SigV4's allowed clock skew between the signer and the service.
MAX_SKEW = timedelta(minutes=15)
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
_UNRESERVED = "-_.~"

MISSING_TOKEN = "Missing Authentication Token"  # noqa: S105 (a message, not a secret)
INVALID_TOKEN = "The security token included in the request is invalid."  # noqa: S105
SIGNATURE_MISMATCH = (
    "The request signature we calculated does not match the signature you provided. "
    "Check your AWS Secret Access Key and signing method. Consult the service documentation for details."
)
BODY_HASH_MISMATCH = "The provided 'x-amz-content-sha256' header does not match what was computed."


class AuthError(Exception):
    """A refused request: 403 with API Gateway's error type and message."""

    def __init__(self, error_type: str, message: str, status: int = 403) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.message = message
        self.status = status


def _incomplete(message: str) -> AuthError:
    return AuthError("IncompleteSignatureException", message)


def _invalid_signature(message: str) -> AuthError:
    return AuthError("InvalidSignatureException", message)


@dataclass(frozen=True)
class ArrivedRequest:
    """What reached the front door, unmodified: the raw (still percent-encoded) path and query."""

    method: str
    raw_path: str
    raw_query: str
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        return self._by_name.get(name.lower())

    @cached_property
    def _by_name(self) -> dict[str, str]:
        # Lower-cased name -> its values joined by commas (as HTTP folds repeated headers); built once.
        values: dict[str, list[str]] = {}
        for k, v in self.headers:
            values.setdefault(k.lower(), []).append(v)
        return {k: ",".join(v) for k, v in values.items()}


@dataclass(frozen=True)
class _Authorization:
    access_key_id: str
    date: str
    region: str
    service: str
    terminator: str
    signed_headers: tuple[str, ...]
    signature: str


def verify(
    request: ArrivedRequest,
    lookup: Callable[[str], Principal | None],
    *,
    region: str,
    service: str = SERVICE,
    now: datetime | None = None,
) -> Principal:
    """The principal that signed `request`, or AuthError saying why it is refused."""
    query_keys = {unquote_plus(pair.partition("=")[0]).lower() for pair in request.raw_query.split("&") if pair}
    authorization = request.header("Authorization")
    if authorization is None:
        if "x-amz-signature" in query_keys or "x-amz-credential" in query_keys:
            # Presigned URLs are a real SigV4 form, but not one this front door implements: refuse clearly.
            raise _incomplete("Query-string (presigned URL) SigV4 is not supported here; sign the Authorization header instead.")
        raise AuthError("MissingAuthenticationTokenException", MISSING_TOKEN)

    auth = _parse_authorization(authorization, request)
    _check_scope(auth, region=region, service=service)
    amz_date = request.header("X-Amz-Date") or ""  # present: _parse_authorization refuses a request without it
    signed_at = _parse_amz_date(amz_date)
    if auth.date != amz_date[:8]:
        raise _invalid_signature(
            "Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: "
            f"'{auth.date}' != '{amz_date[:8]}', from '{amz_date}'."
        )
    _check_skew(signed_at, amz_date, now or datetime.now(UTC))

    principal = lookup(auth.access_key_id)
    if principal is None:
        raise AuthError("UnrecognizedClientException", INVALID_TOKEN)
    if request.header("X-Amz-Security-Token") is not None:
        # Local principals are long-term keys: a session token can only come from somewhere else.
        raise AuthError("UnrecognizedClientException", INVALID_TOKEN)

    body_hash = hashlib.sha256(request.body).hexdigest()
    declared_hash = request.header("X-Amz-Content-Sha256")
    if declared_hash is not None and declared_hash.strip() != body_hash:
        raise _invalid_signature(BODY_HASH_MISMATCH)

    expected = ""
    for query in _canonical_query_candidates(request.raw_query):
        expected, canonical_request, string_to_sign = _sign(request, auth, principal, amz_date, query)
        if hmac.compare_digest(expected.encode(), auth.signature.encode()):
            return principal
    raise _invalid_signature(
        f"{SIGNATURE_MISMATCH}\n\nThe Canonical String for this request should have been\n'{canonical_request}'\n\n"
        f"The String-to-Sign should have been\n'{string_to_sign}'\n"
    )


def _parse_authorization(value: str, request: ArrivedRequest) -> _Authorization:
    algorithm, _, rest = value.strip().partition(" ")
    fields: dict[str, str] = {}
    for part in rest.split(","):
        name, sep, field_value = part.strip().partition("=")
        if sep:
            fields[name.strip()] = field_value.strip()
    missing = [
        f"Authorization header requires '{name}' parameter." for name in ("Credential", "Signature", "SignedHeaders") if name not in fields
    ]
    if request.header("X-Amz-Date") is None:
        missing.append("Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header.")
    if algorithm != ALGORITHM or missing:
        if algorithm != ALGORITHM and not missing:
            missing.append(f"Unsupported Authorization Type: '{algorithm}'; only {ALGORITHM} is accepted.")
        raise _incomplete(" ".join(missing) + f" Authorization={value}")
    credential = fields["Credential"]
    parts = credential.split("/")
    if len(parts) != 5:
        raise _incomplete(
            f"Credential must have exactly 5 slash-delimited elements, e.g. keyid/date/region/service/term, got '{credential}'"
        )
    signed = tuple(h.strip().lower() for h in fields["SignedHeaders"].split(";") if h.strip())
    if "host" not in signed:
        raise _incomplete("'Host' or ':authority' must be a 'SignedHeader' in the AWS Authorization.")
    key_id, date, region, service, terminator = parts
    return _Authorization(key_id, date, region, service, terminator, signed_headers=signed, signature=fields["Signature"])


def _check_scope(auth: _Authorization, *, region: str, service: str) -> None:
    if auth.terminator != TERMINATOR:
        raise _incomplete(f"Credential should be scoped with a valid terminator: '{TERMINATOR}', not '{auth.terminator}'. ")
    if auth.service != service:
        raise _invalid_signature(f"Credential should be scoped to correct service: '{service}'. ")
    if auth.region != region:
        raise _invalid_signature(f"Credential should be scoped to a valid region, not '{auth.region}'. ")


def _parse_amz_date(value: str) -> datetime:
    # strptime's format machinery costs more than the rest of a GET's verification; the basic format
    # is fixed-width: YYYYMMDD'T'HHMMSS'Z'.
    try:
        if len(value) != 16 or value[8] != "T" or value[15] != "Z" or not (value[:8] + value[9:15]).isdigit():
            raise ValueError(value)
        return datetime(
            int(value[:4]), int(value[4:6]), int(value[6:8]), int(value[9:11]), int(value[11:13]), int(value[13:15]), tzinfo=UTC
        )
    except ValueError:
        raise _incomplete(f"Date must be in ISO-8601 'basic format'. Got '{value}'. See http://en.wikipedia.org/wiki/ISO_8601") from None


def _check_skew(signed_at: datetime, amz_date: str, now: datetime) -> None:
    def fmt(t: datetime) -> str:
        return t.strftime(AMZ_DATE_FORMAT)

    if signed_at < now - MAX_SKEW:
        raise _invalid_signature(f"Signature expired: {amz_date} is now earlier than {fmt(now - MAX_SKEW)} ({fmt(now)} - 15 min.)")
    if signed_at > now + MAX_SKEW:
        raise _invalid_signature(f"Signature not yet current: {amz_date} is still later than {fmt(now + MAX_SKEW)} ({fmt(now)} + 15 min.)")


def canonical_query(raw_query: str, *, plus_is_space: bool = True) -> str:
    """SigV4's canonical query: every name and value decoded, re-encoded (RFC 3986), sorted."""
    decode = unquote_plus if plus_is_space else unquote
    pairs = []
    for pair in raw_query.split("&"):
        if not pair:
            continue
        name, _, value = pair.partition("=")
        pairs.append((quote(decode(name), safe=_UNRESERVED), quote(decode(value), safe=_UNRESERVED)))
    return "&".join(f"{n}={v}" for n, v in sorted(pairs))


def _canonical_query_candidates(raw_query: str) -> Iterable[str]:
    # A literal '+' is ambiguous on the wire: form encoding (requests' params) means a space, RFC 3986
    # signers (botocore over a prepared URL) sign it as '+'. The client signed one of the two readings.
    first = canonical_query(raw_query, plus_is_space=True)
    yield first
    if "+" in raw_query:
        second = canonical_query(raw_query, plus_is_space=False)
        if second != first:
            yield second


def _sign(request: ArrivedRequest, auth: _Authorization, principal: Principal, amz_date: str, query: str) -> tuple[str, str, str]:
    """(signature, canonical request, string to sign), by SigV4's rules as botocore's SigV4Auth applies
    them for a non-S3 service (tests/unit/test_sigv4.py holds it to requests-aws4auth and botocore)."""
    signed = set(auth.signed_headers)
    values: dict[str, list[str]] = {}
    for name, value in request.headers:
        lname = name.lower()
        if lname in signed:
            values.setdefault(lname, []).append(value)
    names = sorted(values)
    # Trimall: surrounding white space dropped, runs of it made one space; repeated headers joined by ','.
    canonical_headers = "".join(f"{n}:{','.join(' '.join(v.split()) for v in values[n])}\n" for n in names)
    # The payload line: the signed x-amz-content-sha256 (already checked equal to the body's hash) or,
    # when the client did not sign one, the hash of the body that arrived.
    declared = values.get("x-amz-content-sha256")
    payload = declared[0] if declared else hashlib.sha256(request.body).hexdigest()
    # The path twice URI-encoded (as it arrived, then quoted again), dot segments resolved.
    path = quote(normalize_url_path(request.raw_path), safe="/~")
    canonical_request = f"{request.method.upper()}\n{path}\n{query}\n{canonical_headers}\n{';'.join(names)}\n{payload}"
    scope = f"{auth.date}/{auth.region}/{auth.service}/{TERMINATOR}"
    string_to_sign = f"{ALGORITHM}\n{amz_date}\n{scope}\n{hashlib.sha256(canonical_request.encode('utf-8')).hexdigest()}"
    key = _signing_key(principal.secret_access_key, amz_date[:8], auth.region, auth.service)
    return hmac.new(key, string_to_sign.encode("utf-8"), hashlib.sha256).hexdigest(), canonical_request, string_to_sign


def _signing_key(secret: str, day: str, region: str, service: str) -> bytes:
    # Four HMACs that depend only on the secret, the day, the region and the service: kept, as SigV4
    # intends signers to keep them.
    cache_key = (secret, day, region, service)
    key = _signing_keys.get(cache_key)
    if key is None:
        key = ("AWS4" + secret).encode("utf-8")
        for part in (day, region, service, TERMINATOR):
            key = hmac.new(key, part.encode("utf-8"), hashlib.sha256).digest()
        if len(_signing_keys) >= _SIGNING_KEYS_KEPT:
            _signing_keys.clear()  # a handful of principals x days: clearing now and then is enough
        _signing_keys[cache_key] = key
    return key


_SIGNING_KEYS_KEPT = 256
_signing_keys: dict[tuple[str, str, str, str], bytes] = {}
