"""Fair share between teams (issue 24): the pure rules the scheduler's pass and the queue view apply.

- Usage decays with a half-life (default 7 days): u(t) = u(t0) * 2^(-(t - t0)/half_life), counted in
  price-weighted unit-hours (functions/catalog/gpu_types.py).
- Slurm's fair-share factor F = 2^(-(usage/total usage)/(weight/total weight)): 1 for an unused team, 0.5
  for a team using exactly its share, towards 0 above it.
- Within a priority class, a job of a team still under its nominal quota (with the job) goes before any
  borrower's, then higher F first, then FIFO inside the team.
- A job is admitted within its team's nominal quota, or beyond it up to its borrow limit from the idle
  nominal quota other teams lend (their lend limits); member caps bound one member.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from functions.catalog.gpu_types import gpu_type_of, units_of
from schemas.job import Job
from schemas.teams import Team, WaitReason, limit_units

DEFAULT_HALF_LIFE_SECONDS = 7 * 24 * 3600.0


def factor(usage: float, total_usage: float, weight: float, total_weight: float) -> float:
    """F = 2^(-(usage share)/(weight share)); 1.0 while nobody has used anything."""
    if total_usage <= 0 or total_weight <= 0:
        return 1.0
    return float(2.0 ** (-(usage / total_usage) / (weight / total_weight)))


@dataclass(frozen=True)
class Ask:
    """What one job asks of its team: `units` of `gpu_type`, for `owner`."""

    team: str
    gpu_type: str
    units: int
    owner: str
    reclaimable: bool = True  # False: opted out of checkpointed reclaim, so it never borrows

    @classmethod
    def of(cls, job: Job, default_team: str) -> Ask:
        rc = job.resource_config
        return cls(job.team or default_team, gpu_type_of(rc), units_of(rc), job.owner, job.scheduling_config.reclaimable)


@dataclass
class Cohort:
    """Every team's quotas and what it holds now; admitting a job adds it."""

    teams: Mapping[str, Team]
    usage: Mapping[str, float] = field(default_factory=dict)
    in_use: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    member_units: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    member_jobs: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def hold(self, ask: Ask) -> None:
        self.in_use[(ask.team, ask.gpu_type)] += ask.units
        self.member_units[ask.owner] += ask.units
        self.member_jobs[ask.owner] += 1

    # --- quotas -------------------------------------------------------------------------------
    def nominal(self, team: str, gpu_type: str) -> int:
        quota = self._team(team).quotas.get(gpu_type)
        return quota.nominal if quota else 0

    def borrow_limit(self, team: str, gpu_type: str) -> int:
        quota = self._team(team).quotas.get(gpu_type)
        return limit_units(quota.borrow_limit, quota.nominal) if quota else 0

    def lendable(self, team: str, gpu_type: str) -> int:
        """Units of the team's idle nominal quota others may borrow now."""
        quota = self._team(team).quotas.get(gpu_type)
        if quota is None:
            return 0
        idle = max(quota.nominal - self.in_use[(team, gpu_type)], 0)
        return min(limit_units(quota.lend_limit, quota.nominal), idle)

    def borrowed(self, team: str, gpu_type: str) -> int:
        return max(self.in_use[(team, gpu_type)] - self.nominal(team, gpu_type), 0)

    def lent(self, team: str, gpu_type: str) -> int:
        """The team's share of what borrowers hold: borrowed units spread over lenders by what each lends."""
        borrowed = sum(self.borrowed(t, gpu_type) for t in self.teams)
        lendable = {t: self.lendable(t, gpu_type) for t in self.teams}
        total = sum(lendable.values())
        return min(lendable[team], borrowed * lendable[team] // total) if total else 0

    def borrowing(self, ask: Ask) -> bool:
        """Would admitting the job take the team beyond its nominal quota?"""
        return self.in_use[(ask.team, ask.gpu_type)] + ask.units > self.nominal(ask.team, ask.gpu_type)

    def refusal(self, ask: Ask) -> WaitReason | None:
        """Why the job may not be admitted now by its team's rules (None: it may, capacity permitting)."""
        team = self._team(ask.team)
        caps = team.member_caps
        if caps.max_gpus is not None and self.member_units[ask.owner] + ask.units > caps.max_gpus:
            return WaitReason.QUOTA
        if caps.max_running_jobs is not None and self.member_jobs[ask.owner] + 1 > caps.max_running_jobs:
            return WaitReason.QUOTA
        if not self.borrowing(ask):
            return None
        limit = self.borrow_limit(ask.team, ask.gpu_type)
        if limit == 0 or not ask.reclaimable:
            return WaitReason.QUOTA
        after = self.in_use[(ask.team, ask.gpu_type)] + ask.units - self.nominal(ask.team, ask.gpu_type)
        if after > limit:
            return WaitReason.BORROW_LIMIT
        others_borrowed = sum(self.borrowed(t, ask.gpu_type) for t in self.teams if t != ask.team)
        lendable = sum(self.lendable(t, ask.gpu_type) for t in self.teams if t != ask.team)
        if others_borrowed + after > lendable:
            return WaitReason.COHORT_FULL
        return None

    # --- fair share ---------------------------------------------------------------------------
    def factors(self) -> dict[str, float]:
        total_usage = sum(self.usage.get(t, 0.0) for t in self.teams)
        total_weight = sum(t.weight for t in self.teams.values())
        return {name: factor(self.usage.get(name, 0.0), total_usage, team.weight, total_weight) for name, team in self.teams.items()}

    def _team(self, name: str) -> Team:
        return self.teams[name]


def admission_order(jobs: Iterable[Job], cohort: Cohort, default_team: str) -> list[tuple[Job, Ask]]:
    """The order a pass offers capacity in: priority class first; within one, jobs that keep their team
    within nominal before borrowers, then the higher fair-share factor, then FIFO inside the team.

    Greedy: each step takes the best head among the teams' queues, assuming every job before it was
    admitted (so a team's second job may already be a borrower). The cohort is not changed."""
    factors = cohort.factors()
    queues: dict[str, list[tuple[Job, Ask]]] = defaultdict(list)
    for job in sorted(jobs, key=lambda j: (-j.priority, j.created_at, j.job_id)):
        ask = Ask.of(job, default_team)
        queues[ask.team if ask.team in cohort.teams else default_team].append((job, ask))
    held: dict[tuple[str, str], int] = defaultdict(int, cohort.in_use)
    order: list[tuple[Job, Ask]] = []
    while queues:

        def key(team: str) -> tuple[int, bool, float, datetime, str]:
            job, ask = queues[team][0]
            borrower = held[(ask.team, ask.gpu_type)] + ask.units > cohort.nominal(ask.team, ask.gpu_type)
            return (-job.priority, borrower, -factors.get(ask.team, 1.0), job.created_at, job.job_id)

        best = min(queues, key=key)
        job, ask = queues[best].pop(0)
        if not queues[best]:
            del queues[best]
        held[(ask.team, ask.gpu_type)] += ask.units
        order.append((job, ask))
    return order


@dataclass(frozen=True)
class Holder:
    """A running job holding capacity in a pool, as reclaim weighs it."""

    job: Job
    ask: Ask
    units: int
    work_lost: float  # units x seconds since its last checkpoint (or its start)


def work_lost(job: Job, units: int, now: datetime) -> float:
    """GPU-seconds a stop now would throw away: since the newest checkpoint of this attempt, else since the run started."""
    started = job.run_started_at or now
    saved = [c.created_at for c in job.checkpoints if c.created_at is not None and c.created_at >= started]
    return units * max((now - max(saved, default=started)).total_seconds(), 0.0)


def reclaim_victims(waiting: Ask, holders: Iterable[Holder], needed: int, cohort: Cohort) -> list[Holder]:
    """Borrowers to pause so that `waiting`, within its team's nominal quota, gets its quota back: jobs of other
    teams over their nominal quota of the type, by weighted share (usage/weight, highest first), then priority
    (lowest first), then work lost (least first); none at all if they cannot free `needed` units. Only a team
    within nominal reclaims, only from a borrower: a reclaimed job's team can never reclaim back in turn (it is
    over nominal while it holds what it borrowed), so A-reclaims-B-reclaims-A cannot happen."""
    if cohort.borrowing(waiting):
        return []
    shares = {t: cohort.usage.get(t, 0.0) / team.weight for t, team in cohort.teams.items()}
    room: dict[str, int] = {}
    candidates: list[Holder] = []
    for holder in holders:
        team = holder.ask.team
        if team == waiting.team or holder.ask.gpu_type != waiting.gpu_type:
            continue
        room.setdefault(team, cohort.borrowed(team, waiting.gpu_type))
        if room[team] > 0:
            candidates.append(holder)
    candidates.sort(key=lambda h: (-shares.get(h.ask.team, 0.0), h.job.priority, h.work_lost, h.job.job_id))
    chosen: list[Holder] = []
    for holder in candidates:
        if needed <= 0:
            break
        if room[holder.ask.team] <= 0:
            continue  # the team is back within its nominal quota: the rest of its jobs are its own
        chosen.append(holder)
        room[holder.ask.team] -= holder.units
        needed -= holder.units
    return chosen if needed <= 0 else []
