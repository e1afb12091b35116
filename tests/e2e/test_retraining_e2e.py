"""Retraining in local mode, end to end: a real `trainplane up`, policies over signed HTTP, and each
trigger kind firing for real - an object written to the local bucket, a custom event put on the local
bus, a schedule ticking - plus duplicate delivery, a disabled policy and a restart.

One plane of our own whose schedule clock runs 60x (a minute of schedule time per second), so a
rate(1 minute) policy fires within seconds. Jobs are cancelled as soon as they appear: what is under
test is that they start, labelled, not that they train.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from schemas.retraining import EVENT_LABEL, POLICY_LABEL
from tests.e2e.conftest import LocalPlane, PlaneFactory
from tests.helpers.retraining import policy_body
from trainplane import Client

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

FAST_SCHEDULES = {"TRAINPLANE_LOCAL_SCHEDULE_TIME_SCALE": "60", "TRAINPLANE_LOCAL_SCHEDULE_TICK_SECONDS": "0.5"}
WAIT_S = 30.0
QUIET_S = 3.0  # how long "nothing more happens" is watched for


@pytest.fixture(scope="module")
def plane(local_plane_factory: PlaneFactory) -> LocalPlane:
    return local_plane_factory(env=FAST_SCHEDULES)


def create(plane: LocalPlane, **overrides: Any) -> dict[str, Any]:
    reply = plane.request("POST", "/retraining-policies", json=policy_body(**overrides))
    assert reply.status_code == 201, reply.text
    return reply.json()  # type: ignore[no-any-return]


def jobs_of(plane: LocalPlane, policy_id: str) -> list[dict[str, Any]]:
    reply = plane.request("GET", "/jobs", params={f"labels.{POLICY_LABEL}": policy_id, "limit": "50"})
    assert reply.status_code == 200, reply.text
    return reply.json()["jobs"]  # type: ignore[no-any-return]


def wait_for(condition: Callable[[], Any], timeout: float = WAIT_S, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"{what} not met within {timeout:.0f}s")


def wait_for_jobs(plane: LocalPlane, policy_id: str, count: int) -> list[dict[str, Any]]:
    jobs = wait_for(lambda: (j := jobs_of(plane, policy_id)) and len(j) >= count and j, what=f"{count} job(s) of {policy_id}")
    for job in jobs:
        plane.request("POST", f"/jobs/{job['job_id']}/cancel", json={"reason": "e2e: started is all we check"})
    return jobs  # type: ignore[no-any-return]


def cancel_all(plane: LocalPlane, policy_id: str) -> list[dict[str, Any]]:
    """Cancel every job of the policy once no more are arriving (a tick may be in flight)."""
    time.sleep(1.0)
    jobs = jobs_of(plane, policy_id)
    for job in jobs:
        if job["status"] not in ("COMPLETED", "FAILED", "CANCELLED", "PREEMPTED"):
            plane.request("POST", f"/jobs/{job['job_id']}/cancel", json={"reason": "e2e cleanup"})
    return jobs


def test_an_object_written_to_the_local_bucket_starts_one_job_and_a_burst_coalesces(plane: LocalPlane) -> None:
    # Given alice's policy on datasets/e2e-s3/*.jsonl, at most one run an hour
    policy = create(plane, trigger={"type": "s3", "prefix": "datasets/e2e-s3/", "suffix": ".jsonl"}, min_interval_seconds=3600)
    s3 = plane.client("s3")
    # When an object lands there (through the emulated S3, as any tool would write it)
    s3.put_object(Bucket=plane.bucket, Key="datasets/e2e-s3/day-1.jsonl", Body=b'{"text": "hello"}\n')
    # Then a job appears: alice's, labelled with the policy and the S3 event, reading that object
    (job,) = wait_for_jobs(plane, policy["policy_id"], 1)
    assert job["owner"].endswith(":user/alice")
    assert job["labels"][POLICY_LABEL] == policy["policy_id"] and job["labels"][EVENT_LABEL]
    assert job["data_config"]["sources"][0]["path"] == f"s3://{plane.bucket}/datasets/e2e-s3/day-1.jsonl"
    # When a burst of three more lands within the interval, and a file the suffix excludes
    for n in range(3):
        s3.put_object(Bucket=plane.bucket, Key=f"datasets/e2e-s3/burst-{n}.jsonl", Body=b"{}\n")
    s3.put_object(Bucket=plane.bucket, Key="datasets/e2e-s3/readme.txt", Body=b"notes")
    time.sleep(QUIET_S)
    # Then still one job: the burst was coalesced into it
    assert len(jobs_of(plane, policy["policy_id"])) == 1


def test_a_custom_event_put_on_the_local_bus_starts_a_job_once_however_often_delivered(plane: LocalPlane) -> None:
    # Given a drift policy on custom events, mapping the model into a label
    pattern = {"source": ["trainplane.retraining"], "detail-type": ["E2E drift"]}
    mapping = [{"source": "detail.model", "target": "labels.model"}]
    policy = create(plane, trigger={"type": "event", "pattern": pattern}, input_mapping=mapping, concurrency_policy="queue")
    # When the SDK puts the event on the local bus
    with Client(state_dir=plane.state_dir, principal="alice") as client:
        event_id = client.put_event("E2E drift", {"model": "support-bot"})
    # Then one job, carrying that very event id
    (job,) = wait_for_jobs(plane, policy["policy_id"], 1)
    assert job["labels"][EVENT_LABEL] == event_id and job["labels"]["model"] == "support-bot"
    # When the dispatcher gets the same event twice more (EventBridge delivers at least once)
    dispatcher = plane.client("lambda")
    event = {
        "version": "0",
        "id": event_id,
        "source": "trainplane.retraining",
        "detail-type": "E2E drift",
        "detail": {"model": "support-bot"},
    }
    outcomes = []
    for _ in range(2):
        reply = json.loads(dispatcher.invoke(FunctionName="trainplane-retraining", Payload=json.dumps(event).encode())["Payload"].read())
        outcomes += [r["outcome"] for r in reply["results"]]
    # Then they are duplicates of the first: still one job
    assert outcomes == ["duplicate", "duplicate"]
    assert len(jobs_of(plane, policy["policy_id"])) == 1


def test_a_schedule_ticks_jobs_until_its_policy_is_deleted(plane: LocalPlane) -> None:
    # Given a rate(1 minute) policy (a second of wall clock on this plane)
    policy = create(plane, trigger={"type": "schedule", "expression": "rate(1 minute)"}, input_mapping=[], concurrency_policy="queue")
    # When it ticks / Then jobs appear, one per scheduled time
    jobs = wait_for_jobs(plane, policy["policy_id"], 2)
    ticks = [j["labels"][EVENT_LABEL] for j in jobs]
    assert all(t.startswith("schedule:") for t in ticks) and len(set(ticks)) == len(ticks)
    # When it is deleted / Then its schedule stops: no more jobs
    assert plane.request("DELETE", f"/retraining-policies/{policy['policy_id']}").status_code == 204
    settled = len(cancel_all(plane, policy["policy_id"]))  # a tick already in flight may still land
    time.sleep(QUIET_S)
    assert len(jobs_of(plane, policy["policy_id"])) == settled


def test_a_disabled_policy_fires_nothing_and_others_policies_are_not_found(plane: LocalPlane) -> None:
    # Given alice's disabled policy
    policy = create(plane, trigger={"type": "s3", "prefix": "datasets/e2e-off/"}, enabled=False)
    # When data lands / Then no job
    plane.client("s3").put_object(Bucket=plane.bucket, Key="datasets/e2e-off/a.jsonl", Body=b"{}\n")
    time.sleep(QUIET_S)
    assert jobs_of(plane, policy["policy_id"]) == []
    # And the admin's policy is "not found" for alice, while the admin sees hers
    admins = plane.request("POST", "/retraining-policies", json=policy_body(), principal="admin").json()
    assert plane.request("GET", f"/retraining-policies/{admins['policy_id']}").status_code == 404
    assert plane.request("GET", f"/retraining-policies/{policy['policy_id']}", principal="admin").status_code == 200
    # And a policy whose template is invalid is refused when created, naming the field
    bad = policy_body(trigger={"type": "s3", "prefix": "datasets/e2e-bad/"})
    bad["job_template"]["resource_config"] = {"gpu_count": -1}
    refused = plane.request("POST", "/retraining-policies", json=bad)
    assert refused.status_code == 422 and refused.json()["errors"][0]["field"] == "job_template.resource_config.gpu_count"


def test_after_a_restart_schedules_come_back_from_the_policies(plane: LocalPlane) -> None:
    # Given a schedule policy that has ticked, then was disabled (no run in flight at the restart)
    policy_id = create(plane, trigger={"type": "schedule", "expression": "rate(1 minute)"}, input_mapping=[], concurrency_policy="queue")[
        "policy_id"
    ]
    wait_for_jobs(plane, policy_id, 1)
    assert plane.request("PATCH", f"/retraining-policies/{policy_id}", json={"enabled": False}).status_code == 200
    before = len(cancel_all(plane, policy_id))
    # When the plane restarts (the emulated Scheduler keeps nothing across it)
    plane.restart()
    # Then its schedule is back, re-created from the stored policy before any call to the API
    scheduler = plane.client("scheduler")
    name = f"policy-{policy_id}"
    schedules = wait_for(lambda: {s["Name"]: s for s in scheduler.list_schedules(GroupName="trainplane-retraining")["Schedules"]}.get(name))
    assert schedules["State"] == "DISABLED"
    # And once enabled it ticks again
    assert plane.request("PATCH", f"/retraining-policies/{policy_id}", json={"enabled": True}).status_code == 200
    wait_for_jobs(plane, policy_id, before + 1)
    assert plane.request("DELETE", f"/retraining-policies/{policy_id}").status_code == 204
    cancel_all(plane, policy_id)
