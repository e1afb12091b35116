"""Issue 23 in local mode: endpoint.json names the deployment's own bus; a user's rule with an SQS target
on it receives a tiny job's life, in order, with a gap-free sequence (docs/EVENTS.md's recipe)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from functions.catalog import own_events as et
from tests.e2e.conftest import LocalPlane
from tests.e2e.test_lifecycle_e2e import FAKE_TRAINER_ENV, Api, fake_spec

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def events_plane(module_plane_factory: Callable[..., LocalPlane]) -> LocalPlane:
    return module_plane_factory(env=FAKE_TRAINER_ENV)


def _receive_until(sqs: Any, queue_url: str, done: Callable[[list[dict[str, Any]]], bool], max_polls: int = 60) -> list[dict[str, Any]]:
    """Long-poll the queue (each poll waits on SQS for up to 2 s) until `done` holds for what arrived."""
    received: list[dict[str, Any]] = []
    for _ in range(max_polls):
        reply = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=2)
        for message in reply.get("Messages", []):
            received.append(json.loads(message["Body"]))
            sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
        if done(received):
            return received
    raise AssertionError(f"the events did not all arrive: {[(e['detail-type'], e['detail'].get('state')) for e in received]}")


def test_a_rule_with_an_sqs_target_on_the_bus_endpoint_json_names_receives_a_tiny_jobs_life_in_order(events_plane: LocalPlane) -> None:
    # Given the bus endpoint.json names, and a rule (made with boto3, as docs/EVENTS.md shows) that sends
    # this test's events to an SQS queue
    bus = events_plane.endpoint["event_bus"]
    run = uuid.uuid4().hex[:12]
    sqs, events = events_plane.client("sqs"), events_plane.client("events")
    queue_url = sqs.create_queue(QueueName=f"job-events-{run}")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    pattern = {"source": [et.SOURCE], "detail": {"labels": {"e2e_run": [run]}}}
    events.put_rule(Name=f"e2e-{run}", EventBusName=bus, EventPattern=json.dumps(pattern))
    events.put_targets(Rule=f"e2e-{run}", EventBusName=bus, Targets=[{"Id": "queue", "Arn": queue_arn}])

    # When a tiny job runs to completion
    api = Api(events_plane)
    spec = fake_spec("evented", max_steps=4, step_seconds=0.02)
    spec["labels"] = {"e2e_run": run}
    job_id = api.submit(spec)
    final = api.wait_status(job_id, "COMPLETED", "FAILED", "CANCELLED", timeout=120)
    assert final["status"] == "COMPLETED", final.get("error_message")
    history = api.statuses(job_id)

    # Then every state change arrives, in order, numbered 1..n without a gap (checkpoints in between)
    def complete(received: list[dict[str, Any]]) -> bool:
        return any(e["detail"].get("state") == "COMPLETED" and e["detail-type"] == et.JOB_STATE_CHANGE.detail_type for e in received)

    received = _receive_until(sqs, queue_url, complete)
    mine = [e for e in received if e["detail"]["job_id"] == job_id]
    assert all(e["source"] == et.SOURCE for e in mine)
    sequences = [e["detail"]["sequence"] for e in mine]
    assert sorted(set(sequences)) == list(range(1, max(sequences) + 1))  # no gap
    assert sequences == sorted(sequences)  # in order
    changes = [e["detail"] for e in mine if e["detail-type"] == et.JOB_STATE_CHANGE.detail_type]
    assert [c["state"] for c in changes] == history
    assert [c["previous_state"] for c in changes] == [None, *history[:-1]]
    assert any(e["detail-type"] == et.CHECKPOINT_SAVED.detail_type for e in mine)
    first = changes[0]
    assert first["owner"].endswith(":user/alice") and first["schema_version"] == "1"
    assert first["dashboard_url"] == f"{events_plane.api_url}/#/jobs/{job_id}"
