"""The scheduler: who gets capacity next, per queue by priority then FIFO, with slot claims that cannot double-book.

A job waiting for capacity is QUEUED with a "capacity" task token stored on it (the WaitForCapacity
state). A pass reads each queue's head by Query on the sparse by-queue index (repository.queued, no
Scan), claims the job's demand in its capacity pool with one conditional write (the ledger), moves the
job QUEUED -> SCHEDULING with a conditional transition and then answers its token "go". Losing either
conditional write undoes the claim, so two passes racing never book one slot twice nor one job twice.

Within a pool the order is strict (no backfill): a big job at the head is not starved by small ones
behind it. When the head cannot fit, running `preemptible` jobs of lower priority in that pool are
asked to stop gracefully with a checkpoint (pending_action "preempt"); they go back to the queue.

With teams (functions/service/teams.py, fair_share.py) a pool's jobs are offered capacity in fair-share
order instead: priority class, then jobs that keep their team within its nominal quota, then jobs of teams
under nominal that take them beyond it, then borrowers (fair_share.Standing), then the team's decayed usage
against its weight, then FIFO inside the team; a job its team's quota refuses (QUOTA, BORROW_LIMIT,
COHORT_FULL) waits without holding up other teams' jobs, except that a team under its nominal quota waiting
for room (COHORT_FULL) holds back other teams' borrowing.
"""

from __future__ import annotations

import logging
import math
import shutil
import subprocess
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from functions.catalog.gpu_types import gpu_type_of, inventory_problem
from functions.catalog.quotas import parse_gpu_inventory, parse_quotas
from functions.errors import ConcurrentModification, DomainError, IllegalTransition, JobNotFound
from functions.service.fair_share import Ask, Cohort, Holder, admission_order, fair_sharing_victims, reclaim_victims, work_lost
from functions.service.ports import CapacityLedger, CapacityModel, Demand, JobRepository, Reclaim, RunStopper, TokenAnswerer, Transition
from schemas.job import Actor, Job, PendingAction
from schemas.lifecycle import Next, WaitKind
from schemas.status import PAUSABLE, JobStatus
from schemas.teams import DEFAULT_TEAM, Team, WaitReason

if TYPE_CHECKING:
    from functions.service.teams import TeamDirectory

logger = logging.getLogger(__name__)

UNLIMITED = 1_000_000
_QUEUE_READ_LIMIT = 100  # the most one pass reads of a queue
_FIRST_READ_DEPTH = 10
_LOOKAHEAD = 2
_HOLDERS_CHECKED = 64  # beyond this many running jobs in a pool, just run the pass
# The rule a reclaim's event names: a borrower beyond its team's nominal quota, picked by weighted share
# (highest first), then priority (lowest), then work lost (least) (functions/service/fair_share.py).
RECLAIM_RULE = "borrowed_beyond_nominal"


class Admission(Protocol):
    """A hold before capacity is claimed (budgets, functions/service/budgets.py BudgetGate): `hold` reserves
    what the job needs and answers None, or answers why it waits (and reserves nothing); `would_hold` says
    the same without reserving; `released` drops what a job that gave its capacity back still reserves."""

    def hold(self, job: Job) -> object | None: ...

    def would_hold(self, job: Job) -> object | None: ...

    def released(self, job: Job) -> None: ...


class NeverFits(DomainError):
    """The job asks for more than its pool will ever have (e.g. a GPU job on a machine without GPUs)."""


