"""metrics.jsonl beside the checkpoints, progress with ETA, and SageMaker-readable metric lines.

metrics.jsonl is one MetricsPoint per line. S3 has no append, so the file is kept locally and the
whole object is re-uploaded (at most every `sync_seconds`, and at every checkpoint and at the end).
A later attempt first downloads what earlier attempts wrote and appends to it: lines carry `attempt`,
and a reader keeps the latest attempt's point for a step.
"""

from __future__ import annotations

import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING

from schemas.api import MetricsPoint
from schemas.trainer import METRIC_LINE_KEYS, TrainerEventKind, metric_line
from trainer import storage
from trainer.events import Events, log

if TYPE_CHECKING:
    from trainer.tracking import Tracker


class MetricsLog:
    def __init__(self, local_file: Path, uri: str | None, *, attempt: int, sync_seconds: float = 30.0, enabled: bool = True) -> None:
        self.local_file = local_file
        self.uri = uri
        self.attempt = attempt
        self.sync_seconds = sync_seconds
        self.enabled = enabled
        self._last_sync = 0.0
        self._dirty = False
        self.tracker: Tracker | None = None  # trainer/tracking/: the experiment trackers, rank 0 only
        if enabled:
            self._start()

    def _start(self) -> None:
        self.local_file.parent.mkdir(parents=True, exist_ok=True)
        if self.uri and storage.is_s3(self.uri):
            try:
                previous = storage.read_bytes(self.uri)
            except Exception as exc:  # no earlier attempt (NoSuchKey) or not readable: start a new file
                log(f"metrics: starting a new {self.uri} ({type(exc).__name__})")
                previous = b""
            self.local_file.write_bytes(previous)
        elif self.uri:
            # A local metrics_uri is appended to in place.
            self.local_file = storage.local_path(self.uri)
            self.local_file.parent.mkdir(parents=True, exist_ok=True)
        else:
            self.local_file.touch()

    def append(self, point: MetricsPoint) -> None:
        if not self.enabled:
            return
        with self.local_file.open("a", encoding="utf-8") as handle:
            handle.write(point.model_dump_json(exclude_none=True) + "\n")
        self._dirty = True
        if self.tracker is not None:
            self.tracker.log_point(point)
        if time.monotonic() - self._last_sync >= self.sync_seconds:
            self.sync()

    def started_at(self, step: int, checkpoint_uri: str | None) -> None:
        """The loop trains from `step` (resumed from `checkpoint_uri`, or 0): the trackers mark it."""
        if self.tracker is not None:
            self.tracker.started_at(step, checkpoint_uri, self.points())

    def flush_tracker(self) -> None:
        """Before a checkpoint is written: every step up to it reaches the trackers (no gap after a resume)."""
        if self.tracker is not None:
            self.tracker.flush()

    def sync(self) -> None:
        if self.tracker is not None:
            self.tracker.flush(wait_seconds=0.0)
        if not (self.enabled and self._dirty and self.uri and storage.is_s3(self.uri)):
            return
        storage.upload_file(self.local_file, self.uri)
        self._dirty = False
        self._last_sync = time.monotonic()

    def points(self) -> list[MetricsPoint]:
        if not self.local_file.is_file():
            return []
        lines = self.local_file.read_text(encoding="utf-8").splitlines()
        return [MetricsPoint.model_validate_json(line) for line in lines if line.strip()]


class Progress:
    """Percent and ETA from a moving average of recent step times (the first steps are slow)."""

    def __init__(self, total_steps: int, start_step: int = 0, window: int = 20) -> None:
        self.total_steps = total_steps
        self.start_step = start_step
        self._times: deque[float] = deque(maxlen=window)

    def record(self, step_seconds: float) -> None:
        self._times.append(step_seconds)

    @property
    def step_seconds(self) -> float:
        return sum(self._times) / len(self._times) if self._times else 0.0

    def percent(self, step: int) -> float:
        return round(100.0 * step / self.total_steps, 2) if self.total_steps else 100.0

    def eta_seconds(self, step: int) -> float | None:
        if not self._times:
            return None
        return round(max(self.total_steps - step, 0) * self.step_seconds, 1)


def report(events: Events, metrics: MetricsLog, point: MetricsPoint, progress: Progress | None) -> None:
    """One training or evaluation point: metrics.jsonl, a METRICS event, a PROGRESS event, a metric line."""
    metrics.append(point)
    events.emit(TrainerEventKind.METRICS, point.model_dump(exclude_none=True))
    if progress is not None:
        events.emit(
            TrainerEventKind.PROGRESS,
            {
                "step": point.step,
                "total_steps": progress.total_steps,
                "epoch": point.epoch,
                "percent": progress.percent(point.step),
                "eta_seconds": progress.eta_seconds(point.step),
                "loss": point.loss,
                "tokens_per_second": point.tokens_per_second,
            },
        )
    values = {
        "train_loss": point.loss,
        "eval_loss": point.eval_loss,
        "learning_rate": point.learning_rate,
        "grad_norm": point.grad_norm,
        "tokens_per_second": point.tokens_per_second,
        "epoch": point.epoch,
        # RLHF's (trainer/rlhf.py): extra fields of the point, None for every other type
        **{key: (point.model_extra or {}).get(key) for key in ("reward", "reward_std", "kl")},
    }
    assert set(values) == set(METRIC_LINE_KEYS)
    if any(v is not None for k, v in values.items() if k != "epoch"):
        events.line(metric_line(point.step, values))
