"""trainplane.AsyncClient: the SDK's job surface and the seed's waits for asyncio, over httpx.

    async with AsyncClient() as client:
        job = await client.create_and_wait(request, follow_logs=True)
        job = await client.reconnect_and_wait(job_id, poll_interval_s=5.0, timeout_s=600, max_wait_for_resumable_s=120)

Same endpoint and credential resolution, SigV4 signing, retries and errors as `Client`; the waits make
the same decisions (trainplane/waits.py `decide`). Retraining policies are in the sync Client only.
"""

from __future__ import annotations

import asyncio
import builtins
import functools
import json
import os
import random
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any
from urllib.parse import quote, urlencode

import httpx
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials, ReadOnlyCredentials
from pydantic import BaseModel

from schemas.api import LogLine, MetricsPoint, PatchJobRequest, Summary
from schemas.configs import ResourceConfig
from schemas.job import Job, StatusEvent
from schemas.shapes import TrainingShapeList, TrainingShapeProfile
from schemas.status import JobStatus
from trainplane import endpoint as endpoint_mod
from trainplane.client import (
    DEFAULT_MAX_RETRIES,
    DEFAULT_TIMEOUT_SECONDS,
    DEFAULT_UNTIL,
    IDEMPOTENCY_HEADER,
    RETRY_BASE_SECONDS,
    RETRYABLE_STATUS,
    SERVICE,
    JobRequest,
    _job_of,
    _job_path,
    _request_body,
    _shape_path,
)
from trainplane.errors import AuthError, Conflict, ConnectionFailed, TrainplaneError, error_from_response
from trainplane.waits import (
    TRANSIENT,
    Action,
    Goal,
    LogFollower,
    LogHandler,
    ProgressView,
    Target,
    UpdateHandler,
    WaitState,
    decide,
    failure,
    handlers,
    new_idempotency_key,
    view_for,
    why_not,
)


