"""Waking the sweep controller: the controller's Lambda invoked asynchronously (AWS), or an in-process
worker thread (local mode). A wake is a hint: duplicates are harmless (each decision is idempotent) and
a lost one is covered by the sweep reconciler (a schedule in AWS, a timer in local mode).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from functions.adapters.aws import AwsClients
from functions.settings import Settings

logger = logging.getLogger(__name__)


class LambdaWaker:
    """Invoke the controller Lambda with {"sweep_id"} (InvocationType Event: never waits on the decision)."""

    def __init__(self, clients: AwsClients, function_name: str) -> None:
        self._clients = clients
        self.function_name = function_name

    def wake(self, sweep_id: str) -> None:
        try:
            self._clients.client("lambda").invoke(
                FunctionName=self.function_name, InvocationType="Event", Payload=json.dumps({"sweep_id": sweep_id}).encode()
            )
        except Exception:
            # A wake is a hint: the reconciler's schedule decides for every active sweep anyway.
            logger.exception("could not wake the sweep controller for %s; the reconciler will", sweep_id)


class LocalWorker:
    """One background thread that decides for the sweeps it is woken for, each once per burst of wakes."""

    def __init__(self, decide: Callable[[str], Any]) -> None:
        self._decide = decide
        self._pending: list[str] = []
        self._cond = threading.Condition()
        self._stopped = False

    def wake(self, sweep_id: str) -> None:
        with self._cond:
            if sweep_id not in self._pending:
                self._pending.append(sweep_id)
            self._cond.notify()

    def run(self, stop: threading.Event, reconcile: Callable[[], list[str]] | None = None, interval: float = 5.0) -> None:
        """Serve wakes until `stop`; every `interval` seconds (and at start) wake every active sweep."""
        next_sweep = 0.0
        import time

        while not stop.is_set():
            now = time.monotonic()
            if reconcile is not None and now >= next_sweep:
                next_sweep = now + interval
                try:
                    for sweep_id in reconcile():
                        self.wake(sweep_id)
                except Exception:
                    logger.exception("sweep reconciler pass failed")
            with self._cond:
                if not self._pending:
                    self._cond.wait(timeout=min(0.5, max(next_sweep - time.monotonic(), 0.01)))
                batch, self._pending = self._pending, []
            for sweep_id in batch:
                if stop.is_set():
                    return
                try:
                    self._decide(sweep_id)
                except Exception:
                    logger.exception("sweep %s: decision failed; the reconciler retries", sweep_id)


_local_worker: LocalWorker | None = None


def set_local_worker(worker: LocalWorker | None) -> None:
    """Local mode: the in-process controller every waker of this process hands its wakes to."""
    global _local_worker
    _local_worker = worker


class _LocalWaker:
    def wake(self, sweep_id: str) -> None:
        if _local_worker is not None:
            _local_worker.wake(sweep_id)


LOCAL_CONTROLLER = "local"


def waker_for(settings: Settings, clients: AwsClients) -> Any:
    """Local mode's worker ("local"), the controller Lambda the stack names, or None: no controller is deployed."""
    name = settings.sweep_controller_function
    if not name:
        return None
    if name == LOCAL_CONTROLLER:
        return _LocalWaker()
    return LambdaWaker(clients, name)
