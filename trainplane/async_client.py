"""trainplane.AsyncClient: the SDK's job surface and the seed's waits for asyncio, over httpx.

    async with AsyncClient() as client:
        job = await client.create_and_wait(request, follow_logs=True)
        job = await client.reconnect_and_wait(job_id, poll_interval_s=5.0, timeout_s=600, max_wait_for_resumable_s=120)

Same endpoint and credential resolution, SigV4 signing, retries and errors as `Client`: the requests, the
waits and the sweeps are written once as steps (trainplane/transport.py) that each client performs with its
own HTTP library. Retraining policies are in the sync Client only.
"""

from __future__ import annotations

import asyncio
import builtins
import os
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx
from botocore.credentials import Credentials, ReadOnlyCredentials
from pydantic import BaseModel

from schemas.api import LogLine, MetricsPoint, PatchJobRequest, Summary
from schemas.configs import ResourceConfig
from schemas.deployment import DeploymentInfo
from schemas.job import Job, StatusEvent
from schemas.shapes import TrainingShapeList, TrainingShapeProfile
from schemas.status import JobStatus
from trainplane import endpoint as endpoint_mod
from trainplane.client import DEFAULT_MAX_RETRIES, DEFAULT_TIMEOUT_SECONDS, DEFAULT_UNTIL
from trainplane.client_budgets import AsyncBudgetMethods
from trainplane.client_placement import AsyncPlacementMethods
from trainplane.client_sweeps import AsyncSweepMethods
from trainplane.client_teams import AsyncTeamMethods
from trainplane.client_webhooks import AsyncWebhookMethods
from trainplane.errors import ConnectionFailed
from trainplane.operations import JobRequest, job_of, job_path, request_body, shape_path
from trainplane.transport import (
    IDEMPOTENCY_HEADER,
    Answer,
    Refresh,
    Runner,
    Send,
    Sleep,
    Steps,
    asynced,
    request_steps,
    signed_headers,
)
from trainplane.waits import LogFollower, WaitOps


