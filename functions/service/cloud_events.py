"""EventBridge events from SageMaker and EC2 -> the lifecycle service (which answers the waiting execution).

- "SageMaker Training Job State Change": the detail IS a DescribeTrainingJob response, so it maps
  with the launcher's own describe_training_job, exactly as the reconciler's describe() would.
- "EC2 Instance State-change Notification": carries only the instance id and state. Only ends
  (terminated, stopped) are acted on: the launcher describes the instance (tags -> job, attempt) and
  reads the exit status object the user data wrote. Other states are ignored without an AWS call:
  the rule sees every instance of the account, and heartbeats come from the reconciler.
- "EC2 Spot Instance Interruption Warning": the instance is tagged as interrupted, so that its end
  (two minutes later, after the trainer's checkpoint) is a preemption whatever the exit code.

Duplicate and out-of-order events are harmless: an event whose attempt is not the job's current one,
whose run is not the job's recorded run, or whose job no longer runs changes nothing; a repeated end
finds the attempt's outcome already decided (LifecycleService records it once); a late "InProgress"
after the end is only a heartbeat for a job that no longer runs, which the lifecycle ignores.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from functions.catalog.events import EC2_SPOT_WARNING, EC2_STATE_CHANGE, SAGEMAKER_STATE_CHANGE
from functions.catalog.job_names import exit_status_key, job_ref_from_tags, parse_training_job_name
from functions.errors import JobNotFound
from functions.service import costs
from functions.service.ports import (
    TERMINAL_RUN_STATES,
    Ec2Runs,
    JobRepository,
    Launcher,
    LaunchHandle,
    RunDescription,
    RunReports,
    RunState,
    TrainingJobEvents,
)
from schemas.job import Job
from schemas.status import BEFORE_RUN, RUNNING

logger = logging.getLogger(__name__)

_EC2_ENDS = frozenset({"terminated", "stopped"})


@dataclass(frozen=True)
class EventOutcome:
    action: str  # "finished" | "alive" | "interrupted" | "ignored"
    reason: str
    job_id: str | None = None
    attempt: int | None = None
    run_state: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


class CloudEventsService:
    def __init__(
        self, repository: JobRepository, lifecycle: RunReports, launchers: Mapping[str, Launcher], describe_training_job: TrainingJobEvents
    ) -> None:
        self.repository = repository
        self.lifecycle = lifecycle
        self.launchers = launchers
        self.describe_training_job = describe_training_job

    def handle(self, detail_type: str, detail: Mapping[str, Any]) -> EventOutcome:
        if detail_type == SAGEMAKER_STATE_CHANGE:
            return self._sagemaker(detail)
        if detail_type == EC2_STATE_CHANGE:
            return self._ec2_state(detail)
        if detail_type == EC2_SPOT_WARNING:
            return self._ec2_spot_warning(detail)
        return EventOutcome("ignored", f"not an event this service handles: {detail_type!r}")

    # --- SageMaker ----------------------------------------------------------------------------
    def _sagemaker(self, detail: Mapping[str, Any]) -> EventOutcome:
        name = str(detail.get("TrainingJobName", ""))
        raw_tags = detail.get("Tags")
        tags = {str(k): str(v) for k, v in raw_tags.items()} if isinstance(raw_tags, Mapping) else {}
        ref = job_ref_from_tags(tags) or parse_training_job_name(name)
        if ref is None:
            return EventOutcome("ignored", f"training job {name!r} is not one of ours")
        job_id, attempt = ref
        job, why = self._current_run(job_id, attempt, "sagemaker", name)
        if job is None:
            return EventOutcome("ignored", why, job_id, attempt)
        return self._report(job, attempt, self.describe_training_job(detail))

    # --- EC2 ----------------------------------------------------------------------------------
    def _ec2_state(self, detail: Mapping[str, Any]) -> EventOutcome:
        instance_id, state = str(detail.get("instance-id", "")), str(detail.get("state", ""))
        if state not in _EC2_ENDS:
            return EventOutcome("ignored", f"instance {instance_id} is {state}: only ends are acted on")
        found = self._ec2_run(instance_id)
        if isinstance(found, EventOutcome):
            return found
        launcher, job, job_id, attempt = found
        fallback = LaunchHandle("ec2", instance_id, attempt, {"exit_status_key": exit_status_key(job_id, attempt)})
        handle = _handle_of(job, attempt) or fallback
        description = launcher.describe(handle)
        if description.state not in TERMINAL_RUN_STATES:
            # The state event can beat DescribeInstances' view by a moment; the reconciler follows up.
            return EventOutcome("ignored", f"instance {instance_id} still described as {description.state.value}", job_id, attempt)
        return self._report(job, attempt, description)

    def _ec2_spot_warning(self, detail: Mapping[str, Any]) -> EventOutcome:
        instance_id = str(detail.get("instance-id", ""))
        found = self._ec2_run(instance_id)
        if isinstance(found, EventOutcome):
            return found
        launcher, _, job_id, attempt = found
        # The instance's own watcher sends the trainer SIGTERM; the tag makes the end a preemption.
        launcher.mark_interrupted(instance_id)
        logger.info("spot interruption warning", extra={"job_id": job_id, "attempt": attempt, "instance_id": instance_id})
        return EventOutcome("interrupted", "spot interruption warning: the trainer checkpoints, the end follows", job_id, attempt)

    def _ec2_run(self, instance_id: str) -> tuple[Ec2Runs, Job, str, int] | EventOutcome:
        """The launcher, job, job id and attempt an instance is the current run of; else why it is ignored."""
        launcher = self._ec2()
        if launcher is None:
            return EventOutcome("ignored", "no EC2 launcher in this deployment")
        ref = launcher.job_ref(instance_id)
        if ref is None:
            return EventOutcome("ignored", f"instance {instance_id} is not one of ours (or is gone)")
        job_id, attempt = ref
        job, why = self._current_run(job_id, attempt, "ec2", instance_id)
        if job is None:
            return EventOutcome("ignored", why, job_id, attempt)
        return launcher, job, job_id, attempt

    # --- shared -------------------------------------------------------------------------------
    def _current_run(self, job_id: str, attempt: int, launcher: str, run_id: str) -> tuple[Job | None, str]:
        """The job if the event is about its current run; else None and why the event is stale."""
        try:
            job = self.repository.get(job_id)
        except JobNotFound:
            return None, f"job {job_id} no longer exists"
        if job.attempt != attempt:
            return None, f"event for attempt {attempt}, the job is at attempt {job.attempt}"
        if job.status not in RUNNING:
            return None, f"the job is {job.status.value}, not running"
        if job.status in BEFORE_RUN:
            return None, f"the job is {job.status.value}: attempt {attempt}'s run ended before (the next has not launched)"
        handle = _handle_of(job, attempt)
        # An EC2 multi-node run's handle names its instances joined by commas: any of them is the run.
        if handle is not None and (handle.launcher != launcher or run_id not in handle.run_id.split(",")):
            return None, f"the job's run is {handle.launcher}:{handle.run_id}, not {launcher}:{run_id}"
        return job, ""

    def _report(self, job: Job, attempt: int, description: RunDescription) -> EventOutcome:
        if description.state in TERMINAL_RUN_STATES:
            try:
                costs.record_run_cost(self.repository, job, attempt, description)
            except Exception:
                # The cost card must never keep a run's end from being reported.
                logger.exception("cost of %s attempt %d not recorded", job.job_id, attempt)
            self.lifecycle.on_run_finished(job.job_id, attempt, description)
            return EventOutcome("finished", description.message or "run ended", job.job_id, attempt, description.state.value)
        if description.state in {RunState.STARTING, RunState.RUNNING, RunState.STOPPING}:
            self.lifecycle.on_run_alive(job.job_id, attempt)
            state = description.state.value
            return EventOutcome("alive", description.secondary_status or state, job.job_id, attempt, state)
        return EventOutcome("ignored", f"run state {description.state.value}", job.job_id, attempt)

    def _ec2(self) -> Ec2Runs | None:
        launcher = self.launchers.get("ec2")
        return launcher if launcher is not None and hasattr(launcher, "job_ref") else None  # type: ignore[return-value]


def _handle_of(job: Job, attempt: int) -> LaunchHandle | None:
    if not job.run_handle or job.run_handle.get("attempt") != str(attempt):
        return None
    return LaunchHandle.from_dict(job.run_handle)
