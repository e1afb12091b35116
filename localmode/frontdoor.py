"""The local front door: what API Gateway (REST API, AWS_IAM on every method, Lambda proxy) does.

Per request: read it (10 MB cap, as API Gateway), verify SigV4 (sigv4.py), build the REST proxy event
with requestContext.identity of the verified principal, invoke the API handler in-process, and write
the proxy result back. The refusals and failures are API Gateway's: 403 with its messages, 413 for a
too-large body, 502 "Internal server error" when the handler raises or returns a malformed result.

The handler runs as ONE Lambda execution environment: one invocation at a time, as in AWS. That is not
only fidelity: Powertools' resolver keeps the current event on the app object, so two concurrent
invocations in one process would read each other's caller identity. Connections are concurrent
(keep-alive, any number of clients) on one asyncio loop; see FrontDoor for why the invocation runs
on the loop's thread.
"""

from __future__ import annotations

import asyncio
import base64
import errno
import json
import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from email.utils import formatdate
from http import HTTPStatus
from typing import Any, Protocol, cast
from urllib.parse import parse_qsl, unquote, urlsplit

from localmode.credentials import Principal
from localmode.sigv4 import ArrivedRequest, AuthError, verify

logger = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any], Any], Mapping[str, Any]]


class Site(Protocol):
    """Unsigned pages served beside the API (the dashboard): a response, or None for the API's requests."""

    def answer(self, request: ArrivedRequest, source_ip: str) -> tuple[int, list[tuple[str, str]], bytes] | None: ...


MAX_BODY_BYTES = 10 * 1024 * 1024  # API Gateway's payload limit
LAMBDA_TIMEOUT_MS = 30_000
STAGE = "local"
API_ID = "local"
FUNCTION_NAME = "trainplane-api"


class LambdaContext:
    """The parts of Lambda's context object that handlers and Powertools read."""

    def __init__(self, request_id: str, region: str, account_id: str) -> None:
        self.function_name = FUNCTION_NAME
        self.function_version = "$LATEST"
        self.invoked_function_arn = f"arn:aws:lambda:{region}:{account_id}:function:{FUNCTION_NAME}"
        self.memory_limit_in_mb = 512
        self.aws_request_id = request_id
        self.log_group_name = f"/aws/lambda/{FUNCTION_NAME}"
        self.log_stream_name = "local"
        self.identity = None
        self.client_context = None
        self._deadline = time.monotonic() + LAMBDA_TIMEOUT_MS / 1000

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def build_event(
    request: ArrivedRequest,
    principal: Principal,
    *,
    source_ip: str,
    account_id: str,
    request_id: str,
    received: datetime,
    cognito_provider: str | None = None,
) -> dict[str, Any]:
    """The API Gateway REST (v1) Lambda proxy event for a `/{proxy+}` resource."""
    headers: dict[str, str] = {}
    multi_headers: dict[str, list[str]] = {}
    for name, value in request.headers:
        headers[name] = value
        multi_headers.setdefault(name, []).append(value)
    # Headers API Gateway adds for the integration.
    for name, value in (("X-Forwarded-For", source_ip), ("X-Forwarded-Proto", "http")):
        if name not in headers:
            headers[name] = value
            multi_headers[name] = [value]
    query: dict[str, str] = {}
    multi_query: dict[str, list[str]] = {}
    for name, value in parse_qsl(request.raw_query, keep_blank_values=True):
        query[name] = value
        multi_query.setdefault(name, []).append(value)
    path = _decoded_path(request.raw_path)
    body, is_base64 = _event_body(request.body)
    resource = "/" if path == "/" else "/{proxy+}"
    return {
        "resource": resource,
        "path": path,
        "httpMethod": request.method,
        "headers": headers or None,
        "multiValueHeaders": multi_headers or None,
        "queryStringParameters": query or None,
        "multiValueQueryStringParameters": multi_query or None,
        "pathParameters": None if path == "/" else {"proxy": path.lstrip("/")},
        "stageVariables": None,
        "requestContext": {
            "resourceId": "local",
            "resourcePath": resource,
            "httpMethod": request.method,
            "extendedRequestId": request_id,
            "requestTime": received.strftime("%d/%b/%Y:%H:%M:%S +0000"),
            "requestTimeEpoch": int(received.timestamp() * 1000),
            "path": path,
            "accountId": account_id,
            "protocol": "HTTP/1.1",
            "stage": STAGE,
            "domainPrefix": API_ID,
            "domainName": headers.get("Host") or headers.get("host") or "",
            "requestId": request_id,
            "apiId": API_ID,
            "identity": {
                # A dashboard user (localmode/credentials.py new_dashboard_user): as API Gateway reports a
                # request signed with an identity pool's credentials.
                "cognitoIdentityPoolId": _pool_of(principal.cognito_identity_id),
                "cognitoIdentityId": principal.cognito_identity_id,
                "cognitoAuthenticationType": "authenticated" if principal.cognito_identity_id else None,
                "cognitoAuthenticationProvider": cognito_provider if principal.cognito_identity_id else None,
                "principalOrgId": None,
                "apiKey": None,
                "apiKeyId": None,
                "accountId": principal.arn.split(":")[4],
                "caller": principal.user_id,
                "user": principal.user_id,
                "userArn": principal.arn,
                "accessKey": principal.access_key_id,
                "sourceIp": source_ip,
                "userAgent": headers.get("User-Agent") or headers.get("user-agent"),
            },
        },
        "body": body,
        "isBase64Encoded": is_base64,
    }