def detect_local_gpus() -> int:
    """GPUs on this machine without importing torch (Lambda code never does): nvidia-smi -L, else 0."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return 0
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


@dataclass(frozen=True)
class LocalCapacity:
    """One machine: its GPUs as one pool, and CPU slots for gpu_count = 0 jobs, shared by every queue.

    With an emulated inventory (`trainplane up --gpus H100=4,A100=8`) each GPU type is a pool of its own
    (`local/H100`) and a job holds its units of its type while its trainer runs on the CPU."""

    gpu_slots: int
    cpu_slots: int = 1
    inventory: Mapping[str, int] = field(default_factory=dict)

    def demand(self, job: Job) -> Demand:
        rc = job.resource_config
        if rc.gpu_count == 0:
            return Demand("local/cpu", rc.node_count)
        units = rc.gpu_count * rc.node_count
        if self.inventory:
            problem = inventory_problem(self.inventory, gpu_type_of(rc), units)
            if problem is not None:
                raise NeverFits(problem[1])
            return Demand(f"local/{self.emulated_type(gpu_type_of(rc))}", units)
        if units > self.gpu_slots:
            raise NeverFits(
                f"resource_config asks for {units} GPU(s) but this machine has {self.gpu_slots}; "
                "set resource_config.gpu_count to 0 to train on the CPU"
            )
        return Demand("local/gpu", units)

    def capacity(self, pool: str) -> int:
        if pool == "local/cpu":
            return self.cpu_slots
        kind = pool.removeprefix("local/")
        return self.inventory.get(kind, 0) if self.inventory else self.gpu_slots

    def emulated_type(self, gpu_type: str) -> str:
        """A job that named no GPU type runs on the inventory's only type (inventory_problem refuses it otherwise)."""
        return next(iter(self.inventory)) if gpu_type == "any" and len(self.inventory) == 1 else gpu_type


@dataclass(frozen=True)
class CloudCapacity:
    """Per-queue quotas by GPU type (settings.gpu_quotas); unlisted combinations fall back to wildcards."""

    quotas: Mapping[tuple[str, str], int] = field(default_factory=dict)

    def demand(self, job: Job) -> Demand:
        rc = job.resource_config
        kind = "cpu" if rc.gpu_count == 0 else (rc.gpu_type or "any")
        units = rc.node_count * max(rc.gpu_count, 1)
        pool = f"{job.queue}/{kind}"
        if units > self.capacity(pool):
            raise NeverFits(f"resource_config asks for {units} {kind} unit(s) but queue {job.queue!r} has a quota of {self.capacity(pool)}")
        return Demand(pool, units)

    def capacity(self, pool: str) -> int:
        queue, _, kind = pool.partition("/")
        for key in ((queue, kind), (queue, "*"), ("*", kind), ("*", "*")):
            if key in self.quotas:
                return self.quotas[key]
        # No quota configured: the AWS account's own service quotas are the limit.
        return UNLIMITED


@dataclass
class PassResult:
    started: list[str] = field(default_factory=list)
    preempting: list[str] = field(default_factory=list)
    waiting: int = 0


