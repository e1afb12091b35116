"""Teams benchmark (issue 24, Measure): the scheduler's decision time with 10,000 queued jobs across 20 teams.

The real scheduler (functions/service/scheduler.py, fair_share.py) over an in-memory store whose queue read is
index-like (the head of each queue in order, as DynamoDB's sparse by-queue index gives it), the in-memory
ledger, teams with quotas, borrowing and member caps. 20 teams hold their nominal H100s and A100s (the pools
are full); 10,000 jobs of 1-4 GPUs wait in 4 queues. One decision: a running job ends (its units released) and
a pass picks who gets them, by priority, within-nominal first, fair share, FIFO. Prints figures (goal <= 200 ms).

    .venv/bin/python scripts/bench_teams.py [--queued 10000] [--teams 20] [--decisions 30]
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from functions.catalog.gpu_types import gpu_type_of
from functions.service.fair_share import admission_order
from functions.service.ports import Transition
from functions.service.scheduler import LocalCapacity, Scheduler
from functions.service.teams import TeamDirectory
from functions.settings import Settings
from schemas.job import Job, StatusEvent
from schemas.status import JobStatus as S
from schemas.teams import DEFAULT_TEAM
from tests.fakes import InMemoryJobRepository
from tests.helpers.teams import InMemoryTeamRepository, team
from tests.lifecycle_support import InMemoryLedger, make_job, make_request

T0 = datetime(2026, 1, 1, tzinfo=UTC)
QUEUES = ("default", "research", "prod", "batch")
NOMINAL = {"H100": 8, "A100": 16}


class IndexedRepository(InMemoryJobRepository):
    """queued() and queued_of_team() as the by-queue and by-team-queue indexes answer them: the head in order,
    not a scan of every job. Without
    `copies` a read hands out the stored job itself (the scheduler never changes a Job in place): the figures
    are then the scheduler's own, without the fake store's deep copies (which stand for item parsing)."""

    def __init__(self, copies: bool) -> None:
        super().__init__()
        self.copies = copies
        self.reads = 0
        self.index: dict[str, list[tuple[int, datetime, str]]] = defaultdict(list)

    def get(self, job_id: str) -> Job:
        self.reads += 1
        return super().get(job_id) if self.copies else self.jobs[job_id]

    def get_many(self, job_ids: Iterable[str]) -> dict[str, Job]:
        return {job_id: self.get(job_id) for job_id in dict.fromkeys(job_ids) if job_id in self.jobs}

    def add_to_index(self, job: Job) -> None:
        entry = (-job.priority, job.created_at, job.job_id)
        self.index[job.queue].append(entry)
        self.index[f"{job.team}#{gpu_type_of(job.resource_config)}"].append(entry)  # as by-team-queue

    def sort_index(self) -> None:
        for entries in self.index.values():
            entries.sort()

    def queued(self, queue: str, limit: int = 100) -> list[Job]:
        return self._head(queue, limit)

    def queued_of_team(self, team: str, gpu_type: str, limit: int = 100) -> list[Job]:
        return self._head(f"{team}#{gpu_type}", limit)

    def _head(self, key: str, limit: int) -> list[Job]:
        out: list[Job] = []
        for _, _, job_id in self.index.get(key, []):
            job = self.jobs[job_id]
            if job.status == S.QUEUED:
                self.reads += 1
                out.append(job.model_copy(deep=True) if self.copies else job)
                if len(out) == limit:
                    break
        return out


class Tokens:
    def send_success(self, token: str, output: object) -> bool:
        return True

    def stop_run(self, job: Job, *, graceful: bool, reason: str) -> None:
        pass


class _FullCollections:
    """Counts the cyclic collector's full collections (and their CPU time) while registered."""

    def __init__(self) -> None:
        self.count = 0
        self.cpu_ms = 0.0
        self._started = 0.0
        gc.callbacks.append(self)

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._started = time.process_time()
        else:
            self.count += 1
            self.cpu_ms += (time.process_time() - self._started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--queued", type=int, default=10_000)
    parser.add_argument("--teams", type=int, default=20)
    parser.add_argument("--decisions", type=int, default=30)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--store-copies", action="store_true", help="reads deep-copy jobs, as the tests' fake store does")
    parser.add_argument("--no-gc-freeze", action="store_true", help="leave the store's 10,000 jobs to the cyclic collector")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    repo, ledger, teams, tokens = IndexedRepository(args.store_copies), InMemoryLedger(), InMemoryTeamRepository(), Tokens()
    names = [f"t{i:02d}" for i in range(args.teams)]
    for i, name in enumerate(names):
        quotas = {t: {"nominal": n, "borrow_limit": n // 2} for t, n in NOMINAL.items()}
        teams.put(team(name, f"arn:aws:iam::1:user/{name}-*", weight=1 + i % 4, **quotas), None)
    directory = TeamDirectory(teams, Settings(default_team_quotas="H100=0,A100=0"), lambda: T0 + timedelta(days=1))
    inventory = {t: n * args.teams for t, n in NOMINAL.items()}
    scheduler = Scheduler(repo, ledger, LocalCapacity(gpu_slots=0, inventory=inventory), tokens, tokens, teams=directory)
    n = 0

    def add(name: str, gpu_type: str, gpus: int, queue: str, status: S) -> Job:
        nonlocal n
        n += 1
        request = make_request(f"b{n}", resource_config={"gpu_count": gpus, "gpu_type": gpu_type}, scheduling_config={"queue": queue})
        job = make_job(request, owner=f"arn:aws:iam::1:user/{name}-{n % 7}", created_at=T0 + timedelta(seconds=n))
        job = job.model_copy(update={"team": name})
        repo.create(job, StatusEvent(at=job.created_at, to_status=S.PENDING))
        job = repo.transition(Transition(job.job_id, 1, S.PENDING, S.QUEUED, "admitted"))
        ledger.register_queue(queue)
        job = repo.update(job.job_id, job.version, {"task_token": f"tok-{job.job_id}", "task_token_kind": "capacity"})
        repo.add_to_index(job)
        return job

    # Every team holds its nominal quota of both types with 2-GPU jobs that started an hour ago: the pools are full
    running: list[Job] = []
    for name in names:
        for gpu_type, nominal in NOMINAL.items():
            for _ in range(nominal // 2):
                job = add(name, gpu_type, 2, rng.choice(QUEUES), S.QUEUED)
                assert ledger.claim(f"local/{gpu_type}", job.job_id, 2, inventory[gpu_type])
                granted = {"capacity_pool": f"local/{gpu_type}"}
                job = repo.transition(Transition(job.job_id, job.version, S.QUEUED, S.SCHEDULING, "granted", changes=granted))
                for to in (S.PREPARING, S.TRAINING):
                    job = repo.transition(Transition(job.job_id, job.version, job.status, to, "run"))
                running.append(repo.update(job.job_id, job.version, {"run_started_at": T0 + timedelta(hours=23)}))
    for _ in range(args.queued):
        add(rng.choice(names), rng.choice(tuple(NOMINAL)), rng.randint(1, 4), rng.choice(QUEUES), S.QUEUED)
    repo.sort_index()
    if not args.no_gc_freeze:
        # The store's jobs stand for DynamoDB's items, not for the scheduler's heap: left to the collector, each
        # of its full collections walks all 10,000 (~450 ms CPU, every few passes) and that is the benchmark's cost.
        gc.collect()
        gc.freeze()
    collections = _FullCollections()
    store = "deep-copied, as the fake store does" if args.store_copies else "handed out as stored: the scheduler's own time"
    print(f"{args.queued} queued jobs, {args.teams} teams, {len(running)} running jobs holding every GPU, {len(QUEUES)} queues")
    print(f"store reads: {store}; the store's jobs {'left to' if args.no_gc_freeze else 'frozen out of'} the cyclic collector")

    # One decision: a running job ends, a pass gives its units out
    rng.shuffle(running)
    times: list[float] = []
    cpu: list[float] = []  # the process's CPU time: on a shared, loaded machine wall time also counts waiting for a core
    reads: list[int] = []  # jobs a pass reads (DynamoDB: the queues' heads by Query, the holders by GetItem)
    started = 0
    for job in running[: args.decisions]:
        job = repo.get(job.job_id)
        done = repo.transition(Transition(job.job_id, job.version, job.status, S.COMPLETED, "done"))
        scheduler.release(done)
        repo.reads = 0
        t, c = time.perf_counter(), time.process_time()
        result = scheduler.run_pass()
        reads.append(repo.reads)
        times.append((time.perf_counter() - t) * 1000)
        cpu.append((time.process_time() - c) * 1000)
        started += len(result.started)
    for what, values in (("wall", times), ("CPU", cpu)):
        values.sort()
        p95 = values[min(len(values) - 1, int(0.95 * len(values)))]
        print(
            f"one decision (a pass after a release), {what} time: median {statistics.median(values):.1f} ms, p95 {p95:.1f} ms, "
            f"max {values[-1]:.1f} ms over {len(values)} decisions ({started} jobs started) [goal <= 200 ms]"
        )

    print(f"jobs read per pass: median {statistics.median(reads):.0f}")
    print(f"full (generation 2) collections during the passes: {collections.count}, {collections.cpu_ms:.0f} ms CPU in all")
    gc.callbacks.remove(collections)
    # The whole backlog in fair-share order at once (what GET /jobs/{id}'s position would need for every job)
    cohort = scheduler._cohort()
    assert cohort is not None
    everything = [j for j in repo.jobs.values() if j.status == S.QUEUED]
    t = time.perf_counter()
    order = admission_order(everything, cohort, DEFAULT_TEAM)
    print(f"fair-share order of all {len(order)} queued jobs: {(time.perf_counter() - t) * 1000:.0f} ms")
    waiting = repo.get(order[-1][0].job_id)
    t = time.perf_counter()
    position, _, reason = scheduler.explain(waiting)
    took = (time.perf_counter() - t) * 1000
    print(f"one queued job's position/ETA/reason (GET /jobs/{{id}}): {took:.0f} ms (position {position}, {reason})")


if __name__ == "__main__":
    main()