def _pool_of(identity_id: str | None) -> str | None:
    return None if identity_id is None else identity_id.split(":", 1)[0] + ":local-dashboard"


def _decoded_path(raw_path: str) -> str:
    # API Gateway hands the integration the URL-decoded path.
    return unquote(raw_path) or "/"


def _event_body(raw: bytes) -> tuple[str | None, bool]:
    if not raw:
        return None, False
    try:
        return raw.decode("utf-8"), False
    except UnicodeDecodeError:
        return base64.b64encode(raw).decode(), True


class PortInUse(RuntimeError):
    pass


class FrontDoor:
    """An HTTP/1.1 server on host:port in front of `handler`.

    The port is bound at construction (a busy port fails fast, before anything slow has run); requests
    are served from start(), which may also name the handler if it was not known yet. One asyncio loop
    on one thread reads every connection, verifies, invokes and writes: the invocation runs on that
    thread, so a request costs no hand-over between threads (under the GIL each one was a wait), and
    one invocation at a time holds by construction (the lock stays for callers of handle()).
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        principals: list[Principal],
        region: str,
        account_id: str,
        handler: Handler | None = None,
        site: Site | None = None,
    ) -> None:
        self._keys = {p.access_key_id: p for p in principals}
        # A dashboard user's cognitoAuthenticationProvider by principal name (localmode/deploy/user_pool.py).
        self.cognito_providers: dict[str, str] = {}
        self._site = site  # the dashboard's pages (local/dashboard.py), answered before the API
        self._handler = handler
        self._invoke_lock = threading.Lock()  # one execution environment
        self.region = region
        self.account_id = account_id
        self._inflight = 0
        self._connections: set[_Connection] = set()
        self._closing = False
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            # socketserver's default backlog of 5 reset bursts of new connections (20 clients at once).
            self._socket = socket.create_server((host, port), family=family, backlog=1024, reuse_port=False)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise PortInUse(f"port {port} on {host} is in use: pick another with --port (0 picks a free one)") from exc
            raise
        self._socket.setblocking(False)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._socket.getsockname()[1])

    def start(self, handler: Handler | None = None) -> None:
        if handler is not None:
            self._handler = handler
        if self._handler is None:
            raise ValueError("FrontDoor.start: no handler to serve")
        loop = asyncio.new_event_loop()
        ready = threading.Event()
        failed: list[BaseException] = []

        def serve() -> None:
            asyncio.set_event_loop(loop)
            try:
                self._server = loop.run_until_complete(loop.create_server(lambda: _Connection(self), sock=self._socket))
            except BaseException as exc:  # reported to start()'s caller
                failed.append(exc)
                ready.set()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.close()

        self._loop = loop
        self._thread = threading.Thread(target=serve, name="front-door", daemon=True)
        self._thread.start()
        ready.wait()
        if failed:
            raise failed[0]

    def stop(self, drain_seconds: float = 10.0) -> None:
        """Stop accepting, let the requests in flight finish (their writes are already durable)."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or not thread.is_alive():
            self._socket.close()
            return
        done = threading.Event()

        def begin_closing() -> None:
            self._closing = True
            if self._server is not None:
                self._server.close()
            deadline = time.monotonic() + drain_seconds

            def finish_when_drained() -> None:
                if self._inflight and time.monotonic() < deadline:
                    loop.call_later(0.05, finish_when_drained)
                    return
                for connection in list(self._connections):
                    connection.close()
                loop.stop()
                done.set()

            finish_when_drained()

        loop.call_soon_threadsafe(begin_closing)
        done.wait(drain_seconds + 5)
        thread.join(5)
        self._socket.close()

    # --- one request ---------------------------------------------------------------------------

    def handle(self, request: ArrivedRequest, source_ip: str) -> tuple[int, list[tuple[str, str]], bytes]:
        if self._site is not None and (page := self._site.answer(request, source_ip)) is not None:
            return page
        request_id = str(uuid.uuid4())
        received = datetime.now(UTC)
        try:
            principal = verify(request, self._keys.get, region=self.region)
        except AuthError as exc:
            return _error(exc.status, exc.message, request_id, error_type=exc.error_type)
        event = build_event(
            request,
            principal,
            source_ip=source_ip,
            account_id=self.account_id,
            request_id=request_id,
            received=received,
            cognito_provider=self.cognito_providers.get(principal.name),
        )
        try:
            assert self._handler is not None  # start() refuses to serve without one
            with self._invoke_lock:
                result = self._handler(event, LambdaContext(request_id, self.region, self.account_id))
            return _proxy_response(result, request_id)
        except Exception:
            # API Gateway answers 502 when the integration fails; the details go to the (local) logs.
            logger.exception("API handler failed on %s %s (request %s)", request.method, request.raw_path, request_id)
            return _error(502, "Internal server error", request_id)


