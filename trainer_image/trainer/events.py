"""TrainerEvent lines on stdout: how launchers (and the LocalLauncher's log reader) follow a run.

Only rank 0 prints events; other ranks would repeat the same progress N times.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, TextIO

from schemas.trainer import TrainerEvent, TrainerEventKind, TrainerPhase

_lock = threading.Lock()  # the async checkpoint thread prints too: never interleave two lines


class Events:
    def __init__(self, stream: TextIO | None = None, *, enabled: bool = True) -> None:
        self._stream = stream
        self.enabled = enabled
        self.phase: TrainerPhase | None = None

    def emit(self, kind: TrainerEventKind, data: dict[str, Any] | None = None) -> TrainerEvent:
        event = TrainerEvent(kind=kind, time=time.time(), data=data or {})
        if self.enabled:
            self.line(event.to_line())
        return event

    def line(self, text: str) -> None:
        """Any stdout line (metric lines for SageMaker's regexes, plain logs), flushed at once."""
        if not self.enabled:
            return
        stream = self._stream or sys.stdout
        with _lock:
            stream.write(text + "\n")
            stream.flush()

    def set_phase(self, phase: TrainerPhase) -> None:
        if phase != self.phase:
            self.phase = phase
            self.emit(TrainerEventKind.PHASE, {"phase": phase.value})

    def failure(self, reason: str, message: str) -> None:
        self.emit(TrainerEventKind.FAILURE, {"reason": reason, "message": message})

    def done(self, exit_code: int, *, stopped: bool, checkpoint_uri: str | None = None) -> None:
        self.emit(TrainerEventKind.DONE, {"exit_code": exit_code, "stopped": stopped, "checkpoint_uri": checkpoint_uri})


def log(message: str) -> None:
    """A plain log line on stderr (stdout is for events and metric lines)."""
    with _lock:
        sys.stderr.write(f"[trainer] {message}\n")
        sys.stderr.flush()
