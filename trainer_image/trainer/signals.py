"""Graceful stop: SIGTERM (StopTrainingJob, spot reclaim, pause, the LocalLauncher) or the run's
max_runtime_seconds both end in "finish this step, checkpoint, upload, exit 75".

The handler only sets a flag; the loop checks it between optimizer steps, so a checkpoint always
holds a consistent step (never half an accumulation).
"""

from __future__ import annotations

import signal
import threading
import time
from types import FrameType


class StopRequest:
    def __init__(self, *, max_runtime_seconds: float | None = None, clock=time.monotonic) -> None:
        self._event = threading.Event()
        self._clock = clock
        self.started = clock()
        self.max_runtime_seconds = max_runtime_seconds
        self.reason: str | None = None
        self.signal_time: float | None = None
        self._previous: dict[int, object] = {}

    def install(self) -> StopRequest:
        # Signal handlers can only be installed from the main thread; a trainer run from a worker
        # thread (tests) relies on request() instead.
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._previous[sig] = signal.signal(sig, self._on_signal)
        return self

    def uninstall(self) -> None:
        """Give the handlers back (the trainer also runs in-process, in tests)."""
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        self._previous.clear()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self._event.is_set() and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C means "now"
        self.request(signal.Signals(signum).name)

    def request(self, reason: str) -> None:
        if not self._event.is_set():
            self.reason = reason
            self.signal_time = self._clock()
            self._event.set()

    def elapsed(self) -> float:
        return self._clock() - self.started

    def should_stop(self, *, next_step_seconds: float = 0.0, checkpoint_seconds: float = 0.0) -> bool:
        """True after a signal, or when one more step plus a checkpoint would pass max_runtime_seconds."""
        if self._event.is_set():
            return True
        # Stop early enough that the step in flight and the final checkpoint still fit.
        budget = self.max_runtime_seconds
        if budget is not None and self.elapsed() + next_step_seconds + checkpoint_seconds >= budget:
            self.request("max_runtime_seconds")
            return True
        return False

    @property
    def requested(self) -> bool:
        return self._event.is_set()