class _BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class _Connection(asyncio.Protocol):
    """One client connection: HTTP/1.1 with keep-alive and pipelining, Content-Length or chunked bodies."""

    def __init__(self, door: FrontDoor) -> None:
        self.door = door
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.source_ip = ""
        self.continued = False  # "100 Continue" already sent for the request being read

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        self.source_ip = str(peer[0]) if peer else ""
        self.door._connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.door._connections.discard(self)
        self.transport = None

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while self.transport is not None and not self.transport.is_closing():
            try:
                parsed = _parse_request(self.buffer)
            except _BadRequest as exc:
                self._write(*_error(exc.status, exc.message, str(uuid.uuid4())), head_only=False, close=True)
                return
            if parsed is None:
                self._maybe_continue()
                return
            method, target, version, headers, body, consumed = parsed
            del self.buffer[:consumed]
            self.continued = False
            self._serve(method, target, version, headers, body)

    def _maybe_continue(self) -> None:
        # A client that sent `Expect: 100-continue` waits for this before it sends the body.
        if self.continued or self.transport is None:
            return
        head_end = self.buffer.find(b"\r\n\r\n")
        if head_end >= 0 and b"100-continue" in bytes(self.buffer[:head_end]).lower():
            self.continued = True
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def _serve(self, method: str, target: str, version: str, headers: list[tuple[str, str]], body: bytes) -> None:
        door = self.door
        door._inflight += 1
        try:
            parts = urlsplit(target)
            request = ArrivedRequest(method, parts.path or "/", parts.query, headers, body)
            status, response_headers, payload = door.handle(request, self.source_ip)
        finally:
            door._inflight -= 1
        connection = ",".join(v for k, v in headers if k.lower() == "connection").lower()
        keep_alive = "keep-alive" in connection if version == "HTTP/1.0" else "close" not in connection
        self._write(status, response_headers, payload, head_only=method == "HEAD", close=not keep_alive or door._closing)

    def _write(self, status: int, headers: list[tuple[str, str]], payload: bytes, *, head_only: bool, close: bool) -> None:
        if self.transport is None:
            return
        lines = [f"HTTP/1.1 {status} {_reason(status)}", f"Server: {SERVER_NAME}", f"Date: {formatdate(usegmt=True)}"]
        lines += [f"{name}: {value}" for name, value in headers]
        lines.append(f"Content-Length: {len(payload)}")
        if close:
            lines.append("Connection: close")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace")
        # One write: head and body leave together (no Nagle wait between them; asyncio sets TCP_NODELAY).
        self.transport.write(head if head_only else head + payload)
        if close:
            self.transport.close()


SERVER_NAME = "trainplane-local"
MAX_HEAD_BYTES = 64 * 1024  # request line + headers
_Parsed = tuple[str, str, str, list[tuple[str, str]], bytes, int]


