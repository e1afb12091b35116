"""The emulated SageMaker: a created training job stays InProgress (Starting, then Training) until its
trainer ends; StopTrainingJob is Stopping, SIGTERM, then Stopped; the end fills what SageMaker fills
(TrainingTimeInSeconds, BillableTimeInSeconds with managed spot's saving, FailureReason); an
`trainplane-emulator:interrupt` tag makes the job Interrupted and, spot capacity never returning,
Stopped / MaxWaitTimeExceeded. moto's own training job calls come here through moto_patches.py.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime
from typing import Any

from functions.adapters.launchers.sagemaker import LOG_GROUP, RUN_SPEC_HYPERPARAMETER
from functions.catalog import job_names, pricing
from functions.catalog.events import SAGEMAKER_SOURCE, SAGEMAKER_STATE_CHANGE
from functions.service.ports import RunDescription, RunState
from localmode.deploy.emulated_compute.core import INTERRUPT_TAG, EmulatedCompute, Run, with_runtime
from localmode.deploy.emulated_compute.moto_patches import TrainingJobs, training_job
from schemas.job import ErrorType
from schemas.trainer import ERROR_FAILURE_REASONS, FailureReason

logger = logging.getLogger(__name__)


class SageMakerCompute(EmulatedCompute):
    compute = "sagemaker"

    # --- moto's CreateTrainingJob / StopTrainingJob (called from its request threads) --------------
    def sagemaker_created(self, job: Any) -> None:
        """A CreateTrainingJob just stored `job` as Completed: make it a job that has yet to run."""
        now = datetime.now(UTC)
        job.training_job_status = "InProgress"
        job.secondary_status = "Starting"
        job.training_start_time = None
        job.training_end_time = None
        job.final_metric_data_list = []
        job.model_artifacts = {"S3ModelArtifacts": ""}
        job.secondary_status_transitions = [
            {"Status": "Starting", "StartTime": now, "StatusMessage": "Preparing the instances for training"}
        ]
        ref = job_names.job_ref_from_tags({t["Key"]: t["Value"] for t in job.tags}) or job_names.parse_training_job_name(
            job.training_job_name
        )
        if ref is None:
            logger.warning("emulated SageMaker: %s is not a trainplane job; it stays InProgress", job.training_job_name)
            return
        run = Run("sagemaker", job.training_job_name, ref[0], ref[1], spot=bool(job.enable_managed_spot_training))
        self._register(run)
        threading.Thread(target=self._start_sagemaker, args=(run, job), name=f"start-{run.run_id}", daemon=True).start()

    def sagemaker_stop(self, job: Any) -> None:
        """StopTrainingJob: Stopping, then SIGTERM to the trainer (Stopped when it has exited)."""
        from moto.sagemaker.exceptions import ValidationError

        if job.training_job_status not in {"InProgress", "Stopping"}:
            raise ValidationError(message=f"The request was rejected because the training job is in status {job.training_job_status}.")
        job.training_job_status = "Stopping"
        _transition(job, "Stopping", "Stopping the training job")
        run = self._runs.get(job.training_job_name)
        if run is not None:
            run.stop_reason = run.stop_reason or "stop"
            if run.handle is not None:
                threading.Thread(target=self.runner.stop, args=(run.handle,), daemon=True).start()

    def _start_sagemaker(self, run: Run, job: Any) -> None:
        try:
            spec_uri = job.hyper_parameters[RUN_SPEC_HYPERPARAMETER]
            request = self._request(run, spec_uri, tags={t["Key"]: t["Value"] for t in job.tags})
            runtime = (job.stopping_condition or {}).get("MaxRuntimeInSeconds")
            request = with_runtime(request, runtime)
            _transition(job, "Downloading", "Downloading the training image")
            if run.stop_reason is not None:  # stopped before it ever started
                self._end_sagemaker(run, job, RunDescription(RunState.STOPPED, message="stopped before start", run_seconds=0.0))
                return
            run.handle = self.runner.launch(request)
            run.started_at = time.time()
            job.training_start_time = datetime.now(UTC)
            _transition(job, "Training", "Training image download completed. Training in progress.")
            self._emit_sagemaker(job)
        except Exception as exc:
            logger.exception("emulated SageMaker could not start %s", run.run_id)
            self._end_sagemaker(run, job, RunDescription(RunState.FAILED, ErrorType.USER_ERROR, f"ClientError: {exc}", run_seconds=0.0))

    def _end_sagemaker(self, run: Run, job: Any, description: RunDescription) -> None:
        seconds = float(description.run_seconds or 0.0)
        job.training_end_time = datetime.now(UTC)
        job.training_time_in_seconds = round(seconds)
        # Managed spot bills less than the run (SageMaker's own saving); emulated at the typical discount.
        billable = seconds * (1.0 - pricing.SPOT_DISCOUNT_ESTIMATE["sagemaker"]) if run.spot else seconds
        job.billable_time_in_seconds = max(round(billable), 1 if seconds else 0)
        status, secondary, failure = _sagemaker_end(description, run)
        job.training_job_status = status
        if failure:
            job.failure_reason = failure
        _transition(job, secondary, failure or f"Training job {status.lower()}")
        run.ended.set()
        self._logs_delivered()
        self._emit_sagemaker(job)

    def _emit_sagemaker(self, job: Any) -> None:
        detail = _json_safe({k: v for k, v in job.response_object.items() if k != "Tags"})
        detail["Tags"] = {t["Key"]: t["Value"] for t in job.tags}
        self._emit(SAGEMAKER_STATE_CHANGE, SAGEMAKER_SOURCE, job.arn, detail)

    # --- the engine's side of the shared half -------------------------------------------------------
    def _poll(self) -> None:
        with self._lock:
            active = [r for r in self._runs.values() if r.kind == "sagemaker" and not r.ended.is_set() and not r.interrupted]
        if not active:
            return
        sm = self.client("sagemaker")
        for run in active:
            arn = f"arn:aws:sagemaker:{self.region}:{self.account_id}:training-job/{run.run_id}"
            tags = {t["Key"] for t in sm.list_tags(ResourceArn=arn).get("Tags", [])}
            if INTERRUPT_TAG in tags:
                run.interrupted = True
                job = training_job(self.account_id, self.region, run.run_id)
                if job is not None:
                    _transition(job, "Interrupted", "Training job interrupted (emulated spot reclaim)")
                self._stop_run(run, "spot-interruption")

    def _end_run(self, run: Run, description: RunDescription) -> None:
        job = training_job(self.account_id, self.region, run.run_id)
        if job is not None:
            self._end_sagemaker(run, job, description)

    def _log_stream(self, run: Run) -> str:
        return f"{job_names.training_job_name(run.job_id, run.attempt)}/algo-1-{int(time.time())}"

    def _log_group(self) -> str:
        return LOG_GROUP

    def _training_jobs(self) -> TrainingJobs:
        return self


def _sagemaker_end(description: RunDescription, run: Run) -> tuple[str, str, str | None]:
    """The trainer's end -> (TrainingJobStatus, SecondaryStatus, FailureReason) as SageMaker reports them."""
    state = description.state
    if run.interrupted and state in {RunState.STOPPED, RunState.PREEMPTED, RunState.UNKNOWN}:
        return "Stopped", "MaxWaitTimeExceeded", "Training job interrupted and spot capacity did not return within MaxWaitTimeInSeconds"
    if state == RunState.COMPLETED:
        return "Completed", "Completed", None
    if state == RunState.STOPPED:
        return "Stopped", "Stopped", None
    if state == RunState.FAILED and description.error_type == ErrorType.TIMEOUT:
        return "Stopped", "MaxRuntimeExceeded", None
    if state == RunState.FAILED:
        word = ERROR_FAILURE_REASONS.get(description.error_type or ErrorType.INTERNAL, FailureReason.INTERNAL.value)
        return "Failed", "Failed", f"AlgorithmError: {word}: {description.message or 'the trainer failed'}"
    return "Stopped", "Interrupted", "Training job interrupted: the training instance was lost"


def _transition(job: Any, status: str, message: str) -> None:
    now = datetime.now(UTC)
    transitions = list(job.secondary_status_transitions or [])
    if transitions and "EndTime" not in transitions[-1]:
        transitions[-1] = {**transitions[-1], "EndTime": now}
    transitions.append({"Status": status, "StartTime": now, "StatusMessage": message})
    job.secondary_status_transitions = transitions
    job.secondary_status = status
    job.last_modified_time = now


def _json_safe(value: Any) -> Any:
    """EventBridge renders SageMaker's timestamps as epoch milliseconds."""
    if isinstance(value, datetime):
        return int(value.timestamp() * 1000)
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value
