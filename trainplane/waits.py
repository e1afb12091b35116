"""Waiting for a job, as seeds/003 (Fireworks' trainer job manager) does it, mapped onto our states.

    job = client.create_and_wait(request, follow_logs=True, progress=True)     # until COMPLETED
    job = client.wait_for_existing(job_id, until="training")                     # until the trainer runs
    job = client.resume_and_wait(job_id)                                         # PAUSED/PREEMPTED -> training
    job = client.reconnect_and_wait(job_id, poll_interval_s=5.0, timeout_s=600, max_wait_for_resumable_s=120)

What the seed's words mean here:
- "running" (the seed's JOB_STATE_RUNNING, the trainer is up) is `until="training"`: TRAINING,
  CHECKPOINTING, EVALUATING or EXPORTING (or COMPLETED, if it got there between two polls);
  `until="completed"` (the default of create_and_wait and wait_for_existing) waits for COMPLETED.
- Transitional states are waited out: PENDING, QUEUED, SCHEDULING, PREPARING; a TRAINING job with a
  pause pending; a PREEMPTED job the control plane is resuming by itself (its `run_outcome`).
- Resumable: PAUSED (POST /resume, same job) and PREEMPTED for good (POST /retry from the latest
  checkpoint: a child job, which the wait then follows; the Job returned says which one it is).
- The end: FAILED or CANCELLED raise JobFailed (error_type, error_message, the last log lines); so does
  PAUSED or a PREEMPTED job while waiting for completion without resuming; the deadline raises WaitTimeout.

Every wait survives the transport failing under it: a dropped connection or a 5xx is retried on the next
poll until the deadline, and a 403 makes the client fetch its credentials again (refreshed keys, a
rotated key pair) before it tries once more. Logs are followed with the API's log cursor
(GET /jobs/{id}/logs `cursor`), which a lost response does not advance: no line is lost or repeated.

The decisions are pure functions of the job (`decide`), and the loop is written once, as steps
(`wait_steps`, trainplane/transport.py): Client performs them with requests and time.sleep, AsyncClient
with httpx and asyncio.sleep.
"""

from __future__ import annotations

import math
import sys
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from schemas.api import LogLine
from schemas.job import Job, PendingAction
from schemas.status import JobStatus
from trainplane.errors import AuthError, Conflict, ConnectionFailed, JobFailed, ServerError, TrainplaneError, WaitTimeout
from trainplane.operations import existing_child, get_job, job_path, resume_job, retry_job, submit_job
from trainplane.transport import Refresh, Requester, Sleep, Steps, synced

if TYPE_CHECKING:
    from schemas.job import SubmitJobRequest

S = JobStatus
TRAINING_NOW: frozenset[JobStatus] = frozenset({S.TRAINING, S.CHECKPOINTING, S.EVALUATING, S.EXPORTING})
ON_THE_WAY: frozenset[JobStatus] = frozenset({S.PENDING, S.QUEUED, S.SCHEDULING, S.PREPARING})
LAST_LOG_LINES = 20
LOG_PAGE = 1000
# Errors of the transport (not of the request) that the next poll may get past.
TRANSIENT: tuple[type[TrainplaneError], ...] = (ConnectionFailed, ServerError)

LogHandler = Callable[[LogLine], None]
UpdateHandler = Callable[[Job], None]


class Target(StrEnum):
    TRAINING = "training"
    COMPLETED = "completed"


class Action(StrEnum):
    DONE = "done"
    WAIT = "wait"  # on its way: poll again
    SETTLING = "settling"  # not yet something we can act on (pause pending, preemption being handled)
    RESUME = "resume"  # PAUSED: POST /resume
    RETRY = "retry"  # PREEMPTED for good: POST /retry from the latest checkpoint
    FAIL = "fail"


