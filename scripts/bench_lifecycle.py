"""Benchmark of the lifecycle engine: prints figures, asserts nothing (goals in brackets).

1. State transitions of the happy path, from the execution history of moto's engine  [<= 25]
2. DynamoDB writes per job (happy path), by API call and by purpose, on the real repository
3. Local overhead from submit to TRAINING                                           [<= 2 s]
4. Pause request to PAUSED, beyond the trainer's own checkpoint-and-exit time          [<= 2 s]
5. Scheduler pick among 10,000 queued jobs (one pass, Query on the queue index)       [<= 200 ms]

Runs the engine as local mode wires it (moto's server in this process, the real ASL, the lifecycle
Lambda in-process, LocalLauncher) with tests/fake_trainer.py, so the figures are the control plane's.
Usage: .venv/bin/python scripts/bench_lifecycle.py [--jobs 3] [--queued 10000]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

if TYPE_CHECKING:
    from tests.lifecycle_support import LocalEngine

WRITE_CALLS = {"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem"}


class WriteCounter:
    """Counts DynamoDB write calls made through one boto3 client (botocore's before-call event)."""

    def __init__(self, client: Any) -> None:
        self.calls: Counter[str] = Counter()
        self.items: Counter[str] = Counter()
        client.meta.events.register("before-call.dynamodb", self._before)

    def _before(self, model: Any, params: dict[str, Any], **_: Any) -> None:
        if model.name not in WRITE_CALLS:
            return
        self.calls[model.name] += 1
        if model.name == "TransactWriteItems":
            self.items["transaction items"] += len(params.get("TransactItems", []))

    def reset(self) -> None:
        self.calls.clear()
        self.items.clear()


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def run_handle(engine: LocalEngine, job_id: str) -> dict[str, str] | None:
    return engine.job(job_id).run_handle


def stepped(engine: LocalEngine, job_id: str, steps: int) -> bool:
    return engine.job(job_id).progress.step >= steps


def bench_engine(jobs: int) -> None:
    from schemas.status import JobStatus as S
    from tests.lifecycle_support import LocalEngine, make_request, wait_until

    with tempfile.TemporaryDirectory() as tmp, LocalEngine(Path(tmp), cpu_slots=1, dynamodb=True, stop_grace_seconds=10) as engine:
        counter = WriteCounter(engine.clients.dynamodb())
        transitions: list[int] = []
        to_training: list[float] = []
        for i in range(jobs):
            counter.reset()
            started = time.perf_counter()
            job = engine.submit(make_request(f"bench-{i}", max_steps=4, save_steps=2, step_seconds=0.01))
            wait_until(partial(run_handle, engine, job.job_id), 30, 0.005, "TRAINING with its run launched")
            to_training.append(time.perf_counter() - started)
            engine.wait_status(job.job_id, S.COMPLETED, S.FAILED, timeout=60)
            engine.wait_execution(job.job_id, "SUCCEEDED", "FAILED")
            transitions.append(len(engine.transitions(job.job_id)))
            writes = dict(counter.calls)
            history = engine.repository.history(job.job_id)
        print("1. state transitions per happy path:", transitions, "[goal <= 25]")
        print(f"2. DynamoDB write calls for the last job (4 steps, 1 checkpoint): {sum(writes.values())} {writes}")
        print(f"   of which status transitions (1 TransactWriteItems each: item + history + counters): {len(history) - 1}")
        print(
            f"3. submit -> TRAINING (run handle recorded): median {ms(statistics.median(to_training))}, "
            f"max {ms(max(to_training))} over {jobs} jobs [goal <= 2 s]"
        )

        pauses: list[tuple[float, float, float]] = []
        for i in range(jobs):
            job = engine.submit(make_request(f"pause-{i}", max_steps=100_000, save_steps=1_000_000, step_seconds=0.01))
            wait_until(partial(stepped, engine, job.job_id, 5), 30, 0.01, "progress")
            requested = time.perf_counter()
            engine.controls.pause(job.job_id)
            wait_until(lambda: not engine.launcher.active(), 30, 0.002, "the trainer to exit")
            exited = time.perf_counter()
            engine.wait_status(job.job_id, S.PAUSED, timeout=30)
            paused = time.perf_counter()
            pauses.append((paused - requested, exited - requested, paused - exited))
            engine.controls.cancel(job.job_id)
            engine.wait_execution(job.job_id, "SUCCEEDED", "FAILED")
        total = statistics.median(p[0] for p in pauses)
        trainer = statistics.median(p[1] for p in pauses)
        overhead = statistics.median(p[2] for p in pauses)
        print(
            f"4. pause -> PAUSED: median {ms(total)} = trainer checkpoint+exit {ms(trainer)} "
            f"+ control plane {ms(overhead)} (median of {jobs}) [goal: control plane <= 2 s]"
        )


class IndexedRepository:
    """The queue index as DynamoDB serves it: the head of a queue read in O(limit), not O(queue).

    Wraps the in-memory repository (tests/fakes.py), whose queued() sorts every job on each call."""

    def __init__(self, inner: Any) -> None:
        import bisect

        self._bisect = bisect
        self.inner = inner
        self.index: dict[str, list[tuple[int, Any, str]]] = {}

    def load(self, job: Any) -> None:
        from schemas.job import StatusEvent

        self.inner.create(job, StatusEvent(at=job.created_at, to_status=job.status, reason="loaded"))
        self.index.setdefault(job.queue, []).append((-job.priority, job.created_at, job.job_id))

    def sort(self) -> None:
        for entries in self.index.values():
            entries.sort()

    def queued(self, queue: str, limit: int = 100) -> list[Any]:
        return [self.inner.get(job_id) for _, _, job_id in self.index.get(queue, [])[:limit]]

    def transition(self, t: Any) -> Any:
        job = self.inner.transition(t)
        if t.from_status == "QUEUED":
            entries = self.index[job.queue]
            del entries[self._bisect.bisect_left(entries, (-job.priority, job.created_at, job.job_id))]
        return job

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _queued_jobs(queued: int) -> list[Any]:
    from schemas.status import JobStatus
    from tests.lifecycle_support import make_job, make_request

    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    request = make_request("q")
    return [
        make_job(request, created_at=t0 + timedelta(milliseconds=i)).model_copy(
            update={
                "status": JobStatus.QUEUED,
                "task_token": f"tok-{i}",
                "task_token_kind": "capacity",
                "scheduling_config": request.scheduling_config.model_copy(update={"priority": i % 11}),
            }
        )
        for i in range(queued)
    ]


class Answers:
    def __init__(self) -> None:
        self.started: list[str] = []

    def send_success(self, token: str, output: Any) -> bool:
        self.started.append(token)
        return True

    def stop_run(self, job: Any, *, graceful: bool, reason: str) -> None:
        pass


def _passes(scheduler: Any, ledger: Any, repository: Any, answers: Answers, n: int = 5) -> list[float]:
    timings = []
    for _ in range(n):
        holders = ledger.holders("local/cpu")
        if holders:
            ledger.release("local/cpu", next(iter(holders)))
        started = time.perf_counter()
        result = scheduler.run_pass(["default"])
        timings.append(time.perf_counter() - started)
        assert len(result.started) == 1, result
    first = repository.get(result.started[0])
    assert first.priority == 10, "the pick must be the highest priority"
    return timings


def bench_scheduler(queued: int) -> None:
    import boto3
    from moto import mock_aws
    from moto.dynamodb.models import dynamodb_backends

    from functions.adapters.dynamodb import DynamoJobRepository
    from functions.adapters.dynamodb_items import create_tables, job_item
    from functions.service.scheduler import LocalCapacity, Scheduler
    from tests.fakes import InMemoryJobRepository
    from tests.lifecycle_support import InMemoryLedger

    jobs = _queued_jobs(queued)

    # a) the scheduler itself, with the queue index served as DynamoDB serves it (head in O(limit))
    indexed = IndexedRepository(InMemoryJobRepository())
    for job in jobs:
        indexed.load(job)
    indexed.sort()
    ledger, answers = InMemoryLedger(), Answers()
    ledger.register_queue("default")
    timings = _passes(Scheduler(indexed, ledger, LocalCapacity(gpu_slots=0, cpu_slots=1), answers, answers), ledger, indexed, answers)
    print(
        f"5. scheduler pick among {queued} queued jobs (index read as DynamoDB serves it, claim, transition, answer): "
        f"median {ms(statistics.median(timings))}, max {ms(max(timings))} over {len(timings)} passes [goal <= 200 ms]"
    )

    # b) the same pass on moto's DynamoDB: real repository and ledger, Query on the sparse by-queue index
    class Clients:
        def __init__(self) -> None:
            self._ddb = boto3.client("dynamodb", region_name="us-east-1")

        def client(self, service: str) -> Any:
            return self._ddb

        def dynamodb(self) -> Any:
            return self._ddb

    from functions.adapters.capacity import DynamoDBCapacityLedger

    with mock_aws():
        clients = Clients()
        create_tables(clients.dynamodb(), jobs_table="bench-jobs", idempotency_table="bench-idem")
        backend = dynamodb_backends["123456789012"]["us-east-1"]
        loading = time.perf_counter()
        for job in jobs:  # straight into moto's table: 10,000 PutItem calls through botocore take minutes
            backend.put_item("bench-jobs", job_item(job))
        repository = DynamoJobRepository(clients, "bench-jobs")  # type: ignore[arg-type]
        ledger_ddb, answers = DynamoDBCapacityLedger(clients, "bench-jobs"), Answers()
        ledger_ddb.register_queue("default")
        scheduler = Scheduler(repository, ledger_ddb, LocalCapacity(gpu_slots=0, cpu_slots=1), answers, answers)
        print(f"   loaded {queued} QUEUED jobs into moto in {time.perf_counter() - loading:.1f} s")
        timings = _passes(scheduler, ledger_ddb, repository, answers, n=3)
        print(
            f"   the same pass on moto's DynamoDB: median {ms(statistics.median(timings))}, max {ms(max(timings))}: moto answers a "
            "Query by sorting the whole index in Python (O(n log n)); DynamoDB reads the <= 3 items asked for"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=3)
    parser.add_argument("--queued", type=int, default=10_000)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    bench_engine(args.jobs)
    bench_scheduler(args.queued)


if __name__ == "__main__":
    main()
