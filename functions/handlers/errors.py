"""Every error the API returns, mapped in ONE place to {"message", "errors": [{"field", "message", "type"}]}.

400 malformed JSON (or not UTF-8, NaN/Infinity, nested too deeply); 403 no caller identity; 404 unknown
job (also another principal's) or route; 405 a method the path does not have (with `Allow`); 409 a
status that does not allow the action, or a lost race; 413 a job too large to store; 415 a body that is
not JSON; 422 schema or domain validation naming the field; 503 the lifecycle engine, or the user pool
that decides a dashboard user's team, could not be reached (the latter with Retry-After); 500 anything
else, without internals (never an input's fault: edge.py screens what arrives).
Each route's OpenAPI entry declares exactly the codes it returns (`responses()` below).

The rules every router follows live here too, once: `principal_of` (who the caller is, through
`signed_caller`, the only reader of the request's identity), `reject_unknown_params` (422 naming a query
parameter the route does not know), `responses` (the documented codes, worded per router), a listing's
page parameters (`PageLimit`, `PageToken`), and `ResourceRules`, which binds them for the router of one
kind of resource (a policy, a sweep, a webhook) so that its routes say only what is theirs.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, cast

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestUnsupportedContentType, RequestValidationError
from aws_lambda_powertools.event_handler.openapi.params import Query

from functions.errors import (
    AdminOnly,
    BudgetNotFound,
    CheckpointNotFound,
    ConcurrentModification,
    DomainError,
    GroupsUnavailable,
    IllegalTransition,
    InvalidRequest,
    JobNotFound,
    PolicyNotFound,
    RunActive,
    RunNotFound,
    ShapeNotFound,
    SweepNotFound,
    TeamNotFound,
    TooLarge,
    Unsupported,
    WebhookNotFound,
)
from functions.service.controls import WorkflowUnavailable
from schemas.api import ErrorResponse

if TYPE_CHECKING:
    from aws_lambda_powertools import Logger
    from aws_lambda_powertools.event_handler.api_gateway import Router
    from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEvent

    from functions.service.feature_ports import CognitoUser
    from functions.service.principal import Principal

logger = logging.getLogger(__name__)

# Where pydantic's error location starts with where the value came from; the field path follows.
_SOURCES = {"body", "query", "path", "header", "cookie"}
# Every error answer is bounded, whatever the input (Lambda answers at most 6 MB; API Gateway turns more
# into a 502): at most MAX_ERRORS errors, each field and message cut to MAX_TEXT characters, and the
# summary message likewise. 5,000 unknown keys once made a 6.4 MB 422.
MAX_ERRORS = 20
MAX_TEXT = 1024


class Forbidden(DomainError):
    """No IAM caller in the request context (API Gateway with AWS_IAM auth always sets one)."""


def signed_caller(router: Router) -> tuple[str, CognitoUser | None]:
    """The caller of the request a route is serving: THE one place a route's identity is read.

    An IAM user's or role's ARN; for the dashboard's Cognito sign-ins (one role, one session name for
    everyone) the role session named by the person's identity id (functions/service/principal.py
    caller_arn), with the user pool and sub API Gateway names them by (what their Cognito groups, and so
    their team, are looked up by: docs/TEAMS.md). 403 when there is none. tests/unit/test_route_rules.py
    fails on any other reader, and tests/integration/test_every_route_principals.py walks every route as
    four callers.
    """
    from functions.service.principal import caller_arn, cognito_user_of

    identity = cast("APIGatewayProxyEvent", router.current_event).request_context.identity
    arn = caller_arn(identity.user_arn, identity.cognito_identity_id, identity.cognito_authentication_type)
    if not arn:
        raise Forbidden("no IAM caller in the request context: the API requires AWS_IAM (SigV4) authorization")
    # Only an authenticated identity-pool session is a dashboard user (caller_arn renamed it by its identity).
    dashboard = arn != identity.user_arn
    return arn, cognito_user_of(identity.cognito_authentication_provider) if dashboard else None


def caller_of(router: Router) -> str:
    """The caller's principal ARN (signed_caller's); 403 without one."""
    return signed_caller(router)[0]


def principal_of(router: Router) -> Principal:
    """The principal every route acts as (its caller, whether it is an admin, a dashboard user's user-pool
    identity); 403 without a caller."""
    from functions import composition  # the composition loads adapters lazily; errors.py stays import-light

    arn, cognito = signed_caller(router)
    return composition.job_service().principal(arn, cognito)


def reject_unknown_params(router: Router, known: frozenset[str], prefix: str | None = None) -> None:
    """422 naming a query parameter the route does not know (a misspelt ?staus=QUEUED would silently list
    everything); `prefix` admits a family of names (`labels.<key>`)."""
    for name in router.current_event.query_string_parameters or {}:
        if name not in known and not (prefix and name.startswith(prefix) and len(name) > len(prefix)):
            raise InvalidRequest(
                name, f"unknown query parameter; known: {', '.join(sorted(known))}" + (f", {prefix}<key>" if prefix else "")
            )


class BadRequest(DomainError):
    """Input that is not even well-formed (400)."""

    def __init__(self, message: str, *, kind: str = "bad_request") -> None:
        super().__init__(message)
        self.kind = kind


class UnsupportedMediaType(DomainError):
    """A body sent as something other than JSON (415)."""

    def __init__(self, content_type: str) -> None:
        super().__init__(f"the body must be JSON (Content-Type: application/json), not {content_type.split(';', 1)[0].strip()!r}")


class MethodNotAllowed(DomainError):
    """A method the path does not have (405, with the methods it has in `Allow`)."""

    def __init__(self, method: str, allowed: list[str]) -> None:
        super().__init__(f"{method} is not allowed here; allowed: {', '.join(allowed)}")
        self.allowed = allowed


class IdempotencyKeyReused(DomainError):
    """The Idempotency-Key was used before with a different body (422)."""

    def __init__(self) -> None:
        super().__init__("Idempotency-Key was already used with a different request body; use a new key for a new job")


class IdempotencyInProgress(DomainError):
    """The first request with this Idempotency-Key is still running (409)."""

    def __init__(self) -> None:
        super().__init__("a request with this Idempotency-Key is still being processed; retry shortly")


def error_response(
    status: int, message: str, errors: Iterable[Mapping[str, Any]] = (), headers: Mapping[str, str] | None = None
) -> Response:
    body = {"message": _short(message, 4 * MAX_TEXT), "errors": [_bounded(e) for e in itertools.islice(errors, MAX_ERRORS)]}
    return Response(status_code=status, content_type=content_types.APPLICATION_JSON, body=json.dumps(body), headers=dict(headers or {}))


def _short(text: str, limit: int = MAX_TEXT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _bounded(error: Mapping[str, Any]) -> dict[str, Any]:
    return {key: _short(value) if isinstance(value, str) else value for key, value in error.items()}


def field_path(loc: Iterable[Any]) -> str:
    """('body', 'training_config', 'base_model', 'model_id') -> 'training_config.base_model.model_id'."""
    parts = [str(p) for p in loc]
    if parts and parts[0] in _SOURCES:
        parts = parts[1:]
    return ".".join(parts) or "body"


def _validation_errors(errors: Iterable[Mapping[str, Any]]) -> list[dict[str, str]]:
    out = []
    for err in errors:
        message = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        kind = str(err.get("type", "invalid"))
        if kind == "extra_forbidden":
            message = "unknown field (not part of the schema)"
        elif kind == "missing" and str(err.get("loc", ("",))[0]) == "body" and len(err.get("loc", ())) == 1:
            message = "a JSON body is required"
        out.append({"field": field_path(err.get("loc", ())), "message": message, "type": kind})
    return out


def register(app: APIGatewayRestResolver, on_error: Callable[[int], None] | None = None) -> None:
    """Install the mapping on the resolver; the only place exceptions become HTTP responses.

    `on_error(status)` is called for every error answered (the API counts them as metrics).
    """

    def _error(status: int, message: str, errors: Iterable[Mapping[str, Any]] = (), headers: Mapping[str, str] | None = None) -> Response:
        if on_error is not None:
            on_error(status)
        return error_response(status, message, errors, headers)

    @app.exception_handler(RequestValidationError)
    def _schema(exc: RequestValidationError) -> Response:
        errors = exc.errors()  # each error's input is the body's own object, not a copy
        if any(e.get("type") == "json_invalid" for e in errors):
            detail = next((e.get("ctx", {}).get("error") for e in errors if e.get("type") == "json_invalid"), None)
            invalid = [{"field": "body", "message": "not valid JSON", "type": "json_invalid"}]
            return _error(400, f"malformed JSON body{': ' + str(detail) if detail else ''}", invalid)
        mapped = _validation_errors(errors[:MAX_ERRORS])
        summary = "; ".join(f"{e['field']}: {_short(e['message'], 512)}" for e in mapped[:5])
        if len(errors) > 5:
            listed = f"the first {MAX_ERRORS} are listed" if len(errors) > MAX_ERRORS else "all are listed"
            summary += f" (and {len(errors) - 5} more: {listed})"
        return _error(422, "invalid request: " + summary, mapped)

    @app.exception_handler(BadRequest)
    def _bad(exc: BadRequest) -> Response:
        return _error(400, str(exc), [{"field": "body", "message": str(exc), "type": exc.kind}])

    @app.exception_handler([UnsupportedMediaType, RequestUnsupportedContentType])
    def _media_type(exc: Exception) -> Response:
        message = str(exc) if isinstance(exc, UnsupportedMediaType) else "the body must be JSON (Content-Type: application/json)"
        return _error(415, message, [{"field": "Content-Type", "message": message, "type": "unsupported_media_type"}])

    @app.exception_handler(MethodNotAllowed)
    def _method(exc: MethodNotAllowed) -> Response:
        return _error(405, str(exc), headers={"Allow": ", ".join(exc.allowed)})

    @app.exception_handler(TooLarge)
    def _too_large(exc: TooLarge) -> Response:
        return _error(413, str(exc), [{"field": exc.field, "message": str(exc), "type": "too_large"}])

    @app.exception_handler([Forbidden, AdminOnly])
    def _forbidden(exc: DomainError) -> Response:
        return _error(403, str(exc))

    @app.exception_handler(
        [BudgetNotFound, JobNotFound, PolicyNotFound, ShapeNotFound, RunNotFound, SweepNotFound, TeamNotFound, WebhookNotFound]
    )
    def _not_found(exc: DomainError) -> Response:
        return _error(404, str(exc))

    @app.not_found
    def _no_route(exc: NotFoundError) -> Response:
        return _error(404, f"no route for {app.current_event.http_method} {app.current_event.path}")

    @app.exception_handler([IllegalTransition, ConcurrentModification, RunActive])
    def _conflict(exc: DomainError) -> Response:
        return _error(409, str(exc))

    @app.exception_handler(InvalidRequest)
    def _invalid(exc: InvalidRequest) -> Response:
        return _error(422, str(exc), [{"field": exc.field, "message": exc.message, "type": "invalid"}])

    @app.exception_handler(CheckpointNotFound)
    def _no_checkpoint(exc: CheckpointNotFound) -> Response:
        return _error(422, str(exc), [{"field": "checkpoint_id", "message": str(exc), "type": "not_found"}])

    @app.exception_handler(Unsupported)
    def _unsupported(exc: Unsupported) -> Response:
        return _error(422, str(exc), [{"field": "body", "message": str(exc), "type": "unsupported"}])

    @app.exception_handler(WorkflowUnavailable)
    def _unavailable(exc: WorkflowUnavailable) -> Response:
        return _error(503, str(exc))

    @app.exception_handler(GroupsUnavailable)
    def _no_groups(exc: GroupsUnavailable) -> Response:
        return _error(503, str(exc), headers={"Retry-After": str(exc.retry_after_seconds)})

    @app.exception_handler(IdempotencyKeyReused)
    def _reused_key(exc: IdempotencyKeyReused) -> Response:
        return _error(422, str(exc), [{"field": "Idempotency-Key", "message": str(exc), "type": "idempotency_mismatch"}])

    @app.exception_handler(IdempotencyInProgress)
    def _in_progress(exc: IdempotencyInProgress) -> Response:
        return _error(409, str(exc))

    @app.exception_handler(Exception)
    def _internal(exc: Exception) -> Response:
        logger.exception("unhandled error")
        return _error(500, "internal error; the request id in the logs has the details")


def _doc(description: str) -> dict[str, Any]:
    return {"description": description, "content": {content_types.APPLICATION_JSON: {"model": ErrorResponse}}}


ERROR_DOCS: dict[int, dict[str, Any]] = {
    400: _doc("Malformed JSON or an unreadable parameter"),
    403: _doc("Not signed, or signed by an unknown key (API Gateway IAM authorization)"),
    404: _doc("No such job (or it belongs to another principal)"),
    405: _doc("The path does not have this method; the `Allow` header lists those it has"),
    409: _doc("The job's status does not allow this action, or another request changed it first"),
    413: _doc("Too large: the job would not fit its database record (the message says the limit)"),
    415: _doc("The body is not JSON: send Content-Type application/json"),
    422: _doc("Invalid input: each error names its field"),
    500: _doc("Internal error"),
    503: _doc("The lifecycle engine, or the user pool that decides a dashboard user's team, could not be reached; retry later"),
}


# What a route that reads a JSON body can also answer: malformed (400), over API Gateway's 10 MB or the
# stored record's budget (413), not JSON (415).
BODY_ERRORS = (400, 413, 415)


def responses(
    status: int, description: str, *errors: int, content: bool = True, wording: Mapping[int, str] | None = None
) -> dict[int, Any]:
    """A route's OpenAPI `responses`: its success and exactly the error codes it can return.

    403 and 500 always; 405 always too: a method the path does not have is answered 405 with `Allow`,
    and OpenAPI can only say so on the operations the path does have. `wording` rewords an error's
    description for a router whose resource is not a job (a policy, a sweep, a run).
    """
    success: dict[str, Any] = {"description": description}
    if not content:
        success["content"] = {}  # e.g. 204: no body
    documented = {status: success, **{code: ERROR_DOCS[code] for code in sorted({403, 405, 500, *errors})}}
    for code, text in (wording or {}).items():
        if code in documented and code != status:
            documented[code] = _doc(text)
    return documented


# A listing's page, the same on every paged list route (jobs, policies, sweeps): at most `limit` items,
# then `next_token` (functions/catalog/page_tokens.py) for the next page.
PageLimit = Annotated[int, Query(ge=1, le=200)]
PageToken = Annotated[str | None, Query(max_length=2048)]
PAGE_PARAMS = frozenset({"limit", "next_token"})


def no_content() -> Response:
    """A 204's answer: no body (its route has no return annotation, so no response model)."""
    return Response(status_code=204, body="")


@dataclass(frozen=True)
class ResourceRules:
    """The rules above, bound once for the router of one kind of resource (a policy, a sweep, a webhook).

    `principal` is how each of its routes gets its caller (through `principal_of`), with the resource's id
    appended to the logs under `id_key` and unknown query parameters refused: those a route names in
    `params`, else the router's `params` (None: not checked). `responses` documents a route's codes in the
    router's `wording`. functions/handlers/collection.py declares the routes every such router has.
    """

    router: Router
    logger: Logger
    id_key: str
    wording: Mapping[int, str]
    params: frozenset[str] | None = None

    def principal(self, resource_id: str | None = None, *, params: frozenset[str] | None = None) -> Principal:
        if resource_id is not None:
            self.logger.append_keys(**{self.id_key: resource_id})
        principal = principal_of(self.router)
        known = self.params if params is None else params
        if known is not None:
            reject_unknown_params(self.router, known)
        return principal

    def responses(self, status: int, description: str, *errors: int, content: bool = True) -> dict[int, Any]:
        return responses(status, description, *errors, content=content, wording=self.wording)
