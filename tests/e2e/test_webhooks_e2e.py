"""Issue 23 webhooks in local mode: a loopback receiver gets a tiny job's life as signed deliveries, in
order, with a gap-free sequence, each verified by the reference `standardwebhooks` verifier; a receiver
answering 500 twice gets the event on the third attempt (the schedule shortened by
TRAINPLANE_WEBHOOK_RETRY_DELAYS); 410 disables the webhook; Alice's webhook never gets the admin's job."""

from __future__ import annotations

import json
import threading
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from standardwebhooks import Webhook as Verifier

from tests.e2e.conftest import LocalPlane
from tests.e2e.test_lifecycle_e2e import FAKE_TRAINER_ENV, Api, fake_spec
from tests.helpers.waits import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """A loopback HTTP receiver: per path, scripted answers (then 200); records every request."""

    script: dict[str, list[int]] = field(default_factory=dict)
    received: dict[str, list[Received]] = field(default_factory=lambda: defaultdict(list))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver.lock:
                    receiver.received[self.path].append(Received(self.path, dict(self.headers.items()), body))
                    answers = receiver.script.get(self.path) or []
                    status = answers.pop(0) if answers else 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        return Handler

    def at(self, path: str) -> list[Received]:
        with self.lock:
            return list(self.received[path])


@pytest.fixture(scope="module")
def receiver() -> Iterator[tuple[Receiver, str]]:
    receiver = Receiver()
    server = ThreadingHTTPServer(("127.0.0.1", 0), receiver.handler())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield receiver, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def plane(module_plane_factory: Callable[..., LocalPlane]) -> LocalPlane:
    return module_plane_factory(env={**FAKE_TRAINER_ENV, "TRAINPLANE_WEBHOOK_RETRY_DELAYS": "0,0.2,0.2,0.2"})


def create(plane: LocalPlane, principal: str, url: str, **body: Any) -> dict[str, Any]:
    response = plane.request("POST", "/webhooks", principal=principal, json={"url": url, **body})
    assert response.status_code == 201, response.text
    return dict(response.json())


def verified(delivery: Received, secret: str) -> dict[str, Any]:
    return Verifier(secret).verify(delivery.body, delivery.headers)  # type: ignore[no-any-return]


def test_a_tiny_jobs_life_arrives_signed_in_order_and_alice_never_gets_the_admins_job(
    plane: LocalPlane, receiver: tuple[Receiver, str]
) -> None:
    # Given: Alice's and the admin's webhooks for this run's job events, on a loopback receiver
    rx, base = receiver
    run = uuid.uuid4().hex[:12]
    alice = create(plane, "alice", f"{base}/alice-{run}", event_types=["job.*"], labels={"e2e_run": run})
    admin = create(plane, "admin", f"{base}/admin-{run}", event_types=["job.*"], labels={"e2e_run": run})

    # When: the admin's job and Alice's job run to completion
    api = Api(plane)
    admins_spec = fake_spec("admins", max_steps=2, step_seconds=0.02)
    admins_spec["labels"] = {"e2e_run": run}
    admins_job = plane.request("POST", "/jobs", principal="admin", json=admins_spec).json()["job_id"]
    spec = fake_spec("hooked", max_steps=4, step_seconds=0.02)
    spec["labels"] = {"e2e_run": run}
    job_id = api.submit(spec)
    assert api.wait_status(job_id, "COMPLETED", "FAILED", "CANCELLED", timeout=120)["status"] == "COMPLETED"
    history = api.statuses(job_id)

    # Then: Alice's receiver gets her job's life, each delivery verified byte for byte, in order, no gap
    def done(path: str, job: str) -> bool:
        return any(
            verified(d, secret)["data"].get("state") == "COMPLETED" and verified(d, secret)["data"]["job_id"] == job
            for d in rx.at(path)
            for secret in [alice["secret"] if "alice" in path else admin["secret"]]
        )

    wait_until(lambda: done(f"/alice-{run}", job_id), timeout=60, what="Alice's job's COMPLETED delivery")
    deliveries = rx.at(f"/alice-{run}")
    firsts: dict[str, dict[str, Any]] = {}
    for delivery in deliveries:
        payload = verified(delivery, alice["secret"])
        assert delivery.headers["webhook-id"] == payload["data"]["event_id"]
        firsts.setdefault(delivery.headers["webhook-id"], payload)  # a duplicate carries the id of the first
    events = list(firsts.values())
    assert {e["data"]["job_id"] for e in events} == {job_id}  # never the admin's job
    sequences = [e["data"]["sequence"] for e in events]
    assert sequences == list(range(1, len(sequences) + 1))  # in order, gap-free
    states = [e["data"]["state"] for e in events if e["type"] == "job.status_changed"]
    assert states == history
    # and the admin's webhook gets the admin's job (an admin's webhook may see everyone's)
    wait_until(lambda: done(f"/admin-{run}", admins_job), timeout=120, what="the admin's job's COMPLETED delivery")


