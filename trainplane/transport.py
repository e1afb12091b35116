"""The SDK's calls without I/O, shared by `Client` (requests) and `AsyncClient` (httpx).

Every call of the SDK is written once, as a generator of *steps* (a signed request to send, a pause, a
credentials refresh) that returns the call's result; each client only performs the steps, with its own
HTTP library and its own sleep (`Client._run`, `AsyncClient._run`). So the retry policy, the waits
(trainplane/waits.py), the sweeps (trainplane/client_sweeps.py) and the signing exist once, and the two
clients cannot drift apart:

    def get_job(self, job_id):                      # an operation: a generator of steps
        return Job.model_validate((yield from self._request("GET", f"/jobs/{job_id}")))

    class Client:      get_job = synced(get_job)    # def get_job(self, job_id) -> Job
    class AsyncClient: get_job = asynced(get_job)   # async def get_job(self, job_id) -> Job

Errors of the transport (ConnectionFailed) are thrown into the generator at the step that failed, so an
operation handles them where it made the request (a wait polls again, a request retries).
"""

from __future__ import annotations

import functools
import json
import random
from collections.abc import Callable, Coroutine, Generator, Mapping
from dataclasses import dataclass
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar
from urllib.parse import quote, urlencode

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials, ReadOnlyCredentials

from trainplane.errors import TrainplaneError, error_from_response

SERVICE = "execute-api"
IDEMPOTENCY_HEADER = "Idempotency-Key"
# Throttling and gateway errors that a repeat may get past (API Gateway answers these under load).
RETRYABLE_STATUS = frozenset({429, 502, 503, 504})
RETRY_BASE_SECONDS = 0.25

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class Send:
    """Send this request, signed at sending time (the signature carries the time); answer with an Answer."""

    method: str
    url: str
    data: bytes | None
    headers: dict[str, str]


@dataclass(frozen=True)
class Sleep:
    seconds: float


@dataclass(frozen=True)
class Refresh:
    """Fetch the signing credentials again (a 403: rotated or expired keys)."""


@dataclass(frozen=True)
class Answer:
    status: int
    content: bytes
    reason: str


Step = Send | Sleep | Refresh
Steps = Generator[Step, Any, R]


class Requester(Protocol):
    """What an operation needs of a client: its request steps."""

    def _request(
        self, method: str, path: str, *, params: Mapping[str, Any] | None = None, body: Any = None, headers: Mapping[str, str] | None = None
    ) -> Steps[Any]: ...


def request_steps(
    endpoint: str,
    method: str,
    path: str,
    *,
    params: Mapping[str, Any] | None = None,
    body: Any = None,
    headers: Mapping[str, str] | None = None,
    max_retries: int = 0,
) -> Steps[Any]:
    """One API call: the decoded JSON body, or the API's error (trainplane/errors.py). Only what cannot do
    anything twice is repeated (reads, and a POST the server deduplicates by its Idempotency-Key), on a
    lost connection or a throttling/gateway answer, with jittered backoff."""
    url = endpoint + path
    query = [(k, str(v)) for k, v in (params or {}).items() if v is not None and v != ""]
    if query:
        # RFC 3986 encoding, sorted: exactly the canonical query string SigV4 signs.
        url += "?" + urlencode(sorted(query), quote_via=quote)
    data = json.dumps(body).encode() if body is not None else None
    all_headers = {"Accept": "application/json", **(headers or {})}
    if data is not None:
        all_headers["Content-Type"] = "application/json"
    safe_to_repeat = method == "GET" or (method == "POST" and IDEMPOTENCY_HEADER in all_headers)
    attempts = 1 + (max_retries if safe_to_repeat else 0)
    for attempt in range(attempts):
        last = attempt == attempts - 1
        try:
            answer: Answer = yield Send(method, url, data, all_headers)
        except TrainplaneError:  # ConnectionFailed, thrown in by the client that could not send
            if last:
                raise
        else:
            if answer.status not in RETRYABLE_STATUS or last:
                return decode(answer)
        yield Sleep(RETRY_BASE_SECONDS * 2**attempt * (1 + random.random()))
    raise AssertionError("unreachable: the last attempt returns or raises")


def signed_headers(send: Send, credentials: Credentials | ReadOnlyCredentials, region: str) -> dict[str, str]:
    """The request's headers with botocore's SigV4 (service execute-api): what API Gateway's IAM
    authorization and the local front door verify."""
    request = AWSRequest(method=send.method, url=send.url, data=send.data, headers=send.headers)
    frozen = credentials.get_frozen_credentials() if isinstance(credentials, Credentials) else credentials
    SigV4Auth(frozen, SERVICE, region).add_auth(request)
    return dict(request.headers.items())


def decode(answer: Answer) -> Any:
    try:
        body: Any = json.loads(answer.content) if answer.content else {}
    except ValueError:
        body = answer.content.decode(errors="replace")
    if answer.status >= 400:
        raise error_from_response(answer.status, body, answer.reason or "")
    if not isinstance(body, dict):
        raise TrainplaneError(answer.status, f"unexpected response body: {str(body)[:200]!r}")
    return body


class Runner:
    """Drives an operation's steps: `for step in runner:` perform it, then `give` its result or `fail`."""

    def __init__(self, steps: Steps[Any]) -> None:
        self._steps = steps
        self._value: Any = None
        self._error: TrainplaneError | None = None
        self.result: Any = None

    def __iter__(self) -> Runner:
        return self

    def __next__(self) -> Step:
        error, self._error = self._error, None
        value, self._value = self._value, None
        try:
            return self._steps.throw(error) if error is not None else self._steps.send(value)
        except StopIteration as stop:
            self.result = stop.value
            raise

    def give(self, value: Any) -> None:
        self._value = value

    def fail(self, error: TrainplaneError) -> None:
        self._error = error


def synced(operation: Callable[Concatenate[Any, P], Steps[R]]) -> Callable[Concatenate[Any, P], R]:
    """The operation as a method of Client (which has `_run(steps)`)."""

    @functools.wraps(operation)
    def method(self: Any, *args: P.args, **kwargs: P.kwargs) -> R:
        result: R = self._run(operation(self, *args, **kwargs))
        return result

    return method


def asynced(operation: Callable[Concatenate[Any, P], Steps[R]]) -> Callable[Concatenate[Any, P], Coroutine[Any, Any, R]]:
    """The operation as a coroutine method of AsyncClient (which has `async _run(steps)`)."""

    @functools.wraps(operation)
    async def method(self: Any, *args: P.args, **kwargs: P.kwargs) -> R:
        result: R = await self._run(operation(self, *args, **kwargs))
        return result

    return method
