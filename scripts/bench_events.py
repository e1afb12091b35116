"""Benchmark of the control plane's events in local mode: commit -> bus and commit -> webhook latency, and
events lost, with --jobs jobs RUNNING at once.

Starts `trainplane up` with the real trainer and as many CPU slots as jobs (local mode's capacity setting,
TRAINPLANE_LOCAL_CPU_SLOTS), puts a rule with an SQS target on the bus endpoint.json names (docs/EVENTS.md's
recipe), registers a webhook (`job.*`, this run's label) on a loopback receiver in this process, and submits
--jobs CUSTOM jobs running scripts/bench_events_job.py: each stays RUNNING until this script creates its
release file. Once every job is running, this script creates the start file: for --hold-seconds each job saves
a checkpoint every --save-seconds (a `Trainplane Checkpoint Saved` event each); then it is released, saves a
last checkpoint and COMPLETES. Then every event is read back, until every event the outbox took is seen or
nothing new arrives for --drain-idle seconds (the outbox's pending count is printed then).
Latency of one event: the SQS message's SentTimestamp (EventBridge delivered it), or the moment the receiver
read the delivery's body, minus the event's `at` (the commit's clock reading, taken just before the
transaction). Lost: an outbox event of a job (sequences 1 .. the job item's `event_seq`, every event the
job's transactions wrote) not seen on the bus, or not at the receiver. Prints figures, asserts nothing.

Usage: nice -n 5 .venv/bin/python scripts/bench_events.py [--jobs 100] [--save-seconds 10] [--hold-seconds 30]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from functions.catalog import own_events as et  # noqa: E402
from functions.constants import JOBS_TABLE  # noqa: E402
from tests.e2e.conftest import LocalPlane  # noqa: E402
from tests.helpers.jobs import request_body  # noqa: E402


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


class Receiver:
    """A loopback webhook receiver: the first receipt time of each webhook-id, and the event it carried."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.first: dict[str, tuple[float, dict[str, Any]]] = {}
        self.deliveries = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                at = time.time()
                with receiver.lock:
                    receiver.deliveries += 1
                    receiver.first.setdefault(self.headers["webhook-id"], (at, json.loads(body)["data"]))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/bench"

    def received(self) -> int:
        with self.lock:
            return len(self.first)


RUNNING = {"TRAINING", "CHECKPOINTING"}
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED"}
JOB_SCRIPT = ROOT / "scripts" / "bench_events_job.py"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--save-seconds", type=float, default=10.0, help="each job's checkpoint interval")
    parser.add_argument("--hold-seconds", type=float, default=30.0, help="how long all jobs run together")
    parser.add_argument("--start-timeout", type=float, default=900.0, help="the wait for every job to be running")
    parser.add_argument("--drain-idle", type=float, default=120.0, help="stop reading after this long without news")
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores; load average at start {load()}")
    with tempfile.TemporaryDirectory() as tmp:
        # Local mode's capacity for CPU-only jobs is its CPU slots: one per job, so that all run at once.
        env = {"TRAINPLANE_LOCAL_CPU_SLOTS": str(args.jobs)}
        plane = LocalPlane(Path(tmp) / "state", env=env, allow_dirs=[ROOT / "scripts"]).start()
        try:
            run(plane, args, Path(tmp))
        finally:
            plane.stop()
    print(f"load average at end {load()}")


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def job_spec(n: int, tag: str, files: Path, save_seconds: float) -> dict[str, Any]:
    body = request_body(name=f"bench-{n}", labels={"bench": tag})
    body["training_config"]["framework"] = {"type": "CUSTOM", "custom_script_path": str(JOB_SCRIPT)}
    body["training_config"]["hyperparameters"] = {}
    environment = {"START_FILE": str(files / "start"), "RELEASE_FILE": str(files / "release"), "SAVE_SECONDS": str(save_seconds)}
    body["training_config"]["environment"] = environment
    return body


