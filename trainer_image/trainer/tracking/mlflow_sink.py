"""MLflow (`mlflow-skinny`'s MlflowClient): one run per job, continued by every attempt (trainer/tracking/__init__.py)."""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from schemas.tracking import TrackingPlan, is_mlflow_arn
from schemas.trainer import RunSpec
from trainer.events import log
from trainer.failures import UserError
from trainer.tracking.sink import JOB_TAG, MAX_BUFFERED, PARENT_JOB_TAG, Buffered, run_params


class MlflowSink(Buffered):
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

    def close(self, status: str) -> None:
        self.client.set_terminated(self.run_id, status=status)
