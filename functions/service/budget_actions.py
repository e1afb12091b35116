"""What a budget does to the jobs it covers (docs/BUDGETS.md), each through the job's own path:

- `pause_for_budget`: the checkpointed pause (pending_action pause, reason BUDGET; CHECKPOINTING -> PAUSED);
- `cancel_for_budget`: the `cancel` threshold (only when a budget asks for it): the job's own cancel, as a
  user's cancel does it (a running job's run is stopped, no checkpoint is taken), reason BUDGET in its timeline;
- `resumer`: a raised budget, or a new period, resumes the jobs it paused, highest priority first.

The meter's tick (functions/service/budgets.py BudgetMeter) decides which jobs; this module only acts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from functions.errors import ConcurrentModification, DomainError, IllegalTransition, JobNotFound
from functions.service.ports import JobQuery, JobRepository, RunStopper
from schemas.budgets import Budget
from schemas.job import Job, PendingAction
from schemas.status import PAUSABLE, JobStatus

logger = logging.getLogger(__name__)

BUDGET_REASON = "BUDGET"
_PAGE = 200
# The jobs a `cancel` threshold cancels besides the running ones: those waiting for capacity.
WAITING = frozenset({JobStatus.PENDING, JobStatus.QUEUED})

# Cancel one job by id with a reason: JobService.cancel as the control plane (composition_budgets.py).
CancelJob = Callable[[str, str], object]


def jobs_in(jobs: JobRepository, statuses: Iterable[JobStatus]) -> list[Job]:
    """Every job in `statuses`, of every owner, page by page."""
    out: list[Job] = []
    for status in sorted(statuses):
        token: str | None = None
        while True:
            page, token = jobs.list_jobs(JobQuery(owner=None, status=JobStatus(status), limit=_PAGE, next_token=token))
            out.extend(page)
            if token is None:
                break
    return out


def pause_for_budget(jobs: JobRepository, stopper: RunStopper | None, job: Job, budget: Budget) -> bool:
    """The checkpointed pause (CHECKPOINTING -> PAUSED), reason BUDGET, the same path as a user's pause."""
    reason = f"{BUDGET_REASON}: budget {budget.name!r} ({budget.budget_id}) is spent"
    try:
        request = {"pending_action": PendingAction.PAUSE, "pending_reason": reason}
        paused = jobs.update(job.job_id, job.version, request, PAUSABLE, action="pause")
    except (ConcurrentModification, IllegalTransition, JobNotFound):
        return False  # it moved on (ended, paused, cancelled) since it was read: that writer decided
    if stopper is None:
        return True  # no lifecycle engine (an API without its state machine): the request is recorded
    try:
        stopper.stop_run(paused, graceful=True, reason=reason)
    except DomainError:
        logger.exception("budget pause of %s could not reach its run; the reconciler will", job.job_id)
    return True


def cancel_reason(budget: Budget, percent: float) -> str:
    return f"{BUDGET_REASON}: budget {budget.name!r} ({budget.budget_id}) reached {percent:g}%: cancelled"


def cancel_for_budget(cancel: CancelJob | None, job: Job, budget: Budget, percent: float) -> bool:
    """The job's own cancel, reason BUDGET; False if it had ended meanwhile (its end stands)."""
    if cancel is None:
        logger.error("budget %s would cancel %s, but no cancel path was given", budget.budget_id, job.job_id)
        return False
    try:
        cancel(job.job_id, cancel_reason(budget, percent))
    except (ConcurrentModification, IllegalTransition, JobNotFound):
        return False  # it ended (or was deleted) since it was read
    return True


def resumer(jobs: JobRepository, resume_one: Callable[[str], object]) -> Callable[[list[str]], list[str]]:
    """Resume a budget's PAUSED jobs, highest priority first then oldest (each through the job's own resume:
    QUEUED again, from its latest checkpoint, subject to quotas); the ids resumed."""

    def resume(job_ids: list[str]) -> list[str]:
        paused: list[Job] = []
        for job_id in job_ids:
            try:
                job = jobs.get(job_id)
            except JobNotFound:
                continue
            if job.status == JobStatus.PAUSED:
                paused.append(job)
        done = []
        for job in sorted(paused, key=lambda j: (-j.priority, j.created_at, j.job_id)):
            try:
                resume_one(job.job_id)
            except DomainError:
                logger.exception("could not resume %s after its budget was raised", job.job_id)
                continue
            done.append(job.job_id)
        return done

    return resume
