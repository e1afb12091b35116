"""The dispatcher Lambda with recorded events (tests/events/retraining_*.json), on moto: S3 "Object
Created", a CloudWatch drift alarm, EventBridge Scheduler's invocation; duplicates; malformed input.
Also the EventBridge Scheduler adapter against moto's Scheduler, and the schedule re-sync."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from functions import composition
from functions.adapters.aws import AwsClients
from functions.adapters.schedules import EventBridgeSchedules
from functions.handlers import retraining
from schemas.retraining import EVENT_LABEL, POLICY_LABEL, RetrainingPolicy, RetrainingPolicyRequest
from schemas.status import JobStatus
from tests.fakes import RecordingWorkflow
from tests.helpers.aws import emulated_aws, fresh_resources
from tests.helpers.events import FakeLambdaContext
from tests.helpers.jobs import ADMIN, ALICE
from tests.helpers.retraining import policy_body

EVENTS = Path(__file__).resolve().parents[1] / "events"
GROUP = "trainplane-test-retraining"
DISPATCHER = "arn:aws:lambda:us-east-1:123456789012:function:trainplane-test-retraining"
ROLE = "arn:aws:iam::123456789012:role/trainplane-test-scheduler"


@cache
def _recorded(name: str) -> dict[str, Any]:
    return json.loads((EVENTS / f"{name}.json").read_text())


def recorded(name: str, **changes: Any) -> dict[str, Any]:
    event = copy.deepcopy(_recorded(name))
    event.update(changes)
    return event


@pytest.fixture(scope="module")
def aws() -> Iterator[AwsClients]:
    with emulated_aws() as clients:
        clients.client("scheduler").create_schedule_group(Name=GROUP)
        yield clients


class Plane:
    def __init__(self, aws: AwsClients, workflow: RecordingWorkflow) -> None:
        self.aws = aws
        self.workflow = workflow
        self.root = composition.current()

    def create(self, owner: str = ALICE, **overrides: Any) -> RetrainingPolicy:
        service = self.root.retraining
        return service.create(RetrainingPolicyRequest.model_validate(policy_body(**overrides)), service.principal(owner))

    def invoke(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        return retraining.lambda_handler(event, FakeLambdaContext(function_name="trainplane-retraining"))["results"]  # type: ignore[no-any-return]

    def jobs_of(self, policy: RetrainingPolicy) -> list[Any]:
        return self.root.jobs.list_jobs(self.root.jobs.principal(ADMIN), labels={POLICY_LABEL: policy.policy_id}).jobs


@pytest.fixture
def plane(aws: AwsClients) -> Iterator[Plane]:
    settings = fresh_resources(
        aws, admin_arns=(ADMIN,), retraining_schedule_group=GROUP, retraining_scheduler_role_arn=ROLE, retraining_function_arn=DISPATCHER
    )
    # The recorded S3 event names the default artifacts bucket; this test's bucket is unique.
    workflow = RecordingWorkflow()
    composition.configure(settings=settings, clients=aws, workflow=workflow)
    try:
        yield Plane(aws, workflow)
    finally:
        composition.reset()


def s3_created(plane: Plane, **changes: Any) -> dict[str, Any]:
    event = recorded("retraining_s3_object_created", **changes)
    event["detail"]["bucket"]["name"] = plane.root.settings.artifacts_bucket
    return event


def test_an_s3_object_under_the_prefix_starts_one_job_even_when_delivered_twice(plane: Plane) -> None:
    # Given alice's policy on new .jsonl objects under datasets/fresh/
    policy = plane.create()
    event = s3_created(plane)
    # When EventBridge delivers the recorded "Object Created" event, and then again
    (first,) = plane.invoke(event)
    (again,) = plane.invoke(event)
    # Then one job, alice's, labelled with the policy and the event, reading the new object
    assert first["outcome"] == "started" and again["outcome"] == "duplicate" and again["job_id"] == first["job_id"]
    (job,) = plane.jobs_of(policy)
    assert job.owner == ALICE and job.labels[EVENT_LABEL] == event["id"] and job.labels["rows"] == "5576"
    assert job.data_config.sources[0].path == f"s3://{plane.root.settings.artifacts_bucket}/datasets/fresh/part-0001.jsonl"
    assert plane.workflow.methods() == ["start"]


def test_a_drift_alarm_starts_the_policy_that_waits_for_it(plane: Plane) -> None:
    # Given a policy on the support bot's drift alarm, mapping the alarm name into a label
    pattern = {
        "source": ["aws.cloudwatch"],
        "detail-type": ["CloudWatch Alarm State Change"],
        "detail": {"alarmName": [{"prefix": "support-bot-"}], "state": {"value": ["ALARM"]}},
    }
    mapping = [{"source": "detail.alarmName", "target": "labels.alarm"}]
    policy = plane.create(trigger={"type": "event", "pattern": pattern}, input_mapping=mapping)
    # When the alarm fires, and an unrelated alarm too
    (result,) = plane.invoke(recorded("retraining_drift_alarm"))
    other = recorded("retraining_drift_alarm", id="other-alarm")
    other["detail"] = {**other["detail"], "alarmName": "billing-spike"}
    # Then one job for the drift alarm, none for the other
    assert result["outcome"] == "started"
    assert plane.invoke(other) == []
    (job,) = plane.jobs_of(policy)
    assert job.labels["alarm"] == "support-bot-feature-drift"


def test_a_scheduler_invocation_fires_its_policy_once_per_scheduled_time(plane: Plane) -> None:
    policy = plane.create(trigger={"type": "schedule", "expression": "cron(0 3 * * ? *)"}, input_mapping=[], concurrency_policy="queue")
    tick = recorded("retraining_scheduler_invocation", policy_id=policy.policy_id)
    (first,) = plane.invoke(tick)
    (retried,) = plane.invoke({**tick, "execution_id": "another-attempt"})
    assert (first["outcome"], retried["outcome"]) == ("started", "duplicate")
    (job,) = plane.jobs_of(policy)
    assert job.labels[EVENT_LABEL] == "schedule:2026-01-01T03:00:00Z"
    assert plane.invoke({**tick, "policy_id": "pol-deleted"}) == []


def test_events_no_policy_waits_for_start_nothing(plane: Plane) -> None:
    plane.create()
    assert plane.invoke(s3_created(plane, **{"detail-type": "Object Deleted"})) == []
    assert plane.invoke(recorded("retraining_s3_object_created")) == []  # another bucket
    custom = {"id": "c1", "source": "trainplane.retraining", "detail-type": "Anything", "detail": {}}
    assert plane.invoke(custom) == []


@pytest.mark.parametrize(
    "event",
    [
        {"source": "aws.s3", "detail-type": "Object Created", "detail": {}},  # no id
        {"id": "", "source": "aws.s3", "detail-type": "Object Created"},
        {"id": "x" * 300, "source": "aws.s3", "detail-type": "Object Created"},
        {"policy_id": ""},
        {"policy_id": "pol-1", "scheduled_time": "yesterday"},
    ],
)
def test_a_malformed_invocation_raises_so_that_lambda_retries_and_dead_letters_it(plane: Plane, event: dict) -> None:
    with pytest.raises(ValidationError):
        plane.invoke(event)


def test_a_disabled_policys_outcome_is_reported_and_nothing_starts(plane: Plane) -> None:
    policy = plane.create(enabled=False)
    (result,) = plane.invoke(s3_created(plane))
    assert result["outcome"] == "disabled" and plane.jobs_of(policy) == []


def test_cancel_running_on_moto_cancels_the_running_job(plane: Plane) -> None:
    # Given a cancel_running policy whose first job is running
    policy = plane.create(concurrency_policy="cancel_running")
    (first,) = plane.invoke(s3_created(plane, id="e1"))
    # When the next object lands
    (second,) = plane.invoke(s3_created(plane, id="e2"))
    # Then the first job is CANCELLED and the second one runs
    assert second["cancelled_job_ids"] == [first["job_id"]]
    statuses = {j.job_id: j.status for j in plane.jobs_of(policy)}
    assert statuses == {first["job_id"]: JobStatus.CANCELLED, second["job_id"]: JobStatus.PENDING}


# --- the Scheduler adapter on moto -----------------------------------------------------------------


def test_the_scheduler_adapter_creates_replaces_and_deletes_idempotently(plane: Plane) -> None:
    adapter = EventBridgeSchedules(plane.aws, GROUP, ROLE, DISPATCHER)
    policy = plane.create(trigger={"type": "schedule", "expression": "rate(1 hour)"}, input_mapping=[])
    scheduler = plane.aws.client("scheduler")
    # put twice = one schedule, the second write wins
    adapter.put(policy.model_copy(update={"enabled": False}))
    adapter.put(policy)
    got = scheduler.get_schedule(Name=f"policy-{policy.policy_id}", GroupName=GROUP)
    assert got["State"] == "ENABLED" and got["Target"]["RetryPolicy"] == {"MaximumEventAgeInSeconds": 3600, "MaximumRetryAttempts": 3}
    assert policy.policy_id in adapter.policy_ids()
    # delete twice is fine
    adapter.delete(policy.policy_id)
    adapter.delete(policy.policy_id)
    assert policy.policy_id not in adapter.policy_ids()
    # and the re-sync puts it back from the policy, removing a schedule whose policy is gone
    adapter.put(policy.model_copy(update={"policy_id": "pol-orphan"}))
    counts = plane.root.retraining.sync_schedules()
    assert counts["deleted"] >= 1 and "pol-orphan" not in adapter.policy_ids() and policy.policy_id in adapter.policy_ids()
