"""Errors the SDK raises: one class per kind of API answer, carrying the API's message and field errors.

The HTTP API answers every error with `{"message": ..., "errors": [...]}` (CONTRACTS.md). The classes
below keep both, so the CLI (and any script) can print exactly what the server said.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from schemas.api import FieldError


class TrainplaneError(Exception):
    """An error answer of the API, or a failure to reach it (status is None then)."""

    def __init__(self, status: int | None, message: str, errors: list[FieldError] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.errors: list[FieldError] = list(errors or [])

    def __str__(self) -> str:
        head = f"{self.status}: {self.message}" if self.status is not None else self.message
        if not self.errors:
            return head
        return head + "".join(f"\n  - {e.field}: {e.message}" for e in self.errors)


class ValidationFailed(TrainplaneError):
    """400/422: the request was invalid; `errors` names each bad field."""


class AuthError(TrainplaneError):
    """401/403: unsigned, wrongly signed, or not allowed."""


class NotFound(TrainplaneError):
    """404: no such job (also another principal's job)."""


class Conflict(TrainplaneError):
    """409: the job's status does not allow the action, or another request changed it first."""


class ServerError(TrainplaneError):
    """5xx: the control plane failed; the request may be retried."""


class ConnectionFailed(TrainplaneError):
    """The endpoint could not be reached at all (nothing listening, DNS, TLS)."""

    def __init__(self, message: str) -> None:
        super().__init__(None, message)


class EndpointNotConfigured(TrainplaneError):
    """No endpoint or credentials could be found (flag, environment, endpoint.json)."""

    def __init__(self, message: str) -> None:
        super().__init__(None, message)


class StaleEndpoint(EndpointNotConfigured):
    """A local endpoint.json whose `trainplane up` is gone (kill -9): nothing listens there any more."""


class WaitTimeout(TrainplaneError, TimeoutError):
    """A wait gave up: the job had not reached the wanted statuses in time (`job` is the last one seen)."""

    def __init__(self, job_id: str, last_status: str, timeout: float, wanted: list[str], *, job: Any = None, what: str = "") -> None:
        target = what or " or ".join(wanted)
        super().__init__(None, f"timed out after {timeout:g}s waiting for job {job_id} to reach {target}; last status {last_status}")
        self.job_id = job_id
        self.last_status = last_status
        self.timeout = timeout
        self.job = job


class JobFailed(TrainplaneError):
    """A wait ended because the job can no longer reach what was waited for: it FAILED, was CANCELLED,
    was PREEMPTED for good, or (waiting for completion) was PAUSED.

    `error_type` and `error_message` are the job's own; `last_log_lines` the end of its log (newest last).
    """

    def __init__(self, job: Any, last_log_lines: list[str] | None = None, *, why: str = "") -> None:
        status = str(getattr(job, "status", ""))
        self.job = job
        self.job_status = status
        self.job_id: str = str(getattr(job, "job_id", ""))
        self.error_type: str | None = str(job.error_type) if getattr(job, "error_type", None) else None
        self.error_message: str | None = getattr(job, "error_message", None)
        self.last_log_lines: list[str] = list(last_log_lines or [])
        detail = f": {self.error_type or ''} {self.error_message or ''}".rstrip() if (self.error_type or self.error_message) else ""
        super().__init__(None, f"job {self.job_id} is {status}{detail}{'; ' + why if why else ''}")

    def __str__(self) -> str:
        tail = "".join(f"\n  | {line}" for line in self.last_log_lines)
        return self.message + (f"\n  last log lines:{tail}" if tail else "")


_BY_STATUS: dict[int, type[TrainplaneError]] = {
    400: ValidationFailed,
    401: AuthError,
    403: AuthError,
    404: NotFound,
    409: Conflict,
    422: ValidationFailed,
}


def parse_field_errors(raw: Any) -> list[FieldError]:
    """Field errors from an error body; tolerant of pydantic's own shape ({loc, msg, type})."""
    if not isinstance(raw, list):
        return []
    out: list[FieldError] = []
    for item in raw:
        if isinstance(item, Mapping):
            field = item.get("field")
            if field is None and "loc" in item:
                loc = item.get("loc") or []
                field = ".".join(str(p) for p in loc if p != "body") or "body"
            message = item.get("message") or item.get("msg") or ""
            out.append(FieldError(field=str(field or ""), message=str(message), type=item.get("type")))
        else:
            out.append(FieldError(field="", message=str(item)))
    return out


def error_from_response(status: int, body: Any, reason: str = "") -> TrainplaneError:
    """The exception for one non-2xx answer; `body` is the decoded JSON (or raw text)."""
    message = ""
    errors: list[FieldError] = []
    if isinstance(body, Mapping):
        message = str(body.get("message") or body.get("Message") or "")
        errors = parse_field_errors(body.get("errors") if "errors" in body else body.get("detail"))
    elif isinstance(body, str):
        message = body.strip()[:500]
    if not message:
        message = reason or f"HTTP {status}"
    cls = _BY_STATUS.get(status, ServerError if status >= 500 else TrainplaneError)
    return cls(status, message, errors)
