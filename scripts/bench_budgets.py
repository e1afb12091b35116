"""The budget tick's cost (issue 25, "Measure"; docs/BENCHMARKS.md): 1,000 running jobs and 100 budgets.

Prints figures, asserts nothing. The tick (functions/service/budgets.py BudgetMeter.tick) runs on in-memory
repositories with the real metering code, so the time printed is the tick's own CPU; the DynamoDB calls it
would make are counted (reads: the budgets' Query and the running jobs' pages; writes: one conditional put per
budget whose meter changed) and the largest budget item's size is printed against DynamoDB's 400 KB.

    .venv/bin/python scripts/bench_budgets.py [--jobs 1000] [--budgets 100] [--runs 7]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from functions.service.budgets import BudgetMeter
from schemas.job import StatusEvent
from schemas.status import JobStatus as S
from tests.fakes import InMemoryJobRepository
from tests.helpers.budgets import InMemoryBudgetRepository, budget
from tests.helpers.jobs import T0, make_job

TYPES = ["H100", "A100", "L4", "T4"]
TEAMS = [f"team{i}" for i in range(10)]
OWNERS = [f"arn:aws:iam::123456789012:user/u{i}" for i in range(50)]
PROJECTS = [f"p{i}" for i in range(20)]


class Counting:
    """Counts the calls a repository gets (each is one DynamoDB request in the cloud, a page for listings)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not callable(attr):
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] = self.calls.get(name, 0) + 1
            return attr(*args, **kwargs)

        return counted


class NoStops:
    def stop_run(self, job: Any, *, graceful: bool, reason: str) -> None:
        pass


def world(n_jobs: int, n_budgets: int, seed: int) -> tuple[InMemoryBudgetRepository, InMemoryJobRepository]:
    rng = random.Random(seed)
    jobs = InMemoryJobRepository()
    for i in range(n_jobs):
        request = {"resource_config": {"gpu_count": rng.randint(1, 8), "gpu_type": rng.choice(TYPES)}}
        job = make_job(
            job_id=f"job-{i:05d}",
            owner=rng.choice(OWNERS),
            request=request,
            status=S.TRAINING,
            created_at=T0,
            run_started_at=T0 + timedelta(seconds=rng.randint(0, 3600)),
            team=rng.choice(TEAMS),
            labels={"project": rng.choice(PROJECTS)},
        )
        jobs.create(job, StatusEvent(at=T0, to_status=S.TRAINING))
    budgets = InMemoryBudgetRepository()
    for i in range(n_budgets):
        kind = ("team", "principal", "label", "deployment")[i % 4]
        value = {"team": rng.choice(TEAMS), "principal": rng.choice(OWNERS), "label": f"project={rng.choice(PROJECTS)}"}.get(kind)
        scope = {"kind": kind, **({"value": value} if value else {})}
        budgets.create(budget(f"b{i:03d}", T0, amount_usd=1e6, scope=scope))
    return budgets, jobs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--budgets", type=int, default=100)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    budgets, jobs = world(args.jobs, args.budgets, seed=7)
    counted_budgets, counted_jobs = Counting(budgets), Counting(jobs)
    now = [T0 + timedelta(hours=2)]
    meter = BudgetMeter(counted_budgets, counted_jobs, NoStops(), clock=lambda: now[0])
    # The running jobs' read is DynamoDB's (pages of a Query on the by-status index, counted below); the
    # in-memory fake's deep copies would dominate the figure, so the tick is timed on what it read once.
    started = time.perf_counter()
    running = meter.running()
    read = time.perf_counter() - started
    pages = counted_jobs.calls.get("list_jobs", 0)
    meter.running = lambda: running  # type: ignore[method-assign]
    times = []
    for _ in range(args.runs):
        now[0] += timedelta(seconds=30)
        counted_budgets.calls.clear()
        counted_jobs.calls.clear()
        started = time.perf_counter()
        result = meter.tick()
        times.append(time.perf_counter() - started)
    largest = max(len(b.model_dump_json()) for b in budgets.list())
    print(f"budget tick: {result.jobs} running jobs, {result.budgets} budgets, {args.runs} ticks")
    median, worst = statistics.median(times) * 1000, max(times) * 1000
    print(f"  tick time without the running jobs' read (the metering's own CPU): median {median:.1f} ms, max {worst:.1f} ms")
    print(f"  calls per tick: budgets {dict(sorted(counted_budgets.calls.items()))}, jobs {dict(sorted(counted_jobs.calls.items()))}")
    print(f"  plus the running jobs' read: {pages} pages of the by-status Query (in-memory, read once: {read:.2f} s)")
    print(f"  largest budget item: {largest / 1024:.1f} KiB of DynamoDB's 400 KiB")


if __name__ == "__main__":
    main()
