"""Test support for placement: pool health in a dict (the PoolHealth port, atomic like the DynamoDB updates)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import replace

from functions.service.ports import PoolState


class InMemoryPoolHealth:
    def __init__(self) -> None:
        self.pools: dict[str, PoolState] = {}
        self._lock = threading.Lock()

    def record(self, pool: str, kind: str, now: float, reason: str) -> PoolState:
        with self._lock:
            state = self.pools.get(pool, PoolState(pool))
            if kind == "preempted":
                state = replace(state, preemptions=state.preemptions + 1, last_reason=reason)
            else:
                state = replace(state, capacity_errors=state.capacity_errors + 1, last_reason=reason)
            self.pools[pool] = state
            return state

    def block(self, pool: str, until: float) -> None:
        with self._lock:
            state = self.pools.get(pool, PoolState(pool))
            if state.blocked_until < until:
                self.pools[pool] = replace(state, blocked_until=until)

    def states(self, pools: Sequence[str]) -> dict[str, PoolState]:
        with self._lock:
            return {pool: self.pools[pool] for pool in pools if pool in self.pools}
