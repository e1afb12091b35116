"""The SDK's sweep methods, mixed into trainplane.Client: /sweeps.

sweep = client.create_sweep({"name": "lr", "job_template": {...},
                             "hyperParameterTuningConfig": {"method": "bayes", "maxTrials": 20, ...}})
sweep = client.wait_sweep(sweep.sweep_id, timeout=3600)        # until COMPLETED, FAILED or CANCELLED
print(sweep.best_trial)

AsyncClient has the same calls, awaited (`await client.wait_sweep(...)`, `async for s in client.list_sweeps()`).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any
from urllib.parse import quote

from pydantic import BaseModel

from schemas.sweeps import SWEEP_TERMINAL, Sweep, SweepRequest, SweepStatus
from trainplane.errors import TrainplaneError
from trainplane.transport import Sleep, Steps, asynced, synced

SweepBody = SweepRequest | Mapping[str, Any]
COLLECTION = "/sweeps"


class SweepWaitTimeout(TrainplaneError, TimeoutError):
    """wait_sweep() gave up: the sweep had not ended in time."""

    def __init__(self, sweep_id: str, last_status: str, timeout: float) -> None:
        super().__init__(None, f"timed out after {timeout:g}s waiting for sweep {sweep_id} to end; last status {last_status}")
        self.sweep_id = sweep_id
        self.last_status = last_status


class SweepOps:
    """The sweep calls, written once as steps (trainplane/transport.py): SweepMethods (Client) and
    AsyncSweepMethods (AsyncClient) make them methods and coroutines."""

    _request: Callable[..., Steps[Any]]  # `self` is the client running the operation (Requester)

    def create_sweep(self, request: SweepBody) -> Steps[Sweep]:
        return Sweep.model_validate((yield from self._request("POST", COLLECTION, body=_body(request))))

    def get_sweep(self, sweep_id: str) -> Steps[Sweep]:
        return Sweep.model_validate((yield from self._request("GET", _sweep_path(sweep_id))))

    def list_sweeps_page(self, *, limit: int | None = None, next_token: str | None = None) -> Steps[tuple[list[Sweep], str | None]]:
        """One page of GET /sweeps and the token of the next one (None on the last page)."""
        body = yield from self._request("GET", COLLECTION, params={"limit": limit, "next_token": next_token})
        return [Sweep.model_validate(s) for s in body.get("sweeps", [])], body.get("next_token")

    def pause_sweep(self, sweep_id: str, reason: str | None = None) -> Steps[Sweep]:
        return (yield from _act(self, sweep_id, "pause", reason))

    def resume_sweep(self, sweep_id: str, reason: str | None = None) -> Steps[Sweep]:
        return (yield from _act(self, sweep_id, "resume", reason))

    def cancel_sweep(self, sweep_id: str, reason: str | None = None) -> Steps[Sweep]:
        return (yield from _act(self, sweep_id, "cancel", reason))

    def delete_sweep(self, sweep_id: str) -> Steps[None]:
        yield from self._request("DELETE", _sweep_path(sweep_id))

    def wait_sweep(
        self,
        sweep_id: str,
        *,
        timeout: float | None = None,
        poll: float = 2.0,
        until: frozenset[SweepStatus] = SWEEP_TERMINAL,
        on_update: Callable[[Sweep], None] | None = None,
    ) -> Steps[Sweep]:
        """Poll until the sweep's status is in `until` (default: COMPLETED, FAILED or CANCELLED)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            sweep = Sweep.model_validate((yield from self._request("GET", _sweep_path(sweep_id))))
            if on_update is not None:
                on_update(sweep)
            if sweep.status in until:
                return sweep
            if deadline is not None and time.monotonic() >= deadline:
                raise SweepWaitTimeout(sweep_id, sweep.status.value, timeout or 0.0)
            yield Sleep(poll if deadline is None else max(0.0, min(poll, deadline - time.monotonic())))


def _act(api: SweepOps, sweep_id: str, action: str, reason: str | None) -> Steps[Sweep]:
    body = {"reason": reason} if reason else None
    return Sweep.model_validate((yield from api._request("POST", _sweep_path(sweep_id, action), body=body)))


class SweepMethods:
    """The sweep calls as Client's methods."""

    create_sweep = synced(SweepOps.create_sweep)
    get_sweep = synced(SweepOps.get_sweep)
    list_sweeps_page = synced(SweepOps.list_sweeps_page)
    pause_sweep = synced(SweepOps.pause_sweep)
    resume_sweep = synced(SweepOps.resume_sweep)
    cancel_sweep = synced(SweepOps.cancel_sweep)
    delete_sweep = synced(SweepOps.delete_sweep)
    wait_sweep = synced(SweepOps.wait_sweep)

    def list_sweeps(self, *, page_size: int | None = None) -> Iterator[Sweep]:
        """Every sweep the caller may see, newest first, fetching pages lazily."""
        token: str | None = None
        while True:
            sweeps, token = self.list_sweeps_page(limit=page_size, next_token=token)
            yield from sweeps
            if not token:
                return


class AsyncSweepMethods:
    """The same calls as AsyncClient's coroutines (the same names, arguments and results)."""

    create_sweep = asynced(SweepOps.create_sweep)
    get_sweep = asynced(SweepOps.get_sweep)
    list_sweeps_page = asynced(SweepOps.list_sweeps_page)
    pause_sweep = asynced(SweepOps.pause_sweep)
    resume_sweep = asynced(SweepOps.resume_sweep)
    cancel_sweep = asynced(SweepOps.cancel_sweep)
    delete_sweep = asynced(SweepOps.delete_sweep)
    wait_sweep = asynced(SweepOps.wait_sweep)

    async def list_sweeps(self, *, page_size: int | None = None) -> AsyncIterator[Sweep]:
        """Every sweep the caller may see, newest first, fetching pages lazily (`async for`)."""
        token: str | None = None
        while True:
            sweeps, token = await self.list_sweeps_page(limit=page_size, next_token=token)
            for sweep in sweeps:
                yield sweep
            if not token:
                return


def _body(request: BaseModel | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(request, BaseModel):
        return request.model_dump(mode="json", by_alias=True, exclude_unset=True, context={"reveal_secrets": True})
    return dict(request)


def _sweep_path(sweep_id: str, action: str = "") -> str:
    if not sweep_id or "/" in sweep_id:
        raise ValueError(f"not a sweep id: {sweep_id!r}")
    return f"{COLLECTION}/{quote(sweep_id, safe='')}" + (f"/{action}" if action else "")
