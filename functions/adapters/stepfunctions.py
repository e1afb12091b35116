"""The Workflow port on Step Functions (AWS, and moto's engine in local mode), plus task-token answers.

Every call here acts on a decision the service already made with a conditional write. Answering a
token that is no longer valid (already answered, timed out, execution gone) is expected in races and
returns False instead of raising: the decision stands, only its delivery found nobody waiting.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from functions.service.ports import Launcher, LaunchHandle
from schemas.job import Job
from schemas.lifecycle import ANSWERS_WAIT, Decision

logger = logging.getLogger(__name__)

# Errors that mean "nobody waits on this token any more".
_GONE = {"TaskTimedOut", "InvalidToken", "TaskDoesNotExist", "ExecutionDoesNotExist", "InvalidArn"}
_EXECUTION_NAME_MAX = 80


class Clients(Protocol):
    def client(self, service: str) -> Any: ...


def execution_name(job: Job) -> str:
    """Unique per start (Step Functions keeps names for 90 days), readable as job + attempt."""
    suffix = f"-a{job.attempt:03d}-{uuid.uuid4().hex[:8]}"
    return job.job_id[: _EXECUTION_NAME_MAX - len(suffix)] + suffix


class StepFunctionsWorkflow:
    def __init__(
        self, clients: Clients, state_machine_arn: str, launchers: Mapping[str, Launcher], *, jobs: Callable[[str], Job] | None = None
    ) -> None:
        self._clients = clients
        self.state_machine_arn = state_machine_arn
        self.launchers = launchers
        # Reads the job as stored now. The engine records tokens and run handles without a version bump
        # (so a wait beginning never makes a user's verb fail), so the job a verb holds may predate them.
        self._jobs = jobs

    def _fresh(self, job: Job) -> Job:
        if self._jobs is None:
            return job
        try:
            return self._jobs(job.job_id)
        except Exception:
            logger.exception("re-reading job %s failed; acting on the caller's copy", job.job_id)
            return job

    @property
    def _sfn(self) -> Any:
        return self._clients.client("stepfunctions")

    # --- Workflow port ----------------------------------------------------------------------
    def start(self, job: Job, *, before_start: Callable[[str], None] | None = None) -> str:
        """Start an execution; `before_start(arn)` runs first with the ARN it will have (Step Functions
        derives it from the machine and the name), so a replacement execution can be recorded on the job
        before its first task asks whether it is the job's current one."""
        name = execution_name(job)
        if before_start is not None:
            before_start(self.execution_arn(name))
        response = self._sfn.start_execution(stateMachineArn=self.state_machine_arn, name=name, input=json.dumps({"job_id": job.job_id}))
        return str(response["executionArn"])

    def execution_arn(self, name: str) -> str:
        return self.state_machine_arn.replace(":stateMachine:", ":execution:", 1) + ":" + name

    def stop_run(self, job: Job, *, graceful: bool, reason: str) -> None:
        job = self._fresh(job)
        if not job.run_handle:
            return  # nothing launched yet: the Launch task sees the decision and stops what it starts
        handle = LaunchHandle.from_dict(job.run_handle)
        launcher = self.launchers.get(handle.launcher)
        if launcher is None:
            logger.error("no launcher %r to stop job %s (%s)", handle.launcher, job.job_id, reason)
            return
        logger.info("stopping run of %s (graceful=%s): %s", job.job_id, graceful, reason)
        launcher.stop(handle, graceful=graceful)

    def answer_wait(self, job: Job, decision: Decision, detail: Mapping[str, Any] | None = None) -> None:
        job = self._fresh(job)
        if not job.task_token or job.task_token_kind not in ANSWERS_WAIT.get(decision, frozenset()):
            # No matching wait yet: the waiting task checks the job when it stores its token and answers itself.
            return
        self.send_success(job.task_token, {"next": decision, **(detail or {})})

    # --- tokens -----------------------------------------------------------------------------
    def send_success(self, token: str, output: Mapping[str, Any]) -> bool:
        return self._token_call("send_task_success", taskToken=token, output=json.dumps(dict(output)))

    def send_heartbeat(self, token: str) -> bool:
        return self._token_call("send_task_heartbeat", taskToken=token)

    def _token_call(self, method: str, **kwargs: Any) -> bool:
        from botocore.exceptions import ClientError

        try:
            getattr(self._sfn, method)(**kwargs)
            return True
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in _GONE:
                return False
            raise

    # --- executions (reconciler) -------------------------------------------------------------
    def execution_running(self, execution_arn: str | None) -> bool:
        from botocore.exceptions import ClientError

        if not execution_arn:
            return False
        try:
            status = self._sfn.describe_execution(executionArn=execution_arn)["status"]
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code", "") in _GONE:
                return False
            raise
        return status == "RUNNING"

    def stop_execution(self, execution_arn: str, cause: str) -> None:
        from botocore.exceptions import ClientError

        try:
            self._sfn.stop_execution(executionArn=execution_arn, cause=cause[:32_000])
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code", "") not in _GONE:
                raise
