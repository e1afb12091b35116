"""The SDK's sweep methods, mixed into trainplane.Client: /sweeps.

sweep = client.create_sweep({"name": "lr", "job_template": {...},
                             "hyperParameterTuningConfig": {"method": "bayes", "maxTrials": 20, ...}})
sweep = client.wait_sweep(sweep.sweep_id, timeout=3600)        # until COMPLETED, FAILED or CANCELLED
print(sweep.best_trial)
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any
from urllib.parse import quote

from pydantic import BaseModel

from schemas.sweeps import SWEEP_TERMINAL, Sweep, SweepRequest, SweepStatus
from trainplane.errors import TrainplaneError

SweepBody = SweepRequest | Mapping[str, Any]
COLLECTION = "/sweeps"


class SweepWaitTimeout(TrainplaneError, TimeoutError):
    """wait_sweep() gave up: the sweep had not ended in time."""

    def __init__(self, sweep_id: str, last_status: str, timeout: float) -> None:
        super().__init__(None, f"timed out after {timeout:g}s waiting for sweep {sweep_id} to end; last status {last_status}")
        self.sweep_id = sweep_id
        self.last_status = last_status


class SweepMethods:
    """Relies on the Client's `_call`."""

    _call: Callable[..., Any]

    def create_sweep(self, request: SweepBody) -> Sweep:
        return Sweep.model_validate(self._call("POST", COLLECTION, body=_body(request)))

    def get_sweep(self, sweep_id: str) -> Sweep:
        return Sweep.model_validate(self._call("GET", _sweep_path(sweep_id)))

    def list_sweeps_page(self, *, limit: int | None = None, next_token: str | None = None) -> tuple[builtins.list[Sweep], str | None]:
        body = self._call("GET", COLLECTION, params={"limit": limit, "next_token": next_token})
        return [Sweep.model_validate(s) for s in body.get("sweeps", [])], body.get("next_token")

    def list_sweeps(self, *, page_size: int | None = None) -> Iterator[Sweep]:
        token: str | None = None
        while True:
            sweeps, token = self.list_sweeps_page(limit=page_size, next_token=token)
            yield from sweeps
            if not token:
                return

    def pause_sweep(self, sweep_id: str, reason: str | None = None) -> Sweep:
        return Sweep.model_validate(self._call("POST", _sweep_path(sweep_id, "pause"), body={"reason": reason} if reason else None))

    def resume_sweep(self, sweep_id: str, reason: str | None = None) -> Sweep:
        return Sweep.model_validate(self._call("POST", _sweep_path(sweep_id, "resume"), body={"reason": reason} if reason else None))

    def cancel_sweep(self, sweep_id: str, reason: str | None = None) -> Sweep:
        return Sweep.model_validate(self._call("POST", _sweep_path(sweep_id, "cancel"), body={"reason": reason} if reason else None))

    def delete_sweep(self, sweep_id: str) -> None:
        self._call("DELETE", _sweep_path(sweep_id))

    def wait_sweep(
        self,
        sweep_id: str,
        *,
        timeout: float | None = None,
        poll: float = 2.0,
        until: frozenset[SweepStatus] = SWEEP_TERMINAL,
        on_update: Callable[[Sweep], None] | None = None,
    ) -> Sweep:
        """Poll until the sweep's status is in `until` (default: COMPLETED, FAILED or CANCELLED)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            sweep = self.get_sweep(sweep_id)
            if on_update is not None:
                on_update(sweep)
            if sweep.status in until:
                return sweep
            if deadline is not None and time.monotonic() >= deadline:
                raise SweepWaitTimeout(sweep_id, sweep.status.value, timeout or 0.0)
            time.sleep(poll if deadline is None else max(0.0, min(poll, deadline - time.monotonic())))


def _body(request: BaseModel | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(request, BaseModel):
        return request.model_dump(mode="json", by_alias=True, exclude_unset=True, context={"reveal_secrets": True})
    return dict(request)


def _sweep_path(sweep_id: str, action: str = "") -> str:
    if not sweep_id or "/" in sweep_id:
        raise ValueError(f"not a sweep id: {sweep_id!r}")
    return f"{COLLECTION}/{quote(sweep_id, safe='')}" + (f"/{action}" if action else "")
