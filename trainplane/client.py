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
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import requests
from botocore.credentials import Credentials, ReadOnlyCredentials
from pydantic import BaseModel

from schemas.api import LogLine, MetricsPoint, PatchJobRequest, Summary
from schemas.configs import ResourceConfig
from schemas.deployment import DeploymentInfo
from schemas.job import Job, StatusEvent
from schemas.shapes import TrainingShapeList, TrainingShapeProfile
from schemas.status import TERMINAL, JobStatus
from trainplane import endpoint as endpoint_mod
from trainplane.client_budgets import BudgetMethods
from trainplane.client_placement import PlacementMethods
from trainplane.client_policies import PolicyMethods
from trainplane.client_sweeps import SweepMethods
from trainplane.client_teams import TeamMethods
from trainplane.client_webhooks import WebhookMethods
from trainplane.errors import ConnectionFailed, WaitTimeout
from trainplane.operations import JobRequest
from trainplane.operations import job_of as _job_of
from trainplane.operations import job_path as _job_path
from trainplane.operations import request_body as _request_body
from trainplane.operations import shape_path as _shape_path
from trainplane.transport import IDEMPOTENCY_HEADER, Answer, Refresh, Runner, Send, Sleep, Steps, request_steps, signed_headers
from trainplane.waits import LogFollower, WaitMethods

# What wait() stops at by default: a final status, or PAUSED (which waits for a human to resume).
DEFAULT_UNTIL: frozenset[JobStatus] = TERMINAL | {JobStatus.PAUSED}
DEFAULT_TIMEOUT_SECONDS = 30.0
DEFAULT_MAX_RETRIES = 2

_Params = Mapping[str, str | int | float | None]


class Client(WaitMethods, PolicyMethods, SweepMethods, TeamMethods, WebhookMethods, PlacementMethods, BudgetMethods):
    """create_and_wait, wait_for_existing, resume_and_wait, reconnect_and_wait: trainplane/waits.py;
    create_policy, list_policies, ..., put_event: trainplane/client_policies.py;
    create_sweep, get_sweep, wait_sweep, ...: trainplane/client_sweeps.py;
    list_teams, get_team, put_team, delete_team: trainplane/client_teams.py;
    create_budget, list_budgets, raise_budget, ..., forecast (the dry run): trainplane/client_budgets.py;
    create_webhook, test_webhook, webhook_deliveries, ...: trainplane/client_webhooks.py."""

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

    def deployment(self) -> DeploymentInfo:
        """What the deployment says about itself (GET /deployment; `trainplane doctor` reads it)."""
        return DeploymentInfo.model_validate(self._call("GET", "/deployment"))

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

    # --- transport (the calls themselves: trainplane/transport.py) ----------------------------------

    def _call(
        self,
        method: str,
        path: str,
        *,
        params: _Params | None = None,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        return self._run(self._request(method, path, params=params, body=body, headers=headers))

    def _request(
        self, method: str, path: str, *, params: Mapping[str, Any] | None = None, body: Any = None, headers: Mapping[str, str] | None = None
    ) -> Steps[Any]:
        return request_steps(self.endpoint, method, path, params=params, body=body, headers=headers, max_retries=self.max_retries)

    def _run(self, steps: Steps[Any]) -> Any:
        """Perform an operation's steps with requests and time.sleep; its result."""
        runner = Runner(steps)
        for step in runner:
            if isinstance(step, Sleep):
                time.sleep(step.seconds)
            elif isinstance(step, Refresh):
                self.refresh_credentials()
            else:
                try:
                    runner.give(self._send(step))
                except ConnectionFailed as exc:
                    runner.fail(exc)
        return runner.result

    def _send(self, send: Send) -> Answer:
        headers = signed_headers(send, self._credentials, self.region)
        try:
            response = self._http.request(send.method, send.url, data=send.data, headers=headers, timeout=self.timeout)
        except requests.ConnectionError as exc:
            hint = ""
            if self.resolved.local is not None:
                hint = f" (is `trainplane up` still running? {self.resolved.local.path} may be stale)"
            raise ConnectionFailed(f"cannot reach {self.endpoint}{hint}: {exc}") from exc
        except requests.Timeout as exc:
            raise ConnectionFailed(f"{send.method} {send.url} got no answer within {self.timeout:g}s") from exc
        return Answer(response.status_code, response.content, response.reason or "")