class Scheduler:
    def __init__(
        self,
        repository: JobRepository,
        ledger: CapacityLedger,
        capacity: CapacityModel,
        tokens: TokenAnswerer,
        stopper: RunStopper,
        *,
        teams: TeamDirectory | None = None,
        clock: Callable[[], datetime] | None = None,
        admission: Admission | None = None,
    ) -> None:
        self.repository = repository
        self.admission = admission
        self.ledger = ledger
        self.capacity = capacity
        self.tokens = tokens
        self.stopper = stopper
        self.teams = teams
        self.clock = clock or (teams.clock if teams is not None else (lambda: datetime.now(UTC)))

    def _active_teams(self) -> dict[str, Team] | None:
        """Every team; None while teams change nothing (today's order)."""
        if self.teams is None:
            return None
        teams = self.teams.teams()
        return teams if self.teams.active(teams) else None

    def _cohort(self, teams: dict[str, Team] | None = None) -> Cohort | None:
        """Every team's quotas and holdings now; None while teams change nothing (today's order)."""
        teams = teams if teams is not None else self._active_teams()
        if teams is None:
            return None
        assert self.teams is not None
        return self.teams.cohort(teams, self.ledger, self.repository, self.clock())

    # --- claims -------------------------------------------------------------------------------
    def release(self, job: Job) -> bool:
        pool = job.capacity_pool
        if not pool:
            return False
        released = self.ledger.release(pool, job.job_id)
        if released:
            logger.info("released capacity", extra={"job_id": job.job_id, "pool": pool})
            if self.teams is not None:
                self.teams.record(job, self.clock())
            if self.admission is not None:
                self.admission.released(job)
        return released

    # --- the pass -----------------------------------------------------------------------------
    def run_pass(self, queues: Iterable[str] | None = None) -> PassResult:
        """Give capacity to waiting jobs in order; ask lower-priority preemptible jobs to make room."""
        result = PassResult()
        names = sorted(set(queues) if queues is not None else set(self.ledger.queues()))
        teams = self._active_teams()
        depth = self._read_depth()
        waiting: dict[str, Job] = {}
        for queue in names:
            for job in self.repository.queued(queue, limit=depth):
                waiting[job.job_id] = job
        cohort = self._cohort(teams) if waiting and teams is not None else None
        if cohort is not None:
            self._read_team_heads(cohort, set(names), depth, waiting)
        by_pool: dict[str, list[Job]] = {}
        for job in waiting.values():
            if job.task_token_kind != WaitKind.CAPACITY or not job.task_token:
                continue  # admitted but its WaitForCapacity has not stored a token yet: it runs its own pass
            try:
                demand = self.capacity.demand(job)
            except NeverFits:
                continue  # its own WaitForCapacity task fails it with the reason
            by_pool.setdefault(demand.pool, []).append(job)
        for pool, jobs in by_pool.items():
            # Several queues may share a pool (local mode): one order over all of them.
            if cohort is not None:
                self._serve_pool_fairly(pool, jobs, cohort, result)
                continue
            jobs.sort(key=lambda j: (-j.priority, j.created_at, j.job_id))
            self._serve_pool(pool, jobs, result)
        return result

    def _read_depth(self) -> int:
        """How far into each queue a pass reads: strict order needs only as many jobs as could start
        now, plus the next one (whose wait may call for a preemption). Reading 100 jobs where 2 matter
        costs real DynamoDB little, but moto's Query serialises every row returned (~25 ms a job).
        With teams the by-queue head is read as deep (it finds jobs of teams since deleted, and jobs queued
        before the per-team index existed); each team's own head comes from _read_team_heads."""
        free = 0
        for pool in self.ledger.pools():
            capacity = self.capacity.capacity(pool)
            if capacity >= UNLIMITED:
                return _QUEUE_READ_LIMIT
            free += max(capacity - sum(self.ledger.holders(pool).values()), 0)
        if not self.ledger.pools():
            return _FIRST_READ_DEPTH  # no claim made yet: every pool is empty
        return min(_QUEUE_READ_LIMIT, free + _LOOKAHEAD)

    def _read_team_heads(self, cohort: Cohort, queues: set[str], depth: int, waiting: dict[str, Job]) -> None:
        """Add each team's head per quota type to `waiting`, from the per-team index: fair share orders teams,
        so the by-queue head (the oldest jobs, maybe all one team's) is not enough. A team-type is read as
        deep as it could start jobs now (its room under nominal + borrow limit, at most `depth`) plus the
        next one, whose refusal or reclaim the pass decides; a type the team may not use at all (nominal and
        borrow limit 0: its jobs wait on QUOTA) is not read."""
        for name, team in cohort.teams.items():
            for gpu_type, quota in team.quotas.items():
                allowed = quota.nominal + cohort.borrow_limit(name, gpu_type)
                if allowed <= 0:
                    continue
                limit = min(depth, max(allowed - cohort.in_use[(name, gpu_type)], 0) + _LOOKAHEAD)
                for job in self.repository.queued_of_team(name, gpu_type, limit=limit):
                    if job.queue in queues:
                        waiting.setdefault(job.job_id, job)

    def worth_a_pass(self, job: Job) -> bool:
        """Could this job's arrival start anything? Free units in its pool, a lower-priority preemptible job
        to stop, or another team's job (a borrower to reclaim from). When not, the next release runs the
        pass that will serve it."""
        try:
            demand = self.capacity.demand(job)
        except NeverFits:
            return False
        holders = self.ledger.holders(demand.pool)
        if self.capacity.capacity(demand.pool) - sum(holders.values()) > 0 or len(holders) > _HOLDERS_CHECKED:
            return True
        for job_id in holders:
            try:
                holder = self.repository.get(job_id)
            except JobNotFound:
                return True  # an orphan claim: let a pass (and the reconciler) sort it out
            if holder.scheduling_config.preemptible and holder.priority < job.priority:
                return True
            if self.teams is not None and holder.team != job.team:
                return True  # maybe a borrower its team may reclaim from: the pass decides
        return False

    def _serve_pool(self, pool: str, jobs: list[Job], result: PassResult) -> None:
        capacity = self.capacity.capacity(pool)
        for index, job in enumerate(jobs):
            if self.admission is not None and self.admission.hold(job) is not None:
                result.waiting += 1
                continue  # held by a budget (reason BUDGET): never launched, and it holds up no one
            demand = self.capacity.demand(job)
            if not self.ledger.claim(pool, job.job_id, demand.units, capacity):
                if job.job_id in self.ledger.holders(pool):
                    continue  # a concurrent pass claimed it and is starting it
                self._make_room(pool, job, demand, capacity, result)
                result.waiting += len(jobs) - index
                return
            if self._start(job, pool):
                result.started.append(job.job_id)
            else:
                self.ledger.release(pool, job.job_id)

    def _serve_pool_fairly(self, pool: str, jobs: list[Job], cohort: Cohort, result: PassResult) -> None:
        capacity = self.capacity.capacity(pool)
        order = admission_order(jobs, cohort, DEFAULT_TEAM)
        refused: set[tuple[str, str]] = set()  # FIFO inside a team: behind its refused job, its later ones wait too
        held_back = False  # a team under its nominal quota waits for room: no other team borrows past it
        for index, (job, ask) in enumerate(order):
            if held_back and cohort.borrowing(ask):
                refused.add((ask.team, ask.gpu_type))
                result.waiting += 1
                continue
            refusal = None if (ask.team, ask.gpu_type) in refused else cohort.refusal(ask)
            held_back = held_back or (refusal == WaitReason.COHORT_FULL and cohort.holds_room_for(ask))
            if (ask.team, ask.gpu_type) in refused or refusal is not None:
                if refusal == WaitReason.COHORT_FULL and cohort.others_borrow_more(ask):  # Kueue's fair sharing between borrowers
                    self._reclaim(pool, job, ask, self.capacity.demand(job), capacity, cohort, result)
                refused.add((ask.team, ask.gpu_type))
                result.waiting += 1
                continue
            if self.admission is not None and self.admission.hold(job) is not None:
                result.waiting += 1
                continue
            demand = self.capacity.demand(job)
            if not self.ledger.claim(pool, job.job_id, demand.units, capacity, team=cohort.hold_for(ask)):
                holders = self.ledger.holders(pool)
                if job.job_id in holders:
                    continue
                if capacity - sum(holders.values()) >= demand.units:
                    # Room in the pool: its team's hold refused it (a racing pass admitted its team's job)
                    refused.add((ask.team, ask.gpu_type))
                    result.waiting += 1
                    continue
                if not self._reclaim(pool, job, ask, demand, capacity, cohort, result):
                    self._make_room(pool, job, demand, capacity, result)
                result.waiting += len(order) - index
                return
            if self._start(job, pool):
                result.started.append(job.job_id)
                cohort.hold(ask)
            else:
                self.ledger.release(pool, job.job_id)

    def _reclaim(self, pool: str, waiting: Job, ask: Ask, demand: Demand, capacity: int, cohort: Cohort, result: PassResult) -> bool:
        """A job within its team's nominal quota takes lent GPUs back: borrowers of other teams that have run
        at least reclaim_min_run_seconds are paused through the checkpointed pause path (pending_action
        "preempt": CHECKPOINTING -> QUEUED, same job id, resumed from that checkpoint). True when some are
        on their way out (or already were): then no priority preemption is asked for as well."""
        assert self.teams is not None
        now = self.clock()
        min_run = self.teams.settings.reclaim_min_run_seconds
        holders = self.ledger.holders(pool)
        free = capacity - sum(holders.values())
        incoming = 0
        eligible: list[Holder] = []
        for job_id, units in holders.items():
            # As the pass read it (a stale one loses its conditional write below), else read now
            if job_id in cohort.holders:
                holder, held = cohort.holders[job_id]
            else:
                try:
                    holder = self.repository.get(job_id)
                except JobNotFound:
                    continue
                held = Ask.of(holder, DEFAULT_TEAM)
            if held.team == ask.team or held.team not in cohort.teams or cohort.borrowed(held.team, held.gpu_type) <= 0:
                continue
            if holder.pending_action == PendingAction.PREEMPT:
                incoming += units  # already being reclaimed (or preempted): its units are on the way back
            elif (
                holder.pending_action is None
                and holder.status in PAUSABLE
                and holder.run_started_at is not None
                and (now - holder.run_started_at).total_seconds() >= min_run
                and holder.reclaims < self.teams.settings.max_reclaims
            ):
                eligible.append(Holder(holder, held, units, work_lost(holder, units, now)))
        needed = max(demand.units - free, cohort.cohort_deficit(ask)) - incoming
        if needed <= 0:
            return incoming > 0
        if cohort.borrowing(ask):  # a borrower: only from borrowers with a larger share (Kueue's two rules)
            victims, fair_rule = fair_sharing_victims(ask, eligible, needed, cohort)
            rule = str(fair_rule)
        else:
            victims, rule = reclaim_victims(ask, eligible, needed, cohort), RECLAIM_RULE
        for victim in victims:
            why_text = (
                f"team {victim.ask.team} borrowed beyond its nominal {victim.ask.gpu_type} quota"
                if rule == RECLAIM_RULE
                else f"team {victim.ask.team}'s borrowed share exceeds team {ask.team}'s (fair sharing, {rule})"
            )
            reason = (
                f"reclaimed by team {ask.team} for job {waiting.job_id}: {why_text} "
                f"(work lost {victim.work_lost:.0f} GPU-s since its last checkpoint)"
            )
            why = Reclaim(
                team=victim.ask.team,
                gpu_type=victim.ask.gpu_type,
                gpus=victim.units,
                beneficiary_job_id=waiting.job_id,
                beneficiary_team=ask.team,
                rule=rule,
                work_lost_gpu_seconds=round(victim.work_lost, 1),
            )
            if self._preempt(victim.job, waiting, reason=reason, changes={"reclaims": victim.job.reclaims + 1}, reclaim=why):
                result.preempting.append(victim.job.job_id)
        return bool(victims)

    def _start(self, job: Job, pool: str) -> bool:
        try:
            moved = self.repository.transition(
                Transition(
                    job_id=job.job_id,
                    expected_version=job.version,
                    from_status=JobStatus.QUEUED,
                    to_status=JobStatus.SCHEDULING,
                    reason=f"capacity granted in {pool}",
                    actor=Actor.SCHEDULER.value,
                    changes={"task_token": None, "task_token_kind": None, "capacity_pool": pool, "run_outcome": None},
                )
            )
        except (ConcurrentModification, IllegalTransition, JobNotFound):
            return False  # cancelled, edited or taken by a concurrent pass: that writer decided
        assert job.task_token is not None
        if not self.tokens.send_success(job.task_token, {"next": Next.GO}):
            logger.warning("capacity token no longer valid; the reconciler will recover the job", extra={"job_id": moved.job_id})
        return True

    def _make_room(self, pool: str, waiting: Job, demand: Demand, capacity: int, result: PassResult) -> None:
        holders = self.ledger.holders(pool)
        free = capacity - sum(holders.values())
        victims: list[tuple[Job, int]] = []
        for job_id, units in holders.items():
            try:
                job = self.repository.get(job_id)
            except JobNotFound:
                continue
            if job.scheduling_config.preemptible and job.priority < waiting.priority and job.status in PAUSABLE:
                victims.append((job, units))
        # Already stopping for us (or anyone): their units are on the way back.
        incoming = sum(units for job, units in victims if job.pending_action is not None)
        candidates = sorted(
            ((j, u) for j, u in victims if j.pending_action is None), key=lambda v: (v[0].priority, -v[0].created_at.timestamp())
        )
        needed = demand.units - free - incoming
        if needed <= 0 or sum(u for _, u in candidates) < needed:
            return  # room is coming, or preempting everything allowed would still not fit: do not stop anyone
        for job, units in candidates:
            if needed <= 0:
                break
            if self._preempt(job, waiting):
                result.preempting.append(job.job_id)
                needed -= units

    def _preempt(
        self,
        victim: Job,
        waiting: Job,
        *,
        reason: str | None = None,
        changes: Mapping[str, Any] | None = None,
        reclaim: Reclaim | None = None,
    ) -> bool:
        reason = reason or f"preempted by higher-priority job {waiting.job_id} (priority {waiting.priority} > {victim.priority})"
        try:
            job = self.repository.update(
                victim.job_id,
                victim.version,
                {"pending_action": PendingAction.PREEMPT, "pending_reason": reason, **(changes or {})},
                allowed=PAUSABLE,
                action="preempt",
                reclaim=reclaim,
            )
        except (ConcurrentModification, IllegalTransition, JobNotFound):
            return False
        self.stopper.stop_run(job, graceful=True, reason=reason)
        return True

    # --- queue position -----------------------------------------------------------------------
    def position(self, job: Job, *, default_runtime_seconds: float = 3600.0) -> tuple[int | None, float | None]:
        """(jobs ahead of this one in its queue, estimated seconds until it starts); None when not queued."""
        position, eta, _ = self.explain(job, default_runtime_seconds=default_runtime_seconds)
        return position, eta

    def explain(self, job: Job, *, default_runtime_seconds: float = 3600.0) -> tuple[int | None, float | None, WaitReason | None]:
        """Position, estimated wait and why a QUEUED job waits: its team's quota (QUOTA), borrow limit
        (BORROW_LIMIT) or no idle capacity to borrow (COHORT_FULL); a higher priority class ahead of it
        (PRIORITY); a budget (BUDGET); else no room in its pool (COHORT_FULL). None for a job not queued."""
        return self.explain_all([job], default_runtime_seconds=default_runtime_seconds).get(job.job_id, (None, None, None))

    def explain_all(
        self, jobs: Iterable[Job], *, default_runtime_seconds: float = 3600.0
    ) -> dict[str, tuple[int | None, float | None, WaitReason | None]]:
        """`explain` for each QUEUED job of `jobs` (a page of GET /jobs), by job id: each queue's waiting
        line and the teams' cohort are read once for the whole page, not once per job."""
        queued = [job for job in jobs if job.status == JobStatus.QUEUED]
        if not queued:
            return {}
        cohort = self._cohort()
        lines: dict[str, list[Job]] = {}
        explained: dict[str, tuple[int | None, float | None, WaitReason | None]] = {}
        for job in queued:
            if job.queue not in lines:
                waiting = self.repository.queued(job.queue, limit=1000)
                lines[job.queue] = waiting if cohort is None else [j for j, _ in admission_order(waiting, cohort, DEFAULT_TEAM)]
            explained[job.job_id] = self._explain_in(job, lines[job.queue], cohort, default_runtime_seconds)
        return explained

    def _explain_in(
        self, job: Job, waiting: list[Job], cohort: Cohort | None, default_runtime_seconds: float
    ) -> tuple[int | None, float | None, WaitReason | None]:
        reason = cohort.refusal(Ask.within(job, cohort.teams, DEFAULT_TEAM)) if cohort is not None else None
        ahead = 0
        runtimes: list[float] = []
        for other in waiting:
            if other.job_id == job.job_id:
                break
            ahead += 1
            if reason is None and other.priority > job.priority:
                reason = WaitReason.PRIORITY
            runtimes.append(float(other.scheduling_config.max_runtime_seconds or default_runtime_seconds))
        if reason is None and self.admission is not None and self.admission.would_hold(job) is not None:
            reason = WaitReason.BUDGET
        reason = reason or WaitReason.COHORT_FULL
        try:
            pool = self.capacity.demand(job).pool
        except NeverFits:
            return ahead, None, reason
        slots = max(1, min(self.capacity.capacity(pool), 64))
        # Each wave of `slots` jobs ahead takes about one (mean) runtime; a rough, honest upper-ish bound.
        mean = sum(runtimes) / len(runtimes) if runtimes else 0.0
        return ahead, math.ceil(ahead / slots) * mean if ahead else 0.0, reason


def capacity_model(settings: Any) -> CapacityModel:
    """The capacity model a deployment uses: this machine's slots (local) or per-queue quotas (cloud)."""
    if settings.compute == "local":
        inventory = parse_gpu_inventory(settings.local_gpu_inventory)
        if inventory:  # emulated GPUs: the machine's own are not counted
            return LocalCapacity(gpu_slots=0, cpu_slots=settings.local_cpu_slots, inventory=inventory)
        gpus = settings.local_gpu_slots if settings.local_gpu_slots is not None else detect_local_gpus()
        return LocalCapacity(gpu_slots=gpus, cpu_slots=settings.local_cpu_slots, inventory=inventory)
    return CloudCapacity(parse_quotas(settings.gpu_quotas))