@dataclass(frozen=True)
class Goal:
    """What a wait is for: a target (or, for the older API, a set of statuses) and whether to resume."""

    target: Target | None = Target.COMPLETED
    statuses: frozenset[JobStatus] = frozenset()
    resume: bool = False

    @classmethod
    def of(
        cls, until: str | Target | Iterable[JobStatus | str] | None, *, resume: bool = False, default: Target = Target.COMPLETED
    ) -> Goal:
        if until is None:
            return cls(default, resume=resume)
        if isinstance(until, str) and until.lower() in {t.value for t in Target}:
            return cls(Target(until.lower()), resume=resume)
        if isinstance(until, str):
            raise ValueError(f"until must be 'training', 'completed' or a set of statuses, not {until!r}")
        return cls(None, frozenset(JobStatus(s) for s in until), resume=resume)

    def describe(self) -> str:
        if self.target is Target.TRAINING:
            return "training (TRAINING, CHECKPOINTING, EVALUATING or EXPORTING)"
        if self.target is Target.COMPLETED:
            return "COMPLETED"
        return " or ".join(sorted(self.statuses))


def decide(job: Job, goal: Goal) -> Action:
    """The next step of a wait, from the job as it stands now."""
    status = job.status
    if goal.target is None:
        if status in goal.statuses:
            return Action.DONE
    elif status == S.COMPLETED or (goal.target is Target.TRAINING and status in TRAINING_NOW and job.pending_action is None):
        return Action.DONE
    if status in {S.FAILED, S.CANCELLED, S.COMPLETED}:
        return Action.FAIL
    if status in ON_THE_WAY:
        return Action.WAIT
    if status in TRAINING_NOW:
        # A pause (or cancel) on its way: the job is about to stop, not to train on.
        return Action.SETTLING if job.pending_action in {PendingAction.PAUSE, PendingAction.CANCEL} and goal.resume else Action.WAIT
    if status == S.PAUSED:
        return Action.RESUME if goal.resume else Action.FAIL
    if status == S.PREEMPTED:
        if job.run_outcome == "resume_preempted":
            return Action.SETTLING  # the control plane resumes it by itself (PREEMPTED -> QUEUED)
        return Action.RETRY if goal.resume else Action.FAIL
    return Action.WAIT


@dataclass
class LogFollower:
    """Follows one job's log exactly once per line, with the API's cursor.

    The cursor moves only when a page's lines have been handed over, so a request whose answer was lost
    (a dropped connection) is simply asked again. Against an API that returns no cursor (the CloudWatch
    reader), it falls back to `since` = the newest stamp seen, skipping the lines already given there.
    """

    job_id: str
    on_line: LogHandler | None = None
    cursor: str | None = None
    since: float | None = None  # the first round's `since` (epoch seconds), when given
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=LAST_LOG_LINES))
    seen: int = 0
    _boundary: float | None = None
    _at_boundary: int = 0
    _page_token: str | None = None
    _round_skip: int = 0
    _round_boundary: float | None = None
    _round_since: float | None = None

    def params(self) -> dict[str, Any]:
        if self.cursor is not None:
            return {"next_token": self.cursor, "limit": LOG_PAGE}
        return {"since": self._round_since, "next_token": self._page_token, "limit": LOG_PAGE}

    def start_round(self) -> None:
        self._page_token = None
        # One `since` for every page of a round: the pages' tokens are positions in that selection.
        self._round_since = self.since if self._boundary is None else math.nextafter(self._boundary, -math.inf)
        self._round_boundary, self._round_skip = self._boundary, self._at_boundary

    def absorb(self, body: Mapping[str, Any]) -> bool:
        """Hand over one page's new lines; True while the API has more pages now."""
        cursor = body.get("cursor")
        for raw in body.get("lines", []):
            line = LogLine.model_validate(raw)
            if cursor is None and self.cursor is None and self._round_boundary is not None:
                if line.timestamp < self._round_boundary:
                    continue
                if line.timestamp == self._round_boundary and self._round_skip > 0:
                    self._round_skip -= 1
                    continue
            self._at_boundary = self._at_boundary + 1 if line.timestamp == self._boundary else 1
            self._boundary = line.timestamp
            self.seen += 1
            self.tail.append(line.message)
            if self.on_line is not None:
                self.on_line(line)
        token = body.get("next_token")
        if cursor is not None:
            self.cursor = str(cursor)
            self._page_token = None
        else:
            self._page_token = str(token) if token else None
        return bool(token)


