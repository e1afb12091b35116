"""The Python SDK: every route of the HTTP API (docs/CONTRACTS.md), signed with SigV4 like any AWS call.

    from trainplane import Client
    client = Client()                      # endpoint and keys found as trainplane/endpoint.py says
    job = client.create_and_wait({"name": "demo", ...}, timeout=600)

Requests are signed by botocore's own SigV4Auth (service "execute-api"), which is what API Gateway's
IAM authorization and the local front door verify. A Client keeps one HTTP connection pool; use one
Client per thread.
"""

from __future__ import annotations

import builtins
import json
import os
import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any
from urllib.parse import quote, urlencode

import requests
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials, ReadOnlyCredentials
from pydantic import BaseModel

from schemas.api import LogLine, MetricsPoint, PatchJobRequest, Summary
from schemas.configs import ResourceConfig
from schemas.job import Job, StatusEvent, SubmitJobRequest
from schemas.shapes import TrainingShapeList, TrainingShapeProfile
from schemas.status import TERMINAL, JobStatus
from trainplane import endpoint as endpoint_mod
from trainplane.client_policies import PolicyMethods
from trainplane.client_sweeps import SweepMethods
from trainplane.errors import ConnectionFailed, TrainplaneError, WaitTimeout, error_from_response
from trainplane.waits import LogFollower, WaitMethods

SERVICE = "execute-api"
IDEMPOTENCY_HEADER = "Idempotency-Key"
# What wait() stops at by default: a final status, or PAUSED (which waits for a human to resume).
DEFAULT_UNTIL: frozenset[JobStatus] = TERMINAL | {JobStatus.PAUSED}
DEFAULT_TIMEOUT_SECONDS = 30.0
# Throttling and gateway errors that a repeat may get past (API Gateway answers these under load).
RETRYABLE_STATUS = frozenset({429, 502, 503, 504})
DEFAULT_MAX_RETRIES = 2
RETRY_BASE_SECONDS = 0.25

JobRequest = SubmitJobRequest | Mapping[str, Any]
_Params = Mapping[str, str | int | float | None]


