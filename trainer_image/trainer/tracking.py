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

- **Weights & Biases** (`wandb`, trainer/tracking.py `WandbSink`). The run id is the job id: every attempt
  continues it (`resume="must"` once a run is known: the id the job recorded, or, offline, the earlier
  attempts' files; `"allow"` online otherwise, so a lost report never forks the run). A retry is a new
  run in the parent's `group`, with the parent's run id in its config (W&B has no child runs). Online, the
  API key is read from the Secrets Manager secret the job names; offline, each attempt's run directory is
  uploaded to the job's `jobs/<id>/wandb/` prefix at every flush and at the end, for `wandb sync`. W&B's
  steps only go up: a resumed attempt never logs a step the run holds (the server's `starting_step`
  online, the earlier attempts' uploaded files offline) and fills the steps up to its checkpoint from
  metrics.jsonl.

After the run is open, a tracker that fails (server down) never fails the training: the failure is
logged and the buffered points are tried again at the next flush. Opening it is checked: a tracking
server that cannot be reached at the start is a UserError naming the field.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from schemas.api import MetricsPoint
from schemas.tracking import TrackingPlan, TrackingRecord, is_mlflow_arn
from schemas.trainer import RunSpec, TrainerEventKind
from trainer import storage, wandb_files
from trainer.events import Events, log
from trainer.failures import UserError

JOB_TAG = "trainplane.job_id"
PARENT_JOB_TAG = "trainplane.parent_job_id"
CHECKPOINT_METRIC = "checkpoint_step"
FLUSH_SECONDS = 5.0
# At most this long a checkpoint, and the end of an attempt, wait for the trackers: a stop (checkpoint, close,
# exit) stays well inside the launchers' grace (30 s local, 120 s SageMaker); what was not sent by then is
# filled in from metrics.jsonl when the job resumes.
PRE_CHECKPOINT_WAIT_SECONDS = 5.0
CLOSE_WAIT_SECONDS = 5.0
MAX_BUFFERED = 100_000  # points kept while a tracker is down
FINISHED_FILE_WAIT_SECONDS = 15.0  # W&B offline: how long an attempt waits for its run file to be written
TRANSACTION_LOG_FLUSH_SECONDS = 1.0  # W&B offline: how often wandb-core writes the run file
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


class _Buffered:
    """A sink's points and tags waiting to be sent: Tracker takes them under its buffer lock and sends them off
    the training thread; a failed send gives them back, ahead of what came meanwhile."""

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


class MlflowSink(_Buffered):
    def __init__(self, plan: TrackingPlan, spec: RunSpec, hyperparameters: dict[str, str]) -> None:
        config = plan.config.mlflow
        assert config is not None
        # The client's own retries back off for minutes by default; a trainer must not hang on a tracker.
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "3")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
        if not is_mlflow_arn(config.tracking_uri):
            # sagemaker-mlflow's header provider warns on every request to a non-ARN server (it parses the URI
            # as an ARN); its headers are for ARNs only.
            logging.getLogger("mlflow.tracking.request_header.registry").setLevel(logging.ERROR)
        if config.tracking_uri.startswith("file://"):
            # mlflow 3 keeps its file store in maintenance mode behind this opt-in; local mode's stores use it.
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        from mlflow import MlflowClient

        self.uri = config.tracking_uri
        try:
            self.client = MlflowClient(tracking_uri=self.uri)
            self.experiment_id = self._experiment(config.experiment_name)
            self.run_id, self.parent_run_id = self._open_run(plan, spec, hyperparameters)
            self.last_step = self._last_steps()
        except Exception as exc:
            hint = " (a SageMaker MLflow ARN needs the sagemaker-mlflow plugin and AWS credentials)" if is_mlflow_arn(self.uri) else ""
            raise UserError(
                f"output_config.tracking.mlflow.tracking_uri: cannot open a run on {self.uri}: {type(exc).__name__}: {exc}{hint}"
            ) from exc
        self._buffer = []
        self._tags = {}

    def _experiment(self, name: str) -> str:
        found = self.client.get_experiment_by_name(name)
        if found is not None:
            return str(found.experiment_id)
        try:
            return str(self.client.create_experiment(name))
        except Exception:
            found = self.client.get_experiment_by_name(name)  # another job created it meanwhile
            if found is None:
                raise
            return str(found.experiment_id)

    def _run_of_job(self, job_id: str) -> str | None:
        runs = self.client.search_runs([self.experiment_id], filter_string=f"tags.`{JOB_TAG}` = '{job_id}'", max_results=1)
        return str(runs[0].info.run_id) if runs else None

    def _open_run(self, plan: TrackingPlan, spec: RunSpec, hyperparameters: dict[str, str]) -> tuple[str, str | None]:
        run_id = None
        if plan.mlflow_run_id:
            try:
                run = self.client.get_run(plan.mlflow_run_id)
                if run.info.lifecycle_stage == "active" and run.data.tags.get(JOB_TAG) == spec.job_id:
                    run_id = run.info.run_id
            except Exception as exc:  # deleted on the server, or another server now: look it up by tag
                log(f"tracking: run {plan.mlflow_run_id} not found ({type(exc).__name__}); looking the job's run up")
        run_id = run_id or self._run_of_job(spec.job_id)
        parent = self._run_of_job(plan.parent_job_id) if plan.parent_job_id else None
        if run_id is not None:
            self.client.update_run(run_id, status="RUNNING")
            log(f"tracking: continuing MLflow run {run_id}")
            return run_id, parent
        tags = {f"label.{k}" if k.startswith("mlflow.") else k: v for k, v in plan.labels.items()}
        tags[JOB_TAG] = spec.job_id
        tags["trainplane.job_name"] = plan.job_name
        tags["trainplane.training_type"] = spec.training_config.training_type.value
        if plan.parent_job_id:
            tags[PARENT_JOB_TAG] = plan.parent_job_id
            if parent:
                tags["mlflow.parentRunId"] = parent
        run = self.client.create_run(self.experiment_id, run_name=spec.job_id, tags=tags)
        run_id = str(run.info.run_id)
        self._log_params(run_id, spec, hyperparameters)
        log(f"tracking: new MLflow run {run_id}")
        return run_id, parent

    def _log_params(self, run_id: str, spec: RunSpec, hyperparameters: dict[str, str]) -> None:
        from mlflow.entities import Param

        items = [Param(k, str(v)[:6000]) for k, v in sorted(run_params(spec, hyperparameters).items())]
        for start in range(0, len(items), 100):  # MLflow's log_batch takes at most 100 params
            self.client.log_batch(run_id, params=items[start : start + 100])

    def _last_steps(self) -> dict[str, int]:
        """The highest step of every metric the run holds (what an earlier attempt already logged)."""
        run = self.client.get_run(self.run_id)
        last: dict[str, int] = {}
        for key in run.data.metrics:
            history = self.client.get_metric_history(self.run_id, key)
            if history:
                last[key] = max(int(m.step) for m in history)
        return last

    def record(self) -> dict[str, str | None]:
        url = None
        if self.uri.startswith(("http://", "https://")):
            url = f"{self.uri.rstrip('/')}/#/experiments/{self.experiment_id}/runs/{self.run_id}"
        return {
            "mlflow_run_id": self.run_id,
            "mlflow_experiment_id": self.experiment_id,
            "mlflow_run_url": url,
            "mlflow_parent_run_id": self.parent_run_id,
        }

    def log(self, values: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        for key, value in values.items():
            if step <= self.last_step.get(key, -1):
                continue  # already in the run: an earlier attempt logged this step before it was stopped
            self.last_step[key] = step
            if len(self._buffer) < MAX_BUFFERED:
                self._buffer.append(Metric(key, value, now, step))

    def send(self, points: list[Any], tags: dict[str, str]) -> None:
        from mlflow.entities import RunTag

        for start in range(0, len(points), 1000):  # log_batch's limit
            self.client.log_batch(self.run_id, metrics=points[start : start + 1000])
        if tags:
            self.client.log_batch(self.run_id, tags=[RunTag(k, v) for k, v in tags.items()])

    def terminate(self, status: str) -> None:
        self.client.set_terminated(self.run_id, status=status)


WANDB_FIELD = "output_config.tracking.wandb"


def wandb_api_key(secret_arn: str) -> str:
    """The W&B API key from the job's Secrets Manager secret, read with the trainer's role: the secret's
    string, or its `api_key` / `WANDB_API_KEY` field when it is a JSON object."""
    import boto3  # lazy: only an online W&B run reads a secret

    field = f"{WANDB_FIELD}.api_key_secret_arn"
    region = secret_arn.split(":")[3]
    try:
        value = boto3.client("secretsmanager", region_name=region).get_secret_value(SecretId=secret_arn).get("SecretString")
    except Exception as exc:
        raise UserError(f"{field}: cannot read the secret {secret_arn}: {type(exc).__name__}: {exc}") from exc
    if value and value.lstrip().startswith("{"):
        try:
            fields = json.loads(value)
        except ValueError:
            fields = {}
        value = (fields.get("api_key") or fields.get("WANDB_API_KEY")) if isinstance(fields, dict) else None
    if not isinstance(value, str) or not value.strip():
        raise UserError(f"{field}: the secret {secret_arn} holds no API key (a string, or JSON with api_key)")
    return value.strip()


class WandbSink(_Buffered):
    """One W&B run per job, id = the job id (docs/TRACKING.md). Points are buffered like MLflow's and sent
    in step order; W&B's steps only go up, so a point of a step at or below what the run holds is never sent
    (`floor`: the run's last step when this attempt opened it), and a checkpoint whose save finished after
    later steps were sent is logged at the latest sent step (its value is its own step)."""

    def __init__(self, plan: TrackingPlan, spec: RunSpec, hyperparameters: dict[str, str], staging: Path) -> None:
        config = plan.config.wandb
        assert config is not None
        self.offline = config.mode == "offline"
        self.uri = plan.wandb_uri  # offline: the run's files go under it, one directory per attempt
        self.attempt = spec.attempt
        self.run_id = spec.job_id
        self.parent_run_id = plan.parent_job_id  # the parent job's run (its id is its job id)
        self.group = plan.parent_job_id or spec.job_id
        continuing = plan.wandb_run_id is not None
        self.floor = -1
        if self.offline and self.uri:
            self.floor, found = self._earlier_offline_files()
            continuing = continuing or found
        os.environ.setdefault("WANDB_SILENT", "true")
        # wandb-core reports its own errors to W&B's error tracker unless told not to: a trainer (offline above
        # all) sends nothing anywhere the job did not name.
        os.environ.setdefault("WANDB_ERROR_REPORTING", "false")
        import wandb

        try:
            api_key = None if self.offline else wandb_api_key(config.api_key_secret_arn or "")
            settings: dict[str, Any] = {
                "console": "off",  # the trainer's stdout is its report channel (TRAINPLANE_EVENT lines)
                "x_disable_stats": True,  # no system-metrics sampler beside the training
                "disable_git": True,
                "save_code": False,
                "x_save_requirements": False,  # walking every installed distribution costs ~2 s per attempt; the image is pinned
                # wandb-core writes the run file in bursts (every 15 s by default): every second, so that each upload
                # (every flush) holds what was logged until about then; a trainer killed with -9 loses little.
                "x_transaction_log_flush_interval": TRANSACTION_LOG_FLUSH_SECONDS,
                "silent": True,
            }
            if api_key:
                settings["api_key"] = api_key
            if config.base_url:
                settings["base_url"] = config.base_url
            staging.mkdir(parents=True, exist_ok=True)
            self.run = wandb.init(
                project=config.project,
                entity=config.entity,
                id=self.run_id,
                name=spec.job_id,
                group=self.group,
                job_type=spec.training_config.training_type.value,
                tags=[f"{k}:{v}"[:64] for k, v in sorted(plan.labels.items())],
                config=self._config(plan, spec, hyperparameters),
                # Offline, a resumed attempt's file says so (its run record's `resume`), so `wandb sync` appends it.
                resume=("must" if continuing else ("allow" if not self.offline else None)),
                mode=config.mode,
                dir=str(staging),
                settings=wandb.Settings(**settings),
            )
        except UserError:
            raise
        except Exception as exc:
            raise UserError(f"{WANDB_FIELD}: cannot open the W&B run {self.run_id}: {type(exc).__name__}: {exc}") from exc
        if not self.offline:
            self.floor = max(self.floor, int(self.run.starting_step) - 1)  # the server's history: steps below are held
        self.sent_step = self.floor
        self.run_dir = Path(self.run.dir).parent  # .../offline-run-<time>-<id> (run.dir is its files/)
        self._buffer = []  # (step, values)
        self._tags = {}
        log(f"tracking: {'continuing' if continuing else 'new'} W&B run {self.run_id} ({config.mode})")

    def _earlier_offline_files(self) -> tuple[int, bool]:
        """(the highest step of the earlier attempts' uploaded run files, whether there are any). Read before
        this attempt's run exists: every file there is an earlier one's (a relaunch of the same attempt too)."""
        assert self.uri is not None
        last, found = -1, False
        for relative in storage.list_files(self.uri):
            if relative.endswith(".wandb"):
                found = True
                last = max(last, wandb_files.last_step(storage.read_bytes(storage.join(self.uri, relative))))
        return last, found

    @staticmethod
    def _config(plan: TrackingPlan, spec: RunSpec, hyperparameters: dict[str, str]) -> dict[str, Any]:
        config = run_params(spec, hyperparameters)
        config.update({JOB_TAG: spec.job_id, "trainplane.job_name": plan.job_name, "trainplane.labels": dict(plan.labels)})
        if plan.parent_job_id:
            config[PARENT_JOB_TAG] = plan.parent_job_id
            config["trainplane.parent_run_id"] = plan.parent_job_id
        return config

    def record(self) -> dict[str, str | None]:
        url = None
        if not self.offline:
            try:
                url = self.run.url
            except Exception:  # no URL without a server answer
                url = None
        return {
            "wandb_run_id": self.run_id,
            "wandb_run_url": url,
            "wandb_project": self.run.project,
            "wandb_group": self.group,
            "wandb_parent_run_id": self.parent_run_id,
            "wandb_offline_uri": self.uri if self.offline else None,
        }

    def log(self, values: dict[str, float], step: int) -> None:
        if step <= self.floor:
            return  # already in the run: an earlier attempt logged this step before it was stopped
        if len(self._buffer) < MAX_BUFFERED:
            self._buffer.append((step, values))

    def send(self, points: list[Any], tags: dict[str, str]) -> None:
        ordered = sorted(points, key=lambda point: point[0])
        for i, (step, values) in enumerate(ordered):
            at = max(step, self.sent_step)  # W&B drops a step below its current one
            try:
                self.run.log(values, step=at)
            except Exception:
                points[:] = ordered[i:]  # the caller gives back only what was not logged (no step twice)
                raise
            self.sent_step = at
        points.clear()
        for key, value in tags.items():
            self.run.summary[key] = value
        try:
            self.upload()
        except Exception as exc:  # the points are in the run file; the next flush (or the end) uploads it again
            log(f"tracking: W&B run files upload failed ({type(exc).__name__}: {exc}); tried again at the next flush")

    def upload(self) -> None:
        """Offline: the attempt's run directory to the job's prefix (what `wandb sync` reads), once its run file
        holds the run record (before that, a file of a header alone would be an attempt without a run)."""
        if not (self.offline and self.uri) or not self.run_dir.is_dir():
            return
        run_files = list(self.run_dir.glob("*.wandb"))
        if not run_files or any(wandb_files.run_record(path.read_bytes()) is None for path in run_files):
            return
        target = storage.join(self.uri, f"{self.run_dir.name}-attempt-{self.attempt:03d}")
        for path in sorted(self.run_dir.rglob("*")):
            relative = path.relative_to(self.run_dir)
            if path.is_file() and relative.parts[0] != "tmp":
                storage.upload_file(path, storage.join(target, relative.as_posix()))

    def terminate(self, status: str) -> None:
        if status == "KILLED":
            self.run.mark_preempting()  # stopped with a checkpoint: the next attempt resumes this run
        try:
            self.run.finish(exit_code=1 if status == "FAILED" else 0)
            self._await_exit_record()
        finally:
            self.upload()  # what the run file holds, finished or not

    def _await_exit_record(self) -> None:
        """Offline, wandb-core writes the run file behind `finish()`: it returned once with the file still a bare
        header (so that attempt's upload was skipped, and its steps missing from the run). Wait, bounded, for the
        exit record that `finish()` writes last, so the upload carries the whole attempt."""
        if not self.offline:
            return
        deadline = time.monotonic() + FINISHED_FILE_WAIT_SECONDS
        while True:
            files = list(self.run_dir.glob("*.wandb")) if self.run_dir.is_dir() else []
            if files and all(wandb_files.has_exit(path.read_bytes()) for path in files):
                return
            if time.monotonic() >= deadline:
                log(f"tracking: W&B's run file has no exit record {FINISHED_FILE_WAIT_SECONDS:g} s after finish; uploading what it holds")
                return
            time.sleep(0.05)


class TensorBoardSink:
    def __init__(self, uri: str, staging: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.uri = uri
        self.remote = storage.is_s3(uri)
        self.dir = staging if self.remote else storage.local_path(uri)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.writer = SummaryWriter(log_dir=str(self.dir))

    def restart_at(self, step: int) -> None:
        """TensorBoard's restart marker: readers drop earlier events of step >= `step` (re-done here)."""
        from tensorboard.compat.proto.event_pb2 import Event, SessionLog

        self.writer._get_file_writer().add_event(Event(step=step, wall_time=time.time(), session_log=SessionLog(status=SessionLog.START)))

    def log(self, values: dict[str, float], step: int) -> None:
        for key, value in values.items():
            self.writer.add_scalar(key, value, step)

    def send(self) -> None:
        self.writer.flush()
        if self.remote:
            for path in sorted(self.dir.iterdir()):
                if path.is_file():
                    storage.upload_file(path, storage.join(self.uri, path.name))

    def close(self) -> None:
        self.writer.close()
        self.send()


class Tracker:
    """Every tracker of the run; the loop sees one object (MetricsLog forwards its points here)."""

    def __init__(self, mlflow: MlflowSink | None, tensorboard: TensorBoardSink | None, wandb: WandbSink | None = None) -> None:
        self.mlflow, self.tensorboard, self.wandb = mlflow, tensorboard, wandb
        self._buffer_lock = threading.Lock()  # the loop and the async checkpoint thread log; held briefly
        self._send_lock = threading.Lock()  # one send at a time; never held by the training loop
        self._last_flush = time.monotonic()
        self._sender: threading.Thread | None = None

    @classmethod
    def open(cls, spec: RunSpec, hyperparameters: dict[str, str], staging: Path, events: Events) -> Tracker | None:
        plan = spec.tracking
        if plan is None:
            return None
        mlflow = MlflowSink(plan, spec, hyperparameters) if plan.config.mlflow is not None else None
        tensorboard = TensorBoardSink(plan.tensorboard_uri, staging / f"attempt-{spec.attempt:03d}") if plan.tensorboard_uri else None
        wandb_staging = staging.parent / "wandb" / f"attempt-{spec.attempt:03d}"
        wandb = WandbSink(plan, spec, hyperparameters, wandb_staging) if plan.config.wandb is not None else None
        if mlflow is None and tensorboard is None and wandb is None:
            return None
        reported = {**(mlflow.record() if mlflow else {}), **(wandb.record() if wandb else {})}
        record = TrackingRecord(**reported, tensorboard_uri=plan.tensorboard_uri)
        events.emit(TrainerEventKind.TRACKING, record.model_dump(exclude_none=True))
        return cls(mlflow, tensorboard, wandb)

    def started_at(self, step: int, checkpoint_uri: str | None, earlier: list[MetricsPoint]) -> None:
        """The loop trains from `step` (a resumed checkpoint's, else 0). MLflow gets what earlier attempts
        wrote to metrics.jsonl up to `step` that it misses (a flush that never reached it: the latest
        attempt's point of a step wins, as for every reader of metrics.jsonl); TensorBoard its restart marker."""
        latest: dict[int, MetricsPoint] = {}
        for point in earlier:
            if point.step <= step:
                latest[point.step] = (
                    point if point.step not in latest else latest[point.step].model_copy(update=point.model_dump(exclude_none=True))
                )
        with self._buffer_lock:
            for sink in self._buffered():
                for point_step, point in sorted(latest.items()):
                    sink.log(point_values(point), point_step)
            if self.tensorboard is not None and step > 0:
                self.tensorboard.restart_at(step + 1)
        if checkpoint_uri is not None:
            self.checkpoint(step, checkpoint_uri)

    def log_point(self, point: MetricsPoint) -> None:
        values = point_values(point)
        if not values:
            return
        with self._buffer_lock:
            for sink in self._sinks():
                sink.log(values, point.step)
        if time.monotonic() - self._last_flush >= FLUSH_SECONDS:
            self.flush(wait_seconds=0.0)

    def checkpoint(self, step: int, uri: str) -> None:
        with self._buffer_lock:
            for sink in self._sinks():
                sink.log({CHECKPOINT_METRIC: float(step)}, step)
            for buffered in self._buffered():
                buffered.tag("trainplane.latest_checkpoint", uri)

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
            for sink in self._buffered():
                with self._buffer_lock:
                    points, tags = sink.take()
                if not (points or tags):
                    continue
                try:
                    sink.send(points, tags)
                except Exception as exc:
                    with self._buffer_lock:
                        sink.give_back(points, tags)
                    log(f"tracking: {type(sink).__name__} send failed ({type(exc).__name__}: {exc}); kept for the next flush")
            if self.tensorboard is not None:
                self._guarded("TensorBoard upload", self.tensorboard.send)

    def close(self, status: str) -> None:
        """FINISHED, KILLED (stopped: paused or preempted, continued by the next attempt) or FAILED."""
        if not self.flush(wait_seconds=CLOSE_WAIT_SECONDS) or not self._send_lock.acquire(timeout=CLOSE_WAIT_SECONDS):
            log(f"tracking: the trackers are not answering; the run is left as it is ({status} not recorded)")
            return
        try:
            for sink in self._buffered():
                self._guarded("close", lambda sink=sink: sink.terminate(status))
            if self.tensorboard is not None:
                self._guarded("close", self.tensorboard.close)
        finally:
            self._send_lock.release()

    def _buffered(self) -> list[MlflowSink | WandbSink]:
        """The trackers that take points in batches (a server or a run file), sent by the flush thread."""
        return [s for s in (self.mlflow, self.wandb) if s is not None]

    def _sinks(self) -> list[MlflowSink | TensorBoardSink | WandbSink]:
        return [s for s in (self.mlflow, self.tensorboard, self.wandb) if s is not None]

    @staticmethod
    def _guarded(what: str, action: Any) -> None:
        try:
            action()
        except Exception as exc:  # a tracker down never fails the training; the points wait for the next flush
            log(f"tracking: {what} failed ({type(exc).__name__}: {exc}); training goes on")
