"""Fair share between teams (issue 24): the pure rules the scheduler's pass and the queue view apply.

- Usage decays with a half-life (default 7 days): u(t) = u(t0) * 2^(-(t - t0)/half_life), counted in
  price-weighted unit-hours (functions/catalog/gpu_types.py).
- Slurm's fair-share factor F = 2^(-(usage/total usage)/(weight/total weight)): 1 for an unused team, 0.5
  for a team using exactly its share, towards 0 above it.
- Within a priority class (Standing): jobs that keep their team within its nominal quota first, then jobs of
  teams under nominal that take them beyond it (overshoots: the team holding the smallest fraction of its
  nominal quotas halfway through the job first, price-weighted over every type), then borrowers (teams at or
  beyond nominal: the least borrowed halfway through the job per unit of weight x F first); higher F first
  among equals, then FIFO inside the team. So while every team is backlogged each sits at its nominal quota
  whatever F is, and F decides how what nobody within nominal waits for is borrowed: in proportion to it.
  A team under nominal that waits for room holds back other teams' borrowing of the type (holds_room_for).
- A job is admitted within its team's nominal quota, or beyond it up to its borrow limit from the idle
  nominal quota other teams lend (their lend limits); member caps bound one member.
- Reclaim: a team within nominal takes lent units back from borrowers (reclaim_victims); a borrower may
  preempt another team's borrowing only by Kueue's two fair-sharing rules (fair_sharing_victims).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import IntEnum, StrEnum

from functions.catalog.gpu_types import gpu_type_of, unit_hourly_usd, units_of
from functions.service.ports import TeamHold
from schemas.configs import DEFAULT_PRIORITY
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
    priority: int = DEFAULT_PRIORITY

    @classmethod
    def of(cls, job: Job, default_team: str) -> Ask:
        rc = job.resource_config
        return cls(job.team or default_team, gpu_type_of(rc), units_of(rc), job.owner, job.scheduling_config.reclaimable, job.priority)

    @classmethod
    def within(cls, job: Job, teams: Mapping[str, Team], default_team: str) -> Ask:
        """As `of`, a job whose team was deleted after its submit counting as the default team's."""
        ask = cls.of(job, default_team)
        return ask if ask.team in teams else replace(ask, team=default_team)


@dataclass
class Cohort:
    """Every team's quotas and what it holds now; admitting a job adds it."""

    teams: Mapping[str, Team]
    usage: Mapping[str, float] = field(default_factory=dict)
    in_use: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    member_units: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    member_jobs: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    running: dict[tuple[str, str], float] = field(default_factory=lambda: defaultdict(float))  # usage of running jobs, by type
    holders: dict[str, tuple[Job, Ask]] = field(default_factory=dict)  # the jobs holding capacity, as the pass read them

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

    def hold_for(self, ask: Ask) -> TeamHold:
        """The team's limit of the type that the ledger's claim enforces: nominal plus borrow limit (or just
        nominal for a job that may not borrow), whatever a racing pass read."""
        limit = self.nominal(ask.team, ask.gpu_type) + (self.borrow_limit(ask.team, ask.gpu_type) if ask.reclaimable else 0)
        return TeamHold(ask.team, ask.gpu_type, limit)

    def cohort_deficit(self, ask: Ask) -> int:
        """Units other teams' borrowing must give back before `ask` may borrow (0: the lenders have room)."""
        after = self.in_use[(ask.team, ask.gpu_type)] + ask.units - self.nominal(ask.team, ask.gpu_type)
        if after <= 0:
            return 0  # within nominal: its own quota, not the lenders', is what it needs
        others_borrowed = sum(self.borrowed(t, ask.gpu_type) for t in self.teams if t != ask.team)
        lendable = sum(self.lendable(t, ask.gpu_type) for t in self.teams if t != ask.team)
        return max(others_borrowed + after - lendable, 0)

    def holds_room_for(self, ask: Ask) -> bool:
        """Does `ask`, refused on COHORT_FULL, hold back other teams' borrowing of its type in this pass? Yes while
        its team is under its nominal quota (it goes before any borrower) and the other teams' lend limits could
        ever cover what the job takes beyond it (else it would hold them back for good)."""
        held, nominal = self.in_use[(ask.team, ask.gpu_type)], self.nominal(ask.team, ask.gpu_type)
        could_lend = sum(
            limit_units(quota.lend_limit, quota.nominal)
            for name, team in self.teams.items()
            if name != ask.team and (quota := team.quotas.get(ask.gpu_type)) is not None
        )
        return held < nominal and held + ask.units - nominal <= could_lend

    def others_borrow_more(self, ask: Ask) -> bool:
        """Does another team hold a larger share of the type than `ask`'s team would with the job? Else neither of
        Kueue's rules (FairSharingRule) can let it preempt anyone: no need to weigh the holders."""
        preemptor = self.share(ask.team, ask.gpu_type, ask.units)
        return any(self.share(t, ask.gpu_type) > preemptor for t in self.teams if t != ask.team)

    def share(self, team: str, gpu_type: str, delta: int = 0) -> float:
        """Kueue's weighted share of one type: units held beyond nominal (with `delta` more) per unit of weight."""
        held = self.in_use[(team, gpu_type)] + delta
        return max(held - self.nominal(team, gpu_type), 0) / self._team(team).weight

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
        if self.cohort_deficit(ask) > 0:
            return WaitReason.COHORT_FULL
        return None

    # --- fair share ---------------------------------------------------------------------------
    def factors(self) -> dict[str, float]:
        total_usage = sum(self.usage.get(t, 0.0) for t in self.teams)
        total_weight = sum(t.weight for t in self.teams.values())
        return {name: factor(self.usage.get(name, 0.0), total_usage, team.weight, total_weight) for name, team in self.teams.items()}

    def _team(self, name: str) -> Team:
        return self.teams[name]