def test_a_receiver_answering_500_twice_gets_the_event_on_the_third_attempt(plane: LocalPlane, receiver: tuple[Receiver, str]) -> None:
    rx, base = receiver
    path = f"/flaky-{uuid.uuid4().hex[:8]}"
    rx.script[path] = [500, 500]
    hook = create(plane, "alice", base + path)
    sent = plane.request("POST", f"/webhooks/{hook['webhook_id']}/test", principal="alice")
    assert sent.status_code == 202, sent.text

    wait_until(lambda: len(rx.at(path)) >= 3, timeout=60, what="three attempts")
    attempts = rx.at(path)
    assert {a.headers["webhook-id"] for a in attempts} == {sent.json()["event_id"]}  # the same id every time
    for attempt in attempts:
        verified(attempt, hook["secret"])

    def recorded() -> list[dict[str, Any]]:
        reply = plane.request("GET", f"/webhooks/{hook['webhook_id']}/deliveries", principal="alice").json()["deliveries"]
        return list(reversed(reply)) if len(reply) == 3 else []

    history = wait_until(recorded, timeout=30, what="the three attempts recorded")
    assert [(d["attempt"], d["outcome"], d["status_code"]) for d in history] == [
        (1, "retrying", 500),
        (2, "retrying", 500),
        (3, "delivered", 200),
    ]


def test_410_disables_the_webhook(plane: LocalPlane, receiver: tuple[Receiver, str]) -> None:
    rx, base = receiver
    path = f"/gone-{uuid.uuid4().hex[:8]}"
    rx.script[path] = [410]
    hook = create(plane, "alice", base + path)
    assert plane.request("POST", f"/webhooks/{hook['webhook_id']}/test", principal="alice").status_code == 202

    def disabled() -> bool:
        return plane.request("GET", f"/webhooks/{hook['webhook_id']}", principal="alice").json()["enabled"] is False

    wait_until(disabled, timeout=60, what="the webhook disabled")
    assert "410" in plane.request("GET", f"/webhooks/{hook['webhook_id']}", principal="alice").json()["disabled_reason"]
    assert json.loads(rx.at(path)[0].body)["type"] == "webhook.test"


def test_a_queued_retry_survives_kill_9_of_trainplane_up(plane_factory: Callable[..., LocalPlane], receiver: tuple[Receiver, str]) -> None:
    # Given: a plane of its own retrying every second, and a receiver that fails until told otherwise
    rx, base = receiver
    own = plane_factory(env={"TRAINPLANE_WEBHOOK_RETRY_DELAYS": ",".join(["0"] + ["1"] * 9)})
    path = f"/down-{uuid.uuid4().hex[:8]}"
    rx.script[path] = [500] * 1000
    hook = create(own, "alice", base + path)
    event_id = own.request("POST", f"/webhooks/{hook['webhook_id']}/test", principal="alice").json()["event_id"]
    wait_until(lambda: rx.at(path), timeout=60, what="the first (failed) attempt")

    # When: `trainplane up` is killed with -9 while the retry waits, the receiver recovers, and it restarts
    own.kill()
    with rx.lock:
        rx.script[path] = []
    own.start()

    # Then: the queued retry is made after the restart and delivered, with the same webhook-id
    def delivered() -> bool:
        reply = own.request("GET", f"/webhooks/{hook['webhook_id']}/deliveries", principal="alice").json()["deliveries"]
        return any(d["outcome"] == "delivered" and d["event_id"] == event_id for d in reply)

    wait_until(delivered, timeout=60, what="the retry delivered after the restart")
    assert {a.headers["webhook-id"] for a in rx.at(path)} == {event_id}