class AsyncClient(AsyncSweepMethods, AsyncTeamMethods, AsyncWebhookMethods, AsyncPlacementMethods, AsyncBudgetMethods):
    """Client's surface for asyncio: the jobs, the seed's waits and the sweeps (create_sweep, ..., wait_sweep),
    each awaited; the waits and the sweeps are the very operations Client runs (trainplane/transport.py)."""

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
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self._resolve_args: dict[str, Any] = {"credentials": credentials, "region": region, "state_dir": state_dir, "principal": principal}
        self._endpoint_arg = endpoint
        self.resolved = endpoint_mod.resolve(endpoint, **self._resolve_args)
        self.endpoint = self.resolved.url
        self.region = self.resolved.region
        self.timeout = timeout
        self.max_retries = max_retries
        self._credentials = self.resolved.credentials
        self._http = http or httpx.AsyncClient(timeout=timeout)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def refresh_credentials(self) -> None:
        self._credentials = endpoint_mod.fresh_credentials(self._credentials, self._endpoint_arg, self._resolve_args)

    # --- jobs -------------------------------------------------------------------------------------

    async def submit(self, request: JobRequest, idempotency_key: str | None = None) -> Job:
        headers = {IDEMPOTENCY_HEADER: idempotency_key} if idempotency_key else None
        return Job.model_validate(await self._call("POST", "/jobs", body=request_body(request), headers=headers))

    async def get(self, job_id: str) -> Job:
        return Job.model_validate(await self._call("GET", job_path(job_id)))

    async def list_page(
        self,
        *,
        status: JobStatus | str | None = None,
        queue: str | None = None,
        labels: Mapping[str, str] | None = None,
        name: str | None = None,
        limit: int | None = None,
        next_token: str | None = None,
    ) -> tuple[builtins.list[Job], str | None]:
        params: dict[str, Any] = {
            "status": str(status) if status else None,
            "queue": queue,
            "name": name,
            "limit": limit,
            "next_token": next_token,
        }
        for key, value in (labels or {}).items():
            params[f"labels.{key}"] = value
        body = await self._call("GET", "/jobs", params=params)
        return [Job.model_validate(j) for j in body.get("jobs", [])], body.get("next_token")

    async def list(
        self,
        *,
        status: JobStatus | str | None = None,
        queue: str | None = None,
        labels: Mapping[str, str] | None = None,
        name: str | None = None,
        page_size: int | None = None,
    ) -> AsyncIterator[Job]:
        token: str | None = None
        while True:
            jobs, token = await self.list_page(status=status, queue=queue, labels=labels, name=name, limit=page_size, next_token=token)
            for job in jobs:
                yield job
            if not token:
                return

    async def patch(self, job_id: str, changes: PatchJobRequest | Mapping[str, Any]) -> Job:
        body = changes.model_dump(mode="json", exclude_unset=True) if isinstance(changes, BaseModel) else dict(changes)
        return Job.model_validate(await self._call("PATCH", job_path(job_id), body=body))

    async def delete(self, job_id: str) -> None:
        await self._call("DELETE", job_path(job_id))

    async def cancel(self, job_id: str, reason: str = "") -> Job:
        return job_of(await self._call("POST", job_path(job_id, "cancel"), body={"reason": reason}))

    async def pause(self, job_id: str, save_checkpoint: bool = True) -> Job:
        return job_of(await self._call("POST", job_path(job_id, "pause"), body={"save_checkpoint": save_checkpoint}))

    async def resume(self, job_id: str, checkpoint_id: str = "") -> Job:
        return job_of(await self._call("POST", job_path(job_id, "resume"), body={"checkpoint_id": checkpoint_id}))

    async def retry(
        self, job_id: str, checkpoint_id: str = "", new_resource_config: ResourceConfig | Mapping[str, Any] | None = None
    ) -> Job:
        resources = new_resource_config.model_dump(mode="json") if isinstance(new_resource_config, BaseModel) else new_resource_config
        body = {"checkpoint_id": checkpoint_id, "modify_resources": resources is not None, "new_resource_config": resources}
        return job_of(await self._call("POST", job_path(job_id, "retry"), body=body))

    async def events(self, job_id: str) -> builtins.list[StatusEvent]:
        return [StatusEvent.model_validate(e) for e in (await self._call("GET", job_path(job_id, "events"))).get("events", [])]

    async def metrics(self, job_id: str) -> builtins.list[MetricsPoint]:
        return [MetricsPoint.model_validate(p) for p in (await self._call("GET", job_path(job_id, "metrics"))).get("points", [])]

    async def logs(self, job_id: str, since: float | None = None, follow: bool = False, poll: float = 2.0) -> AsyncIterator[LogLine]:
        handed: builtins.list[LogLine] = []
        follower = LogFollower(job_id, on_line=handed.append, since=since)
        while True:
            stopped = follow and (await self.get(job_id)).status in DEFAULT_UNTIL
            follower.start_round()
            more = True
            while more:
                more = follower.absorb(await self._call("GET", job_path(job_id, "logs"), params=follower.params()))
                for line in handed:
                    yield line
                handed.clear()
            if not follow or stopped:
                return
            await asyncio.sleep(poll)

    async def summary(self) -> Summary:
        return Summary.model_validate(await self._call("GET", "/summary"))

    async def deployment(self) -> DeploymentInfo:
        """What the deployment says about itself (GET /deployment; `trainplane doctor` reads it)."""
        return DeploymentInfo.model_validate(await self._call("GET", "/deployment"))

    async def list_training_shapes(self) -> builtins.list[TrainingShapeProfile]:
        return TrainingShapeList.model_validate(await self._call("GET", "/training-shapes")).shapes

    async def get_training_shape(self, name: str, version: int | None = None) -> TrainingShapeProfile:
        return TrainingShapeProfile.model_validate(await self._call("GET", shape_path(name), params={"version": version}))

    # --- the seed's waits (trainplane/waits.py): the same operations Client runs ----------------------

    create_and_wait = asynced(WaitOps.create_and_wait)
    wait_for_existing = asynced(WaitOps.wait_for_existing)
    resume_and_wait = asynced(WaitOps.resume_and_wait)
    reconnect_and_wait = asynced(WaitOps.reconnect_and_wait)

    # --- transport (the calls themselves: trainplane/transport.py) ----------------------------------

    async def _call(
        self, method: str, path: str, *, params: Mapping[str, Any] | None = None, body: Any = None, headers: Mapping[str, str] | None = None
    ) -> Any:
        return await self._run(self._request(method, path, params=params, body=body, headers=headers))

    def _request(
        self, method: str, path: str, *, params: Mapping[str, Any] | None = None, body: Any = None, headers: Mapping[str, str] | None = None
    ) -> Steps[Any]:
        return request_steps(self.endpoint, method, path, params=params, body=body, headers=headers, max_retries=self.max_retries)

    async def _run(self, steps: Steps[Any]) -> Any:
        """Perform an operation's steps with httpx and asyncio.sleep; its result."""
        runner = Runner(steps)
        for step in runner:
            if isinstance(step, Sleep):
                await asyncio.sleep(step.seconds)
            elif isinstance(step, Refresh):
                self.refresh_credentials()
            else:
                try:
                    runner.give(await self._send(step))
                except ConnectionFailed as exc:
                    runner.fail(exc)
        return runner.result

    async def _send(self, send: Send) -> Answer:
        headers = signed_headers(send, self._credentials, self.region)
        try:
            # The URL is sent exactly as signed: httpx would re-encode a str URL's query its own way.
            response = await self._http.request(send.method, httpx.URL(send.url), content=send.data, headers=headers)
        except httpx.TimeoutException as exc:
            raise ConnectionFailed(f"{send.method} {send.url} got no answer within {self.timeout:g}s") from exc
        except httpx.TransportError as exc:
            raise ConnectionFailed(f"cannot reach {self.endpoint}: {exc}") from exc
        return Answer(response.status_code, response.content, response.reason_phrase or "")