class Standing(IntEnum):
    """Where admitting a job leaves its team against its nominal quota of the type, in the order a pass offers
    capacity (within a priority class): a team under its nominal quota goes before any borrower."""

    WITHIN = 0  # the team stays within its nominal quota
    OVERSHOOT = 1  # the team is under its nominal quota and the job takes it beyond (it borrows the rest)
    BORROWER = 2  # the team is at or beyond its nominal quota already

    @classmethod
    def of(cls, have: int, units: int, nominal: int) -> Standing:
        if have + units <= nominal:
            return cls.WITHIN
        return cls.OVERSHOOT if have < nominal else cls.BORROWER


def admission_order(jobs: Iterable[Job], cohort: Cohort, default_team: str) -> list[tuple[Job, Ask]]:
    """The order a pass offers capacity in: priority class first; within one, by Standing (within nominal,
    overshoot, borrower), then where the job leaves its team (_Order.rank), then the higher fair-share factor,
    then FIFO inside the team.

    Greedy: each step takes the best head among the teams' queues, assuming every job before it was
    admitted (so a team's second job may already be a borrower). The cohort is not changed."""
    queues: dict[str, list[tuple[Job, Ask]]] = defaultdict(list)
    for job in sorted(jobs, key=lambda j: (-j.priority, j.created_at, j.job_id)):
        ask = Ask.within(job, cohort.teams, default_team)
        queues[ask.team].append((job, ask))
    ranks = _Order(cohort)
    order: list[tuple[Job, Ask]] = []
    while queues:

        def key(team: str) -> tuple[int, Standing, float, float, datetime, str]:
            job, ask = queues[team][0]
            return (-job.priority, *ranks.rank(ask), job.created_at, job.job_id)

        best = min(queues, key=key)
        job, ask = queues[best].pop(0)
        if not queues[best]:
            del queues[best]
        ranks.hold(ask)
        order.append((job, ask))
    return order


class _Order:
    """Where a job would leave its team, as admission_order ranks it within a priority class, from what the
    teams hold (the cohort's holdings plus what the order has admitted before it):
    - its Standing: within nominal, overshoot, borrower;
    - an overshoot by the fraction of its nominal quotas the team would hold halfway through the job,
      price-weighted over every type (each type's units at its unit price, as usage counts them): a job that
      takes its team less far beyond nominal than the team is below it now goes before one that takes it
      further, and a team short of one type's quota (its jobs too big for what it has left) is made up on
      another, so shares counted in price-weighted GPU-hours come out by weight. Not by F: after a quiet
      spell a team's F is the highest and it would win every overshoot, for days;
    - a borrower by what its team would borrow of the type halfway through the job, per unit of its weight
      scaled by its fair-share factor F (Kueue's weighted share, with F in the weight): a team that has used
      less than its share borrows more, in proportion, rather than all there is until its F falls below
      another's (for hours after a quiet spell);
    - then the higher F."""

    def __init__(self, cohort: Cohort) -> None:
        self.cohort = cohort
        self.factors = cohort.factors()
        self.held: dict[tuple[str, str], int] = defaultdict(int, cohort.in_use)
        self.priced: dict[str, float] = defaultdict(float)
        for (team, gpu_type), units in cohort.in_use.items():
            self.priced[team] += units * unit_hourly_usd(gpu_type)
        self.priced_nominal = {
            name: sum(quota.nominal * unit_hourly_usd(gpu_type) for gpu_type, quota in team.quotas.items())
            for name, team in cohort.teams.items()
        }

    def hold(self, ask: Ask) -> None:
        """Count the job's units of its type as its team's (admission_order: admitted before the next)."""
        self.held[(ask.team, ask.gpu_type)] += ask.units
        self.priced[ask.team] += ask.units * unit_hourly_usd(ask.gpu_type)

    def rank(self, ask: Ask, less: int = 0) -> tuple[Standing, float, float]:
        """The job's rank, its team holding `less` units of the job's type fewer than counted (a preemption's)."""
        price = unit_hourly_usd(ask.gpu_type)
        have, nominal = self.held[(ask.team, ask.gpu_type)] - less, self.cohort.nominal(ask.team, ask.gpu_type)
        standing = Standing.of(have, ask.units, nominal)
        factor = self.factors[ask.team]  # every ask's team is in the cohort (Ask.within)
        if standing == Standing.OVERSHOOT:  # under nominal of the type, so its nominal quotas are above 0
            place = (self.priced[ask.team] + (ask.units / 2 - less) * price) / self.priced_nominal[ask.team]
        elif standing == Standing.BORROWER:
            borrowed = have + ask.units / 2 - nominal
            weight = self.cohort.teams[ask.team].weight * factor
            place = borrowed / weight if weight > 0 else math.inf  # F underflows to 0 for a team far beyond its share
        else:
            place = 0.0
        return standing, place, -factor


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