def _parse_request(buffer: bytearray) -> _Parsed | None:
    """One whole request from the start of `buffer`, or None while more bytes are needed.

    Returns (method, target, version, headers, body, bytes consumed); _BadRequest for what no
    server could read (API Gateway answers those 400, and 413 past its 10 MB payload limit).
    """
    head_end = buffer.find(b"\r\n\r\n")
    if head_end < 0:
        if len(buffer) > MAX_HEAD_BYTES:
            raise _BadRequest(431, "Request Header Fields Too Large")
        return None
    head = bytes(buffer[:head_end]).decode("latin-1")
    request_line, _, header_block = head.partition("\r\n")
    words = request_line.split()
    if len(words) != 3 or not words[2].startswith("HTTP/1."):
        raise _BadRequest(400, "Bad request line")
    method, target, version = words
    headers: list[tuple[str, str]] = []
    for line in header_block.split("\r\n") if header_block else ():
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise _BadRequest(400, "Malformed header line")
        headers.append((name, value.strip()))
    body_start = head_end + 4
    encoding = ",".join(v for k, v in headers if k.lower() == "transfer-encoding").lower()
    if "chunked" in encoding:
        chunked = _chunked_body(buffer, body_start)
        if chunked is None:
            return None
        body, end = chunked
        return method, target, version, headers, body, end
    lengths = [v for k, v in headers if k.lower() == "content-length"]
    try:
        length = int(lengths[0]) if lengths else 0
        if length < 0 or len(set(lengths)) > 1:
            raise ValueError
    except ValueError:
        raise _BadRequest(400, "Invalid Content-Length") from None
    if length > MAX_BODY_BYTES:
        raise _BadRequest(413, "Request Too Long")
    if len(buffer) < body_start + length:
        return None
    return method, target, version, headers, bytes(buffer[body_start : body_start + length]), body_start + length


def _chunked_body(buffer: bytearray, start: int) -> tuple[bytes, int] | None:
    """(body, end) once the whole chunked body is in `buffer`, else None.

    Called again for every read while the body arrives: it only finds chunk boundaries (no copying)
    until the last chunk is there, then copies the chunks once.
    """
    spans: list[tuple[int, int]] = []
    total = 0
    position = start
    while True:
        line_end = buffer.find(b"\r\n", position)
        if line_end < 0:
            return None
        try:
            size = int(bytes(buffer[position:line_end]).split(b";")[0].strip() or b"0", 16)
        except ValueError:
            raise _BadRequest(400, "Invalid chunk size") from None
        position = line_end + 2
        if size == 0:
            # Trailers (ignored) up to the empty line that ends the body.
            while True:
                line_end = buffer.find(b"\r\n", position)
                if line_end < 0:
                    return None
                empty = line_end == position
                position = line_end + 2
                if empty:
                    return b"".join(bytes(buffer[a:b]) for a, b in spans), position
        total += size
        if total > MAX_BODY_BYTES:
            raise _BadRequest(413, "Request Too Long")
        if len(buffer) < position + size + 2:
            return None
        spans.append((position, position + size))
        position += size + 2


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


def _error(status: int, message: str, request_id: str, *, error_type: str | None = None) -> tuple[int, list[tuple[str, str]], bytes]:
    headers = [("Content-Type", "application/json"), ("x-amzn-RequestId", request_id)]
    if error_type:
        headers.append(("x-amzn-ErrorType", error_type))
    return status, headers, json.dumps({"message": message}).encode()


def _proxy_response(result: Mapping[str, Any], request_id: str) -> tuple[int, list[tuple[str, str]], bytes]:
    """The Lambda proxy result as HTTP; malformed results are API Gateway's 502."""
    if not isinstance(result, Mapping) or not isinstance(result.get("statusCode"), int):
        raise ValueError(f"malformed Lambda proxy response: {str(result)[:200]}")
    headers: list[tuple[str, str]] = []
    multi = result.get("multiValueHeaders") or {}
    single = result.get("headers") or {}
    for name, values in multi.items():
        headers += [(name, str(v)) for v in values]
    headers += [(name, str(v)) for name, v in single.items() if name not in multi]
    lower = {name.lower() for name, _ in headers}
    headers = [(n, v) for n, v in headers if n.lower() not in ("content-length", "transfer-encoding", "connection")]
    if "content-type" not in lower:
        headers.append(("Content-Type", "application/json"))  # API Gateway's default
    if "x-amzn-requestid" not in lower:
        headers.append(("x-amzn-RequestId", request_id))
    body = result.get("body") or ""
    payload = base64.b64decode(body) if result.get("isBase64Encoded") else str(body).encode()
    return int(result["statusCode"]), headers, payload
