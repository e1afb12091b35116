"""Teams simulator (issue 24): the real scheduler (functions/service/scheduler.py, fair_share.py) on a fake
clock, an in-memory store and ledger, and a fake launcher whose checkpointed stop takes a scripted time.
Prints figures, asserts nothing but the invariants it counts (goals in brackets).

3 teams (weights 1, 2, 3; nominal quotas in proportion) x 2 GPU types (H100, A100), every team kept
backlogged, jobs of 1-3 GPUs running 5-25 simulated minutes (about 11,500 jobs in 7 days). Event-driven, as
the plane: a scheduler pass at every release (a job's end, a reclaimed job's checkpointed stop ending) and
every simulated 5 minutes; what each team holds is integrated over time between events. Team c goes quiet
on days 3-4, so a and b borrow its idle quota and c reclaims it. Each phase's backlogged teams are measured
against their weighted share among them; --why adds what explains it (each team's mean holding against its
nominal quota, its starts by standing, the times it was reclaimed).

    .venv/bin/python scripts/sim_teams.py [--days 7] [--seed 1] [--why]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from functions.catalog.gpu_types import gpu_type_of, unit_hourly_usd
from functions.service.ports import Transition
from functions.service.scheduler import LocalCapacity, Scheduler
from functions.service.teams import TeamDirectory
from functions.settings import Settings
from schemas.job import Job, PendingAction, StatusEvent
from schemas.status import JobStatus as S
from tests.fakes import InMemoryJobRepository
from tests.helpers.teams import InMemoryTeamRepository, team
from tests.lifecycle_support import InMemoryLedger, make_job, make_request

T0 = datetime(2026, 1, 1, tzinfo=UTC)
TICK = timedelta(minutes=5)
CHECKPOINT = timedelta(minutes=2)  # the fake launcher's checkpointed stop
INVENTORY = {"H100": 12, "A100": 24}
WEIGHTS = {"a": 1.0, "b": 2.0, "c": 3.0}
BACKLOG = 6  # queued jobs each active team keeps per GPU type


class QueueIndexedRepository(InMemoryJobRepository):
    """The tests' in-memory store, with queued() answered from the QUEUED jobs only (as the by-queue index
    answers it): a scan of all 10,000 jobs per read made the simulator quadratic, not the scheduler."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting: set[str] = set()

    def transition(self, t: Transition) -> Job:
        job = super().transition(t)
        (self.waiting.add if job.status == S.QUEUED else self.waiting.discard)(job.job_id)
        return job

    def queued(self, queue: str, limit: int = 100) -> list[Job]:
        return self._head(lambda j: j.queue == queue, limit)

    def queued_of_team(self, team: str, gpu_type: str, limit: int = 100) -> list[Job]:
        return self._head(lambda j: j.team == team and gpu_type_of(j.resource_config) == gpu_type, limit)

    def _head(self, wanted: Callable[[Job], bool], limit: int) -> list[Job]:
        jobs = [job for i in self.waiting if wanted(job := self.jobs[i])]
        jobs.sort(key=lambda j: (-j.priority, j.created_at, j.job_id))
        return [j.model_copy(deep=True) for j in jobs[:limit]]


class Clock:
    now = T0

    def __call__(self) -> datetime:
        return self.now


