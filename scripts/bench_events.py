"""Benchmark of the control plane's events in local mode: commit -> bus and commit -> webhook latency, and
events lost.

Starts `trainplane up` (tests/fake_trainer.py as the trainer), puts a rule with an SQS target on the bus
endpoint.json names (docs/EVENTS.md's recipe), registers a webhook (`job.*`, this run's label) on a
loopback receiver in this process, runs --jobs jobs at once to completion and reads every event back.
Latency of one event: the SQS message's SentTimestamp (EventBridge delivered it), or the moment the
receiver read the delivery's body, minus the event's `at` (the commit's clock reading, taken just before
the transaction). Prints figures, asserts nothing.

Usage: .venv/bin/python scripts/bench_events.py [--jobs 20] [--steps 6]
"""

from __future__ import annotations

import argparse
import json
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
from tests.e2e.conftest import LocalPlane  # noqa: E402
from tests.e2e.test_lifecycle_e2e import FAKE_TRAINER_ENV, Api, fake_spec  # noqa: E402


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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = {**FAKE_TRAINER_ENV, "TRAINPLANE_LOCAL_CPU_SLOTS": str(args.jobs)}
        plane = LocalPlane(Path(tmp) / "state", env=env, allow_dirs=[ROOT / "examples"]).start()
        try:
            run(plane, args.jobs, args.steps)
        finally:
            plane.stop()


def run(plane: LocalPlane, jobs: int, steps: int) -> None:
    bus, tag = plane.endpoint["event_bus"], uuid.uuid4().hex[:12]
    sqs, events = plane.client("sqs"), plane.client("events")
    queue_url = sqs.create_queue(QueueName=f"bench-{tag}")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    events.put_rule(Name=f"bench-{tag}", EventBusName=bus, EventPattern=json.dumps({"source": [et.SOURCE]}))
    events.put_targets(Rule=f"bench-{tag}", EventBusName=bus, Targets=[{"Id": "q", "Arn": queue_arn}])

    receiver = Receiver()
    hook = {"url": receiver.url, "event_types": ["job.*"], "labels": {"bench": tag}}
    created = plane.request("POST", "/webhooks", principal="alice", json=hook)
    assert created.status_code == 201, created.text

    api = Api(plane)
    began = time.monotonic()
    job_ids = []
    for n in range(jobs):
        spec = fake_spec(f"bench-{n}", max_steps=steps, step_seconds=0.05)
        spec["labels"] = {"bench": tag}
        job_ids.append(api.submit(spec))
    for job_id in job_ids:
        api.wait_status(job_id, "COMPLETED", "FAILED", "CANCELLED", timeout=600)
    committed = {job_id: len(api.statuses(job_id)) for job_id in job_ids}
    print(f"{jobs} jobs ran to the end in {time.monotonic() - began:.1f} s")

    latencies: list[float] = []
    seen: dict[str, set[int]] = {job_id: set() for job_id in job_ids}
    changes: dict[str, int] = dict.fromkeys(job_ids, 0)
    duplicates = 0
    idle_polls = 0
    while idle_polls < 3:  # the queue stays empty for three long polls in a row: everything is in
        reply = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=1, AttributeNames=["SentTimestamp"])
        messages = reply.get("Messages", [])
        idle_polls = 0 if messages else idle_polls + 1
        for message in messages:
            event: dict[str, Any] = json.loads(message["Body"])
            detail = event["detail"]
            sent = int(message["Attributes"]["SentTimestamp"]) / 1000
            latencies.append((sent - datetime.fromisoformat(detail["at"]).timestamp()) * 1000)
            if detail["sequence"] in seen[detail["job_id"]]:
                duplicates += 1
            seen[detail["job_id"]].add(detail["sequence"])
            if event["detail-type"] == et.JOB_STATE_CHANGE.detail_type:
                changes[detail["job_id"]] += 1
            sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
    gaps = sum(1 for s in seen.values() if s and sorted(s) != list(range(1, max(s) + 1)))
    lost = sum(max(0, committed[j] - changes[j]) for j in job_ids)
    print(f"events received: {len(latencies)} ({duplicates} duplicates); state changes committed: {sum(committed.values())}")
    print(f"events lost: {lost}; jobs with a gap in their sequence: {gaps}")
    report("commit -> bus", latencies)

    on_bus = {(j, n) for j, sequences in seen.items() for n in sequences}
    deadline = time.monotonic() + 120
    while receiver.received() < len(on_bus) and time.monotonic() < deadline:  # deliveries trail the bus a little
        time.sleep(0.2)
    with receiver.lock:
        firsts = list(receiver.first.values())
        deliveries = receiver.deliveries
    receiver.server.shutdown()
    hooked = [((at - datetime.fromisoformat(d["at"]).timestamp()) * 1000, d) for at, d in firsts]
    missing = on_bus - {(d["job_id"], d["sequence"]) for _, d in hooked}
    print(f"webhook deliveries: {deliveries} ({deliveries - len(hooked)} duplicates); events on the bus not delivered: {len(missing)}")
    report("commit -> webhook received", [ms for ms, _ in hooked])


def report(what: str, latencies: list[float]) -> None:
    if latencies:
        print(
            f"{what}: p50 {statistics.median(latencies):.0f} ms, p99 {percentile(latencies, 99):.0f} ms, "
            f"max {max(latencies):.0f} ms (n={len(latencies)})"
        )


if __name__ == "__main__":
    main()
