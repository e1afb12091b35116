"""Retraining in local mode, end to end: a real `trainplane up`, policies over signed HTTP, and each
trigger kind firing for real - an object written to the local bucket, a custom event put on the local
bus, a schedule ticking - plus duplicate delivery, a disabled policy and a restart.

One plane of our own whose schedule clock runs 60x (a minute of schedule time per second), so a
rate(1 minute) policy fires within seconds. Jobs are cancelled as soon as they appear: what is under
test is that they start, labelled, not that they train.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from functions import constants
from functions.adapters.policies import EVENT_PREFIX, POLICY_PREFIX
from localmode.deploy.retraining import QUEUE_NAME as EVENTS_QUEUE
from schemas.retraining import EVENT_LABEL, POLICY_LABEL
from tests.e2e.conftest import LocalPlane, PlaneFactory
from tests.helpers.retraining import policy_body
from tests.helpers.waits import wait_until
from trainplane import Client

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

FAST_SCHEDULES = {"TRAINPLANE_LOCAL_SCHEDULE_TIME_SCALE": "60", "TRAINPLANE_LOCAL_SCHEDULE_TICK_SECONDS": "0.5"}
WAIT_S = 30.0


@pytest.fixture(scope="module")
def plane(module_plane_factory: PlaneFactory) -> LocalPlane:
    return module_plane_factory(env=FAST_SCHEDULES)


@pytest.fixture(scope="module")
def clock(plane: LocalPlane) -> str:
    """A schedule policy that is the schedules' witness: it fires on every tick it is due (rate(1 minute), a
    second here), starting one job, then capped by its daily cap (a decision recorded, no job). Each of its
    decisions is a pass of the scheduler, so "nothing more happens" is waited for as passes, not as time."""
    policy = create(plane, name="ticks", trigger={"type": "schedule", "expression": "rate(1 minute)"}, input_mapping=[], daily_cap=1)
    wait_for_jobs(plane, policy["policy_id"], 1)
    return str(policy["policy_id"])


def create(plane: LocalPlane, **overrides: Any) -> dict[str, Any]:
    reply = plane.request("POST", "/retraining-policies", json=policy_body(**overrides))
    assert reply.status_code == 201, reply.text
    return reply.json()  # type: ignore[no-any-return]


def jobs_of(plane: LocalPlane, policy_id: str) -> list[dict[str, Any]]:
    reply = plane.request("GET", "/jobs", params={f"labels.{POLICY_LABEL}": policy_id, "limit": "50"})
    assert reply.status_code == 200, reply.text
    return reply.json()["jobs"]  # type: ignore[no-any-return]


def wait_for(condition: Callable[[], Any], timeout: float = WAIT_S, what: str = "condition") -> Any:
    return wait_until(condition, timeout, interval=0.2, what=what)


def events_handled(plane: LocalPlane) -> bool:
    """Every event that reached the dispatcher's queue has been dispatched (the pump deletes a message
    once the dispatcher has decided on it; S3 and the bus put events there before put_object returns)."""
    sqs = plane.client("sqs")
    url = sqs.get_queue_url(QueueName=EVENTS_QUEUE)["QueueUrl"]
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    counts = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
    return all(counts[name] == "0" for name in names)


def decisions(plane: LocalPlane, policy_id: str) -> int:
    """How many events (fires included) the dispatcher has decided on for the policy."""
    key = "pk = :pk AND begins_with(sk, :sk)"
    values = {":pk": {"S": POLICY_PREFIX + policy_id}, ":sk": {"S": EVENT_PREFIX}}
    return int(plane.client("dynamodb").query(TableName=constants.JOBS_TABLE, KeyConditionExpression=key,
                                              ExpressionAttributeValues=values, Select="COUNT")["Count"])  # fmt: skip


def schedules_passed(plane: LocalPlane, clock: str, passes: int = 2) -> None:
    """Wait until the scheduler has fired the witness `passes` more times: the pass that was under way
    (which may have listed a schedule just deleted) has ended, its fires' jobs created."""
    seen = decisions(plane, clock)
    wait_for(lambda: decisions(plane, clock) >= seen + passes, what=f"{passes} passes of the scheduler")


def wait_for_jobs(plane: LocalPlane, policy_id: str, count: int) -> list[dict[str, Any]]:
    jobs = wait_for(lambda: (j := jobs_of(plane, policy_id)) and len(j) >= count and j, what=f"{count} job(s) of {policy_id}")
    for job in jobs:
        plane.request("POST", f"/jobs/{job['job_id']}/cancel", json={"reason": "e2e: started is all we check"})
    return jobs  # type: ignore[no-any-return]


def cancel_all(plane: LocalPlane, policy_id: str, clock: str) -> list[dict[str, Any]]:
    """Cancel every job of the policy once no more are arriving (a tick may be in flight)."""
    schedules_passed(plane, clock)
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
    wait_for(lambda: events_handled(plane), what="the burst dispatched")
    # Then still one job: the burst was coalesced into it (each of its three events decided; the .txt not one)
    assert len(jobs_of(plane, policy["policy_id"])) == 1 and decisions(plane, policy["policy_id"]) == 4


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


def test_a_schedule_ticks_jobs_until_its_policy_is_deleted(plane: LocalPlane, clock: str) -> None:
    # Given a rate(1 minute) policy (a second of wall clock on this plane)
    policy = create(plane, trigger={"type": "schedule", "expression": "rate(1 minute)"}, input_mapping=[], concurrency_policy="queue")
    # When it ticks / Then jobs appear, one per scheduled time
    jobs = wait_for_jobs(plane, policy["policy_id"], 2)
    ticks = [j["labels"][EVENT_LABEL] for j in jobs]
    assert all(t.startswith("schedule:") for t in ticks) and len(set(ticks)) == len(ticks)
    # When it is deleted / Then its schedule stops: no more jobs
    assert plane.request("DELETE", f"/retraining-policies/{policy['policy_id']}").status_code == 204
    settled = len(cancel_all(plane, policy["policy_id"], clock))  # a tick already in flight may still land
    schedules_passed(plane, clock)
    assert len(jobs_of(plane, policy["policy_id"])) == settled


def test_a_disabled_policy_fires_nothing_and_others_policies_are_not_found(plane: LocalPlane) -> None:
    # Given alice's disabled policy
    policy = create(plane, trigger={"type": "s3", "prefix": "datasets/e2e-off/"}, enabled=False)
    # When data lands / Then no job
    plane.client("s3").put_object(Bucket=plane.bucket, Key="datasets/e2e-off/a.jsonl", Body=b"{}\n")
    wait_for(lambda: events_handled(plane), what="the object's event dispatched")
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


def test_after_a_restart_schedules_come_back_from_the_policies(plane: LocalPlane, clock: str) -> None:
    # Given a schedule policy that has ticked, then was disabled (no run in flight at the restart)
    policy_id = create(plane, trigger={"type": "schedule", "expression": "rate(1 minute)"}, input_mapping=[], concurrency_policy="queue")[
        "policy_id"
    ]
    wait_for_jobs(plane, policy_id, 1)
    assert plane.request("PATCH", f"/retraining-policies/{policy_id}", json={"enabled": False}).status_code == 200
    before = len(cancel_all(plane, policy_id, clock))
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
    cancel_all(plane, policy_id, clock)
