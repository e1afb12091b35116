"""The lifecycle verbs: cancel, pause, resume, retry.

Each verb checks the job's status (409 naming the states it is allowed from), then decides with ONE
conditional write that also records the request in the history (actor "user", with the reason), and
only then tells the lifecycle engine. Twenty identical requests racing therefore have exactly one
winner; the others get 409. Without a workflow (workflow=None) the verbs still validate and record.

When the engine cannot be told after the decision was stored, the decision stands (it is the truth
the engine's reconciler acts on) and the failure is logged; only pause, whose decision is a request
that nothing else would act on, is undone and reported as 503.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from functions.errors import ConcurrentModification, DomainError, IllegalTransition, InvalidRequest

if TYPE_CHECKING:  # annotations only: functions/handlers/errors.py imports this module for WorkflowUnavailable
    from functions.service.paths import PathRules
    from functions.service.ports import ArtifactStore, JobRepository, Workflow
    from functions.service.principal import Principal
from schemas.api import RetryRequest
from schemas.job import Actor, CheckpointRef, ErrorType, Job, PendingAction, StatusEvent, SubmitJobRequest, without_reserved_labels
from schemas.lifecycle import Decision
from schemas.status import PAUSABLE, RUNNING, TERMINAL, JobStatus

logger = logging.getLogger(__name__)

NON_TERMINAL = frozenset(JobStatus) - TERMINAL
PAUSED_ONLY = frozenset({JobStatus.PAUSED})
USER = Actor.USER.value
DECISION_ATTEMPTS = 5


class WorkflowUnavailable(DomainError):
    """The lifecycle engine could not be told about a decision that needs it now (503, retry later)."""


class AlreadyRequested(ConcurrentModification):
    """Another request of the same kind already won (409); re-reading would not change the answer."""


class LifecycleControls:
    """Mixed into JobService; relies on its repo, store, workflow, clock, get() and submit()."""

    repo: JobRepository
    store: ArtifactStore
    workflow: Workflow | None
    clock: Callable[[], datetime]
    paths: PathRules

    def get(self, job_id: str, principal: Principal) -> Job:  # pragma: no cover - provided by JobService
        raise NotImplementedError

    def owner_principal(self, principal: Principal, owner: str | None) -> Principal:  # pragma: no cover - JobService
        raise NotImplementedError

    def submit(  # pragma: no cover - provided by JobService
        self,
        request: SubmitJobRequest,
        principal: Principal,
        *,
        owner: str | None = None,
        parent_job_id: str | None = None,
        reason: str = "",
    ) -> Job:
        raise NotImplementedError

    def _check_checkpoint(self, job: Job, ref: CheckpointRef, principal: Principal) -> None:
        """The checkpoint a resume or retry starts from must be one the job's owner may read (its URI came
        from a trainer's report): 422 naming checkpoint_id otherwise."""
        owner = self.owner_principal(principal, job.owner)
        self.paths.check_checkpoint_uri("checkpoint_id", ref.uri, owner)

    # --- cancel ----------------------------------------------------------------------------------

    def _decide(self, job_id: str, principal: Principal, decide: Callable[[Job], Job]) -> tuple[Job, Job]:
        """Read the job and write one decision, conditional on the version read.

        The trainer's phase reports (TRAINING <-> CHECKPOINTING, ...) bump the version too, so a lost
        condition is re-read and the verb's rules checked again: a user's cancel never fails only
        because a checkpoint started. Another user decision that won stays won (the re-check refuses).
        """
        for attempt in range(1, DECISION_ATTEMPTS + 1):
            job = self.get(job_id, principal)
            try:
                return job, decide(job)
            except AlreadyRequested:
                raise
            except ConcurrentModification:
                if attempt == DECISION_ATTEMPTS:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def cancel(self, job_id: str, principal: Principal, reason: str = "", *, actor: str = USER, error_type: ErrorType | None = None) -> Job:
        """`actor` and `error_type`: who the timeline names and why in machine form, for a cancel the control plane
        decides (a budget's `cancel` threshold: actor system, error_type BUDGET, functions/service/budget_actions.py)."""
        from functions.service.ports import Transition  # on first use: the API's cold start does not load the ports

        why = reason or "cancelled by request"

        def decide(job: Job) -> Job:
            if job.status in TERMINAL:
                raise IllegalTransition(job_id, job.status, "cancel", NON_TERMINAL)
            changes: dict[str, Any] = {"pending_action": None, "pending_reason": None}
            if error_type is not None:
                changes |= {"error_type": error_type, "error_message": why}
            return self.repo.transition(Transition(job_id, job.version, job.status, JobStatus.CANCELLED, why, actor, changes))

        job, cancelled = self._decide(job_id, principal, decide)
        if self.workflow is not None:
            try:
                if job.status in RUNNING:
                    self.workflow.stop_run(cancelled, graceful=False, reason=why)
                # Also answer whatever wait the execution is in (capacity, resume, or the run itself).
                self.workflow.answer_wait(cancelled, Decision.CANCEL, {"reason": why})
            except Exception:
                logger.exception("job %s is CANCELLED but the engine was not told; its reconciler will stop it", job_id)
        return cancelled

    # --- pause -----------------------------------------------------------------------------------

    def pause(self, job_id: str, principal: Principal, save_checkpoint: bool = True) -> Job:
        why = "pause requested" + ("" if save_checkpoint else " without a checkpoint")

        def decide(job: Job) -> Job:
            if job.status not in PAUSABLE:
                raise IllegalTransition(job_id, job.status, "pause", PAUSABLE)
            if job.pending_action is not None:
                raise AlreadyRequested(job_id, f"a {job.pending_action} is already in progress")
            event = StatusEvent(at=self.clock(), from_status=job.status, to_status=job.status, reason=why, actor=USER)
            return self.repo.update(
                job_id,
                job.version,
                {"pending_action": PendingAction.PAUSE, "pending_reason": why},
                PAUSABLE,
                event=event,
                action="pause",
            )

        _, paused = self._decide(job_id, principal, decide)
        if self.workflow is not None:
            try:
                # graceful: SIGTERM, the trainer saves a checkpoint within the grace period; the engine
                # moves the job to PAUSED once it is saved (status stays until then).
                self.workflow.stop_run(paused, graceful=save_checkpoint, reason=why)
            except Exception as exc:
                logger.exception("pause of %s could not reach the run; withdrawing the request", job_id)
                self._withdraw_pause(paused)
                raise WorkflowUnavailable(f"could not reach the run of job {job_id} to pause it; try again") from exc
        return paused

    def _withdraw_pause(self, job: Job) -> None:
        try:
            event = StatusEvent(at=self.clock(), from_status=job.status, to_status=job.status, reason="pause withdrawn", actor="system")
            self.repo.update(
                job.job_id, job.version, {"pending_action": None, "pending_reason": None}, event=event, action="withdraw pause"
            )
        except DomainError:
            logger.exception("pause request of %s could not be withdrawn", job.job_id)

    # --- resume ----------------------------------------------------------------------------------

    def resume(self, job_id: str, principal: Principal, checkpoint_id: str = "") -> Job:
        from functions.service.ports import Transition  # on first use: the API's cold start does not load the ports

        chosen: str | None = None

        def decide(job: Job) -> Job:
            nonlocal chosen
            if job.status != JobStatus.PAUSED:
                raise IllegalTransition(job_id, job.status, "resume", PAUSED_ONLY)
            ref = _checkpoint(job, checkpoint_id)
            if ref is not None:
                self._check_checkpoint(job, ref, principal)
            chosen = ref.checkpoint_id if ref else None
            why = f"resumed from {chosen}" if chosen else "resumed (no checkpoint: from the start)"
            changes: dict[str, Any] = {"resume_checkpoint_id": chosen, "pending_action": None, "pending_reason": None}
            return self.repo.transition(Transition(job_id, job.version, JobStatus.PAUSED, JobStatus.QUEUED, why, USER, changes))

        _, resumed = self._decide(job_id, principal, decide)
        if self.workflow is not None:
            try:
                self.workflow.answer_wait(resumed, Decision.RESUME, {"checkpoint_id": chosen or ""})
            except Exception:
                logger.exception("job %s is QUEUED again but its execution was not told; the reconciler will", job_id)
        return resumed

    # --- retry -----------------------------------------------------------------------------------

    def retry(self, job_id: str, principal: Principal, request: RetryRequest) -> Job:
        parent = self.get(job_id, principal)
        if parent.status not in TERMINAL:
            raise IllegalTransition(job_id, parent.status, "retry", TERMINAL)
        ref = _checkpoint(parent, request.checkpoint_id)
        if ref is not None:
            self._check_checkpoint(parent, ref, principal)
        submission = parent.submit_request()
        # The child is no trial of the parent's sweep (the sweep's trial is its own job): not its labels.
        submission = submission.model_copy(update={"labels": without_reserved_labels(submission.labels)})
        training = submission.training_config
        if ref is not None:
            # A URI, not an id: the id would be resolved against the child's own (empty) checkpoints.
            training = training.model_copy(update={"resume_from_checkpoint": ref.uri})
        updates: dict[str, Any] = {"training_config": training}
        if request.modify_resources and request.new_resource_config is not None:
            updates["resource_config"] = request.new_resource_config
        child_request = _validated(submission, updates)
        why = f"retry of {job_id}" + (f" from {ref.checkpoint_id}" if ref else "")
        # The child belongs to the parent's owner: an admin retrying alice's job retries it for alice.
        child = self.submit(child_request, principal, owner=parent.owner, parent_job_id=job_id, reason=why)
        try:
            note = StatusEvent(
                at=self.clock(), from_status=parent.status, to_status=parent.status, reason=f"retried as {child.job_id}", actor=USER
            )
            self.repo.append_event(job_id, note)
        except Exception:
            logger.exception("retry of %s created %s but the parent's history was not updated", job_id, child.job_id)
        return child