class Client(WaitMethods, PolicyMethods, SweepMethods):
    """create_and_wait, wait_for_existing, resume_and_wait, reconnect_and_wait: trainplane/waits.py;
    create_policy, list_policies, ..., put_event: trainplane/client_policies.py;
    create_sweep, get_sweep, wait_sweep, ...: trainplane/client_sweeps.py."""

    def __init__(
        self,
        endpoint: str | None = None,
        credentials: Credentials | ReadOnlyCredentials | None = None,
        region: str | None = None,
        *,
        state_dir: str | os.PathLike[str] | None = None,
        principal: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        max_retries: int = DEFAULT_MAX_RETRIES,
        session: requests.Session | None = None,
    ) -> None:
        self._resolve_args: dict[str, Any] = {"credentials": credentials, "region": region, "state_dir": state_dir, "principal": principal}
        self._endpoint_arg = endpoint
        self.resolved = endpoint_mod.resolve(endpoint, **self._resolve_args)
        self.endpoint = self.resolved.url
        self.region = self.resolved.region
        self.timeout = timeout
        self.max_retries = max_retries
        self._credentials = self.resolved.credentials
        self._http = session or requests.Session()

    def close(self) -> None:
        self._http.close()

    def refresh_credentials(self) -> None:
        """Fetch the signing keys again: refreshable credentials refresh now; keys that came from the
        environment, the AWS config or endpoint.json are looked up again (a rotated key pair)."""
        self._credentials = endpoint_mod.fresh_credentials(self._credentials, self._endpoint_arg, self._resolve_args)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- jobs -------------------------------------------------------------------------------------

    def submit(self, request: JobRequest, idempotency_key: str | None = None) -> Job:
        headers = {IDEMPOTENCY_HEADER: idempotency_key} if idempotency_key else None
        return Job.model_validate(self._call("POST", "/jobs", body=_request_body(request), headers=headers))

    def get(self, job_id: str) -> Job:
        return Job.model_validate(self._call("GET", _job_path(job_id)))

    def list_page(
        self,
        *,
        status: JobStatus | str | None = None,
        queue: str | None = None,
        labels: Mapping[str, str] | None = None,
        name: str | None = None,
        limit: int | None = None,
        next_token: str | None = None,
    ) -> tuple[builtins.list[Job], str | None]:
        """One page of GET /jobs and the token of the next one (None on the last page)."""
        params: dict[str, str | int | float | None] = {
            "status": str(status) if status else None,
            "queue": queue,
            "name": name,
            "limit": limit,
            "next_token": next_token,
        }
        for key, value in (labels or {}).items():
            params[f"labels.{key}"] = value
        body = self._call("GET", "/jobs", params=params)
        return [Job.model_validate(j) for j in body.get("jobs", [])], body.get("next_token")

    def list(
        self,
        *,
        status: JobStatus | str | None = None,
        queue: str | None = None,
        labels: Mapping[str, str] | None = None,
        name: str | None = None,
        page_size: int | None = None,
    ) -> Iterator[Job]:
        """Every matching job, newest first, fetching pages lazily as the iterator advances."""
        token: str | None = None
        while True:
            jobs, token = self.list_page(status=status, queue=queue, labels=labels, name=name, limit=page_size, next_token=token)
            yield from jobs
            if not token:
                return

    def patch(self, job_id: str, changes: PatchJobRequest | Mapping[str, Any]) -> Job:
        body = changes.model_dump(mode="json", exclude_unset=True) if isinstance(changes, BaseModel) else dict(changes)
        return Job.model_validate(self._call("PATCH", _job_path(job_id), body=body))

    def delete(self, job_id: str) -> None:
        self._call("DELETE", _job_path(job_id))

    # --- lifecycle verbs --------------------------------------------------------------------------

    def cancel(self, job_id: str, reason: str = "") -> Job:
        return _job_of(self._call("POST", _job_path(job_id, "cancel"), body={"reason": reason}))

    def pause(self, job_id: str, save_checkpoint: bool = True) -> Job:
        return _job_of(self._call("POST", _job_path(job_id, "pause"), body={"save_checkpoint": save_checkpoint}))

    def resume(self, job_id: str, checkpoint_id: str = "") -> Job:
        return _job_of(self._call("POST", _job_path(job_id, "resume"), body={"checkpoint_id": checkpoint_id}))

    def retry(self, job_id: str, checkpoint_id: str = "", new_resource_config: ResourceConfig | Mapping[str, Any] | None = None) -> Job:
        """A child job (parent_job_id = job_id) from the checkpoint, on new resources if given."""
        resources = new_resource_config.model_dump(mode="json") if isinstance(new_resource_config, BaseModel) else new_resource_config
        body = {"checkpoint_id": checkpoint_id, "modify_resources": resources is not None, "new_resource_config": resources}
        return _job_of(self._call("POST", _job_path(job_id, "retry"), body=body))

    # --- what a job produced ----------------------------------------------------------------------

    def events(self, job_id: str) -> builtins.list[StatusEvent]:
        return [StatusEvent.model_validate(e) for e in self._call("GET", _job_path(job_id, "events")).get("events", [])]

    def metrics(self, job_id: str) -> builtins.list[MetricsPoint]:
        return [MetricsPoint.model_validate(p) for p in self._call("GET", _job_path(job_id, "metrics")).get("points", [])]

    def logs(self, job_id: str, since: float | None = None, follow: bool = False, poll: float = 2.0) -> Iterator[LogLine]:
        """Log lines, oldest first, stamped after `since` (epoch seconds); with follow, polls until the job stops.

        Each round resumes from the API's log cursor (trainplane/waits.py LogFollower): a line is given once.
        """
        handed: builtins.list[LogLine] = []
        follower = LogFollower(job_id, on_line=handed.append, since=since)
        path = _job_path(job_id, "logs")
        while True:
            # Read the status before the lines: whatever was written before the job stopped is fetched.
            stopped = follow and self.get(job_id).status in DEFAULT_UNTIL
            follower.start_round()
            more = True
            while more:
                more = follower.absorb(self._call("GET", path, params=follower.params()))
                yield from handed
                handed.clear()
            if not follow or stopped:
                return
            time.sleep(poll)

    def summary(self) -> Summary:
        return Summary.model_validate(self._call("GET", "/summary"))

    # --- training shapes --------------------------------------------------------------------------

    def list_training_shapes(self) -> builtins.list[TrainingShapeProfile]:
        return TrainingShapeList.model_validate(self._call("GET", "/training-shapes")).shapes

    def get_training_shape(self, name: str, version: int | None = None) -> TrainingShapeProfile:
        """The shape's latest version, or the one given (NotFound if the deployment has no such shape)."""
        return TrainingShapeProfile.model_validate(self._call("GET", _shape_path(name), params={"version": version}))

    def openapi(self) -> dict[str, Any]:
        return dict(self._call("GET", "/openapi.json"))

    # --- waiting ----------------------------------------------------------------------------------

    def wait(
        self,
        job_id: str,
        until: Iterable[JobStatus | str] | None = None,
        timeout: float | None = None,
        poll: float = 2.0,
        on_update: Callable[[Job], None] | None = None,
    ) -> Job:
        """Poll until the job's status is in `until` (default: terminal or PAUSED); WaitTimeout names the last status."""
        wanted = frozenset(JobStatus(s) for s in until) if until is not None else DEFAULT_UNTIL
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self.get(job_id)
            if on_update is not None:
                on_update(job)
            if job.status in wanted:
                return job
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(job_id, job.status.value, timeout or 0.0, sorted(s.value for s in wanted))
            pause = poll if deadline is None else max(0.0, min(poll, deadline - time.monotonic()))
            time.sleep(pause)

    # --- transport --------------------------------------------------------------------------------

    def _call(
        self,
        method: str,
        path: str,
        *,
        params: _Params | None = None,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        url = self.endpoint + path
        query = [(k, str(v)) for k, v in (params or {}).items() if v is not None and v != ""]
        if query:
            # RFC 3986 encoding, sorted: exactly the canonical query string SigV4 signs.
            url += "?" + urlencode(sorted(query), quote_via=quote)
        data = json.dumps(body).encode() if body is not None else None
        all_headers = {"Accept": "application/json", **(headers or {})}
        if data is not None:
            all_headers["Content-Type"] = "application/json"
        # Only what cannot do anything twice is retried: reads, and a submit the server deduplicates.
        safe_to_repeat = method == "GET" or (method == "POST" and IDEMPOTENCY_HEADER in all_headers)
        attempts = 1 + (self.max_retries if safe_to_repeat else 0)
        for attempt in range(attempts):
            last = attempt == attempts - 1
            try:
                response = self._send(method, url, data, all_headers)
            except ConnectionFailed:
                if last:
                    raise
            else:
                if response.status_code not in RETRYABLE_STATUS or last:
                    return _decode(response)
            time.sleep(RETRY_BASE_SECONDS * 2**attempt * (1 + random.random()))
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _send(self, method: str, url: str, data: bytes | None, headers: dict[str, str]) -> requests.Response:
        # Signed afresh for every attempt: the signature carries the time.
        signed = AWSRequest(method=method, url=url, data=data, headers=headers)
        SigV4Auth(self._credentials.get_frozen_credentials(), SERVICE, self.region).add_auth(signed)
        try:
            return self._http.request(method, url, data=data, headers=dict(signed.headers.items()), timeout=self.timeout)
        except requests.ConnectionError as exc:
            hint = ""
            if self.resolved.local is not None:
                hint = f" (is `trainplane up` still running? {self.resolved.local.path} may be stale)"
            raise ConnectionFailed(f"cannot reach {self.endpoint}{hint}: {exc}") from exc
        except requests.Timeout as exc:
            raise ConnectionFailed(f"{method} {url} got no answer within {self.timeout:g}s") from exc


def _decode(response: requests.Response) -> Any:
    try:
        body: Any = response.json() if response.content else {}
    except ValueError:
        body = response.text
    if response.status_code >= 400:
        raise error_from_response(response.status_code, body, response.reason or "")
    if not isinstance(body, dict):
        raise TrainplaneError(response.status_code, f"unexpected response body: {str(body)[:200]!r}")
    return body


def _job_path(job_id: str, action: str = "") -> str:
    if not job_id or "/" in job_id:
        raise ValueError(f"not a job id: {job_id!r}")
    return f"/jobs/{quote(job_id, safe='')}" + (f"/{action}" if action else "")


def _shape_path(name: str) -> str:
    if not name or "/" in name:
        raise ValueError(f"not a training shape name: {name!r}")
    return f"/training-shapes/{quote(name, safe='')}"


def _job_of(body: Mapping[str, Any]) -> Job:
    """Lifecycle verbs may answer with the job itself or with {"job": ..., "action": ...}."""
    if "job_id" not in body and isinstance(body.get("job"), Mapping):
        return Job.model_validate(body["job"])
    return Job.model_validate(body)


def _request_body(request: JobRequest) -> dict[str, Any]:
    if isinstance(request, SubmitJobRequest):
        # exclude_unset keeps "which priority did the user set" intact; reveal_secrets sends hub_token
        # itself rather than its mask (the model masks it on every other JSON dump).
        return request.model_dump(mode="json", exclude_unset=True, context={"reveal_secrets": True})
    return dict(request)
