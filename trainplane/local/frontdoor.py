"""The local front door: what API Gateway (REST API, AWS_IAM on every method, Lambda proxy) does.

Per request: read it (10 MB cap, as API Gateway), verify SigV4 (sigv4.py), build the REST proxy event
with requestContext.identity of the verified principal, invoke the API handler in-process, and write
the proxy result back. The refusals and failures are API Gateway's: 403 with its messages, 413 for a
too-large body, 502 "Internal server error" when the handler raises or returns a malformed result.

The handler runs as ONE Lambda execution environment: one invocation at a time, as in AWS. That is not
only fidelity: Powertools' resolver keeps the current event on the app object, so two concurrent
invocations in one process would read each other's caller identity. Reading, verification and writing
stay concurrent (one thread per connection, keep-alive).
"""

from __future__ import annotations

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
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from trainplane.local.credentials import Principal
from trainplane.local.sigv4 import ArrivedRequest, AuthError, verify

logger = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any], Any], Mapping[str, Any]]

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
    request: ArrivedRequest, principal: Principal, *, source_ip: str, account_id: str, request_id: str, received: datetime
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
                "cognitoIdentityPoolId": None,
                "cognitoIdentityId": None,
                "cognitoAuthenticationType": None,
                "cognitoAuthenticationProvider": None,
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


class _Server(ThreadingHTTPServer):
    # socketserver's default listen backlog is 5: a burst of new connections (20 clients at once) would
    # be reset by the kernel before a thread could accept them.
    request_queue_size = 1024
    daemon_threads = True


class _Server6(_Server):
    address_family = socket.AF_INET6


class PortInUse(RuntimeError):
    pass


class FrontDoor:
    """A threaded HTTP server on host:port in front of `handler`.

    The port is bound at construction (a busy port fails fast, before anything slow has run); requests
    are served from start(), which may also name the handler if it was not known yet.
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
    ) -> None:
        self._keys = {p.access_key_id: p for p in principals}
        self._handler = handler
        self._invoke_lock = threading.Lock()  # one execution environment
        self.region = region
        self.account_id = account_id
        self._inflight = 0
        self._inflight_cv = threading.Condition()
        server_class = _Server6 if ":" in host else _Server
        try:
            self._server = server_class((host, port), self._request_handler_class())
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise PortInUse(f"port {port} on {host} is in use: pick another with --port (0 picks a free one)") from exc
            raise
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self, handler: Handler | None = None) -> None:
        if handler is not None:
            self._handler = handler
        if self._handler is None:
            raise ValueError("FrontDoor.start: no handler to serve")
        # A short poll interval: shutdown() waits for the serve loop to notice.
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.1,), name="front-door", daemon=True)
        self._thread.start()

    def stop(self, drain_seconds: float = 10.0) -> None:
        """Stop accepting, let the requests in flight finish (their writes are already durable)."""
        if self._thread is not None:  # shutdown() would wait forever for a loop that never ran
            self._server.shutdown()
        self._server.server_close()
        deadline = time.monotonic() + drain_seconds
        with self._inflight_cv:
            while self._inflight and time.monotonic() < deadline:
                self._inflight_cv.wait(0.1)

    # --- one request ---------------------------------------------------------------------------

    def handle(self, request: ArrivedRequest, source_ip: str) -> tuple[int, list[tuple[str, str]], bytes]:
        request_id = str(uuid.uuid4())
        received = datetime.now(UTC)
        try:
            principal = verify(request, self._keys.get, region=self.region)
        except AuthError as exc:
            return _error(exc.status, exc.message, request_id, error_type=exc.error_type)
        event = build_event(request, principal, source_ip=source_ip, account_id=self.account_id, request_id=request_id, received=received)
        try:
            assert self._handler is not None  # start() refuses to serve without one
            with self._invoke_lock:
                result = self._handler(event, LambdaContext(request_id, self.region, self.account_id))
            return _proxy_response(result, request_id)
        except Exception:
            # API Gateway answers 502 when the integration fails; the details go to the (local) logs.
            logger.exception("API handler failed on %s %s (request %s)", request.method, request.raw_path, request_id)
            return _error(502, "Internal server error", request_id)

    def _request_handler_class(self) -> type[BaseHTTPRequestHandler]:
        door = self

        class RequestHandler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive: clients reuse connections
            # TCP_NODELAY: the status line + headers and the body leave in two writes; with Nagle on,
            # the body waits for the client's delayed ACK of the headers, ~40 ms on every response.
            disable_nagle_algorithm = True
            server_version = "trainplane-local"

            def _serve(self) -> None:
                with door._inflight_cv:
                    door._inflight += 1
                try:
                    body = self._read_body()
                    if body is None:
                        return
                    parts = urlsplit(self.path)
                    request = ArrivedRequest(self.command, parts.path or "/", parts.query, list(self.headers.items()), body)
                    status, headers, payload = door.handle(request, self.client_address[0])
                    self._write(status, headers, payload)
                finally:
                    with door._inflight_cv:
                        door._inflight -= 1
                        door._inflight_cv.notify_all()

            def _read_body(self) -> bytes | None:
                if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                    return self._read_chunked()
                try:
                    length = int(self.headers.get("Content-Length") or 0)
                except ValueError:
                    self._write(*_error(400, "Invalid Content-Length", str(uuid.uuid4())))
                    return None
                if length > MAX_BODY_BYTES:
                    self._write(*_error(413, "Request Too Long", str(uuid.uuid4())), close=True)
                    return None
                return self.rfile.read(length) if length else b""

            def _read_chunked(self) -> bytes | None:
                chunks: list[bytes] = []
                total = 0
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass  # trailers
                        return b"".join(chunks)
                    total += size
                    if total > MAX_BODY_BYTES:
                        self._write(*_error(413, "Request Too Long", str(uuid.uuid4())), close=True)
                        return None
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()

            def _write(self, status: int, headers: list[tuple[str, str]], payload: bytes, close: bool = False) -> None:
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                if close:
                    self.send_header("Connection", "close")
                    self.close_connection = True
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                logger.debug("front door %s: " + format, self.client_address[0], *args)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _serve

        return RequestHandler


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
