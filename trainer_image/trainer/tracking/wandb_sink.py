"""Weights & Biases (`wandb`): one run per job, id = the job id, online or offline (trainer/tracking/__init__.py)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from schemas.tracking import TrackingPlan
from schemas.trainer import RunSpec
from trainer import storage, wandb_files
from trainer.events import log
from trainer.failures import UserError
from trainer.tracking.sink import JOB_TAG, MAX_BUFFERED, PARENT_JOB_TAG, Buffered, run_params

FINISHED_FILE_WAIT_SECONDS = 15.0  # W&B offline: how long an attempt waits for its run file to be written
TRANSACTION_LOG_FLUSH_SECONDS = 1.0  # W&B offline: how often wandb-core writes the run file
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


class WandbSink(Buffered):
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
        # A wandb-core service named by the environment belongs to whatever process started the trainer's launcher
        # (a notebook, a test run that used wandb): attached to it, this attempt would share that process's open
        # runs -- including the run a killed earlier attempt left open ("run ID ... is in use") -- and lose its
        # file when that process ends. A trainer starts its own service.
        os.environ.pop("WANDB_SERVICE", None)
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

    def close(self, status: str) -> None:
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