@dataclass
class WaitState:
    """One wait's bookkeeping: its goal, deadline, the job it follows (a retry switches to the child)."""

    goal: Goal
    job_id: str
    timeout_s: float | None
    poll_interval_s: float
    follow: LogFollower | None
    started: float = field(default_factory=time.monotonic)
    settle_started: float | None = None
    max_settle_s: float | None = None
    last_job: Job | None = None
    auth_retried: bool = False

    def remaining(self) -> float | None:
        return None if self.timeout_s is None else self.timeout_s - (time.monotonic() - self.started)

    def pause_s(self) -> float:
        left = self.remaining()
        return self.poll_interval_s if left is None else max(0.0, min(self.poll_interval_s, left))

    def expired(self) -> bool:
        left = self.remaining()
        return left is not None and left <= 0

    def timeout_error(self) -> WaitTimeout:
        job = self.last_job
        status = job.status.value if job is not None else "unknown"
        return WaitTimeout(self.job_id, status, self.timeout_s or 0.0, [], job=job, what=self.goal.describe())

    def settling(self, action: Action) -> None:
        """Bound the time spent in states we cannot act on (the seed's max_wait_for_resumable_s)."""
        if action is not Action.SETTLING:
            self.settle_started = None
            return
        now = time.monotonic()
        if self.settle_started is None:
            self.settle_started = now
        if self.max_settle_s is not None and now - self.settle_started > self.max_settle_s:
            status = self.last_job.status.value if self.last_job else "unknown"
            raise WaitTimeout(
                self.job_id, status, self.max_settle_s, [], job=self.last_job, what="a resumable state (max_wait_for_resumable_s)"
            )

    def switch_to(self, job: Job) -> None:
        """A retry made a child job: from now on the wait (and the log) follows it."""
        self.job_id = job.job_id
        self.last_job = job
        if self.follow is not None:
            self.follow = LogFollower(job.job_id, on_line=self.follow.on_line)


def failure(state: WaitState, job: Job, why: str = "") -> JobFailed:
    lines = list(state.follow.tail) if state.follow is not None else []
    return JobFailed(job, lines, why=why)


def why_not(job: Job, goal: Goal) -> str:
    if job.status == S.PAUSED:
        return "it waits to be resumed (resume_and_wait or reconnect_and_wait resume it)"
    if job.status == S.PREEMPTED:
        return "its preemption budget is spent (resume_and_wait or reconnect_and_wait retry it from its latest checkpoint)"
    if job.status == S.COMPLETED and goal.target is None:
        return f"it finished without reaching {goal.describe()}"
    return ""


def new_idempotency_key() -> str:
    return f"wait-{uuid.uuid4()}"


# --- what a person sees --------------------------------------------------------------------------


def print_line(line: LogLine) -> None:
    sys.stdout.write(f"[{line.attempt}] {line.message}\n")
    sys.stdout.flush()


class ProgressView:
    """A rich progress bar (status, step, loss) with the followed log lines printed above it."""

    def __init__(self, job_id: str, console: Any = None) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.console = console or Console(stderr=True, highlight=False)
        self.bar = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.percentage:>5.1f}%"),
            TextColumn("{task.fields[detail]}"),
            TimeElapsedColumn(),
            console=self.console,
        )
        self.task = self.bar.add_task(job_id, total=100.0, detail="")

    def __enter__(self) -> ProgressView:
        self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.stop()

    def update(self, job: Job) -> None:
        from rich.markup import escape

        p = job.progress
        step = f"step {p.step}/{p.total_steps}" if p.total_steps else f"step {p.step}"
        loss = f", loss {p.loss:.4f}" if p.loss is not None else ""
        self.bar.update(
            self.task, completed=p.percent, description=f"{escape(job.name)} [bold]{job.status.value}[/bold]", detail=step + loss
        )

    def line(self, line: LogLine) -> None:
        self.console.print(f"[{line.attempt}] {line.message}", markup=False, highlight=False)


