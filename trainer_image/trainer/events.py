"""TrainerEvent lines on stdout: how launchers (and the LocalLauncher's log reader) follow a run.

Only rank 0 prints events; other ranks would repeat the same progress N times. Each event names its
job and attempt (from TRAINPLANE_JOB_ID / TRAINPLANE_ATTEMPT, then the run spec) and carries a `seq`,
so the control plane can apply reports that arrive twice or out of order (a CloudWatch Logs
subscription delivers at least once) exactly once and in order.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any, TextIO

from schemas.trainer import ENV_ATTEMPT, ENV_JOB_ID, ReportSequence, TrainerEvent, TrainerEventKind, TrainerPhase

_lock = threading.Lock()  # the async checkpoint thread prints too: never interleave two lines


class Events:
    def __init__(self, stream: TextIO | None = None, *, enabled: bool = True) -> None:
        self._stream = stream
        self.enabled = enabled
        self.phase: TrainerPhase | None = None
        self.job_id: str | None = os.environ.get(ENV_JOB_ID) or None
        attempt = os.environ.get(ENV_ATTEMPT, "")
        self.attempt: int | None = int(attempt) if attempt.isdigit() and int(attempt) >= 1 else None
        self._seq = ReportSequence()

    def bind(self, job_id: str, attempt: int) -> None:
        """The run spec's job and attempt: every later event names them."""
        self.job_id, self.attempt = job_id, attempt

    def emit(self, kind: TrainerEventKind, data: dict[str, Any] | None = None) -> TrainerEvent:
        event = TrainerEvent(kind=kind, time=time.time(), data=data or {}, job_id=self.job_id, attempt=self.attempt, seq=self._seq.next())
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
