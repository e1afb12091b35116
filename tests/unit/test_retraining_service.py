"""RetrainingService on in-memory fakes: CRUD and ownership, what is refused at creation, and dispatch -
matching, labels and mapping, duplicate delivery, burst coalescing, daily cap, each concurrency policy,
disabled policies, schedules, and races between deliveries."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from functions.errors import InvalidRequest, PolicyNotFound
from functions.service.feature_ports import FireClaim
from functions.service.jobs import JobService
from functions.service.ports import NameClaim, Transition
from functions.service.retraining.dispatch import CLAIM_LEASE
from functions.service.retraining.policies import RetrainingService, SchedulerUnavailable
from functions.settings import Settings
from schemas.api import RetryRequest
from schemas.job import Job, StatusEvent
from schemas.retraining import EVENT_LABEL, POLICY_LABEL, RetrainingPolicy, RetrainingPolicyPatch, RetrainingPolicyRequest
from schemas.status import JobStatus
from tests.fakes import InMemoryArtifactStore, InMemoryJobRepository, RecordingWorkflow
from tests.helpers.jobs import ADMIN, ALICE, BOB
from tests.helpers.retraining import InMemoryPolicyRepository, RecordingSchedules, custom_event, policy_body, s3_event

S = JobStatus
BUCKET = "trainplane-artifacts"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "retraining"


class Clock:
    """A clock the test moves; it stands still otherwise (intervals and days are the test's to set)."""

    def __init__(self) -> None:
        self.now = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


class SlowCreateRepository(InMemoryJobRepository):
    """Creating a job takes a while, as a DynamoDB transaction does: the window in which a job has
    been decided but does not exist yet is wide enough for racing deliveries to fall into."""

    def create(self, job: Job, first_event: StatusEvent, claim: NameClaim | None = None) -> None:
        time.sleep(0.05)
        super().create(job, first_event, claim)


class Plane:
    def __init__(self, *, schedules: bool = True, slow_create: bool = False) -> None:
        self.clock = Clock()
        self.repo = SlowCreateRepository(self.clock) if slow_create else InMemoryJobRepository(self.clock)
        self.workflow = RecordingWorkflow()
        self.settings = Settings(admin_arns=(ADMIN,), artifacts_bucket=BUCKET)
        self.jobs = JobService(self.repo, InMemoryArtifactStore(BUCKET), self.workflow, self.settings, clock=self.clock)
        self.policies = InMemoryPolicyRepository()
        self.schedules = RecordingSchedules() if schedules else None
        self.service = RetrainingService(self.policies, self.jobs, self.settings, self.schedules, clock=self.clock)

    def create(self, owner: str = ALICE, **overrides: Any) -> RetrainingPolicy:
        request = RetrainingPolicyRequest.model_validate(policy_body(**overrides))
        return self.service.create(request, self.service.principal(owner))

    def patch(self, policy: RetrainingPolicy, **changes: Any) -> RetrainingPolicy:
        patch = RetrainingPolicyPatch.model_validate(changes)
        return self.service.patch(policy.policy_id, self.service.principal(policy.owner), patch)

    def jobs_of(self, policy: RetrainingPolicy) -> list[Job]:
        return sorted((j for j in self.repo.jobs.values() if j.labels.get(POLICY_LABEL) == policy.policy_id), key=lambda j: j.created_at)

    def end(self, job_id: str, status: JobStatus = S.CANCELLED) -> None:
        job = self.repo.get(job_id)
        self.repo.transition(Transition(job_id, job.version, job.status, status, actor="system"))


@pytest.fixture
def plane() -> Plane:
    return Plane()


# --- CRUD and ownership --------------------------------------------------------------------------


def test_a_created_policy_is_its_owners_and_invisible_to_others(plane: Plane) -> None:
    # Given alice's policy
    policy = plane.create()
    alice, bob, admin = (plane.service.principal(a) for a in (ALICE, BOB, ADMIN))
    # When each principal reads and lists
    # Then alice and the admin see it, bob gets "not found" (never 403) and an empty list
    assert plane.service.get(policy.policy_id, alice).owner == ALICE
    assert plane.service.get(policy.policy_id, admin).policy_id == policy.policy_id
    with pytest.raises(PolicyNotFound):
        plane.service.get(policy.policy_id, bob)
    with pytest.raises(PolicyNotFound):
        plane.service.delete(policy.policy_id, bob)
    assert [p.policy_id for p in plane.service.list_policies(alice).policies] == [policy.policy_id]
    assert plane.service.list_policies(bob).policies == []
    assert len(plane.service.list_policies(admin).policies) == 1


def test_listing_pages_with_a_token_bound_to_the_caller(plane: Plane) -> None:
    # Given three of alice's policies
    for _ in range(3):
        plane.create()
        plane.clock.advance(seconds=1)
    alice, bob = plane.service.principal(ALICE), plane.service.principal(BOB)
    # When alice lists two at a time
    first = plane.service.list_policies(alice, limit=2)
    second = plane.service.list_policies(alice, limit=2, next_token=first.next_token)
    # Then she gets all three once, newest first, and bob cannot use her token
    assert len(first.policies) == 2 and len(second.policies) == 1 and second.next_token is None
    assert first.policies[0].created_at > first.policies[1].created_at > second.policies[0].created_at
    with pytest.raises(InvalidRequest, match="another listing"):
        plane.service.list_policies(bob, limit=2, next_token=first.next_token)
    with pytest.raises(InvalidRequest) as bad:
        plane.service.list_policies(alice, limit=0)
    assert bad.value.field == "limit"


def test_an_artifacts_bucket_trigger_outside_datasets_is_refused_naming_the_field(plane: Plane) -> None:
    # Given a trigger on the artifacts bucket's checkpoint area (written all day by the trainer)
    # When it is created / Then it is refused, naming trigger.prefix, and nothing is stored
    with pytest.raises(InvalidRequest) as refused:
        plane.create(trigger={"type": "s3", "prefix": "jobs/"})
    assert refused.value.field == "trigger.prefix" and "datasets/" in refused.value.message
    assert plane.policies.policies == {}
    # But another bucket takes any prefix
    assert plane.create(trigger={"type": "s3", "bucket": "team-data", "prefix": "raw/"}).trigger.bucket == "team-data"


@pytest.mark.parametrize(
    ("pattern", "field", "message"),
    [
        ({"detail-type": ["Drift"]}, "trigger.pattern.source", "exact values"),
        ({"source": [{"prefix": "aws."}]}, "trigger.pattern.source", "exact values"),
        ({"source": ["aws.sagemaker"]}, "trigger.pattern.source", "never reach the dispatcher"),
        ({"source": ["aws.s3"], "detail-type": ["Object Deleted"]}, "trigger.pattern.detail-type", "no event of these detail-types"),
    ],
)
def test_an_event_pattern_the_rules_never_deliver_is_refused(plane: Plane, pattern: dict, field: str, message: str) -> None:
    with pytest.raises(InvalidRequest, match=message) as refused:
        plane.create(trigger={"type": "event", "pattern": pattern}, input_mapping=[])
    assert refused.value.field == field


def test_a_schedule_needs_a_scheduler_in_this_deployment() -> None:
    # Given a deployment without EventBridge Scheduler settings
    plane = Plane(schedules=False)
    # When a schedule policy is created / Then it is refused with what to configure
    with pytest.raises(InvalidRequest, match="retraining_schedule_group") as refused:
        plane.create(trigger={"type": "schedule", "expression": "rate(1 day)"}, input_mapping=[])
    assert refused.value.field == "trigger.type"


def test_patch_validates_the_edited_policy_whole(plane: Plane) -> None:
    # Given a policy whose template has one data source
    policy = plane.create()
    # When a patch maps the event into a second source the stored template does not have
    with pytest.raises(InvalidRequest) as refused:
        plane.patch(policy, input_mapping=[{"source": "id", "target": "data_config.sources[1].path"}])
    # Then it is refused naming the mapping, and the policy is unchanged
    assert refused.value.field == "input_mapping" and "index [1] does not exist" in refused.value.message
    assert plane.service.get(policy.policy_id, plane.service.principal(ALICE)).version == 1
    with pytest.raises(InvalidRequest, match="nothing to change"):
        plane.patch(policy)
    # And a valid patch bumps the version and keeps the rest
    edited = plane.patch(policy, min_interval_seconds=60, daily_cap=None)
    assert (edited.version, edited.min_interval_seconds, edited.name) == (2, 60, policy.name)


def test_patch_null_leaves_required_fields_and_clears_only_nullable_ones(plane: Plane) -> None:
    # Given a policy with a daily cap (found by the fuzzer: {"trigger": null} is valid in openapi.json, was a 422)
    policy = plane.create(daily_cap=5, description="nightly")
    # When a patch gives null for fields a policy must have
    same = plane.patch(policy, trigger=None, job_template=None, enabled=None, concurrency_policy=None)
    # Then nothing changes
    assert same.version == policy.version and same.trigger == policy.trigger and same.job_template == policy.job_template
    # And null clears the fields a policy may hold empty, leaving the rest
    cleared = plane.patch(policy, trigger=None, daily_cap=None, description=None)
    assert (cleared.daily_cap, cleared.description, cleared.trigger) == (None, None, policy.trigger)
    assert cleared.version == policy.version + 1


def test_only_training_config_priority_survives_storage(plane: Plane) -> None:
    # Given a template that sets only training_config.priority (SubmitJobRequest.effective_priority)
    body = policy_body()
    body["job_template"]["training_config"]["priority"] = 9
    policy = plane.create(**body)
    # When it fires / Then the job is scheduled at 9, as the same request through POST /jobs would be
    plane.service.dispatch(s3_event())
    (job,) = plane.jobs_of(policy)
    assert job.priority == 9 and policy.job_template.scheduling_config.priority == 9


# --- dispatch: matching, labels, mapping ---------------------------------------------------------


def test_new_data_starts_a_job_through_the_job_service_with_the_policy_labels(plane: Plane) -> None:
    # Given alice's policy on datasets/fresh/*.jsonl mapping the object into the data path and its size into a label
    policy = plane.create()
    # When S3 reports a new object there
    (result,) = plane.service.dispatch(s3_event(size=4096))
    # Then one job started: alice's, labelled with the policy and the event, the object as its data
    assert result.outcome == "started" and result.event_id == "evt-1"
    job = plane.repo.get(result.job_id or "")
    assert job.owner == ALICE and job.status == S.PENDING
    assert job.labels == {"team": "support", "rows": "4096", POLICY_LABEL: policy.policy_id, EVENT_LABEL: "evt-1"}
    assert job.data_config.sources[0].path == f"s3://{BUCKET}/datasets/fresh/part-1.jsonl"
    # And it went through JobService.submit: lifecycle started, history says who started it
    assert plane.workflow.methods() == ["start"]
    assert policy.policy_id in plane.repo.history(job.job_id)[0].reason
    stored = plane.policies.get(policy.policy_id)
    assert (stored.last_job_id, stored.last_event_id, stored.fired_today) == (job.job_id, "evt-1", 1)


@pytest.mark.parametrize(
    "event",
    [
        s3_event("datasets/fresh/part-1.csv"),  # suffix
        s3_event("datasets/other/part-1.jsonl"),  # prefix
        s3_event(bucket="team-data"),  # bucket
        {**s3_event(), "detail-type": "Object Deleted"},
        custom_event(),
    ],
)
def test_events_outside_the_trigger_start_nothing(plane: Plane, event: dict) -> None:
    plane.create()
    assert plane.service.dispatch(event) == []
    assert plane.repo.jobs == {}


def test_an_event_pattern_policy_maps_event_fields_into_labels_and_hyperparameters(plane: Plane) -> None:
    # Given a drift policy on custom events whose score is above 0.3
    pattern = {"source": ["trainplane.retraining"], "detail-type": ["Drift detected"], "detail": {"score": [{"numeric": [">", 0.3]}]}}
    mapping = [
        {"source": "detail.model", "target": "labels.model"},
        {"source": "detail.score", "target": "training_config.hyperparameters.learning_rate"},
    ]
    policy = plane.create(trigger={"type": "event", "pattern": pattern}, input_mapping=mapping)
    # When a low score and then a high score arrive
    assert plane.service.dispatch(custom_event({"model": "bot", "score": 0.1}, event_id="low")) == []
    (result,) = plane.service.dispatch(custom_event({"model": "bot", "score": 0.42}, event_id="high"))
    # Then only the high one started a job, with the event's fields as strings where the job wants strings
    job = plane.repo.get(result.job_id or "")
    assert job.labels["model"] == "bot" and job.labels[EVENT_LABEL] == "high"
    assert job.training_config.hyperparameters["learning_rate"] == "0.42"
    assert plane.jobs_of(policy) == [job]


def test_one_event_fires_every_policy_it_matches_once(plane: Plane) -> None:
    # Given an S3 policy and an event-pattern policy on the same S3 events
    s3_policy = plane.create()
    pattern_policy = plane.create(trigger={"type": "event", "pattern": {"source": ["aws.s3"]}}, input_mapping=[])
    # When one object lands / Then each policy starts its own job
    results = plane.service.dispatch(s3_event())
    assert sorted(r.policy_id for r in results) == sorted([s3_policy.policy_id, pattern_policy.policy_id])
    assert all(r.outcome == "started" for r in results) and len(plane.repo.jobs) == 2


def test_an_event_the_mapping_cannot_fill_is_invalid_and_stays_decided(plane: Plane) -> None:
    # Given a mapping from a field the event does not carry
    plane.create(input_mapping=[{"source": "detail.object.version-id", "target": "labels.version"}])
    # When it fires, and the event is delivered again
    (first,) = plane.service.dispatch(s3_event())
    (again,) = plane.service.dispatch(s3_event())
    # Then no job: "invalid" naming the mapping and the missing field, and the redelivery is a duplicate
    assert first.outcome == "invalid" and "input_mapping[0]" in first.detail and "detail.object.version-id" in first.detail
    assert again.outcome == "duplicate" and "invalid" in again.detail
    assert plane.repo.jobs == {}


def test_a_mapped_value_the_job_refuses_is_invalid_naming_the_field(plane: Plane) -> None:
    # Given a mapping of the object's key into the GPU count
    plane.create(input_mapping=[{"source": "detail.object.key", "target": "resource_config.gpu_count"}])
    # When it fires / Then nothing starts, and the detail names the job field
    (result,) = plane.service.dispatch(s3_event())
    assert result.outcome == "invalid" and "resource_config.gpu_count" in result.detail


def test_a_template_mapped_into_a_number_is_read_as_the_number(plane: Plane) -> None:
    # Given a mapping of event text into a numeric field (the API refuses "2" for a number; a mapping writes text)
    plane.create(input_mapping=[{"template": "{detail.object.size}", "target": "resource_config.cpu_cores"}])
    # When it fires / Then the job starts with the number the text says
    (result,) = plane.service.dispatch(s3_event(size=3))
    assert result.outcome == "started", result.detail
    assert plane.repo.jobs[result.job_id].resource_config.cpu_cores == 3


# --- duplicates, bursts, caps ----------------------------------------------------------------------


def test_the_same_event_delivered_twice_starts_one_job(plane: Plane) -> None:
    policy = plane.create()
    first = plane.service.dispatch(s3_event())
    plane.clock.advance(seconds=30)
    second = plane.service.dispatch(s3_event())
    assert first[0].outcome == "started"
    assert second[0].outcome == "duplicate" and second[0].job_id == first[0].job_id
    assert len(plane.jobs_of(policy)) == 1


def test_a_burst_within_the_minimum_interval_starts_one_job(plane: Plane) -> None:
    # Given a policy that fires at most every 10 minutes
    policy = plane.create(min_interval_seconds=600, concurrency_policy="queue")
    # When five objects land a few seconds apart
    outcomes = []
    for n in range(5):
        outcomes += [r.outcome for r in plane.service.dispatch(s3_event(f"datasets/fresh/{n}.jsonl", event_id=f"e{n}"))]
        plane.clock.advance(seconds=5)
    # Then the first started a job, the others were coalesced into it
    assert outcomes == ["started", "coalesced", "coalesced", "coalesced", "coalesced"]
    # And once the interval has passed the next one starts again
    plane.clock.advance(minutes=10)
    assert plane.service.dispatch(s3_event("datasets/fresh/late.jsonl", event_id="late"))[0].outcome == "started"
    assert len(plane.jobs_of(policy)) == 2


def test_the_daily_cap_counts_per_utc_day(plane: Plane) -> None:
    policy = plane.create(daily_cap=2, concurrency_policy="queue")

    def fire(n: int) -> str:
        return plane.service.dispatch(s3_event(f"datasets/fresh/{n}.jsonl", event_id=f"d{n}"))[0].outcome

    assert [fire(1), fire(2), fire(3)] == ["started", "started", "capped"]
    plane.clock.advance(days=1)
    assert fire(4) == "started"
    assert plane.policies.get(policy.policy_id).fired_today == 1


def test_a_disabled_policy_fires_nothing_until_enabled_again(plane: Plane) -> None:
    policy = plane.create()
    plane.patch(policy, enabled=False)
    (result,) = plane.service.dispatch(s3_event())
    assert result.outcome == "disabled" and plane.repo.jobs == {}
    plane.patch(policy, enabled=True)
    assert plane.service.dispatch(s3_event())[0].outcome == "started"


# --- concurrency policies --------------------------------------------------------------------------


def test_skip_waits_for_the_running_job_to_end(plane: Plane) -> None:
    policy = plane.create(concurrency_policy="skip")
    (first,) = plane.service.dispatch(s3_event(event_id="a"))
    (second,) = plane.service.dispatch(s3_event(event_id="b"))
    assert second.outcome == "skipped_running" and first.job_id in second.detail
    plane.end(first.job_id or "", S.CANCELLED)
    (third,) = plane.service.dispatch(s3_event(event_id="c"))
    assert third.outcome == "started" and len(plane.jobs_of(policy)) == 2


def test_skip_counts_jobs_found_by_label_not_only_its_last_one(plane: Plane) -> None:
    # Given the policy's job failed and alice retried it: the child carries the label, not the policy's bookkeeping
    policy = plane.create(concurrency_policy="skip")
    (first,) = plane.service.dispatch(s3_event(event_id="a"))
    plane.end(first.job_id or "", S.FAILED)
    retried = plane.jobs.retry(first.job_id or "", plane.jobs.principal(ALICE), RetryRequest())
    assert retried.labels[POLICY_LABEL] == policy.policy_id
    # When the next event arrives / Then it is skipped because of that job
    (second,) = plane.service.dispatch(s3_event(event_id="b"))
    assert second.outcome == "skipped_running" and retried.job_id in second.detail
    assert len(plane.jobs_of(policy)) == 2


def test_queue_starts_a_job_for_every_event(plane: Plane) -> None:
    policy = plane.create(concurrency_policy="queue")
    results = [plane.service.dispatch(s3_event(event_id=e))[0] for e in ("a", "b", "c")]
    assert [r.outcome for r in results] == ["started"] * 3
    assert all(j.status == S.PENDING for j in plane.jobs_of(policy))


def test_cancel_running_cancels_through_the_cancel_service_then_starts(plane: Plane) -> None:
    # Given a policy that replaces its running job, which has started one
    policy = plane.create(concurrency_policy="cancel_running")
    (first,) = plane.service.dispatch(s3_event(event_id="a"))
    # When new data arrives
    (second,) = plane.service.dispatch(s3_event(event_id="b"))
    # Then the first job was cancelled (history says why, the engine was told) and a new one started
    assert second.outcome == "started" and second.cancelled_job_ids == [first.job_id]
    old = plane.repo.get(first.job_id or "")
    assert old.status == S.CANCELLED and "replaced by a new run" in plane.repo.history(old.job_id)[-1].reason
    assert "answer_wait" in plane.workflow.methods()
    assert plane.repo.get(second.job_id or "").status == S.PENDING
    assert [j.job_id for j in plane.jobs_of(policy) if j.status != S.CANCELLED] == [second.job_id]


# --- schedules -------------------------------------------------------------------------------------


def test_a_schedule_policy_has_a_schedule_for_its_life(plane: Plane) -> None:
    assert plane.schedules is not None
    # Given a schedule policy
    policy = plane.create(trigger={"type": "schedule", "expression": "cron(0 3 * * ? *)"}, input_mapping=[])
    assert plane.schedules.schedules[policy.policy_id] == {"expression": "cron(0 3 * * ? *)", "enabled": True}
    # When it is disabled, then turned into an S3 trigger, then deleted
    plane.patch(policy, enabled=False)
    assert plane.schedules.schedules[policy.policy_id]["enabled"] is False
    edited = plane.patch(policy, trigger={"type": "s3", "prefix": "datasets/x/"})
    # Then the schedule follows: disabled, then removed
    assert policy.policy_id not in plane.schedules.schedules
    plane.service.delete(edited.policy_id, plane.service.principal(ALICE))
    assert plane.schedules.calls[-1] == ("delete", policy.policy_id)


def test_scheduler_down_means_nothing_was_created_or_changed(plane: Plane) -> None:
    assert plane.schedules is not None
    plane.schedules.fail = True
    with pytest.raises(SchedulerUnavailable):
        plane.create(trigger={"type": "schedule", "expression": "rate(1 hour)"}, input_mapping=[])
    assert plane.policies.policies == {}
    plane.schedules.fail = False
    policy = plane.create(trigger={"type": "schedule", "expression": "rate(1 hour)"}, input_mapping=[])
    plane.schedules.fail = True
    with pytest.raises(SchedulerUnavailable):
        plane.patch(policy, trigger={"type": "schedule", "expression": "rate(2 hours)"})
    restored = plane.policies.get(policy.policy_id)
    assert restored.trigger.expression == "rate(1 hour)"  # type: ignore[union-attr]


def test_a_tick_fires_once_per_scheduled_time(plane: Plane) -> None:
    # Given a schedule policy that queues its runs
    policy = plane.create(
        trigger={"type": "schedule", "expression": "rate(1 hour)"},
        input_mapping=[{"source": "time", "target": "labels.snapshot"}],
        concurrency_policy="queue",
    )
    at = datetime(2026, 3, 1, 13, 0, tzinfo=UTC)
    # When Scheduler invokes for 13:00 twice (a retry) and then for 14:00
    first = plane.service.fire_scheduled(policy.policy_id, at, "x1")
    retried = plane.service.fire_scheduled(policy.policy_id, at, "x2")
    later = plane.service.fire_scheduled(policy.policy_id, at + timedelta(hours=1), "x3")
    # Then two jobs, each labelled with its tick
    assert [r.outcome for r in (*first, *retried, *later)] == ["started", "duplicate", "started"]
    jobs = plane.jobs_of(policy)
    assert [j.labels[EVENT_LABEL] for j in jobs] == ["schedule:2026-03-01T13:00:00Z", "schedule:2026-03-01T14:00:00Z"]
    assert jobs[0].labels["snapshot"] == "2026-03-01T13:00:00Z"
    # And ticks for a deleted policy start nothing
    plane.service.delete(policy.policy_id, plane.service.principal(ALICE))
    assert plane.service.fire_scheduled(policy.policy_id, at + timedelta(hours=2)) == []


def test_sync_schedules_puts_missing_ones_and_removes_orphans(plane: Plane) -> None:
    assert plane.schedules is not None
    policy = plane.create(trigger={"type": "schedule", "expression": "rate(1 hour)"}, input_mapping=[])
    plane.schedules.schedules.clear()  # e.g. local mode restarted: the emulated Scheduler kept nothing
    plane.schedules.schedules["pol-gone"] = {"expression": "rate(1 day)", "enabled": True}
    assert plane.service.sync_schedules() == {"put": 1, "deleted": 1}
    assert plane.schedules.policy_ids() == [policy.policy_id]


# --- races -----------------------------------------------------------------------------------------


def _race(n: int, target: Any) -> list[Any]:
    barrier = threading.Barrier(n)
    results: list[Any] = [None] * n

    def run(i: int) -> None:
        barrier.wait()
        results[i] = target(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_concurrent_deliveries_of_one_event_start_one_job() -> None:
    plane = Plane(slow_create=True)
    policy = plane.create(concurrency_policy="queue")
    results = _race(8, lambda i: plane.service.dispatch(s3_event())[0])
    assert sorted(r.outcome for r in results) == ["duplicate"] * 7 + ["started"]
    assert len(plane.jobs_of(policy)) == 1


def test_a_concurrent_burst_starts_one_job_under_skip_even_without_an_interval() -> None:
    plane = Plane(slow_create=True)
    # Given skip and no minimum interval: only "one of its jobs is running" holds the burst back
    policy = plane.create(concurrency_policy="skip")
    # When eight different events arrive at once
    results = _race(8, lambda i: plane.service.dispatch(s3_event(f"datasets/fresh/{i}.jsonl", event_id=f"b{i}"))[0])
    # Then one started, every other was skipped for it
    assert sorted(r.outcome for r in results) == ["skipped_running"] * 7 + ["started"]
    assert len(plane.jobs_of(policy)) == 1


def test_a_concurrent_burst_within_the_interval_starts_one_job() -> None:
    plane = Plane(slow_create=True)
    policy = plane.create(concurrency_policy="queue", min_interval_seconds=60)
    results = _race(8, lambda i: plane.service.dispatch(s3_event(f"datasets/fresh/{i}.jsonl", event_id=f"c{i}"))[0])
    assert sorted(r.outcome for r in results) == ["coalesced"] * 7 + ["started"]
    assert len(plane.jobs_of(policy)) == 1


def test_cancel_running_leaves_one_live_job_when_events_race() -> None:
    plane = Plane(slow_create=True)
    policy = plane.create(concurrency_policy="cancel_running")
    _race(6, lambda i: plane.service.dispatch(s3_event(f"datasets/fresh/{i}.jsonl", event_id=f"r{i}"))[0])
    live = [j for j in plane.jobs_of(policy) if j.status not in (S.CANCELLED,)]
    assert len(live) == 1
    assert live[0].job_id == plane.policies.get(policy.policy_id).last_job_id


def test_a_claim_whose_invocation_died_is_taken_over_by_a_redelivery(plane: Plane) -> None:
    # Given an event claimed by an invocation that died before submitting its job
    policy = plane.create()
    stored = plane.policies.get(policy.policy_id)
    assert (
        plane.policies.claim_fire(policy.policy_id, FireClaim("evt-1", plane.clock(), stored.version, None, "2026-03-01", 1)) == "claimed"
    )
    # When EventBridge redelivers it at once / Then it is a duplicate (the claim may still be working)
    assert plane.service.dispatch(s3_event())[0].outcome == "duplicate"
    # But once the claim is older than the lease, the redelivery starts the job that was owed
    plane.clock.advance(seconds=CLAIM_LEASE.total_seconds() + 1)
    (result,) = plane.service.dispatch(s3_event())
    assert result.outcome == "started" and plane.jobs_of(policy)[0].job_id == result.job_id
    assert plane.policies.get(policy.policy_id).fired_today == 1  # counted once, by the claim


@pytest.mark.parametrize("example", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_the_example_policies_are_accepted(plane: Plane, example: Path) -> None:
    # Given a shipped example policy / When it is created / Then it is accepted as it is
    request = RetrainingPolicyRequest.model_validate(yaml.safe_load(example.read_text()))
    policy = plane.service.create(request, plane.service.principal(ALICE))
    assert policy.name == request.name


# --- edges -----------------------------------------------------------------------------------------


def test_a_policy_edited_between_reading_and_claiming_is_decided_again_on_the_edit(plane: Plane) -> None:
    # Given a policy, and an edit that lands after the dispatcher read it but before it claimed
    policy = plane.create()
    real_claim = plane.policies.claim_fire
    edits = {"done": False}

    def claim_after_an_edit(policy_id: str, claim: FireClaim) -> str:
        if not edits["done"]:
            edits["done"] = True
            plane.patch(policy, enabled=False)
        return real_claim(policy_id, claim)

    plane.policies.claim_fire = claim_after_an_edit  # type: ignore[method-assign]
    # When the event is dispatched / Then the claim on the old version loses, and the new reading says disabled
    (result,) = plane.service.dispatch(s3_event())
    assert result.outcome == "disabled" and plane.repo.jobs == {}


def test_mapping_paths_index_lists_and_refuse_nulls(plane: Plane) -> None:
    first = plane.create(input_mapping=[{"source": "resources[0]", "target": "labels.bucket-arn"}], concurrency_policy="queue")
    (started,) = plane.service.dispatch(s3_event())
    assert plane.repo.get(started.job_id or "").labels["bucket-arn"] == "arn:aws:s3:::trainplane-artifacts"
    other = plane.create(input_mapping=[{"source": "resources[3]", "target": "labels.x"}], concurrency_policy="queue")
    nulled = {**s3_event(event_id="n1"), "resources": [None]}
    results = {r.policy_id: r for r in plane.service.dispatch(nulled)}
    assert results[other.policy_id].outcome == "invalid" and "the event has no resources[3]" in results[other.policy_id].detail
    assert results[first.policy_id].outcome == "invalid" and "resources[0] is null" in results[first.policy_id].detail


def test_an_event_without_a_usable_id_is_refused(plane: Plane) -> None:
    plane.create()
    with pytest.raises(ValueError, match="an event needs an id"):
        plane.service.dispatch({**s3_event(), "id": ""})


def test_a_tick_for_a_policy_that_is_no_longer_a_schedule_starts_nothing(plane: Plane) -> None:
    policy = plane.create(trigger={"type": "schedule", "expression": "rate(1 hour)"}, input_mapping=[])
    plane.patch(policy, trigger={"type": "s3", "prefix": "datasets/fresh/"})
    assert plane.service.fire_scheduled(policy.policy_id, plane.clock.now) == []


def test_cancel_running_tolerates_a_job_that_ended_meanwhile(plane: Plane) -> None:
    # Given a cancel_running policy whose job ends between the dispatcher's read and its cancel
    policy = plane.create(concurrency_policy="cancel_running")
    (first,) = plane.service.dispatch(s3_event(event_id="a"))
    real_cancel = plane.jobs.cancel

    def cancel_after_it_ended(job_id: str, principal: Any, reason: str = "") -> Job:
        plane.end(job_id, S.FAILED)
        return real_cancel(job_id, principal, reason)

    plane.jobs.cancel = cancel_after_it_ended  # type: ignore[method-assign]
    # When the next event arrives / Then the new job starts; nothing was cancelled
    (second,) = plane.service.dispatch(s3_event(event_id="b"))
    assert second.outcome == "started" and second.cancelled_job_ids == []
    assert plane.repo.get(first.job_id or "").status == S.FAILED and len(plane.jobs_of(policy)) == 2
