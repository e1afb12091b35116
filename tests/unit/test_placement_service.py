"""The placement service (functions/service/placement.py) on a fake pool health: which candidate each
attempt takes, what a capacity error or a preemption blocks, the record of what happened, the deadline."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from functions.catalog import placement as rules
from functions.service.placement import PlacementService, launch_choice, needs_on_demand, placement_fields
from functions.service.ports import RunDescription, RunState
from functions.service.run_specs import RunSpecs
from schemas.job import CheckpointRef, ErrorType, Job, Progress
from tests.fakes import InMemoryArtifactStore
from tests.lifecycle_support import make_job, make_request
from tests.placement_support import InMemoryPoolHealth

T0 = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
H100_SPOT = "ec2/p5.48xlarge/any/spot"
A100_SPOT = "ec2/p4d.24xlarge/any/spot"
A100_OD = "ec2/p4d.24xlarge/any/on_demand"


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def _job(**placement: Any) -> Job:
    body = {
        "candidates": [
            {"gpu_type": "H100", "gpus_per_node": 8, "purchase": "spot"},
            {"gpu_type": "A100", "gpus_per_node": 8, "purchase": "spot"},
            {"gpu_type": "A100", "gpus_per_node": 4, "purchase": "on_demand"},
        ],
        **placement,
    }
    request = make_request(resource_config={"gpu_count": 8, "placement": body})
    data = request.data_config.model_copy(update={"batch_size": 4, "gradient_accumulation_steps": 1})
    return make_job(request.model_copy(update={"data_config": data}), created_at=T0)


def _service() -> tuple[PlacementService, InMemoryPoolHealth, Clock]:
    health, clock = InMemoryPoolHealth(), Clock()
    return PlacementService(health, clock), health, clock


def _prepared(service: PlacementService, job: Job) -> Job:
    """PREPARING as the lifecycle does it: the next attempt with its placement."""
    attempt = job.attempt + 1
    return job.model_copy(update={"attempt": attempt, **placement_fields(service.choose(job, attempt))})


def _ended(service: PlacementService, job: Job, run: RunDescription) -> Job:
    return job.model_copy(update=placement_fields(service.on_run_end(job, run)))


def test_the_first_healthy_candidate_is_taken_and_its_pool_recorded() -> None:
    service, _, _ = _service()
    job = _prepared(service, _job())
    assert job.placement is not None
    assert [(t.candidate, t.pool) for t in job.placement.tries] == [(0, H100_SPOT)]
    assert launch_choice(job) == (True, None, ())
    assert [a.global_batch_size for a in job.placement.adaptations] == [32, 32, 32]
    assert (job.placement.adaptations[2].per_device_train_batch_size, job.placement.adaptations[2].gradient_accumulation_steps) == (4, 2)


def test_a_capacity_error_blocks_the_pool_and_the_next_attempt_takes_the_next_candidate() -> None:
    # Given the H100 spot pool answers "no capacity"
    service, health, clock = _service()
    job = _prepared(service, _job())
    job = _ended(service, job, RunDescription(RunState.FAILED, ErrorType.CAPACITY, "InsufficientInstanceCapacity"))
    # Then the pool is blocked (for a capacity error's time) and the next attempt goes to A100 spot
    assert health.pools[H100_SPOT].blocked_until == T0.timestamp() + rules.block_seconds("capacity", 1)
    assert job.placement is not None and job.placement.pools_blocked == [H100_SPOT]
    assert job.placement.tries[0].outcome == "capacity"
    job = _prepared(service, job)
    assert job.placement is not None and job.placement.tries[-1].pool == A100_SPOT
    # And once the block has passed the H100 is tried first again
    clock.now = T0 + timedelta(seconds=rules.block_seconds("capacity", 1) + 1)
    assert _prepared(service, job).placement.tries[-1].pool == H100_SPOT  # type: ignore[union-attr]


def test_a_second_capacity_error_blocks_longer() -> None:
    # Given the H100 spot pool fails, its block passes, and it fails again
    service, health, clock = _service()
    job = _ended(service, _prepared(service, _job()), RunDescription(RunState.FAILED, ErrorType.CAPACITY, "no room"))
    clock.now = T0 + timedelta(seconds=rules.block_seconds("capacity", 1) + 1)
    job = _prepared(service, job)
    assert job.placement is not None and job.placement.tries[-1].pool == H100_SPOT
    job = _ended(service, job, RunDescription(RunState.FAILED, ErrorType.CAPACITY, "still no room"))
    # Then the second block is longer than the first
    state = health.pools[H100_SPOT]
    assert state.capacity_errors == 2
    assert state.blocked_until - clock.now.timestamp() == rules.block_seconds("capacity", 2) > rules.block_seconds("capacity", 1)


def test_a_preemption_blocks_the_pool_for_30_minutes_records_work_lost_and_times_the_recovery() -> None:
    # Given the job trains on A100 spot (H100 blocked), reaches step 7 with a checkpoint at step 4
    service, health, clock = _service()
    health.block(H100_SPOT, (T0 + timedelta(hours=1)).timestamp())
    job = _prepared(service, _job())
    job = job.model_copy(update=placement_fields(service.on_training(job)))
    assert job.placement is not None and job.placement.time_to_first_step_seconds == 0.0
    checkpoint = CheckpointRef(checkpoint_id="step-000004", step=4, uri="s3://b/k")
    job = job.model_copy(update={"progress": Progress(step=7), "checkpoints": [checkpoint]})
    # When spot reclaims it 20 minutes in
    clock.now = T0 + timedelta(minutes=20)
    job = _ended(service, job, RunDescription(RunState.PREEMPTED, ErrorType.PREEMPTED, "spot reclaimed"))
    # Then the A100 spot pool is blocked for 30 minutes and the try says what was lost
    assert health.pools[A100_SPOT].blocked_until == clock.now.timestamp() + 30 * 60
    assert job.placement is not None
    assert (job.placement.tries[-1].outcome, job.placement.tries[-1].work_lost_steps) == ("preempted", 3)
    # And the next attempt resumes on the next healthy candidate, not the pool that was just interrupted
    clock.now += timedelta(minutes=2)
    job = _prepared(service, job)
    assert job.placement is not None and job.placement.tries[-1].pool == A100_OD
    job = job.model_copy(update=placement_fields(service.on_training(job)))
    assert job.placement is not None
    assert [r.seconds for r in job.placement.recoveries] == [120.0]
    # And the money saved so far is against the on-demand candidate for the spot time used
    assert job.placement.dollars_saved_usd > 0


def test_every_pool_blocked_takes_the_one_that_frees_first_and_says_at_risk() -> None:
    service, health, _ = _service()
    health.block(H100_SPOT, (T0 + timedelta(hours=2)).timestamp())
    health.block(A100_SPOT, (T0 + timedelta(minutes=5)).timestamp())
    health.block(A100_OD, (T0 + timedelta(hours=1)).timestamp())
    job = _prepared(service, _job())
    assert job.placement is not None and job.placement.tries[-1].pool == A100_SPOT
    assert job.placement.at_risk


def test_the_run_spec_carries_the_candidate_and_its_adaptation() -> None:
    # Given the job placed on the 4-GPU on-demand candidate (the spot pools blocked)
    service, health, _ = _service()
    for pool in (H100_SPOT, A100_SPOT):
        health.block(pool, (T0 + timedelta(hours=1)).timestamp())
    job = _prepared(service, _job())
    # When its run spec is built
    spec = RunSpecs(InMemoryArtifactStore(), "bucket").run_spec(job, job.attempt, None)
    # Then it asks for that candidate's GPUs and keeps the global batch (4 x 1 x 8 = 4 x 2 x 4)
    assert (spec.resource_config.gpu_type, spec.resource_config.gpu_count, spec.resource_config.node_count) == ("A100", 4, 1)
    assert spec.training_config.hyperparameters["per_device_train_batch_size"] == "4"
    assert spec.training_config.hyperparameters["gradient_accumulation_steps"] == "2"
    assert (spec.data_config.batch_size, spec.data_config.gradient_accumulation_steps) == (4, 2)
    assert launch_choice(job) == (False, None, ())


def test_a_job_without_candidates_is_left_alone() -> None:
    service, health, _ = _service()
    job = make_job(make_request(resource_config={"gpu_count": 1}))
    assert service.choose(job, 1) == {}
    assert service.on_run_end(job, RunDescription(RunState.PREEMPTED)) == {}
    assert health.pools == {}
    spec = RunSpecs(InMemoryArtifactStore(), "bucket").run_spec(job, 1, None)
    assert spec.resource_config == job.resource_config


def test_the_deadline_moves_the_job_to_on_demand_when_slack_runs_out() -> None:
    # Given 7 hours to the deadline and the trainer measuring 1 hour of H100 x8 work left: 5 hours on the
    # A100 x4 on-demand fallback (relative throughput 20 against 4)
    service, _, clock = _service()
    job = _job(deadline=(T0 + timedelta(hours=7)).isoformat())
    job = _prepared(service, job)
    job = job.model_copy(update={"progress": Progress(step=10, total_steps=20, eta_seconds=3600)})
    # Then with 2 hours of slack spot stays
    assert not service.should_leave_spot(job)
    # And with 1h50 gone (slack 10 min: less than a restart plus the work between checkpoints) it leaves spot
    clock.now = T0 + timedelta(hours=1, minutes=50)
    assert service.should_leave_spot(job)
    job = _prepared(service, job)
    assert job.placement is not None and job.placement.moved_to_on_demand
    assert job.placement.tries[-1].pool == A100_OD


def test_needs_on_demand_is_slack_against_overhead_and_loss() -> None:
    assert not needs_on_demand(0, 1000, 500, overhead=100, loss=100)
    assert needs_on_demand(0, 1000, 850, overhead=100, loss=100)


def test_the_state_change_event_carries_the_attempts_placement() -> None:
    from functions.adapters.outbox import job_state_detail

    # Given a job preempted on A100 spot after H100 was blocked
    service, health, clock = _service()
    health.block(H100_SPOT, (T0 + timedelta(hours=1)).timestamp())
    job = _prepared(service, _job())
    clock.now = T0 + timedelta(minutes=5)
    job = _ended(service, job, RunDescription(RunState.PREEMPTED, ErrorType.PREEMPTED, "spot reclaimed"))
    # When its state-change event is made (in the same write as the change)
    detail = job_state_detail(job, None, sequence=3, at=clock.now, reason="preempted", actor="system", dashboard_url=None)
    # Then it names the pool, the outcome and the pools blocked
    summary = detail.model_dump()["placement"]
    assert (summary["pool"], summary["outcome"], summary["recoveries"]) == (A100_SPOT, "preempted", 1)
    assert summary["pools_blocked"] == [A100_SPOT, H100_SPOT]
    # And a job without candidates carries none
    plain = make_job(make_request(resource_config={"gpu_count": 1}))
    assert job_state_detail(plain, None, sequence=1, at=T0, reason="", actor="user", dashboard_url=None).model_dump()["placement"] is None


def test_a_deadline_that_can_no_longer_be_met_is_reported_at_risk() -> None:
    # Given an hour to the deadline and two hours of work measured by the trainer
    service, _, _ = _service()
    job = _job(deadline=(T0 + timedelta(hours=1)).isoformat())
    job = job.model_copy(update={"progress": Progress(step=1, total_steps=10, eta_seconds=7200)})
    # When it is placed again
    job = _prepared(service, job)
    # Then the record says so, and it goes on-demand
    assert job.placement is not None and job.placement.at_risk is not None and "deadline at risk" in job.placement.at_risk
    assert job.placement.tries[-1].pool == A100_OD


def test_sagemaker_on_demand_offers_the_same_shaped_candidates_as_instance_preferences() -> None:
    from functions.adapters.launchers.sagemaker import build_training_job_request, describe_training_job
    from functions.service.ports import LaunchRequest
    from tests.cloud_fixtures import cloud_settings

    # Given SageMaker on-demand candidates: H100 x8, A100 x8, A100-80GB x8, and an L4 x8 spot one
    service, _, clock = _service()
    candidates = [
        {"gpu_type": "H100", "gpus_per_node": 8, "platform": "sagemaker", "purchase": "on_demand"},
        {"gpu_type": "L4", "gpus_per_node": 8, "platform": "sagemaker", "purchase": "spot"},
        {"gpu_type": "A100", "gpus_per_node": 8, "platform": "sagemaker", "purchase": "on_demand"},
        {"gpu_type": "A100-80GB", "gpus_per_node": 8, "platform": "sagemaker", "purchase": "on_demand"},
    ]
    request = make_request(resource_config={"gpu_count": 8, "placement": {"candidates": candidates}})
    data = request.data_config.model_copy(
        update={"sources": [request.data_config.sources[0].model_copy(update={"path": "s3://bucket/d.jsonl"})]}
    )
    job = _prepared(service, make_job(request.model_copy(update={"data_config": data}), created_at=T0))
    # Then the attempt offers the three on-demand types in order (the spot one is not of the list)
    spot, zone, preferences = launch_choice(job)
    assert (spot, zone, preferences) == (False, None, ("ml.p5.48xlarge", "ml.p4d.24xlarge", "ml.p4de.24xlarge"))
    # And CreateTrainingJob carries them as InstancePreferences instead of one InstanceType
    spec = RunSpecs(InMemoryArtifactStore(), "bucket").run_spec(job, job.attempt, None)
    launch = LaunchRequest(job.job_id, job.attempt, job.owner, spec, "s3://bucket/run.json", instance_preferences=preferences)
    resources = build_training_job_request(launch, cloud_settings(compute="sagemaker"))["ResourceConfig"]
    assert "InstanceType" not in resources
    assert [p["InstanceType"] for p in resources["InstancePreferences"]] == list(preferences)
    # When SageMaker picked the A100 and the run was lost, the try and the blocked pool are the A100's
    described = describe_training_job(
        {
            "TrainingJobStatus": "Failed",
            "FailureReason": "CapacityError: no capacity",
            "ResourceConfig": {**resources, "SelectedInstanceType": "ml.p4d.24xlarge"},
        }
    )
    clock.now = T0 + timedelta(minutes=1)
    ended = _ended(service, job, RunDescription(RunState.FAILED, ErrorType.CAPACITY, "no capacity", instance_type=described.instance_type))
    assert ended.placement is not None and ended.placement.tries[-1].pool == "sagemaker/ml.p4d.24xlarge/any/on_demand"