def statuses(plane: LocalPlane, tag: str) -> dict[str, str]:
    """Every job of this run by id: its status (GET /jobs filtered by the run's label, all pages)."""
    found: dict[str, str] = {}
    params: dict[str, Any] = {"labels.bench": tag, "limit": 100}
    while True:
        reply = plane.request("GET", "/jobs", params=params, timeout=120)
        assert reply.status_code == 200, reply.text
        page = reply.json()
        found.update({j["job_id"]: j["status"] for j in page["jobs"]})
        if not page.get("next_token"):
            return found
        params["next_token"] = page["next_token"]


def outbox_pending(ddb: Any) -> int:
    """Events still in the outbox (written, not yet accepted by the bus)."""
    kwargs: dict[str, Any] = {
        "TableName": JOBS_TABLE,
        "KeyConditionExpression": "pk = :pk",
        "ExpressionAttributeValues": {":pk": {"S": et.OUTBOX_PK}},
        "Select": "COUNT",
    }
    count = 0
    while True:
        page = ddb.query(**kwargs)
        count += page["Count"]
        if "LastEvaluatedKey" not in page:
            return count
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def run(plane: LocalPlane, args: argparse.Namespace, files: Path) -> None:
    jobs = args.jobs
    bus, tag = plane.endpoint["event_bus"], uuid.uuid4().hex[:12]
    sqs, events, ddb = plane.client("sqs"), plane.client("events"), plane.client("dynamodb")
    queue_url = sqs.create_queue(QueueName=f"bench-{tag}")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    events.put_rule(Name=f"bench-{tag}", EventBusName=bus, EventPattern=json.dumps({"source": [et.SOURCE]}))
    events.put_targets(Rule=f"bench-{tag}", EventBusName=bus, Targets=[{"Id": "q", "Arn": queue_arn}])

    receiver = Receiver()
    hook = {"url": receiver.url, "event_types": ["job.*"], "labels": {"bench": tag}}
    created = plane.request("POST", "/webhooks", principal="alice", json=hook)
    assert created.status_code == 201, created.text

    began = time.monotonic()
    job_ids = []
    for n in range(jobs):
        reply = plane.request("POST", "/jobs", json=job_spec(n, tag, files, args.save_seconds), timeout=120)
        assert reply.status_code == 201, reply.text
        job_ids.append(str(reply.json()["job_id"]))
    print(f"{jobs} jobs submitted in {time.monotonic() - began:.1f} s")

    # Wait (a condition, polled) until every job is running, or the start timeout says how many could be.
    most, deadline = 0, time.monotonic() + args.start_timeout
    while time.monotonic() < deadline:
        now = statuses(plane, tag)
        running = sum(1 for s in now.values() if s in RUNNING)
        most = max(most, running)
        if running == jobs or all(s in TERMINAL for s in now.values()):
            break
        time.sleep(1)
    all_running_at = time.time()
    (files / "start").touch()
    print(f"{most} of {jobs} jobs running at once, {time.monotonic() - began:.1f} s after the first submit; load {load()}")
    hold_end, fewest = time.monotonic() + args.hold_seconds, most
    while time.monotonic() < hold_end:  # the hold: count what stays running while they all emit checkpoints
        fewest = min(fewest, sum(1 for s in statuses(plane, tag).values() if s in RUNNING))
        time.sleep(1)
    release_at = time.time()
    (files / "release").touch()
    print(f"held {args.hold_seconds:.0f} s (fewest running during it: {fewest}); load {load()}; released")
    end_deadline = time.monotonic() + 900
    final = statuses(plane, tag)
    while time.monotonic() < end_deadline and not all(s in TERMINAL for s in final.values()):
        time.sleep(1)
        final = statuses(plane, tag)
    ends: dict[str, int] = {}
    for status in final.values():
        ends[status] = ends.get(status, 0) + 1
    print(f"{jobs} jobs ended in {time.monotonic() - began:.1f} s: {ends}")

    # Every outbox event a job's transactions wrote: sequences 1 .. event_seq on the job's item.
    written: dict[str, int] = {}
    for job_id in job_ids:
        item = ddb.get_item(TableName=JOBS_TABLE, Key={"pk": {"S": f"JOB#{job_id}"}, "sk": {"S": "META"}})
        written[job_id] = int(item["Item"].get("event_seq", {"N": "0"})["N"])
    outbox = {(j, n) for j, top in written.items() for n in range(1, top + 1)}

    on_bus: list[tuple[float, dict[str, Any]]] = []
    seen: dict[str, set[int]] = {job_id: set() for job_id in job_ids}
    kinds: dict[str, int] = {}
    duplicates = 0
    news = time.monotonic()
    # Read until every event the outbox took is in, or nothing new came for --drain-idle seconds.
    while time.monotonic() - news < args.drain_idle and not outbox <= {(j, n) for j, s in seen.items() for n in s}:
        reply = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=1, AttributeNames=["SentTimestamp"])
        messages = reply.get("Messages", [])
        if messages:
            news = time.monotonic()
            entries = [{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)]
            sqs.delete_message_batch(QueueUrl=queue_url, Entries=entries)
        for message in messages:
            event = json.loads(message["Body"])
            detail = event["detail"]
            kinds[event["detail-type"]] = kinds.get(event["detail-type"], 0) + 1
            sent = int(message["Attributes"]["SentTimestamp"]) / 1000
            on_bus.append(((sent - datetime.fromisoformat(detail["at"]).timestamp()) * 1000, detail))
            if detail["sequence"] in seen[detail["job_id"]]:
                duplicates += 1
            seen[detail["job_id"]].add(detail["sequence"])
    bus_keys = {(j, n) for j, sequences in seen.items() for n in sequences}
    gaps = sum(1 for s in seen.values() if s and sorted(s) != list(range(1, max(s) + 1)))
    print(
        f"outbox events written: {len(outbox)}; on the bus: {len(on_bus)} ({duplicates} duplicates); "
        f"lost (written, never on the bus): {len(outbox - bus_keys)}; jobs with a gap in their sequence: {gaps}"
    )
    print(f"on the bus by detail-type: {kinds}; still in the outbox: {outbox_pending(ddb)}; read until {time.monotonic() - began:.0f} s")

    count, news = receiver.received(), time.monotonic()
    while count < len(outbox) and time.monotonic() - news < args.drain_idle:  # deliveries trail the bus
        time.sleep(0.5)
        if receiver.received() != count:
            count, news = receiver.received(), time.monotonic()
    with receiver.lock:
        firsts = list(receiver.first.values())
        deliveries = receiver.deliveries
    receiver.server.shutdown()
    hooked = [((at - datetime.fromisoformat(d["at"]).timestamp()) * 1000, d) for at, d in firsts]
    delivered = {(d["job_id"], d["sequence"]) for _, d in hooked}
    print(
        f"webhook deliveries: {deliveries} ({deliveries - len(hooked)} duplicates); "
        f"lost (written, never delivered): {len(outbox - delivered)}"
    )

    def held(rows: list[tuple[float, dict[str, Any]]]) -> list[float]:  # committed while all were running
        return [ms for ms, d in rows if all_running_at <= datetime.fromisoformat(d["at"]).timestamp() <= release_at]

    report("commit -> bus, whole run", [ms for ms, _ in on_bus])
    report(f"commit -> bus, while {most} jobs ran", held(on_bus))
    report("commit -> webhook received, whole run", [ms for ms, _ in hooked])
    report(f"commit -> webhook received, while {most} jobs ran", held(hooked))


def report(what: str, latencies: list[float]) -> None:
    if latencies:
        print(
            f"{what}: p50 {statistics.median(latencies):.0f} ms, p99 {percentile(latencies, 99):.0f} ms, "
            f"max {max(latencies):.0f} ms (n={len(latencies)})"
        )


if __name__ == "__main__":
    main()
