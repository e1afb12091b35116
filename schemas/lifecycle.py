"""The lifecycle protocol between the state machine and the lifecycle Lambda: ONE spelling of each word.

The state machine (infra/statemachine/lifecycle.asl.json) calls the Lambda with {"action": Action, ...};
every task returns {"next": Next, ...} and the machine's Choice states route on `$.task.out.next`.
A waiting task stores its task token with a WaitKind (the job's `task_token_kind`); user decisions
answer only the waits they may (functions/adapters/stepfunctions.py). tests/unit/test_lifecycle_protocol.py
checks the ASL against these enums, both ways.
"""

from __future__ import annotations

from enum import StrEnum


class Action(StrEnum):
    """The `action` of each Task state's payload: one per lifecycle service method."""

    ADMIT = "admit"
    WAIT_CAPACITY = "wait_capacity"
    PREPARE = "prepare"
    LAUNCH = "launch"
    WAIT_RUN = "wait_run"
    WAIT_RESUME = "wait_resume"
    RUN_TIMEOUT = "run_timeout"
    CRASH = "crash"


class Next(StrEnum):
    """What a task (or a task-token answer) tells the machine to do next."""

    # Routed on by the machine's Choice states.
    WAIT_CAPACITY = "wait_capacity"
    GO = "go"
    LAUNCH = "launch"
    WAIT = "wait"
    REQUEUE = "requeue"
    RESUME_PREEMPTED = "resume_preempted"
    RESUME = "resume"
    PAUSED = "paused"
    COMPLETED = "completed"
    FAILED = "failed"
    ENDED = "ended"  # every Choice's Default: the execution ends quietly
    # Returned by waiting tasks (waitForTaskToken ignores the Lambda's own result; the token's answer routes).
    ANSWERED = "answered"  # the task answered its own token at once (moto's engine is nudged: localmode/moto_lambda.py)
    WAITING = "waiting"
    IGNORED = "ignored"  # a run report that decided nothing


# What a waiting task's own return value may be: never routed on (the token's answer is).
WAIT_RESULTS = frozenset({Next.ANSWERED, Next.WAITING, Next.IGNORED})


class WaitKind(StrEnum):
    """What a stored task token waits for (Job.task_token_kind)."""

    CAPACITY = "capacity"
    RUN = "run"
    RESUME = "resume"


class Decision(StrEnum):
    """A decision from outside the machine that answers a wait (Workflow.answer_wait)."""

    RESUME = Next.RESUME.value
    GO = Next.GO.value
    CANCEL = "cancel"


# Which waits a decision may answer: a resume must never end a capacity or run wait.
ANSWERS_WAIT: dict[Decision, frozenset[WaitKind]] = {
    Decision.RESUME: frozenset({WaitKind.RESUME}),
    Decision.GO: frozenset({WaitKind.CAPACITY}),
    Decision.CANCEL: frozenset({WaitKind.CAPACITY, WaitKind.RESUME, WaitKind.RUN}),
}