class AsyncClient:
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
        return Job.model_validate(await self._call("POST", "/jobs", body=_request_body(request), headers=headers))

    async def get(self, job_id: str) -> Job:
        return Job.model_validate(await self._call("GET", _job_path(job_id)))

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
        return Job.model_validate(await self._call("PATCH", _job_path(job_id), body=body))

    async def delete(self, job_id: str) -> None:
        await self._call("DELETE", _job_path(job_id))

    async def cancel(self, job_id: str, reason: str = "") -> Job:
        return _job_of(await self._call("POST", _job_path(job_id, "cancel"), body={"reason": reason}))

    async def pause(self, job_id: str, save_checkpoint: bool = True) -> Job:
        return _job_of(await self._call("POST", _job_path(job_id, "pause"), body={"save_checkpoint": save_checkpoint}))

    async def resume(self, job_id: str, checkpoint_id: str = "") -> Job:
        return _job_of(await self._call("POST", _job_path(job_id, "resume"), body={"checkpoint_id": checkpoint_id}))

    async def retry(
        self, job_id: str, checkpoint_id: str = "", new_resource_config: ResourceConfig | Mapping[str, Any] | None = None
    ) -> Job:
        resources = new_resource_config.model_dump(mode="json") if isinstance(new_resource_config, BaseModel) else new_resource_config
        body = {"checkpoint_id": checkpoint_id, "modify_resources": resources is not None, "new_resource_config": resources}
        return _job_of(await self._call("POST", _job_path(job_id, "retry"), body=body))

    async def events(self, job_id: str) -> builtins.list[StatusEvent]:
        return [StatusEvent.model_validate(e) for e in (await self._call("GET", _job_path(job_id, "events"))).get("events", [])]

    async def metrics(self, job_id: str) -> builtins.list[MetricsPoint]:
        return [MetricsPoint.model_validate(p) for p in (await self._call("GET", _job_path(job_id, "metrics"))).get("points", [])]

    async def logs(self, job_id: str, since: float | None = None, follow: bool = False, poll: float = 2.0) -> AsyncIterator[LogLine]:
        handed: builtins.list[LogLine] = []
        follower = LogFollower(job_id, on_line=handed.append, since=since)
        while True:
            stopped = follow and (await self.get(job_id)).status in DEFAULT_UNTIL
            follower.start_round()
            more = True
            while more:
                more = follower.absorb(await self._call("GET", _job_path(job_id, "logs"), params=follower.params()))
                for line in handed:
                    yield line
                handed.clear()
            if not follow or stopped:
                return
            await asyncio.sleep(poll)

    async def summary(self) -> Summary:
        return Summary.model_validate(await self._call("GET", "/summary"))

    async def list_training_shapes(self) -> builtins.list[TrainingShapeProfile]:
        return TrainingShapeList.model_validate(await self._call("GET", "/training-shapes")).shapes

    async def get_training_shape(self, name: str, version: int | None = None) -> TrainingShapeProfile:
        return TrainingShapeProfile.model_validate(await self._call("GET", _shape_path(name), params={"version": version}))

    # --- the seed's waits (trainplane/waits.py) ----------------------------------------------------

    async def create_and_wait(
        self,
        request: JobRequest,
        *,
        until: str | Iterable[JobStatus | str] | None = None,
        timeout_s: float | None = None,
        poll_interval_s: float = 5.0,
        follow_logs: bool = False,
        progress: bool | ProgressView = False,
        on_log: LogHandler | None = None,
        on_update: UpdateHandler | None = None,
        idempotency_key: str | None = None,
    ) -> Job:
        job = await self.submit(request, idempotency_key=idempotency_key or new_idempotency_key())
        return await self._run_wait(Goal.of(until), job.job_id, timeout_s, poll_interval_s, follow_logs, progress, on_log, on_update)

    async def wait_for_existing(
        self,
        job_id: str,
        *,
        until: str | Iterable[JobStatus | str] | None = None,
        timeout_s: float | None = None,
        poll_interval_s: float = 5.0,
        follow_logs: bool = False,
        progress: bool | ProgressView = False,
        on_log: LogHandler | None = None,
        on_update: UpdateHandler | None = None,
    ) -> Job:
        return await self._run_wait(Goal.of(until), job_id, timeout_s, poll_interval_s, follow_logs, progress, on_log, on_update)

    async def resume_and_wait(
        self,
        job_id: str,
        *,
        checkpoint_id: str = "",
        until: str | Iterable[JobStatus | str] | None = Target.TRAINING,
        timeout_s: float | None = None,
        poll_interval_s: float = 5.0,
        follow_logs: bool = False,
        progress: bool | ProgressView = False,
        on_log: LogHandler | None = None,
        on_update: UpdateHandler | None = None,
    ) -> Job:
        goal = Goal.of(until, resume=True, default=Target.TRAINING)
        return await self._run_wait(
            goal, job_id, timeout_s, poll_interval_s, follow_logs, progress, on_log, on_update, checkpoint_id=checkpoint_id
        )

    async def reconnect_and_wait(
        self,
        job_id: str,
        poll_interval_s: float = 5.0,
        timeout_s: float = 600,
        max_wait_for_resumable_s: float = 120,
        *,
        follow_logs: bool = False,
        progress: bool | ProgressView = False,
        on_log: LogHandler | None = None,
        on_update: UpdateHandler | None = None,
    ) -> Job:
        goal = Goal.of(Target.TRAINING, resume=True)
        return await self._run_wait(
            goal, job_id, timeout_s, poll_interval_s, follow_logs, progress, on_log, on_update, max_settle_s=max_wait_for_resumable_s
        )

    async def _run_wait(
        self,
        goal: Goal,
        job_id: str,
        timeout_s: float | None,
        poll_interval_s: float,
        follow_logs: bool,
        progress: bool | ProgressView,
        on_log: LogHandler | None,
        on_update: UpdateHandler | None,
        *,
        checkpoint_id: str = "",
        max_settle_s: float | None = None,
    ) -> Job:
        with view_for(job_id, progress) as view:
            log, update = handlers(view, follow_logs, on_log, on_update)
            state = WaitState(goal, job_id, timeout_s, poll_interval_s, LogFollower(job_id, on_line=log), max_settle_s=max_settle_s)
            while True:
                job = await self._guarded(state, lambda: self.get(state.job_id))
                if job is not None:
                    state.last_job = job
                    if update is not None:
                        update(job)
                    if follow_logs:
                        await self._guarded(state, lambda: self._drain_logs(state))
                    action = decide(job, goal)
                    state.settling(action)
                    if action is Action.DONE:
                        return job
                    if action is Action.FAIL:
                        if not follow_logs:
                            await self._guarded(state, lambda: self._drain_logs(state))
                        raise failure(state, job, why_not(job, goal))
                    if action is Action.RESUME:
                        resumed = await self._guarded(state, lambda: self.resume(state.job_id, checkpoint_id), conflict_ok=True)
                        if resumed is not None:
                            continue
                    if action is Action.RETRY:
                        child = await self._guarded(state, functools.partial(self._existing_child, job)) or await self._guarded(
                            state, lambda: self.retry(state.job_id, checkpoint_id), conflict_ok=True
                        )
                        if child is not None:
                            state.switch_to(child)
                            continue
                if state.expired():
                    raise state.timeout_error()
                await asyncio.sleep(state.pause_s())

    async def _existing_child(self, parent: Job) -> Job | None:
        jobs, _ = await self.list_page(name=parent.name, limit=50)
        return next((j for j in jobs if j.parent_job_id == parent.job_id and j.created_at >= parent.updated_at), None)

    async def _drain_logs(self, state: WaitState) -> None:
        follower = state.follow
        if follower is None:
            return
        follower.start_round()
        while follower.absorb(await self._call("GET", _job_path(state.job_id, "logs"), params=follower.params())):
            pass

    async def _guarded(self, state: WaitState, call: Callable[[], Any], *, conflict_ok: bool = False) -> Any:
        try:
            result = await call()
        except TRANSIENT:
            return None
        except Conflict:
            if not conflict_ok:
                raise
            return None
        except AuthError:
            if state.auth_retried:
                raise
            state.auth_retried = True
            self.refresh_credentials()
            return None
        state.auth_retried = False
        return result

    # --- transport --------------------------------------------------------------------------------

    async def _call(
        self, method: str, path: str, *, params: Mapping[str, Any] | None = None, body: Any = None, headers: Mapping[str, str] | None = None
    ) -> Any:
        url = self.endpoint + path
        query = [(k, str(v)) for k, v in (params or {}).items() if v is not None and v != ""]
        if query:
            url += "?" + urlencode(sorted(query), quote_via=quote)
        data = json.dumps(body).encode() if body is not None else None
        all_headers = {"Accept": "application/json", **(headers or {})}
        if data is not None:
            all_headers["Content-Type"] = "application/json"
        safe_to_repeat = method == "GET" or (method == "POST" and IDEMPOTENCY_HEADER in all_headers)
        attempts = 1 + (self.max_retries if safe_to_repeat else 0)
        for attempt in range(attempts):
            last = attempt == attempts - 1
            try:
                response = await self._send(method, url, data, all_headers)
            except ConnectionFailed:
                if last:
                    raise
            else:
                if response.status_code not in RETRYABLE_STATUS or last:
                    return _decode(response)
            await asyncio.sleep(RETRY_BASE_SECONDS * 2**attempt * (1 + random.random()))
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _send(self, method: str, url: str, data: bytes | None, headers: dict[str, str]) -> httpx.Response:
        signed = AWSRequest(method=method, url=url, data=data, headers=headers)
        SigV4Auth(self._credentials.get_frozen_credentials(), SERVICE, self.region).add_auth(signed)
        try:
            # The URL is sent exactly as signed: httpx would re-encode a str URL's query its own way.
            return await self._http.request(method, httpx.URL(url), content=data, headers=dict(signed.headers.items()))
        except httpx.TimeoutException as exc:
            raise ConnectionFailed(f"{method} {url} got no answer within {self.timeout:g}s") from exc
        except httpx.TransportError as exc:
            raise ConnectionFailed(f"cannot reach {self.endpoint}: {exc}") from exc


def _decode(response: httpx.Response) -> Any:
    try:
        body: Any = response.json() if response.content else {}
    except ValueError:
        body = response.text
    if response.status_code >= 400:
        raise error_from_response(response.status_code, body, response.reason_phrase or "")
    if not isinstance(body, dict):
        raise TrainplaneError(response.status_code, f"unexpected response body: {str(body)[:200]!r}")
    return body
