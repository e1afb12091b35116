"""In-process calls from local mode's own boto3 clients to the emulated AWS, skipping HTTP.

The API handler, the lifecycle handlers and the background loops all run in the `trainplane up`
process, next to moto's backends. Over HTTP each of their calls is a boto3 request sent through a
socket to ThreadedMotoServer, parsed by werkzeug/Flask and routed by moto: ~60% of the CPU of a
`GET /jobs/{id}` before this module (docs/BENCHMARKS.md). Here a botocore `before-send` handler hands
the signed request straight to the moto response class that the server would have routed it to
(moto's own `mock_aws` does the same with its BotocoreStubber) and returns moto's answer as the HTTP
response. Same backends, same moto code from the response class down, so moto_hooks' locks and
journal see every write exactly as they do over HTTP.

One call skips botocore too: DynamoDB `GetItem`, the read behind every `GET /jobs/{id}` and most
lifecycle steps. Through botocore it costs ~2.6 ms of CPU in-process (building, validating and
signing the request, moto parsing it and writing JSON, botocore parsing the JSON back), ~3.5x the
rest of the API handler's work for that route. DirectGetItem answers the plain form of the call
(TableName, Key, ConsistentRead) from moto's backend under moto_hooks' DynamoDB lock and hands back
what botocore would have parsed (the same AttributeValue JSON moto writes, blobs decoded); any other
form, any error, and any stored value of an unexpected shape go through the client's own method, so
errors are exactly moto's.

Only clients pointed at the emulated AWS's endpoint, and only the services in SERVICES, are
attached; anything else (the trainer subprocess, the SDK, other endpoints) keeps using HTTP. Pinned
to moto 5.2.5 like moto_hooks: tests/integration/test_moto_inprocess.py fails if routing changes.
"""

from __future__ import annotations

import base64
import logging
import re
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from botocore.awsrequest import AWSPreparedRequest, AWSResponse
from moto.core.botocore_stubber import MockRawResponse
from moto.core.exceptions import HTTPException
from moto.core.request import normalize_request
from moto.dynamodb.models import dynamodb_backends
from moto.dynamodb.models.dynamo_type import DynamoType
from moto.iam.models import get_account_id_from

from localmode import iam_calls, moto_hooks, moto_speedups

logger = logging.getLogger(__name__)

# Endpoint prefix (the client's service_model.endpoint_prefix) -> moto's backend name. The services
# on local mode's request paths; the rest are rare and keep HTTP.
SERVICES = {"dynamodb": "dynamodb", "s3": "s3", "states": "stepfunctions"}
DEFAULT_ACCOUNT_ID = "123456789012"


class InProcessAws:
    """`attach(service, client)`: route the client's requests to moto in this process (a client hook
    for functions.adapters.aws.add_client_hook)."""

    def __init__(self, endpoint_url: str, services: dict[str, str] | None = None) -> None:
        self.endpoint_url = endpoint_url.rstrip("/")
        self.services = dict(SERVICES if services is None else services)
        self._routes: dict[str, list[tuple[re.Pattern[str], Any]]] = {}
        self.calls = 0  # requests answered in-process (approximate under threads: it only informs)

    def attach(self, service: str, client: Any) -> bool:
        """True when the client now calls moto in-process; False for another endpoint or service."""
        endpoint = (client.meta.endpoint_url or "").rstrip("/")
        prefix = client.meta.service_model.endpoint_prefix
        if endpoint != self.endpoint_url or prefix not in self.services:
            return False
        region = client.meta.region_name
        routes = self._routes_for(prefix)

        def before_send(request: AWSPreparedRequest, **kwargs: Any) -> AWSResponse:
            return self._answer(request, prefix, region, routes)

        client.meta.events.register("before-send", before_send, unique_id=f"trainplane-inprocess-{id(self)}")
        if prefix == "dynamodb":
            # An instance attribute shadows the client class's generated method for this client only.
            client.get_item = DirectGetItem(client.get_item, region, _access_key_of(client))
        return True

    def _routes_for(self, prefix: str) -> list[tuple[re.Pattern[str], Any]]:
        routes = self._routes.get(prefix)
        if routes is None:
            import moto.backends as backends
            from moto.core.base_backend import BackendDict

            # The URL table is the same in every account and region; moto's stubber reads it this way.
            backend_dict = backends.get_backend(self.services[prefix])  # type: ignore[call-overload]
            if isinstance(backend_dict, BackendDict):
                regions = backend_dict[DEFAULT_ACCOUNT_ID]
                backend = regions["us-east-1"] if "us-east-1" in regions else regions["aws"]
            else:
                backend = backend_dict["global"]
            routes = [(re.compile(url), handler) for url, handler in backend.urls.items()]
            self._routes[prefix] = routes
        return routes

    def _answer(self, request: AWSPreparedRequest, prefix: str, region: str, routes: list[tuple[re.Pattern[str], Any]]) -> AWSResponse:
        parts = urlsplit(request.url)
        # The URL moto would see for this request in AWS (path-style for S3: the client's addressing).
        host = "s3.amazonaws.com" if prefix == "s3" else f"{prefix}.{region}.amazonaws.com"
        aws_url = f"https://{host}{parts.path}" + (f"?{parts.query}" if parts.query else "")
        clean_url = f"https://{host}{parts.path}"
        aws_request = AWSPreparedRequest(request.method, aws_url, request.headers, request.body, stream_output=False)
        handler = next((handler for pattern, handler in routes if pattern.match(clean_url)), None)
        if handler is None:
            return AWSResponse(request.url, 404, {}, MockRawResponse(f"no moto route for {clean_url}"))
        normalized = normalize_request(aws_request)
        try:
            status, headers, body = handler(normalized, normalized.raw_url, normalized.headers)
        except HTTPException as exc:
            status, headers, body = exc.code, exc.get_headers(), exc.get_body()
        except Exception:
            # What moto's server answers for a bug in moto: a 500 (botocore retries it, then raises).
            logger.exception("emulated AWS (in-process) failed on %s %s", request.method, clean_url)
            status, headers, body = 500, {}, b"Internal Server Error"
        self.calls += 1
        return AWSResponse(request.url, status, headers, MockRawResponse(body))