class FairSharingRule(StrEnum):
    """Kueue's two fair-sharing preemption rules (its `fairSharing.preemptionStrategies`), tried in this order.

    A borrower waiting for capacity that another team's borrowing holds may preempt a job of that team only
    when, with `preemptor` its team's share with the waiting job and shares as Cohort.share:
    - LessThanOrEqualToFinalShare: preemptor <= the target team's share without the job;
    - LessThanInitialShare (tried when the first frees too little): preemptor < the target team's share with
      the job. Where one team loses several jobs, we ask it of each of them against the team's final share
      (Kueue asks it of each pick in turn): so that no victim's team, taking any one of them back, would
      hold a share at or below the preemptor's.
    Either way a victim's team asking for its job back holds a share above the preemptor's: it can never
    preempt the preemptor's team in turn (no A-preempts-B-preempts-A ping-pong; a hypothesis property)."""

    LESS_THAN_OR_EQUAL_TO_FINAL_SHARE = "LessThanOrEqualToFinalShare"
    LESS_THAN_INITIAL_SHARE = "LessThanInitialShare"


def fair_sharing_victims(
    waiting: Ask, holders: Iterable[Holder], needed: int, cohort: Cohort
) -> tuple[list[Holder], FairSharingRule | None]:
    """Other teams' borrowers to pause so that `waiting`, itself a borrower, gets `needed` units: only jobs it
    would be served before (_served_before); each step takes a job of the team with the highest share now (then
    lowest priority, then least work lost), if the rule allows it; the first rule (of FairSharingRule's two)
    that frees enough wins; ([], None) when neither does."""
    preemptor = cohort.share(waiting.team, waiting.gpu_type, waiting.units)
    candidates = [h for h in holders if h.ask.team != waiting.team and h.ask.gpu_type == waiting.gpu_type]
    ranks = _Order(cohort)
    for rule in FairSharingRule:
        removed: dict[str, int] = defaultdict(int)
        smallest: dict[str, int] = {}  # the smallest job each team has lost so far
        left = list(candidates)
        chosen: list[Holder] = []
        freed = 0
        while freed < needed:
            allowed = [
                h
                for h in left
                if _allows(rule, preemptor, cohort, h, removed[h.ask.team], smallest.get(h.ask.team, h.units))
                and _served_before(waiting, h, ranks, removed[h.ask.team])
            ]
            if not allowed:
                break
            pick = min(
                allowed,
                key=lambda h: (-cohort.share(h.ask.team, h.ask.gpu_type, -removed[h.ask.team]), h.job.priority, h.work_lost, h.job.job_id),
            )
            left.remove(pick)
            chosen.append(pick)
            removed[pick.ask.team] += pick.units
            smallest[pick.ask.team] = min(smallest.get(pick.ask.team, pick.units), pick.units)
            freed += pick.units
        if freed >= needed:
            return chosen, rule
    return [], None


def _served_before(waiting: Ask, victim: Holder, ranks: _Order, removed: int) -> bool:
    """Would `waiting` be offered the room a preemption frees before the victim, back in its queue, where (as
    the oldest of its team's jobs of the type it started before) it is its team's next job? A higher priority
    class first; within one, as admission_order ranks them, with the victim's team holding `removed` units (its
    jobs already chosen) and the victim's own less. Preempting a job that would be served first would hand the
    room back to its team in the next pass, to be preempted again, pass after pass."""
    if waiting.priority > victim.job.priority:
        return True
    if waiting.priority < victim.job.priority:
        return False
    return ranks.rank(waiting) < ranks.rank(victim.ask, less=removed + victim.units)


def _allows(rule: FairSharingRule, preemptor: float, cohort: Cohort, holder: Holder, removed: int, smallest: int) -> bool:
    team, gpu_type = holder.ask.team, holder.ask.gpu_type
    if cohort.share(team, gpu_type, -removed) <= 0:
        return False  # the team is back within its nominal quota: the rest of its jobs are its own
    after = -removed - holder.units
    if rule == FairSharingRule.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE:
        return preemptor <= cohort.share(team, gpu_type, after)
    return preemptor < cohort.share(team, gpu_type, after + min(smallest, holder.units))
