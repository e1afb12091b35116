"""Experiment tracking from the trainer: ONE tracker run per job, across pause, resume and preemption.

`run_spec.tracking` (schemas/tracking.py) names the trackers. Rank 0 opens them after the run spec is
loaded and reports the run (a `tracking` TrainerEvent: the job records it). Every metrics point the
loop reports (trainer/metrics.py `report`) is logged by its global step, and every checkpoint's step.

- **MLflow** (`mlflow-skinny`'s MlflowClient). The run is the one the control plane recorded for the
  job (`mlflow_run_id`, from an earlier attempt's report), else the run tagged `trainplane.job_id` in the
  experiment, else a new one, tagged with the job's id, name and labels, with the hyperparameters and
  the job's configs as params. A retry (`parent_job_id`) is a new run with `mlflow.parentRunId` set to
  the parent job's run. No gap: points are buffered and flushed (every few seconds, and synchronously
  before every checkpoint is written), so every step up to a checkpoint's is on the server before the
  checkpoint exists. No overlap: a resumed attempt re-does the steps after its checkpoint; the points
  of steps the run already holds (an attempt killed after logging them) are not logged again — resume is
  exact, they are the same values.
- **TensorBoard** (`torch.utils.tensorboard`). Each attempt writes its own event file, uploaded to the
  job's `jobs/<id>/tensorboard/` prefix at every flush; an attempt that resumed at step S writes a
  `SessionLog.START` at S+1 first, which TensorBoard documents as the restart marker: readers drop the
  earlier attempts' events from S+1 on (the steps this attempt re-does), so the curve has no overlap.

- **Weights & Biases** (`wandb`, trainer/tracking/wandb_sink.py `WandbSink`). The run id is the job id: every attempt
  continues it (`resume="must"` once a run is known: the id the job recorded, or, offline, the earlier
  attempts' files; `"allow"` online otherwise, so a lost report never forks the run). A retry is a new
  run in the parent's `group`, with the parent's run id in its config (W&B has no child runs). Online, the
  API key is read from the Secrets Manager secret the job names; offline, each attempt's run directory is
  uploaded to the job's `jobs/<id>/wandb/` prefix at every flush and at the end, for `wandb sync`. W&B's
  steps only go up: a resumed attempt never logs a step the run holds (the server's `starting_step`
  online, the earlier attempts' uploaded files offline) and fills the steps up to its checkpoint from
  metrics.jsonl.

Each tracker is a `Sink` (trainer/tracking/sink.py): the one interface Tracker drives (log a point by step,
tag, flush, close); MLflow and W&B buffer their points (`Buffered`) and send them off the training thread.

After the run is open, a tracker that fails (server down) never fails the training: the failure is
logged and the buffered points are tried again at the next flush. Opening it is checked: a tracking
server that cannot be reached at the start is a UserError naming the field.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from schemas.api import MetricsPoint
from schemas.tracking import TrackingRecord
from schemas.trainer import RunSpec, TrainerEventKind
from trainer.events import Events, log
from trainer.tracking.mlflow_sink import MlflowSink
from trainer.tracking.sink import CHECKPOINT_METRIC, Sink, point_values
from trainer.tracking.tensorboard_sink import TensorBoardSink
from trainer.tracking.wandb_sink import WandbSink

FLUSH_SECONDS = 5.0
# At most this long a checkpoint, and the end of an attempt, wait for the trackers: a stop (checkpoint, close,
# exit) stays well inside the launchers' grace (30 s local, 120 s SageMaker); what was not sent by then is
# filled in from metrics.jsonl when the job resumes.
PRE_CHECKPOINT_WAIT_SECONDS = 5.0
CLOSE_WAIT_SECONDS = 5.0


class Tracker:
    """Every tracker of the run; the loop sees one object (MetricsLog forwards its points here)."""

    def __init__(self, sinks: list[Sink]) -> None:
        self.sinks = sinks  # the batching ones (MLflow, W&B) first: the flush sends them before TensorBoard's upload
        self._buffer_lock = threading.Lock()  # the loop and the async checkpoint thread log; held briefly
        self._send_lock = threading.Lock()  # one send at a time; never held by the training loop
        self._last_flush = time.monotonic()
        self._sender: threading.Thread | None = None

    @classmethod
    def open(cls, spec: RunSpec, hyperparameters: dict[str, str], staging: Path, events: Events) -> Tracker | None:
        plan = spec.tracking
        if plan is None:
            return None
        sinks: list[Sink] = []
        if plan.config.mlflow is not None:
            sinks.append(MlflowSink(plan, spec, hyperparameters))
        if plan.config.wandb is not None:
            sinks.append(WandbSink(plan, spec, hyperparameters, staging.parent / "wandb" / f"attempt-{spec.attempt:03d}"))
        if plan.tensorboard_uri:
            sinks.append(TensorBoardSink(plan.tensorboard_uri, staging / f"attempt-{spec.attempt:03d}"))
        if not sinks:
            return None
        reported: dict[str, str | None] = {}
        for sink in sinks:
            reported.update(sink.record())
        record = TrackingRecord(**reported, tensorboard_uri=plan.tensorboard_uri)
        events.emit(TrainerEventKind.TRACKING, record.model_dump(exclude_none=True))
        return cls(sinks)

    def started_at(self, step: int, checkpoint_uri: str | None, earlier: list[MetricsPoint]) -> None:
        """The loop trains from `step` (a resumed checkpoint's, else 0). MLflow and W&B get what earlier attempts
        wrote to metrics.jsonl up to `step` that they miss (a flush that never reached them: the latest
        attempt's point of a step wins, as for every reader of metrics.jsonl); TensorBoard its restart marker."""
        latest: dict[int, MetricsPoint] = {}
        for point in earlier:
            if point.step <= step:
                latest[point.step] = (
                    point if point.step not in latest else latest[point.step].model_copy(update=point.model_dump(exclude_none=True))
                )
        points = [(point_step, point_values(point)) for point_step, point in sorted(latest.items())]
        with self._buffer_lock:
            for sink in self.sinks:
                sink.started_at(step, points)
        if checkpoint_uri is not None:
            self.checkpoint(step, checkpoint_uri)

    def log_point(self, point: MetricsPoint) -> None:
        values = point_values(point)
        if not values:
            return
        with self._buffer_lock:
            for sink in self.sinks:
                sink.log(values, point.step)
        if time.monotonic() - self._last_flush >= FLUSH_SECONDS:
            self.flush(wait_seconds=0.0)

    def checkpoint(self, step: int, uri: str) -> None:
        with self._buffer_lock:
            for sink in self.sinks:
                sink.log({CHECKPOINT_METRIC: float(step)}, step)
                sink.tag("trainplane.latest_checkpoint", uri)

    def flush(self, wait_seconds: float = PRE_CHECKPOINT_WAIT_SECONDS) -> bool:
        """Send what was logged so far, in the background; wait up to `wait_seconds` for it (before a
        checkpoint: then no step up to it is missing). A tracker slower than that never holds the
        training or a stop's checkpoint back: the send goes on, and a resume fills any gap from
        metrics.jsonl. True when everything logged before the call was sent."""
        self._last_flush = time.monotonic()
        deadline = time.monotonic() + wait_seconds
        previous = self._sender
        if previous is not None and previous.is_alive():
            # One sender at a time: a tracker that hangs must not pile threads up (one every few seconds).
            previous.join(wait_seconds)
            if previous.is_alive():
                return self._late(wait_seconds)
        sender = threading.Thread(target=self._send, name="tracking-flush", daemon=True)
        sender.start()
        self._sender = sender
        sender.join(max(0.0, deadline - time.monotonic()))
        return not sender.is_alive() or self._late(wait_seconds)

    @staticmethod
    def _late(wait_seconds: float) -> bool:
        if wait_seconds > 0:
            log(f"tracking: the trackers did not answer within {wait_seconds:.0f}s; training goes on, the send continues")
        return False

    def _send(self) -> None:
        with self._send_lock:  # sends in order: a later flush waits for the earlier one
            for sink in self.sinks:
                try:
                    sink.flush(self._buffer_lock)
                except Exception as exc:  # what was not sent is kept for the next flush
                    log(f"tracking: {type(sink).__name__} send failed ({type(exc).__name__}: {exc}); kept for the next flush")

    def close(self, status: str) -> None:
        """FINISHED, KILLED (stopped: paused or preempted, continued by the next attempt) or FAILED."""
        if not self.flush(wait_seconds=CLOSE_WAIT_SECONDS) or not self._send_lock.acquire(timeout=CLOSE_WAIT_SECONDS):
            log(f"tracking: the trackers are not answering; the run is left as it is ({status} not recorded)")
            return
        try:
            for sink in self.sinks:
                self._guarded("close", lambda sink=sink: sink.close(status))
        finally:
            self._send_lock.release()

    @staticmethod
    def _guarded(what: str, action: Any) -> None:
        try:
            action()
        except Exception as exc:  # a tracker down never fails the training; the points wait for the next flush
            log(f"tracking: {what} failed ({type(exc).__name__}: {exc}); training goes on")