def _checkpoint(job: Job, checkpoint_id: str) -> CheckpointRef | None:
    """The named checkpoint (422 naming checkpoint_id if the job has none such), else the latest, else None."""
    by_id = {c.checkpoint_id: c for c in job.checkpoints}
    if checkpoint_id:
        if checkpoint_id not in by_id:
            known = ", ".join(sorted(by_id)) or "none"
            raise InvalidRequest("checkpoint_id", f"job {job.job_id} has no checkpoint {checkpoint_id!r} (it has: {known})")
        return by_id[checkpoint_id]
    if job.latest_checkpoint_id and job.latest_checkpoint_id in by_id:
        return by_id[job.latest_checkpoint_id]
    return max(job.checkpoints, key=lambda c: c.step) if job.checkpoints else None


def _validated(submission: SubmitJobRequest, updates: dict[str, Any]) -> SubmitJobRequest:
    # Without the fields at their defaults: a stored request carries every field, and a field the caller never
    # set would otherwise count as set (a TrainingArguments alias such as gradient_accumulation_steps would
    # then "conflict" with data_config's default it stands for). The defaults come back on validation.
    document = submission.model_dump(exclude_defaults=True)
    for name, value in updates.items():
        document[name] = value.model_dump()
    try:
        return SubmitJobRequest.model_validate(document)
    except ValueError as exc:
        field = "new_resource_config" if "resource_config" in updates else "checkpoint_id"
        errors = getattr(exc, "errors", None)
        message = str(errors()[0].get("msg")) if callable(errors) else str(exc)
        located = ".".join(str(part) for part in errors()[0].get("loc", ())) if callable(errors) else ""
        if located and not located.startswith("resource_config"):
            field = located  # e.g. training_config.hyperparameters.<key> of a job submitted before that rule
        raise InvalidRequest(field, message.removeprefix("Value error, ")) from exc
