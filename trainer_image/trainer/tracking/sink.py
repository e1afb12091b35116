"""The one interface every tracker of the run implements (MLflow, TensorBoard, W&B), and what they share."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from typing import Any

from schemas.api import MetricsPoint
from schemas.trainer import RunSpec

JOB_TAG = "trainplane.job_id"
PARENT_JOB_TAG = "trainplane.parent_job_id"
CHECKPOINT_METRIC = "checkpoint_step"
MAX_BUFFERED = 100_000  # points kept while a tracker is down
_POINT_FIELDS = ("loss", "learning_rate", "grad_norm", "tokens_per_second", "epoch")
# RLHF's points (trainer/rlhf.py's _LOGGED) add these to the loss, learning rate and grad norm
_RLHF_FIELDS = ("reward", "reward_std", "kl", "entropy", "completion_length", "frac_reward_zero_std")
TRACKED_FIELDS = _POINT_FIELDS + _RLHF_FIELDS


def point_values(point: MetricsPoint) -> dict[str, float]:
    """The numbers of one MetricsPoint by name (train loss as `loss`, evaluations as `eval_*`, RLHF's reward,
    reward_std, kl... as they are)."""
    values: dict[str, float] = {}
    for key, value in point.model_dump(exclude_none=True).items():
        if key in ("step", "attempt"):
            continue
        if isinstance(value, int | float) and not isinstance(value, bool) and (key in TRACKED_FIELDS or key.startswith("eval_")):
            values[key] = float(value)
    return values


def run_params(spec: RunSpec, hyperparameters: dict[str, str]) -> dict[str, Any]:
    """What every tracker records of the job as its params/config: the hyperparameters as the trainer parsed them,
    and the job's shape."""
    tc, dc = spec.training_config, spec.data_config
    return {
        **hyperparameters,
        "training_type": tc.training_type.value,
        "base_model": tc.base_model.model_id,
        "framework": tc.framework.type.value,
        "batch_size": dc.batch_size,
        "max_seq_length": dc.max_seq_length,
        "seed": dc.seed,
        "gpu_count": spec.resource_config.gpu_count,
    }


class Sink(ABC):
    """One tracker of the run as Tracker drives it: points logged by step on the training thread (under
    Tracker's buffer lock), flushed by the flush thread (one at a time), closed with the run's status.
    A sink that raises never fails the training: Tracker logs it and flushes again later."""

    def record(self) -> dict[str, str | None]:
        """What the job records of this tracker (TrackingRecord's fields: its run id, URL...)."""
        return {}

    def started_at(self, step: int, earlier: list[tuple[int, dict[str, float]]]) -> None:
        """The attempt trains from `step`; `earlier`: the points of steps up to it that earlier attempts wrote to
        metrics.jsonl, by step (what a tracker that missed them fills in)."""
        return

    @abstractmethod
    def log(self, values: dict[str, float], step: int) -> None:
        """One point's values at `step` (cheap: the training thread waits on it)."""

    def tag(self, key: str, value: str) -> None:
        """A tag of the run (the latest checkpoint); a sink without tags ignores it."""
        return

    @abstractmethod
    def flush(self, buffer_lock: threading.Lock) -> None:
        """Send what was logged so far (the flush thread); `buffer_lock` guards what `log` fills."""

    @abstractmethod
    def close(self, status: str) -> None:
        """The attempt ends: FINISHED, KILLED (stopped, continued by the next attempt) or FAILED."""


class Buffered(Sink):
    """A sink whose points and tags wait to be sent in batches (a server, a run file): a flush takes them under
    Tracker's buffer lock and sends them off the training thread; a failed send gives them back, ahead of what
    came meanwhile."""

    _buffer: list[Any]
    _tags: dict[str, str]

    def tag(self, key: str, value: str) -> None:
        self._tags[key] = value

    def take(self) -> tuple[list[Any], dict[str, str]]:
        """What is waiting to be sent (the caller holds Tracker's buffer lock)."""
        points, tags = self._buffer, self._tags
        self._buffer, self._tags = [], {}
        return points, tags

    def give_back(self, points: list[Any], tags: dict[str, str]) -> None:
        """A send failed: keep it for the next flush (before what came meanwhile)."""
        self._buffer[:0] = points[: max(0, MAX_BUFFERED - len(self._buffer))]
        self._tags = {**tags, **self._tags}

    def started_at(self, step: int, earlier: list[tuple[int, dict[str, float]]]) -> None:
        for point_step, values in earlier:
            self.log(values, point_step)

    def flush(self, buffer_lock: threading.Lock) -> None:
        with buffer_lock:
            points, tags = self.take()
        if not (points or tags):
            return
        try:
            self.send(points, tags)
        except Exception:
            with buffer_lock:
                self.give_back(points, tags)
            raise

    @abstractmethod
    def send(self, points: list[Any], tags: dict[str, str]) -> None:
        """Send a batch (what `take` gave); raise to keep what was not sent for the next flush."""