# --- DynamoDB GetItem without botocore ---------------------------------------------------------------

_GET_ITEM_PARAMS = frozenset({"TableName", "Key", "ConsistentRead"})
_KEY_KINDS = frozenset({"S", "N", "B"})


class DirectGetItem:
    """`client.get_item(**params)` answered from moto's DynamoDB backend in this process.

    The plain form only: TableName, a Key of S/N/B values, ConsistentRead (every read of moto's is
    consistent). Anything else (a projection, ReturnConsumedCapacity, a malformed parameter, an item
    value this path does not write exactly as moto does) and every error (no such table, a key that is
    not the table's) is handed to the client's own method, which answers it over moto's usual path.
    """

    def __init__(self, original: Callable[..., dict[str, Any]], region: str, access_key: str) -> None:
        self.original = original
        self.region = region
        self.access_key = access_key
        self.calls = 0  # answered directly (approximate under threads: it only informs)

    def __call__(self, **params: Any) -> dict[str, Any]:
        if not _plain_get_item(params):
            return self.original(**params)
        try:
            found, item = self._read(params["TableName"], params["Key"])
        except Exception:  # moto's error, as moto's own path raises it to the caller
            return self.original(**params)
        if not found:
            return self.original(**params)
        self.calls += 1
        iam_calls.record_direct("dynamodb", "GetItem", params, self.region)
        response: dict[str, Any] = {} if item is None else {"Item": item}
        request_id = str(uuid.uuid4())
        response["ResponseMetadata"] = {
            "RequestId": request_id,
            "HTTPStatusCode": 200,
            "HTTPHeaders": {"x-amzn-requestid": request_id, "content-type": "application/x-amz-json-1.0"},
            "RetryAttempts": 0,
        }
        return response

    def _read(self, table_name: str, key: dict[str, Any]) -> tuple[bool, dict[str, Any] | None]:
        """(True, the item as botocore parses it, or None) or (False, None): leave it to moto's path."""
        backend = dynamodb_backends[get_account_id_from(self.access_key)][self.region]
        # Under the lock: moto's update_item changes items in place, a reader must not see half of one.
        with moto_hooks.ddb_unit():
            table = backend.get_table(table_name)
            if not all(name in table.attribute_keys for name in key):
                return False, None  # moto's ProvidedKeyDoesNotExist, from its own path
            item = backend.get_item(table_name, key)
            if item is None:
                return True, None
            try:
                # Copied while locked: the answer shares nothing mutable with moto's item.
                return True, {name: _as_parsed(value) for name, value in item.attrs.items()}
            except moto_speedups.NotPlain:
                return False, None


def _plain_get_item(params: dict[str, Any]) -> bool:
    if not _GET_ITEM_PARAMS.issuperset(params) or not isinstance(params.get("TableName"), str):
        return False
    if not isinstance(params.get("ConsistentRead", False), bool):
        return False
    key = params.get("Key")
    if not isinstance(key, dict) or not key:
        return False
    for value in key.values():
        # One member, a key type, not empty (moto refuses an empty key value: its path says so).
        if not isinstance(value, dict) or len(value) != 1:
            return False
        ((kind, raw),) = value.items()
        if kind not in _KEY_KINDS or not raw or not isinstance(raw, str | bytes):
            return False
        if kind != "B" and not isinstance(raw, str):
            return False
    return True


def _as_parsed(value: Any) -> dict[str, Any]:
    """A stored value (moto's DynamoType) as botocore parses moto's answer for it.

    moto's answer is dynamo_to_dict (B/BS as bytes, base64 text decoded) written by its serializer
    (moto_speedups.attribute_value: S/N as they are, blobs base64) and read back by botocore (blobs
    decoded): so S, N, BOOL, NULL and string sets as stored, blobs as bytes, maps and lists walked.
    Anything else raises NotPlain, and the client's own method answers.
    """
    if not isinstance(value, DynamoType):
        raise moto_speedups.NotPlain
    kind, raw = value.type, value.value
    if kind == "S" or kind == "N":
        if type(raw) is not str:
            raise moto_speedups.NotPlain
        return {kind: raw}
    if kind == "M":
        return {"M": {k: _as_parsed(v) for k, v in raw.items()}}
    if kind == "L":
        return {"L": [_as_parsed(v) for v in raw]}
    if kind == "BOOL" or kind == "NULL":
        if type(raw) is not bool:
            raise moto_speedups.NotPlain
        return {kind: raw}
    if kind == "B":
        return {"B": _as_bytes(raw)}
    if kind == "SS" or kind == "NS":
        if type(raw) is not list or not all(type(v) is str for v in raw):
            raise moto_speedups.NotPlain
        return {kind: list(raw)}
    if kind == "BS" and type(raw) is list:
        return {"BS": [_as_bytes(v) for v in raw]}
    raise moto_speedups.NotPlain


def _as_bytes(raw: Any) -> bytes:
    if isinstance(raw, bytes):
        return raw
    if isinstance(raw, str):
        return base64.b64decode(raw)
    raise moto_speedups.NotPlain


def _access_key_of(client: Any) -> str:
    # moto picks the account from the signing key (a key it does not know: the default account).
    credentials = client._request_signer._credentials
    return str(credentials.get_frozen_credentials().access_key) if credentials is not None else ""