class Launcher:
    """Answers tokens (a start) and stop requests (a checkpointed stop that ends CHECKPOINT later)."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.stops: list[str] = []

    def send_success(self, token: str, output: Any) -> bool:
        self.started.append(token.removeprefix("tok-"))
        return True

    def stop_run(self, job: Job, *, graceful: bool, reason: str) -> None:
        self.stops.append(job.job_id)


def phase_of(now: datetime) -> str:
    day = (now - T0).total_seconds() / 86400
    return "days 0-3" if day < 3 else "days 3-5" if day < 5 else "days 5-7"


class Trace:
    """What explains the allocation (--why): each team's GPUs held per type against its nominal quota, its
    starts by what they did to it (within nominal, overshoot: from under nominal to beyond it, borrow: from at
    or beyond it), and reclaims by the victim's team, per phase."""

    def __init__(self, nominal: dict[tuple[str, str], int]) -> None:
        self.nominal = nominal
        self.held_sum: dict[tuple[str, str, str], float] = defaultdict(float)
        self.ticks: dict[str, float] = defaultdict(float)  # seconds
        self.starts: dict[tuple[str, str, str], int] = defaultdict(int)
        self.reclaims: dict[tuple[str, str], int] = defaultdict(int)

    def held(self, repo: QueueIndexedRepository, ledger: InMemoryLedger) -> dict[tuple[str, str], int]:
        held: dict[tuple[str, str], int] = defaultdict(int)
        for pool in ledger.pools():
            for job_id, units in ledger.holders(pool).items():
                held[(repo.jobs[job_id].team or "default", pool.removeprefix("local/"))] += units
        return held

    def started(self, now: datetime, job: Job, held: dict[tuple[str, str], int]) -> None:
        key = (job.team or "default", job.resource_config.gpu_type or "any")
        before, nominal = held[key], self.nominal[key]
        held[key] += job.resource_config.gpu_count
        kind = "within" if held[key] <= nominal else "overshoot" if before < nominal else "borrow"
        self.starts[(phase_of(now), key[0], kind)] += 1

    def reclaimed(self, now: datetime, job: Job) -> None:
        self.reclaims[(phase_of(now), job.team or "default")] += 1

    def tick(self, now: datetime, held: dict[tuple[str, str], int], seconds: float) -> None:
        phase = phase_of(now)
        self.ticks[phase] += seconds
        for (name, gpu_type), units in held.items():
            self.held_sum[(phase, name, gpu_type)] += units * seconds

    def report(self) -> None:
        for phase in ("days 0-3", "days 3-5", "days 5-7"):
            if not self.ticks[phase]:
                continue
            print(f"why, {phase}:")
            for name in WEIGHTS:
                held = ", ".join(
                    f"{t} {self.held_sum[(phase, name, t)] / self.ticks[phase]:.2f}/{self.nominal[(name, t)]}" for t in INVENTORY
                )
                starts = ", ".join(f"{kind} {self.starts[(phase, name, kind)]}" for kind in ("within", "overshoot", "borrow"))
                print(f"  team {name}: mean held/nominal {held}; starts {starts}; reclaimed {self.reclaims[(phase, name)]}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--why", action="store_true", help="also print each team's holdings against nominal and how its jobs started")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    clock = Clock()
    repo, ledger, launcher, teams = QueueIndexedRepository(), InMemoryLedger(), Launcher(), InMemoryTeamRepository()
    total = sum(WEIGHTS.values())
    for name, weight in WEIGHTS.items():
        quotas = {t: {"nominal": round(n * weight / total), "borrow_limit": n} for t, n in INVENTORY.items()}
        teams.put(team(name, f"arn:aws:iam::1:user/{name}", weight=weight, **quotas), None)
    settings = Settings(default_team_quotas="H100=0,A100=0")
    directory = TeamDirectory(teams, settings, clock)
    scheduler = Scheduler(repo, ledger, LocalCapacity(gpu_slots=0, inventory=INVENTORY), launcher, launcher, teams=directory)

    ends: dict[str, datetime] = {}  # running job -> when it completes
    stopping: dict[str, datetime] = {}  # reclaimed job -> when its checkpointed stop ends
    remaining: dict[str, timedelta] = {}
    n = 0
    hourly: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    reclaims = early = without_checkpoint = 0
    lost_gpu_hours = 0.0  # GPUs held by a reclaimed job while it checkpoints, not training
    pass_ms: list[float] = []
    trace = Trace(nominal={(name, t): round(n * weight / total) for name, weight in WEIGHTS.items() for t, n in INVENTORY.items()})
    end = T0 + timedelta(days=args.days)
    next_tick = T0
    started = time.perf_counter()
    while clock.now < end:
        now = clock.now
        active = [t for t in WEIGHTS if not (t == "c" and 3 <= (now - T0).days < 5)]
        # Submit: keep each active team backlogged
        for name in active:
            for gpu_type in INVENTORY:
                waiting = sum(1 for i in repo.waiting if (j := repo.jobs[i]).team == name and j.resource_config.gpu_type == gpu_type)
                for _ in range(BACKLOG - waiting):
                    n += 1
                    request = make_request(f"s{n}", resource_config={"gpu_count": rng.randint(1, 3), "gpu_type": gpu_type})
                    job = make_job(request, owner=f"arn:aws:iam::1:user/{name}", created_at=now + timedelta(microseconds=n))
                    job = job.model_copy(update={"team": name})
                    repo.create(job, StatusEvent(at=now, to_status=S.PENDING))
                    job = repo.transition(Transition(job.job_id, 1, S.PENDING, S.QUEUED, "admitted"))
                    repo.update(job.job_id, job.version, {"task_token": f"tok-{job.job_id}", "task_token_kind": "capacity"})
                    ledger.register_queue(job.queue)
                    remaining[job.job_id] = timedelta(minutes=rng.randint(5, 25))
        # Ends: completions and checkpointed stops
        for job_id, at in list(ends.items()):
            if at <= now:
                job = repo.get(job_id)
                done = repo.transition(Transition(job_id, job.version, job.status, S.COMPLETED, "done"))
                scheduler.release(done)
                del ends[job_id]
        for job_id, at in list(stopping.items()):
            if at <= now:
                job = repo.get(job_id)
                if job.pending_action != PendingAction.PREEMPT:
                    without_checkpoint += 1  # stopped some other way than the checkpointed pause path
                scheduler.release(job)
                back = repo.transition(Transition(job_id, job.version, job.status, S.QUEUED, job.pending_reason or "reclaimed"))
                repo.update(job_id, back.version, {"pending_action": None, "task_token": f"tok-{job_id}", "task_token_kind": "capacity"})
                remaining[job_id] -= at - CHECKPOINT - (job.run_started_at or at)  # resumed exactly from its checkpoint
                del stopping[job_id]
        # The pass: on every release (as the plane runs one when capacity comes back) and every TICK
        before = len(launcher.started)
        held = trace.held(repo, ledger)
        tick_start = time.perf_counter()
        result = scheduler.run_pass()
        pass_ms.append((time.perf_counter() - tick_start) * 1000)
        for job_id in launcher.started[before:]:
            job = repo.get(job_id)
            for to in (S.PREPARING, S.TRAINING):
                job = repo.transition(Transition(job_id, job.version, job.status, to, "run"))
            repo.update(job_id, job.version, {"run_started_at": now})
            ends[job_id] = now + remaining[job_id]
            trace.started(now, job, held)
        for job_id in result.preempting:
            job = repo.get(job_id)
            reclaims += 1
            trace.reclaimed(now, job)
            if job.run_started_at is not None and (now - job.run_started_at).total_seconds() < settings.reclaim_min_run_seconds:
                early += 1
            ends.pop(job_id, None)
            stopping[job_id] = now + CHECKPOINT
            lost_gpu_hours += job.resource_config.gpu_count * CHECKPOINT.total_seconds() / 3600
        # Until the next event (a job's end, a stop's end, the next tick) what each team holds stays as it is now
        if now >= next_tick:
            next_tick += TICK
        following = min([next_tick, end, *ends.values(), *stopping.values()])
        seconds = (following - now).total_seconds()
        held = trace.held(repo, ledger)
        trace.tick(now, held, seconds)
        hour = int((now - T0).total_seconds() // 3600)  # an interval never crosses a tick, so never an hour
        for (name, gpu_type), units in held.items():
            hourly[hour][name] += units * unit_hourly_usd(gpu_type) * seconds / 3600
        clock.now = following
    elapsed = time.perf_counter() - started

    def jain(values: list[float]) -> float:
        return sum(values) ** 2 / (len(values) * sum(v * v for v in values)) if any(values) else 1.0

    print(f"simulated {args.days:g} days, {n} jobs, {len(pass_ms)} passes in {elapsed:.1f} s")
    print(f"scheduler pass: median {sorted(pass_ms)[len(pass_ms) // 2]:.2f} ms, max {max(pass_ms):.1f} ms")
    # Hours when every team is backlogged: before c's quiet days, and after them, when fair share (usage
    # decaying over 7 days) deliberately gives c more, and a and b (who used c's idle quota) less, for a while.
    # Each phase's backlogged teams, each against its weighted share among them: days 0-3 and 5-7 all three
    # (5-7 right after c's quiet days, its decayed usage low), days 3-5 a and b (c quiet, its quota lent).
    phases = {
        "days 0-3 (all backlogged)": ([h for h in hourly if h < 3 * 24], list(WEIGHTS)),
        "days 3-5 (c quiet: a and b backlogged)": ([h for h in hourly if 3 * 24 <= h < 5 * 24], ["a", "b"]),
        "days 5-7 (after c's quiet days)": ([h for h in hourly if h >= 5 * 24], list(WEIGHTS)),
    }
    for phase, (hours, backlogged) in phases.items():
        if not hours:
            continue
        weight = sum(WEIGHTS[t] for t in backlogged)
        indices = [jain([hourly[h][t] / WEIGHTS[t] for t in backlogged]) for h in hours]
        totals = {t: sum(hourly[h][t] for h in hours) for t in backlogged}
        everything = sum(totals.values())
        print(f"{phase}, {len(hours)} hours:")
        for t in backlogged:
            share, goal = totals[t] / everything, WEIGHTS[t] / weight
            off = 100 * (share - goal) / goal
            hourly_off = [abs(hourly[h][t] / sum(hourly[h][u] for u in backlogged) - goal) / goal for h in hours]
            within = sum(1 for x in hourly_off if x <= 0.05)
            print(
                f"  team {t}: {share:.3f} of the allocation (weighted share {goal:.3f}, {off:+.1f}%) [+-5%];"
                f" hours within +-5%: {within}/{len(hours)}, worst {100 * max(hourly_off):.1f}%"
            )
        mean = sum(indices) / len(indices)
        print(f"  Jain's index over weight-normalised allocations per hour: min {min(indices):.3f}, mean {mean:.3f} [>= 0.95]")
    if args.why:
        trace.report()
    print(f"reclaims: {reclaims}, before the minimum run time: {early} [0], not through the checkpointed stop: {without_checkpoint} [0]")
    print(f"GPU-hours lost to reclaim (held while checkpointing, resumed exactly after): {lost_gpu_hours:.1f}")


if __name__ == "__main__":
    main()
