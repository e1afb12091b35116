"""Benchmark of local mode's DynamoDB (moto in-process) on the jobs table: Query time against table size, and
the event publisher's drain throughput, with and without localmode/moto_ddb_reads.py, in one run.

The jobs table is built as local mode builds it (functions.adapters.dynamodb_items.create_tables) in moto with
localmode's hooks (moto_hooks.install(): the locks, the item-level transactions, moto_speedups). --jobs jobs
are created through the repository (their items, timeline, counters and outbox events), then filler timeline
items (copies of a real timeline item under other sort keys) bring the table to each --sizes figure.

Measured, each with moto_ddb_reads' patches and moto_speedups' JSONPath cache off ("plain") and on
("patched"), the ratio printed:
- the publisher's Query (the OUTBOX partition, Limit 100, ConsistentRead) and the scheduler's queue Query
  (GSI by-queue): mean time per call;
- a full drain (functions/service/event_publisher.py) of --events pending outbox events to the deployment's
  EventBridge bus in moto, with its archive as local mode creates it (PutEvents then the deletes): events/s.
--profile N: cProfile of the plain drain at the largest size, the N costliest functions (cumulative).
Times are this process's CPU time (moto runs in it), so a loaded machine does not inflate them.
Prints figures, asserts nothing.

Usage: nice -n 10 .venv/bin/python scripts/bench_local_ddb.py [--sizes 1000,5000,20000] [--events 500]
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import io
import pstats
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from moto.dynamodb.models import dynamodb_backends  # noqa: E402

from functions import constants as c  # noqa: E402
from functions.adapters import dynamodb_items as items  # noqa: E402
from functions.adapters import outbox  # noqa: E402
from functions.adapters.dynamodb import DynamoJobRepository  # noqa: E402
from functions.adapters.outbox import DynamoOutbox, EventBridgeBus  # noqa: E402
from functions.catalog import own_events as et  # noqa: E402
from functions.service.event_publisher import EventPublisher  # noqa: E402
from localmode import (  # noqa: E402
    moto_ddb_reads,
    moto_hooks,
    moto_speedups,
)
from schemas.job import StatusEvent  # noqa: E402
from schemas.status import JobStatus  # noqa: E402
from tests.helpers.aws import emulated_aws, fresh_resources  # noqa: E402
from tests.helpers.jobs import make_job  # noqa: E402

ACCOUNT = "123456789012"


def timed(fn: Callable[[], Any], repeat: int) -> float:
    """Mean CPU seconds (this process's: moto runs in it) per call of fn over `repeat` calls, after one
    warm-up call. CPU time, not wall time: the figures hold on a shared, loaded machine."""
    fn()
    start = time.process_time()
    for _ in range(repeat):
        fn()
    return (time.process_time() - start) / repeat


def patches(on: bool) -> None:
    """moto_ddb_reads' patches and moto_speedups' JSONPath cache on, or off (moto 5.2.5 as it is)."""
    if on:
        moto_ddb_reads.install()
        moto_speedups._install_jsonpath_cache()
    else:
        moto_ddb_reads.uninstall()
        moto_speedups._uninstall_jsonpath_cache()


def modes(fn: Callable[[], float]) -> tuple[float, float]:
    """fn's figure with the patches off, then on."""
    patches(False)
    plain = fn()
    patches(True)
    return plain, fn()


class Bench:
    def __init__(self, clients: Any, jobs: int) -> None:
        self.clients = clients
        self.settings = fresh_resources(clients)
        self.table_name = self.settings.jobs_table
        self.table = dynamodb_backends[ACCOUNT][c.LOCAL_REGION].get_table(self.table_name)
        repo = DynamoJobRepository(clients, self.table_name)
        for n in range(jobs):
            job = make_job(status=JobStatus.QUEUED if n % 2 else JobStatus.PENDING)
            repo.create(job, StatusEvent(at=job.created_at, from_status=None, to_status=job.status, reason="submitted"))
        self.template = next(i for i in self.table.all_items() if "entity" in i.attrs and i.attrs["entity"].value == "EVENT")
        self.fillers = 0
        # The creates' own outbox events: the drains below start from an empty outbox.
        EventPublisher(self._bus(), DynamoOutbox(clients, self.table_name)).drain(max_rounds=10_000)

    def _bus(self) -> EventBridgeBus:
        events = self.clients.client("events")
        name = self.settings.trainplane_bus_name
        if not any(b["Name"] == name for b in events.list_event_buses()["EventBuses"]):
            # As local mode's deployer (localmode/deploy/event_bus.py): the bus and its archive (a rule and a target)
            arn = events.create_event_bus(Name=name)["EventBusArn"]
            events.create_archive(ArchiveName=name, EventSourceArn=arn, EventPattern=f'{{"source": ["{et.SOURCE}"]}}')
        return EventBridgeBus(self.clients, name)

    def grow_to(self, size: int) -> None:
        """Filler timeline items (a real one's copies) until the table holds `size` items."""
        while len(self.table) < size:
            item = copy.deepcopy(self.template)
            self.fillers += 1
            sk = f"{item.attrs[c.SK].value}#filler{self.fillers:07d}"
            attrs = {k: v.to_json() for k, v in item.attrs.items()}
            attrs[c.SK] = {"S": sk}
            self.table.put_item(attrs)

    def fill_outbox(self, events: int) -> None:
        for n in range(events):
            self.table.put_item(
                {
                    c.PK: {"S": outbox.OUTBOX_PK},
                    c.SK: {"S": f"2026-11-27T00:00:00.{n:06d}#job#bench-{n % 100}#{n:09d}"},
                    "entity": {"S": outbox.ENTITY},
                    "event_id": {"S": f"bench-{n}"},
                    "detail_type": {"S": et.JOB_STATE_CHANGE.detail_type},
                    "subject_id": {"S": f"bench-{n % 100}"},
                    "sequence": {"N": str(n + 1)},
                    "detail": {"S": '{"job_id": "bench", "state": "RUNNING", "reason": "' + "x" * 400 + '"}'},
                }
            )

    def query_outbox(self) -> None:
        self.clients.dynamodb().query(
            TableName=self.table_name,
            KeyConditionExpression="#pk = :pk",
            ExpressionAttributeNames={"#pk": c.PK},
            ExpressionAttributeValues={":pk": {"S": outbox.OUTBOX_PK}},
            ConsistentRead=True,
            Limit=100,
        )

    def query_queue(self) -> None:
        self.clients.dynamodb().query(
            TableName=self.table_name,
            IndexName=c.GSI_QUEUE,
            KeyConditionExpression="#pk = :pk",
            ExpressionAttributeNames={"#pk": c.GSI_QUEUE_PK},
            ExpressionAttributeValues={":pk": {"S": items.queue_pk("default")}},
            Limit=100,
        )

    def drain_rate(self, events: int) -> float:
        self.fill_outbox(events)
        publisher = EventPublisher(self._bus(), DynamoOutbox(self.clients, self.table_name))
        start = time.process_time()
        result = publisher.drain(max_rounds=10_000)
        elapsed = time.process_time() - start
        if result.sent != events:
            raise SystemExit(f"the drain sent {result.sent} of {events} events")
        return events / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,5000,20000", help="table sizes (items), comma-separated")
    parser.add_argument("--jobs", type=int, default=100, help="jobs created through the repository")
    parser.add_argument("--events", type=int, default=500, help="pending outbox events per drain")
    parser.add_argument("--repeat", type=int, default=20, help="Queries per timing")
    parser.add_argument("--profile", type=int, default=0, help="print the N costliest functions of a plain drain")
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))

    with emulated_aws() as clients:
        moto_hooks.install()
        moto_ddb_reads.install()
        bench = Bench(clients, args.jobs)
        queue_items = len(bench.table.has_idx_items(c.GSI_QUEUE))
        print(f"jobs table: {args.jobs} jobs through the repository ({queue_items} in the by-queue index), filler timeline items")
        print(
            f"{'items':>7} | {'outbox Query plain':>18} | {'patched':>8} | {'ratio':>6} | "
            f"{'queue GSI Query plain':>21} | {'patched':>8} | {'ratio':>6} | "
            f"{'drain events/CPU s plain':>24} | {'patched':>8} | {'ratio':>6}"
        )
        for size in sizes:
            bench.grow_to(size)
            bench.fill_outbox(100)
            q_plain, q_fast = modes(lambda: timed(bench.query_outbox, args.repeat))
            g_plain, g_fast = modes(lambda: timed(bench.query_queue, args.repeat))
            EventPublisher(bench._bus(), DynamoOutbox(clients, bench.table_name)).drain(max_rounds=10_000)
            d_plain, d_fast = modes(lambda: bench.drain_rate(args.events))
            print(
                f"{len(bench.table):>7} | {q_plain * 1e3:>15.2f} ms | {q_fast * 1e3:>5.2f} ms | {q_plain / q_fast:>5.1f}x | "
                f"{g_plain * 1e3:>18.2f} ms | {g_fast * 1e3:>5.2f} ms | {g_plain / g_fast:>5.1f}x | "
                f"{d_plain:>24.1f} | {d_fast:>8.1f} | {d_fast / d_plain:>5.1f}x"
            )
        if args.profile:
            for label, install in (("plain", False), ("patched", True)):
                patches(install)
                profiler = cProfile.Profile()
                profiler.enable()
                rate = bench.drain_rate(args.events)
                profiler.disable()
                out = io.StringIO()
                pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(args.profile)
                items_now = len(bench.table)
                print(f"\n--- cProfile of a {label} drain of {args.events} events at {items_now} items ({rate:.1f} events/CPU s, profiled)")
                print(out.getvalue())
        moto_hooks.uninstall()


if __name__ == "__main__":
    main()
