"""In-process calls from local mode's own boto3 clients to the emulated AWS, skipping HTTP.

The API handler, the lifecycle handlers and the background loops all run in the `trainplane up`
process, next to moto's backends. Over HTTP each of their calls is a boto3 request sent through a
socket to ThreadedMotoServer, parsed by werkzeug/Flask and routed by moto: ~60% of the CPU of a
`GET /jobs/{id}` before this module (docs/BENCHMARKS.md). Here a botocore `before-send` handler hands
the signed request straight to the moto response class that the server would have routed it to
(moto's own `mock_aws` does the same with its BotocoreStubber) and returns moto's answer as the HTTP
response. Same backends, same moto code from the response class down, so moto_hooks' locks and
journal see every write exactly as they do over HTTP.

Only clients pointed at the emulated AWS's endpoint, and only the services in SERVICES, are
attached; anything else (the trainer subprocess, the SDK, other endpoints) keeps using HTTP. Pinned
to moto 5.2.5 like moto_hooks: tests/integration/test_moto_inprocess.py fails if routing changes.
"""

from __future__ import annotations

import logging
import re
from typing import Any
from urllib.parse import urlsplit

from botocore.awsrequest import AWSPreparedRequest, AWSResponse
from moto.core.botocore_stubber import MockRawResponse
from moto.core.exceptions import HTTPException
from moto.core.request import normalize_request

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