class _NullView:
    def __enter__(self) -> _NullView:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def view_for(job_id: str, progress: bool | ProgressView) -> ProgressView | _NullView:
    """`progress`: False (no bar), True (a bar on stderr), or a ProgressView of the caller's (the CLI's)."""
    if isinstance(progress, ProgressView):
        return progress
    return ProgressView(job_id) if progress else _NullView()


def handlers(
    view: ProgressView | _NullView, follow_logs: bool, on_log: LogHandler | None, on_update: UpdateHandler | None
) -> tuple[LogHandler | None, UpdateHandler | None]:
    """Who gets log lines and job updates: the caller's callbacks, else the progress bar, else stdout."""
    log: LogHandler | None = None
    if follow_logs:
        log = on_log or (view.line if isinstance(view, ProgressView) else print_line)
    update = on_update
    if isinstance(view, ProgressView):
        bar = view

        def update_both(job: Job) -> None:
            bar.update(job)
            if on_update is not None:
                on_update(job)

        update = update_both
    return log, update


# --- the waits, written once as operations (trainplane/transport.py): Client and AsyncClient run them ---


class WaitOps:
    """create_and_wait, wait_for_existing, resume_and_wait, reconnect_and_wait (see the module docstring),
    as steps; `WaitMethods` (Client) and AsyncClient make them methods."""

    _request: Callable[..., Steps[Any]]

    def create_and_wait(
        self,
        request: SubmitJobRequest | Mapping[str, Any],
        *,
        until: str | Iterable[JobStatus | str] | None = None,
        timeout_s: float | None = None,
        poll_interval_s: float = 5.0,
        follow_logs: bool = False,
        progress: bool | ProgressView = False,
        on_log: LogHandler | None = None,
        on_update: UpdateHandler | None = None,
        idempotency_key: str | None = None,
        timeout: float | None = None,
        poll: float | None = None,
    ) -> Steps[Job]:
        """Submit (with an Idempotency-Key, made up when not given, so a lost answer is retried safely),
        then wait as wait_for_existing does (default: until COMPLETED).

        `timeout` and `poll` are the older names of `timeout_s` and `poll_interval_s`.
        """
        # Always with an Idempotency-Key: a submit whose answer was lost is repeated safely (same job).
        job = yield from submit_job(self, request, idempotency_key or new_idempotency_key())
        timeout_s = timeout if timeout is not None else timeout_s
        poll_interval_s = poll if poll is not None else poll_interval_s
        return (
            yield from wait_steps(self, Goal.of(until), job.job_id, timeout_s, poll_interval_s, follow_logs, progress, on_log, on_update)
        )

    def wait_for_existing(
        self,
        job_id: str,
        *,
        until: str | Iterable[JobStatus | str] | None = None,
        timeout_s: float | None = None,
        poll_interval_s: float = 5.0,
        follow_logs: bool = False,
        progress: bool | ProgressView = False,
        on_log: LogHandler | None = None,
        on_update: UpdateHandler | None = None,
    ) -> Steps[Job]:
        """Wait out transitional states until `until` ("completed", "training", or a set of statuses).

        JobFailed if the job FAILED, was CANCELLED, or stopped (PAUSED, PREEMPTED for good) short of it.
        """
        goal = Goal.of(until)
        return (yield from wait_steps(self, goal, job_id, timeout_s, poll_interval_s, follow_logs, progress, on_log, on_update))

    def resume_and_wait(
        self,
        job_id: str,
        *,
        checkpoint_id: str = "",
        until: str | Iterable[JobStatus | str] | None = Target.TRAINING,
        timeout_s: float | None = None,
        poll_interval_s: float = 5.0,
        follow_logs: bool = False,
        progress: bool | ProgressView = False,
        on_log: LogHandler | None = None,
        on_update: UpdateHandler | None = None,
    ) -> Steps[Job]:
        """Resume a PAUSED job (or retry a PREEMPTED one from its latest checkpoint) and wait until it
        trains again (or `until`). A job that is already on its way is just waited for."""
        goal = Goal.of(until, resume=True, default=Target.TRAINING)
        waiting = wait_steps(
            self, goal, job_id, timeout_s, poll_interval_s, follow_logs, progress, on_log, on_update, checkpoint_id=checkpoint_id
        )
        return (yield from waiting)

    def reconnect_and_wait(
        self,
        job_id: str,
        poll_interval_s: float = 5.0,
        timeout_s: float = 600,
        max_wait_for_resumable_s: float = 120,
        *,
        follow_logs: bool = False,
        progress: bool | ProgressView = False,
        on_log: LogHandler | None = None,
        on_update: UpdateHandler | None = None,
    ) -> Steps[Job]:
        """After a preemption or a lost client: wait (at most max_wait_for_resumable_s) while the control
        plane settles the job (a pause or preemption in progress), resume it if it is PAUSED or PREEMPTED,
        then poll until it trains again (within timeout_s overall)."""
        goal = Goal.of(Target.TRAINING, resume=True)
        waiting = wait_steps(
            self, goal, job_id, timeout_s, poll_interval_s, follow_logs, progress, on_log, on_update, max_settle_s=max_wait_for_resumable_s
        )
        return (yield from waiting)


