"""Budgets (issue 25; docs/BUDGETS.md): who may set them, admission's reservation, the meter's tick.

- `BudgetService`: POST/GET/PATCH/DELETE /budgets. Admins may budget any scope. Anyone else may budget
  only itself (scope principal = its own ARN) or its own team, sees only budgets of those scopes (others
  are 404), and may change or delete only budgets it created (an admin's cap on it is read-only: 403).
- `BudgetGate`: the scheduler's admission hook. Before a job is given capacity its forecast's upper end is
  reserved against every budget that covers it, each a conditional write on the budget's version; a job
  that does not fit, or whose budget is past a `hold_new` threshold, is held with reason BUDGET and never
  launched. Two passes racing for the last dollars: one reservation wins, the other re-reads and holds.
- `BudgetMeter.tick`: replaces each budget's per-job charges with what the job has cost (budget_meter.py),
  shrinks reservations as cost accrues and drops them when the job ends, fires each crossed threshold once
  per period (a `budget.threshold_crossed` event in the same write), and at `pause_running` asks the
  covered running jobs to take the checkpointed pause (pending_action pause, reason BUDGET), and at a
  `cancel` threshold (only when a budget names one) cancels its covered running and waiting jobs. Raising a
  budget (PATCH) or a new period resumes the jobs it paused, highest priority first. The actions on the
  jobs themselves are budget_actions.py's.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from functions.catalog.gpu_types import gpu_type_of, units_of
from functions.errors import AdminOnly, BudgetChanged, BudgetNotFound, InvalidRequest, JobNotFound
from functions.service import budget_meter as meter
from functions.service.budget_actions import BUDGET_REASON, WAITING, CancelJob, cancel_for_budget, jobs_in, pause_for_budget
from functions.service.ports import JobRepository, RunStopper
from functions.service.principal import Principal
from schemas.budgets import (
    Budget,
    BudgetLeft,
    BudgetList,
    BudgetPatch,
    BudgetScope,
    BudgetSpec,
    BudgetView,
    Forecast,
    OverrideRequest,
    ScopeKind,
    ThresholdAction,
)
from schemas.events import BudgetOverride, BudgetThresholdCrossed, event_id
from schemas.job import Job
from schemas.status import PAUSABLE, RUNNING, JobStatus

logger = logging.getLogger(__name__)

_ATTEMPTS = 5


class BudgetRepository(Protocol):
    """Budgets in the jobs table (functions/adapters/budgets.py); every write conditional on the version."""

    def get(self, budget_id: str) -> Budget:
        """BudgetNotFound if there is none."""

    def list(self) -> list[Budget]: ...

    def create(self, budget: Budget) -> None: ...

    def put(self, budget: Budget, expected_version: int, events: Iterable[BudgetThresholdCrossed | BudgetOverride] = ()) -> Budget:
        """Store `budget` as version expected + 1, its events in the same transaction; BudgetChanged when the
        stored version is not `expected_version`."""

    def delete(self, budget_id: str) -> bool: ...


class TeamOf(Protocol):
    """The team of a principal (a dashboard user's by their Cognito groups too: functions/service/teams.py)."""

    def __call__(self, principal: Principal) -> str: ...


def _utcnow() -> datetime:
    return datetime.now(UTC)


def scope_text(scope: BudgetScope) -> str:
    return scope.kind.value if scope.value is None else f"{scope.kind.value}:{scope.value}"


def _action_at(budget: Budget, action: ThresholdAction, spent: float) -> bool:
    """Is `budget` at or past a threshold with `action`?"""
    return any(t.action == action and spent >= _at(budget, t.percent) for t in budget.thresholds)


def _at(budget: Budget, percent: float) -> float:
    """The spend at which `percent` of the budget is reached."""
    return budget.amount_usd * percent / 100.0


def rolled(budget: Budget, now: datetime) -> Budget:
    """The budget in the period that holds `now`: a new period starts with no charges and no crossings."""
    start = meter.period_start(budget.period, now, budget.created_at, budget.starts_at)
    if start <= budget.period_start:
        return budget
    return budget.model_copy(update={"period_start": start, "charges": {}, "crossed": [], "overrides": {}})


class BudgetService:
    """POST/GET/PATCH/DELETE /budgets."""

    def __init__(
        self,
        repository: BudgetRepository,
        team_of: TeamOf,
        resume: Callable[[list[str]], list[str]],
        clock: Callable[[], datetime] = _utcnow,
        ids: Callable[[], str] = lambda: f"bgt-{uuid.uuid4().hex[:16]}",
        jobs: JobRepository | None = None,
        learned: Callable[[Job], meter.JobForecast] = meter.forecast,
    ) -> None:
        self.repository = repository
        # The duration forecast: ForecastLearner.forecast (functions/service/forecast_learning.py) in the
        # composition root, the job's cap or the prior without one.
        self.learned = learned
        self.team_of = team_of
        self.resume = resume
        self.jobs = jobs
        self.clock = clock
        self.ids = ids

    def _own_scope(self, scope: BudgetScope, principal: Principal) -> bool:
        if scope.kind == ScopeKind.PRINCIPAL:
            return scope.value == principal.arn
        if scope.kind == ScopeKind.TEAM:
            return scope.value == self.team_of(principal)
        return False

    def _visible(self, budget: Budget, principal: Principal) -> bool:
        """Admins see every budget; anyone else its own, its team's and the deployment's (never another's)."""
        return principal.is_admin or budget.scope.kind == ScopeKind.DEPLOYMENT or self._own_scope(budget.scope, principal)

    def create(self, spec: BudgetSpec, principal: Principal) -> BudgetView:
        if not (principal.is_admin or self._own_scope(spec.scope, principal)):
            raise AdminOnly(
                "only admins may budget a label, the deployment, another principal or another team; budget yourself or your own team"
            )
        now = self.clock()
        budget = Budget(
            budget_id=self.ids(),
            **spec.model_dump(),
            created_by=principal.arn,
            created_at=now,
            updated_at=now,
            period_start=meter.period_start(spec.period, now, now, spec.starts_at),
        )
        self.repository.create(budget)
        return BudgetView.of(budget)

    def _read(self, budget_id: str, principal: Principal) -> Budget:
        budget = self.repository.get(budget_id)
        if not self._visible(budget, principal):
            raise BudgetNotFound(budget_id)
        return budget

    def forecast(self, job: Job, principal: Principal, position: Callable[[Job], Job]) -> Forecast:
        """POST /jobs?dry_run=true: the job's price, duration and total ranges, its place in the queue and
        what each covering budget it may see would have left. `job` is a draft (JobService.draft): stored nowhere."""
        guess = self.learned(job)
        placed = position(job.model_copy(update={"status": JobStatus.QUEUED}))
        now = self.clock()
        lefts = []
        for stored in self.repository.list():
            if not (meter.covers(stored.scope, job) and meter.in_period(stored, job) and self._visible(stored, principal)):
                continue
            budget = rolled(stored, now)
            lefts.append(
                BudgetLeft(
                    budget_id=budget.budget_id,
                    name=budget.name,
                    left_usd=budget.left_usd,
                    left_after_usd=round(budget.left_usd - guess.high_usd, 6),
                    would_hold=_refusal(budget, job, meter.reservation_usd(job)) is not None,
                )
            )
        rc = job.resource_config
        return Forecast(
            gpu_type=gpu_type_of(rc),
            units=units_of(rc),
            hourly_usd=round(guess.hourly_usd, 6),
            duration_seconds=guess.seconds,
            duration_low_seconds=guess.low_seconds,
            duration_high_seconds=guess.high_seconds,
            total_usd=round(guess.total_usd, 6),
            total_low_usd=round(guess.low_usd, 6),
            total_high_usd=round(guess.high_usd, 6),
            basis=guess.basis,
            shape=meter.shape_of(job),
            queue_position=placed.queue_position or 0,
            estimated_wait_seconds=placed.estimated_wait_seconds or 0.0,
            budgets=lefts,
        )

    def _may_change(self, budget: Budget, principal: Principal) -> None:
        if not (principal.is_admin or budget.created_by == principal.arn):
            raise AdminOnly("this budget was set by an admin: only admins may change or delete it")

    def get(self, budget_id: str, principal: Principal) -> BudgetView:
        return BudgetView.of(self._read(budget_id, principal))

    def list_budgets(self, principal: Principal) -> BudgetList:
        visible = [b for b in self.repository.list() if self._visible(b, principal)]
        return BudgetList(budgets=[BudgetView.of(b) for b in visible])

    def patch(self, budget_id: str, request: BudgetPatch, principal: Principal) -> BudgetView:
        """A new amount or thresholds; raising the amount (above what is spent) resumes the jobs it paused."""
        for _ in range(_ATTEMPTS):
            budget = self._read(budget_id, principal)
            self._may_change(budget, principal)
            changes: dict[str, object] = {"updated_at": self.clock()}
            if request.amount_usd is not None:
                changes["amount_usd"] = request.amount_usd
            if request.thresholds is not None:
                changes["thresholds"] = request.thresholds
            updated = budget.model_copy(update=changes)
            # Crossings above the new amount's thresholds may fire again; those still below stay fired.
            spent = updated.spent_usd
            crossed = [p for p in updated.crossed if spent >= updated.amount_usd * p / 100.0]
            resumable = [] if _action_at(updated, ThresholdAction.PAUSE_RUNNING, spent) else list(updated.paused_jobs)
            updated = updated.model_copy(update={"crossed": crossed, "paused_jobs": [j for j in updated.paused_jobs if j not in resumable]})
            try:
                stored = self.repository.put(updated, budget.version)
            except BudgetChanged:
                continue
            if resumable:
                self.resume(resumable)
            return BudgetView.of(stored)
        raise BudgetChanged(budget_id, "it kept changing")

    def override(self, budget_id: str, request: OverrideRequest, principal: Principal) -> BudgetView:
        """An admin lets one covered job run over the budget, for a reason: a `budget.override` event in the same
        write, the job leaves the budget's paused list and resumes if PAUSED; the budget no longer holds or
        pauses it this period."""
        self._read(budget_id, principal)  # another's budget is a 404, as on every route, before the 403
        if not principal.is_admin:
            raise AdminOnly("only the deployment's admins may let a job run over a budget")
        assert self.jobs is not None
        for _ in range(_ATTEMPTS):
            budget = rolled(self.repository.get(budget_id), self.clock())
            job = self.jobs.get(request.job_id)
            if not (meter.covers(budget.scope, job) and meter.in_period(budget, job)):
                raise InvalidRequest("job_id", f"job {job.job_id} is not covered by budget {budget.name!r} this period")
            sequence = budget.event_seq + 1
            event = BudgetOverride(
                event_id=event_id("budget", budget.budget_id, sequence),
                sequence=sequence,
                at=self.clock(),
                owner=budget.created_by,
                actor=principal.arn,
                reason=request.reason,
                budget_id=budget.budget_id,
                budget_name=budget.name,
                job_id=job.job_id,
                amount_usd=budget.amount_usd,
                spent_usd=budget.spent_usd,
            )
            updated = budget.model_copy(
                update={
                    "overrides": {**budget.overrides, job.job_id: request.reason},
                    "paused_jobs": [j for j in budget.paused_jobs if j != job.job_id],
                    "event_seq": sequence,
                    "updated_at": self.clock(),
                }
            )
            try:
                stored = self.repository.put(updated, budget.version, [event])
            except BudgetChanged:
                continue
            if job.status == JobStatus.PAUSED:
                self.resume([job.job_id])
            return BudgetView.of(stored)
        raise BudgetChanged(budget_id, "it kept changing")

    def delete(self, budget_id: str, principal: Principal) -> None:
        budget = self._read(budget_id, principal)
        self._may_change(budget, principal)
        if not self.repository.delete(budget_id):
            raise BudgetNotFound(budget_id)
        if budget.paused_jobs:
            self.resume(list(budget.paused_jobs))


@dataclass(frozen=True)
class Hold:
    budget_id: str
    message: str


def _refusal(budget: Budget, job: Job, amount: float) -> Hold | None:
    """Why `budget` holds the job: past a hold_new (or cancel) threshold, or the forecast does not fit what is left."""
    if job.job_id in budget.reservations or job.job_id in budget.overrides:
        return None  # already admitted, or an admin let it run over this budget
    spent = budget.spent_usd
    if _action_at(budget, ThresholdAction.HOLD_NEW, spent) or _action_at(budget, ThresholdAction.CANCEL, spent):
        return Hold(budget.budget_id, f"{BUDGET_REASON}: budget {budget.name!r} is at {spent:.4f} of {budget.amount_usd:.4f} USD")
    if budget.left_usd < amount:
        return Hold(
            budget.budget_id,
            f"{BUDGET_REASON}: the job's forecast {amount:.4f} USD exceeds what budget {budget.name!r} has left "
            f"({budget.left_usd:.4f} USD)",
        )
    return None


class BudgetGate:
    """The scheduler's admission hook (functions/service/scheduler.py `admission`)."""

    def __init__(self, repository: BudgetRepository, clock: Callable[[], datetime] = _utcnow) -> None:
        self.repository = repository
        self.clock = clock

    def hold(self, job: Job) -> Hold | None:
        """Reserve the job's forecast against every budget covering it; a Hold (nothing reserved) if one refuses.

        Idempotent per job: a job already holding a reservation keeps it."""
        amount = meter.reservation_usd(job)
        reserved: list[str] = []
        for budget in self.repository.list():
            if not (meter.covers(budget.scope, job) and meter.in_period(budget, job)):
                continue
            refusal = self._reserve(budget.budget_id, job, amount)
            if refusal is not None:
                for budget_id in reserved:
                    self.release(budget_id, job.job_id)
                return refusal
            reserved.append(budget.budget_id)
        return None

    def would_hold(self, job: Job) -> Hold | None:
        """Why the job would be held now, reserving nothing (GET /jobs/{id}'s wait_reason, the dry run)."""
        amount = meter.reservation_usd(job)
        now = self.clock()
        for budget in self.repository.list():
            if meter.covers(budget.scope, job) and meter.in_period(budget, job):
                refusal = _refusal(rolled(budget, now), job, amount)
                if refusal is not None:
                    return refusal
        return None

    def released(self, job: Job) -> None:
        """The job gave its capacity back (ended, paused, preempted): its reservations go."""
        for budget in self.repository.list():
            if job.job_id in budget.reservations:
                self.release(budget.budget_id, job.job_id)

    def _reserve(self, budget_id: str, job: Job, amount: float) -> Hold | None:
        for _ in range(_ATTEMPTS):
            try:
                budget = rolled(self.repository.get(budget_id), self.clock())
            except BudgetNotFound:
                return None
            if job.job_id in budget.reservations:
                return None
            refusal = _refusal(budget, job, amount)
            if refusal is not None:
                return refusal
            updated = budget.model_copy(update={"reservations": {**budget.reservations, job.job_id: amount}})
            try:
                self.repository.put(updated, budget.version)
                return None
            except BudgetChanged:
                continue  # another reservation or the meter wrote first: decide again on what is stored
        return Hold(budget_id, f"{BUDGET_REASON}: budget {budget_id} kept changing; waiting for the next pass")

    def release(self, budget_id: str, job_id: str) -> None:
        for _ in range(_ATTEMPTS):
            try:
                budget = self.repository.get(budget_id)
            except BudgetNotFound:
                return
            if job_id not in budget.reservations:
                return
            updated = budget.model_copy(update={"reservations": {k: v for k, v in budget.reservations.items() if k != job_id}})
            try:
                self.repository.put(updated, budget.version)
                return
            except BudgetChanged:
                continue


class _RunningIndex:
    """The running jobs by team and by owner, so that a budget's tick looks only at the jobs it may cover."""

    def __init__(self, running: list[Job]) -> None:
        self.all = running
        self.by_team: dict[str | None, list[Job]] = {}
        self.by_owner: dict[str, list[Job]] = {}
        for job in running:
            self.by_team.setdefault(job.team, []).append(job)
            self.by_owner.setdefault(job.owner, []).append(job)

    def candidates(self, scope: BudgetScope) -> list[Job]:
        if scope.kind == ScopeKind.TEAM:
            return self.by_team.get(scope.value, [])
        if scope.kind == ScopeKind.PRINCIPAL:
            return self.by_owner.get(scope.value or "", [])
        return self.all


@dataclass
class TickResult:
    budgets: int = 0
    jobs: int = 0
    events: list[BudgetThresholdCrossed] | None = None
    paused: list[str] | None = None
    cancelled: list[str] | None = None


@dataclass
class _Metered:
    """One budget's tick: the events written with it and what it asks of the jobs."""

    events: list[BudgetThresholdCrossed]
    to_pause: list[Job]
    to_cancel: list[Job]
    cancel_percent: float
    resumable: list[str]


class BudgetMeter:
    """The periodic tick (the reconciler's schedule in the cloud, local mode's loop)."""

    def __init__(
        self,
        repository: BudgetRepository,
        jobs: JobRepository,
        stopper: RunStopper | None,
        clock: Callable[[], datetime] = _utcnow,
        dashboard_url: str | None = None,
        resume: Callable[[list[str]], list[str]] | None = None,
        cancel: CancelJob | None = None,
    ) -> None:
        self.repository = repository
        self.jobs = jobs
        self.stopper = stopper
        self.clock = clock
        self.dashboard_url = dashboard_url
        self.resume = resume
        self.cancel = cancel

    def running(self) -> list[Job]:
        return jobs_in(self.jobs, RUNNING)

    def tick(self) -> TickResult:
        now = self.clock()
        result = TickResult(events=[], paused=[], cancelled=[])
        waiting: list[Job] | None = None

        def waiting_jobs() -> list[Job]:
            nonlocal waiting  # read once a tick, and only when a budget is past a cancel threshold
            waiting = jobs_in(self.jobs, WAITING) if waiting is None else waiting
            return waiting

        budgets = self.repository.list()
        if not budgets:
            return result  # a deployment without budgets reads no jobs for them
        running = self.running()
        # Each running job's cost once per tick, whatever the number of budgets covering it.
        costs = {j.job_id: round(meter.accrued_usd(j, now), 6) for j in running}
        index = _RunningIndex(running)
        for budget in budgets:
            result.budgets += 1
            for _ in range(_ATTEMPTS):
                try:
                    metered = self._meter_one(budget, index.candidates(budget.scope), costs, now, waiting_jobs)
                    break
                except BudgetChanged:
                    budget = self.repository.get(budget.budget_id)
            else:
                continue
            assert result.events is not None and result.paused is not None and result.cancelled is not None
            result.events.extend(metered.events)
            if metered.resumable and self.resume is not None:
                self.resume(metered.resumable)  # a new period: what the last one paused runs again
            for job in metered.to_pause:
                if pause_for_budget(self.jobs, self.stopper, job, budget):
                    result.paused.append(job.job_id)
            for job in metered.to_cancel:
                if cancel_for_budget(self.cancel, job, budget, metered.cancel_percent):
                    result.cancelled.append(job.job_id)
        result.jobs = len(running)
        return result

    def _meter_one(
        self, stored: Budget, running: list[Job], costs: dict[str, float], now: datetime, waiting: Callable[[], list[Job]]
    ) -> _Metered:
        budget = rolled(stored, now)
        resumable: list[str] = []
        if budget.period_start != stored.period_start and self.resume is not None:
            resumable, budget = list(budget.paused_jobs), budget.model_copy(update={"paused_jobs": []})
        charges = dict(budget.charges)
        reservations = dict(budget.reservations)
        live = {j.job_id: j for j in running if meter.covers(budget.scope, j) and meter.in_period(budget, j)}
        # Jobs running at the last tick or reserved that no longer run: their final figure from their record (the
        # run's cost is recorded before its end is decided), then no reservation. Ended jobs are not read again.
        for job_id in (set(budget.metering) | set(reservations)) - set(live):
            try:
                job = self.jobs.get(job_id)
            except JobNotFound:
                reservations.pop(job_id, None)
                continue
            if job.status in RUNNING:
                live[job_id] = job
                continue
            if meter.in_period(budget, job):
                charges[job_id] = round(meter.accrued_usd(job, now), 6)
            if job.status != JobStatus.QUEUED and job.status not in {JobStatus.PENDING}:
                reservations.pop(job_id, None)  # ended or paused: nothing more to reserve for this run
        for job_id, job in live.items():
            charges[job_id] = costs[job_id] if job_id in costs else round(meter.accrued_usd(job, now), 6)
            if job_id in reservations:
                reservations[job_id] = round(max(reservations[job_id] - charges[job_id], 0.0), 6)
        spent = sum(charges.values())
        events: list[BudgetThresholdCrossed] = []
        crossed = list(budget.crossed)
        sequence = budget.event_seq
        to_pause: list[Job] = []
        if _action_at(budget, ThresholdAction.PAUSE_RUNNING, spent):
            to_pause = [j for j in live.values() if j.status in PAUSABLE and j.pending_action is None and j.job_id not in budget.overrides]
        to_cancel: list[Job] = []
        cancel_at = [t.percent for t in budget.thresholds if t.action == ThresholdAction.CANCEL and spent >= _at(budget, t.percent)]
        if cancel_at:
            # Cancel wins over pause: the running jobs it covers, and those waiting (never an overridden one).
            covered = [*live.values(), *(j for j in waiting() if meter.covers(budget.scope, j) and meter.in_period(budget, j))]
            to_cancel = [j for j in covered if j.job_id not in budget.overrides]
            cancelled = {j.job_id for j in to_cancel}
            to_pause = [j for j in to_pause if j.job_id not in cancelled]
        for threshold in budget.thresholds:
            at = _at(budget, threshold.percent)
            if spent < at or threshold.percent in crossed:
                continue
            sequence += 1
            acted = {ThresholdAction.PAUSE_RUNNING: to_pause, ThresholdAction.CANCEL: to_cancel}.get(threshold.action, [])
            events.append(self._event(budget, threshold.percent, threshold.action, spent, sequence, now, [j.job_id for j in acted]))
        crossed = sorted(set(crossed) | {t.percent for t in budget.thresholds if spent >= _at(budget, t.percent)})
        paused_jobs = list(dict.fromkeys([*budget.paused_jobs, *(j.job_id for j in to_pause)]))
        updated = budget.model_copy(
            update={
                "charges": charges,
                "reservations": reservations,
                "crossed": crossed,
                "paused_jobs": paused_jobs,
                "metered_at": now,
                "metering": sorted(live),
                "event_seq": sequence,
            }
        )
        if updated != stored:
            self.repository.put(updated, stored.version, events)
        return _Metered(events, to_pause, to_cancel, min(cancel_at, default=0.0), resumable)

    def _event(
        self, budget: Budget, percent: float, action: ThresholdAction, spent: float, sequence: int, now: datetime, acted: list[str]
    ) -> BudgetThresholdCrossed:
        return BudgetThresholdCrossed(
            event_id=event_id("budget", budget.budget_id, sequence),
            sequence=sequence,
            at=now,
            owner=budget.created_by,
            reason=f"budget {budget.name!r} reached {percent:g}% ({spent:.4f} of {budget.amount_usd:.4f} USD): {action.value}",
            dashboard_url=self.dashboard_url,
            budget_id=budget.budget_id,
            budget_name=budget.name,
            scope=scope_text(budget.scope),
            percent=percent,
            action=action.value,
            amount_usd=budget.amount_usd,
            spent_usd=round(spent, 6),
            paused_job_ids=acted if action == ThresholdAction.PAUSE_RUNNING else [],
            cancelled_job_ids=acted if action == ThresholdAction.CANCEL else [],
        )
