"""The resolver the API Lambda uses: Powertools' REST resolver with the edge made strict.

Whatever API Gateway hands over is screened before a route sees it, so that no input ends in a 5xx:
- a body that is not JSON (`Content-Type` other than application/json or `*+json`) is 415, never
  parsed as a form or multipart upload (Powertools would try, and crash on a multipart without boundary);
- a body that is not UTF-8, or base64 that is not base64, is 400;
- JSON is parsed strictly: `NaN`/`Infinity` (which Python's json accepts and JSON does not) and
  documents nested deeper than MAX_JSON_DEPTH are 400 (a deep one overflowed the parser's stack: 500);
- a method the path does not have is 405 with an `Allow` header, not 404.
The refusals are exceptions mapped in errors.py like every other error. The same resolver serves the
cloud (behind API Gateway) and local mode (behind trainplane.local.frontdoor), so both hold.
"""

from __future__ import annotations

import base64
import binascii
import json
from functools import cached_property
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver
from aws_lambda_powertools.event_handler.api_gateway import ResponseBuilder, Route
from aws_lambda_powertools.event_handler.middlewares.openapi_validation import OpenAPIRequestValidationMiddleware
from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEvent

from functions.handlers.errors import BadRequest, MethodNotAllowed, UnsupportedMediaType

# No request of this API nests deeper than ~8 levels; 32 is DynamoDB's own limit for nested attributes.
MAX_JSON_DEPTH = 32


def parse_json(text: str | bytes | bytearray) -> Any:
    """Strict JSON: no NaN/Infinity, at most MAX_JSON_DEPTH levels; BadRequest (400) otherwise.

    Malformed JSON still raises json.JSONDecodeError, which the validation middleware turns into its
    json_invalid error (400 in errors.py).
    """
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise BadRequest(f"the JSON body is nested too deeply (at most {MAX_JSON_DEPTH} levels)", kind="json_too_deep") from None
    except json.JSONDecodeError:
        raise
    except ValueError as exc:  # e.g. an integer of more than 4300 digits (Python's int conversion limit)
        raise BadRequest(f"malformed JSON body: {exc}", kind="json_invalid") from None
    if _deeper_than(value, MAX_JSON_DEPTH):
        raise BadRequest(f"the JSON body is nested too deeply (at most {MAX_JSON_DEPTH} levels)", kind="json_too_deep")
    return value


def _refuse_constant(name: str) -> Any:
    raise BadRequest(f"malformed JSON body: {name} is not a JSON number", kind="json_invalid")


def _deeper_than(value: Any, limit: int) -> bool:
    # Iterative: the document may be as deep as the parser allowed, deeper than Python's stack.
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def is_json_media_type(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


class EdgeEvent(APIGatewayProxyEvent):
    """The REST proxy event, whose body decodes to text or is refused (400), never a UnicodeDecodeError."""

    @cached_property
    def decoded_body(self) -> str | None:
        body = self.body
        if not body or not self.is_base64_encoded:
            return body
        try:
            raw = base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError):
            raise BadRequest("the body is marked base64-encoded but is not base64", kind="body_invalid") from None
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadRequest(f"the body is not UTF-8 text (invalid byte at offset {exc.start})", kind="body_not_utf8") from None


class JsonBodyValidation(OpenAPIRequestValidationMiddleware):
    """Powertools' request validation, reading bodies as JSON only (415 for any other media type)."""

    def _get_body(self, app: Any) -> dict[str, Any]:
        event = app.current_event
        content_type = event.headers.get("content-type", "") or ""
        if event.body and content_type.strip() and not is_json_media_type(content_type):
            raise UnsupportedMediaType(content_type)
        return self._parse_json_data(app)


class EdgeResolver(APIGatewayRestResolver):
    def __init__(self) -> None:
        super().__init__(enable_validation=True, json_body_deserializer=parse_json)
        # Replaces the validation middleware Powertools built in __init__ (it runs first on every route).
        self._request_validation_middleware = JsonBodyValidation()

    def _to_proxy_event(self, event: dict[str, Any]) -> EdgeEvent:
        return EdgeEvent(event, self._json_body_deserializer)

    def allowed_methods(self, path: str) -> list[str]:
        """The methods some route serves at `path` (empty: no such path)."""
        routes = self._static_routes + self._dynamic_routes
        return sorted({route.method.upper() for route in routes if route.rule.match(path)})

    def _handle_not_found(self, method: str, path: str) -> ResponseBuilder:
        allowed = self.allowed_methods(path)
        if not allowed or (self._cors and method == "OPTIONS"):
            return super()._handle_not_found(method=method, path=path)

        def refuse() -> None:
            raise MethodNotAllowed(method, allowed)

        # As Powertools does for a 404: a route of its own, so middlewares and exception handlers run.
        route = Route(rule=self._compile_regex(r".*"), method=method, path=path, func=refuse, cors=self._cors_enabled, compress=False)
        self.append_context(_route=route, _path=path)
        return self._call_route(route=route, route_arguments={})