class WaitMethods:
    """The waits as Client's methods (AsyncClient makes the same operations coroutines)."""

    create_and_wait = synced(WaitOps.create_and_wait)
    wait_for_existing = synced(WaitOps.wait_for_existing)
    resume_and_wait = synced(WaitOps.resume_and_wait)
    reconnect_and_wait = synced(WaitOps.reconnect_and_wait)


def wait_steps(
    api: Requester,
    goal: Goal,
    job_id: str,
    timeout_s: float | None,
    poll_interval_s: float,
    follow_logs: bool,
    progress: bool | ProgressView,
    on_log: LogHandler | None,
    on_update: UpdateHandler | None,
    *,
    checkpoint_id: str = "",
    max_settle_s: float | None = None,
) -> Steps[Job]:
    """The loop of every wait: poll the job, act on `decide`, follow its log, until done, failed or late."""
    with view_for(job_id, progress) as view:
        log, update = handlers(view, follow_logs, on_log, on_update)
        state = WaitState(goal, job_id, timeout_s, poll_interval_s, LogFollower(job_id, on_line=log), max_settle_s=max_settle_s)
        while True:
            job = yield from _guarded(state, get_job(api, state.job_id))
            if job is not None:
                state.last_job = job
                if update is not None:
                    update(job)
                if follow_logs:
                    yield from _guarded(state, _drain_logs(api, state))
                action = decide(job, goal)
                state.settling(action)
                if action is Action.DONE:
                    return job
                if action is Action.FAIL:
                    if not follow_logs:  # still read, for JobFailed's last lines
                        yield from _guarded(state, _drain_logs(api, state))
                    raise failure(state, job, why_not(job, goal))
                if action is Action.RESUME:
                    resumed = yield from _guarded(state, resume_job(api, state.job_id, checkpoint_id), conflict_ok=True)
                    if resumed is not None:
                        continue
                if action is Action.RETRY:
                    # A retry whose answer was lost made a child all the same: follow that one.
                    child = yield from _guarded(state, existing_child(api, job))
                    if child is None:
                        child = yield from _guarded(state, retry_job(api, state.job_id, checkpoint_id), conflict_ok=True)
                    if child is not None:
                        state.switch_to(child)
                        continue
            if state.expired():
                raise state.timeout_error()
            yield Sleep(state.pause_s())


def _drain_logs(api: Requester, state: WaitState) -> Steps[None]:
    follower = state.follow
    if follower is None:
        return
    follower.start_round()
    while follower.absorb((yield from api._request("GET", job_path(state.job_id, "logs"), params=follower.params()))):
        pass


def _guarded(state: WaitState, call: Steps[Any], *, conflict_ok: bool = False) -> Steps[Any]:
    """One API call of a wait: transport failures wait for the next poll (None); a 403 fetches the
    credentials again and tries once more; a 409 on a resume or retry (someone else acted first)
    re-reads the job; any other error is the caller's."""
    try:
        result = yield from call
    except TRANSIENT:
        return None
    except Conflict:
        if not conflict_ok:
            raise
        return None
    except AuthError:
        if state.auth_retried:
            raise
        state.auth_retried = True
        yield Refresh()
        return None
    state.auth_retried = False
    return result
