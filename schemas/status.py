"""JobStatus and the transition table, as data.

The lifecycle of docs/seeds/000_*.txt: PENDING -> QUEUED -> SCHEDULING -> PREPARING -> TRAINING ->
CHECKPOINTING -> EVALUATING -> EXPORTING -> COMPLETED, with PAUSED, CANCELLED, FAILED and PREEMPTED.

Two refinements of the seed, both deliberate:
- A retryable failure with budget left, a scheduler preemption (pause by a higher-priority job) and a
  lost capacity claim go straight back to QUEUED from the running states; the history says why.
- PREEMPTED is terminal for users (no verb but retry applies) but the control plane itself may resume
  it automatically (PREEMPTED -> QUEUED, actor "system") within the job's preemption budget.
"""

from __future__ import annotations

from enum import StrEnum


class JobStatus(StrEnum):
    PENDING = "PENDING"
    QUEUED = "QUEUED"
    SCHEDULING = "SCHEDULING"
    PREPARING = "PREPARING"
    TRAINING = "TRAINING"
    CHECKPOINTING = "CHECKPOINTING"
    EVALUATING = "EVALUATING"
    EXPORTING = "EXPORTING"
    COMPLETED = "COMPLETED"
    PAUSED = "PAUSED"
    CANCELLED = "CANCELLED"
    FAILED = "FAILED"
    PREEMPTED = "PREEMPTED"


S = JobStatus

TERMINAL: frozenset[JobStatus] = frozenset({S.COMPLETED, S.FAILED, S.CANCELLED, S.PREEMPTED})
# Holding GPUs (or a capacity slot) right now.
RUNNING: frozenset[JobStatus] = frozenset({S.SCHEDULING, S.PREPARING, S.TRAINING, S.CHECKPOINTING, S.EVALUATING, S.EXPORTING})
# Holding capacity before this attempt's run exists: prepare() opens the next attempt (and clears the stored run
# handle) as the job leaves SCHEDULING, so a handle seen here is a previous attempt's, already ended and decided
# (a resumed or requeued job); its end must not be reported again.
BEFORE_RUN: frozenset[JobStatus] = frozenset({S.SCHEDULING})
# Where a pause request is accepted: the trainer is running and can checkpoint.
PAUSABLE: frozenset[JobStatus] = frozenset({S.TRAINING, S.CHECKPOINTING})
# Where PATCH may edit the job.
EDITABLE: frozenset[JobStatus] = frozenset({S.PENDING, S.QUEUED, S.FAILED})

_RUN_EXITS = {S.CANCELLED, S.FAILED, S.PREEMPTED, S.QUEUED}

TRANSITIONS: dict[JobStatus, frozenset[JobStatus]] = {
    S.PENDING: frozenset({S.QUEUED, S.CANCELLED, S.FAILED}),
    S.QUEUED: frozenset({S.SCHEDULING, S.CANCELLED, S.FAILED}),
    S.SCHEDULING: frozenset({S.PREPARING} | _RUN_EXITS),
    S.PREPARING: frozenset({S.TRAINING} | _RUN_EXITS),
    S.TRAINING: frozenset({S.CHECKPOINTING, S.EVALUATING, S.EXPORTING, S.COMPLETED, S.PAUSED} | _RUN_EXITS),
    S.CHECKPOINTING: frozenset({S.TRAINING, S.EVALUATING, S.EXPORTING, S.COMPLETED, S.PAUSED} | _RUN_EXITS),
    S.EVALUATING: frozenset({S.TRAINING, S.CHECKPOINTING, S.EXPORTING, S.COMPLETED} | _RUN_EXITS),
    S.EXPORTING: frozenset({S.COMPLETED} | _RUN_EXITS),
    S.PAUSED: frozenset({S.QUEUED, S.CANCELLED}),
    S.PREEMPTED: frozenset({S.QUEUED}),
    S.COMPLETED: frozenset(),
    S.FAILED: frozenset(),
    S.CANCELLED: frozenset(),
}


def can_transition(current: JobStatus, target: JobStatus) -> bool:
    return target in TRANSITIONS[current]


def sources_of(target: JobStatus) -> frozenset[JobStatus]:
    """The states from which `target` may be entered (what a conditional write checks)."""
    return frozenset(s for s, targets in TRANSITIONS.items() if target in targets)


def is_terminal(status: JobStatus) -> bool:
    return status in TERMINAL
