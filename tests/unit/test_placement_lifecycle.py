"""Placement through the lifecycle's tasks (fakes): H100 spot has no capacity, so the job starts on A100
within one scheduler pass; an A100 spot preemption resumes on the next healthy candidate, not that pool;
the job's record shows every placement and the recovery time."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from functions.adapters.launchers.cloud import LaunchCapacityError
from functions.service.placement import PlacementService
from functions.service.ports import LaunchHandle, LaunchRequest, PoolFailure, RunDescription, RunState
from schemas.job import ErrorType, PendingAction, Progress
from schemas.lifecycle import Next
from schemas.status import JobStatus
from tests.placement_support import InMemoryPoolHealth
from tests.unit.test_statemachine_tasks import EXEC, FakeLauncher, World

S = JobStatus
PLACEMENT = {
    "candidates": [
        {"gpu_type": "H100", "gpus_per_node": 8, "purchase": "spot"},
        {"gpu_type": "A100", "gpus_per_node": 8, "purchase": "spot"},
        {"gpu_type": "A100", "gpus_per_node": 8, "purchase": "on_demand"},
    ]
}


class NoH100(FakeLauncher):
    """EC2 as the pools stand: no H100 at all."""

    def launch(self, request: LaunchRequest) -> LaunchHandle:
        if request.run_spec.resource_config.gpu_type == "H100":
            raise LaunchCapacityError("p5.48xlarge", "InsufficientInstanceCapacity: no p5.48xlarge in the region")
        return super().launch(request)


def _world() -> tuple[World, InMemoryPoolHealth]:
    w = World(gpu_slots=8)
    w.launcher = NoH100()
    w.svc.launchers = {"local": w.launcher}
    health = InMemoryPoolHealth()
    w.svc.placement = PlacementService(health, clock=lambda: w.now)
    return w, health


def test_h100_empty_starts_on_a100_and_a_preemption_resumes_elsewhere() -> None:
    w, health = _world()
    job = w.submit(resource_config={"gpu_count": 8, "placement": PLACEMENT}, training_config={"max_retries": 0})
    # When the tasks run: the H100 launch is refused for capacity
    assert w.svc.admit(job.job_id, EXEC) == {"next": "wait_capacity"}
    assert w.svc.wait_capacity(job.job_id, EXEC, "cap-1") == {"next": "waiting"}
    assert w.svc.prepare(job.job_id, EXEC) == {"next": "launch"}
    assert w.svc.launch(job.job_id, EXEC) == {"next": Next.REQUEUE}
    # Then the job is queued again without spending its retries, and the H100 pool is blocked
    requeued = w.repo.get(job.job_id)
    assert (requeued.status, requeued.retries_used) == (S.QUEUED, 0)
    assert "ec2/p5.48xlarge/any/spot" in health.pools
    # And within the next scheduler pass it starts on A100 spot
    assert w.svc.wait_capacity(job.job_id, EXEC, "cap-2") == {"next": "waiting"}
    assert w.tokens.answers[-1] == ("cap-2", {"next": "go"})
    assert w.svc.prepare(job.job_id, EXEC) == {"next": "launch"}
    assert w.svc.launch(job.job_id, EXEC)["next"] == "wait"
    launched = w.launcher.launched[-1]
    assert (launched.run_spec.resource_config.gpu_type, launched.preemptible) == ("A100", True)
    # When A100 spot is reclaimed two minutes in (the H100 pool's 5-minute block still holds)
    w.now += timedelta(minutes=2)
    w.svc.on_run_finished(job.job_id, 2, RunDescription(RunState.PREEMPTED, ErrorType.PREEMPTED, "spot reclaimed"))
    assert w.repo.get(job.job_id).status == S.PREEMPTED
    # Then it resumes on the next healthy candidate (A100 on-demand), not the pool that was interrupted
    w.now += timedelta(minutes=1)
    assert w.svc.admit(job.job_id, EXEC) == {"next": "wait_capacity"}
    assert w.svc.wait_capacity(job.job_id, EXEC, "cap-3") == {"next": "waiting"}
    assert w.svc.prepare(job.job_id, EXEC) == {"next": "launch"}
    assert w.svc.launch(job.job_id, EXEC)["next"] == "wait"
    assert w.launcher.launched[-1].preemptible is False
    # And the record shows every placement, the pools blocked and the recovery's time
    record = w.repo.get(job.job_id).placement
    assert record is not None
    assert [(t.attempt, t.pool, t.outcome) for t in record.tries] == [
        (1, "ec2/p5.48xlarge/any/spot", "capacity"),
        (2, "ec2/p4d.24xlarge/any/spot", "preempted"),
        (3, "ec2/p4d.24xlarge/any/on_demand", "running"),
    ]
    assert record.pools_blocked == ["ec2/p4d.24xlarge/any/spot", "ec2/p5.48xlarge/any/spot"]
    assert [r.seconds for r in record.recoveries] == [60.0]
    assert record.time_to_first_step_seconds is not None  # set once, at the first TRAINING
    assert record.dollars_saved_usd > 0


def test_a_deadline_moves_a_spot_run_to_on_demand_through_the_checkpointed_pause_path() -> None:
    # Given a job with a deadline 3 hours out, training on H100 spot
    w, _ = _world()
    w.launcher = FakeLauncher()
    w.svc.launchers = {"local": w.launcher}
    placement = {**PLACEMENT, "deadline": (w.now + timedelta(hours=3)).isoformat()}
    job = w.submit(resource_config={"gpu_count": 8, "placement": placement})
    w.to_training(job.job_id)
    assert w.launcher.launched[-1].preemptible is True
    # When the trainer measures an hour of work left: with 3 hours to go spot stays
    w.repo.record_progress(job.job_id, Progress(step=10, total_steps=20, eta_seconds=3600, attempt=1))
    w.svc.on_run_alive(job.job_id, 1)
    assert w.repo.get(job.job_id).pending_action is None
    # And 1h50 later the slack (10 minutes) no longer covers a restart: the run is stopped with a checkpoint
    w.now += timedelta(hours=1, minutes=50)
    w.svc.on_run_alive(job.job_id, 1)
    stopping = w.repo.get(job.job_id)
    assert stopping.pending_action == PendingAction.PREEMPT
    assert stopping.placement is not None and stopping.placement.moved_to_on_demand
    assert w.tokens.stops[-1][:2] == (job.job_id, True)
    # Then the stopped run is requeued and its next placement is the on-demand candidate
    w.svc.on_run_finished(job.job_id, 1, RunDescription(RunState.STOPPED))
    assert w.repo.get(job.job_id).status == S.QUEUED
    assert w.svc.wait_capacity(job.job_id, EXEC, "cap-2") == {"next": "waiting"}
    assert w.svc.prepare(job.job_id, EXEC) == {"next": "launch"}
    assert w.svc.launch(job.job_id, EXEC)["next"] == "wait"
    assert w.launcher.launched[-1].preemptible is False
    record = w.repo.get(job.job_id).placement
    assert record is not None and [t.purchase.value for t in record.tries] == ["spot", "on_demand"]


def test_with_a_deadline_and_slack_left_a_blocked_spot_pool_is_retried_before_on_demand() -> None:
    # Given every spot pool blocked and 10 hours to a deadline
    w, health = _world()
    for pool in ("ec2/p5.48xlarge/any/spot", "ec2/p4d.24xlarge/any/spot"):
        health.block(pool, (w.now + timedelta(minutes=10)).timestamp())
    placement = {**PLACEMENT, "deadline": (w.now + timedelta(hours=10)).isoformat(), "expected_work_seconds": 3600}
    job = w.submit(resource_config={"gpu_count": 8, "placement": placement})
    assert w.svc.admit(job.job_id, EXEC) == {"next": "wait_capacity"}
    assert w.svc.wait_capacity(job.job_id, EXEC, "cap-1") == {"next": "waiting"}
    assert w.svc.prepare(job.job_id, EXEC) == {"next": "launch"}
    # Then the placement is still spot (the pool freeing first), not the on-demand candidate
    record = w.repo.get(job.job_id).placement
    assert record is not None and record.tries[-1].purchase.value == "spot"


def test_a_run_end_that_loses_a_race_counts_the_pools_failure_once(monkeypatch: Any) -> None:
    # Given a job training on H100 spot, and a first end decision that loses its conditional write
    w, health = _world()
    w.launcher = FakeLauncher()
    w.svc.launchers = {"local": w.launcher}
    job = w.submit(resource_config={"gpu_count": 8, "placement": PLACEMENT})
    w.to_training(job.job_id)
    real_move, lost = w.svc._move, []

    def move_losing_once(*args: Any, **kwargs: Any) -> Any:
        if not lost:
            lost.append(True)
            return None  # as a lost race: _after_end reads again and decides again
        return real_move(*args, **kwargs)

    monkeypatch.setattr(w.svc, "_move", move_losing_once)
    # When the run is preempted
    w.svc.on_run_finished(job.job_id, 1, RunDescription(RunState.PREEMPTED, ErrorType.PREEMPTED, "spot reclaimed"))
    # Then the pool's preemption is counted once
    assert lost and w.repo.get(job.job_id).status == S.PREEMPTED
    assert health.pools["ec2/p5.48xlarge/any/spot"].preemptions == 1


def test_a_placement_the_rules_no_longer_allow_fails_at_prepare_naming_the_field() -> None:
    # Given a stored job whose candidates no longer satisfy its capabilities (the table changed since submit)
    w, _ = _world()
    placement = {"candidates": [{"gpu_type": "L4", "gpus_per_node": 8}]}
    job = w.submit(resource_config={"gpu_count": 8, "placement": placement}, scheduling_config={"required_capabilities": ["nvlink"]})
    assert w.svc.admit(job.job_id, EXEC) == {"next": "wait_capacity"}
    assert w.svc.wait_capacity(job.job_id, EXEC, "cap-1") == {"next": "waiting"}
    # When it is prepared
    w.svc.prepare(job.job_id, EXEC)
    # Then it fails as the user's error, naming what no longer holds
    failed = w.repo.get(job.job_id)
    assert (failed.status, failed.error_type) == (S.FAILED, ErrorType.USER_ERROR)
    assert failed.error_message is not None and "resource_config.placement" in failed.error_message


class FleetNoH100(FakeLauncher):
    """EC2 Fleet as the pools stand: the fleet's H100 pool fails (an Errors entry), its A100 pool launches."""

    def launch(self, request: LaunchRequest) -> LaunchHandle:
        handle = super().launch(request)
        failures = tuple(PoolFailure(t, z, "InsufficientInstanceCapacity", "none") for t, z in request.fleet_pools if t == "p5.48xlarge")
        if len(failures) == len(request.fleet_pools):
            raise LaunchCapacityError("p5.48xlarge", "no pool of the fleet had room", failures)
        extra = {**handle.extra, "instance_type": "p4d.24xlarge", "zone": "", PoolFailure.EXTRA_KEY: PoolFailure.to_extra(failures)}
        return LaunchHandle(handle.launcher, handle.run_id, handle.attempt, extra)


def test_one_fleet_launch_starts_on_a100_at_once_and_blocks_the_h100_pool_it_could_not_fill() -> None:
    # Given EC2 pools where H100 spot has no room, and the lifecycle's launcher sending one fleet per attempt
    w, health = _world()
    w.launcher = FleetNoH100()
    w.svc.launchers = {"local": w.launcher}
    job = w.submit(resource_config={"gpu_count": 8, "placement": PLACEMENT}, training_config={"max_retries": 0})
    assert w.svc.admit(job.job_id, EXEC) == {"next": "wait_capacity"}
    assert w.svc.wait_capacity(job.job_id, EXEC, "cap-1") == {"next": "waiting"}
    assert w.svc.prepare(job.job_id, EXEC) == {"next": "launch"}
    # When the first attempt launches: one fleet over H100 spot and A100 spot (the same shape and purchase)
    assert w.svc.launch(job.job_id, EXEC)["next"] == "wait"
    assert w.launcher.launched[-1].fleet_pools == (("p5.48xlarge", None), ("p4d.24xlarge", None))
    # Then the job runs on A100 spot in that same launch, and the H100 pool is blocked for its capacity error
    record = w.repo.get(job.job_id).placement
    assert record is not None
    assert [(t.attempt, t.pool, t.candidate, t.outcome) for t in record.tries] == [(1, "ec2/p4d.24xlarge/any/spot", 1, "running")]
    assert record.pools_blocked == ["ec2/p5.48xlarge/any/spot"]
    assert health.pools["ec2/p5.48xlarge/any/spot"].capacity_errors == 1
    # And a preemption now counts against A100 spot, the pool that ran
    w.now += timedelta(minutes=2)
    w.svc.on_run_finished(job.job_id, 1, RunDescription(RunState.PREEMPTED, ErrorType.PREEMPTED, "spot reclaimed"))
    assert health.pools["ec2/p4d.24xlarge/any/spot"].preemptions == 1


def test_a_fleet_with_no_room_anywhere_blocks_every_pool_and_requeues() -> None:
    w, health = _world()
    w.launcher = FleetNoH100()
    w.svc.launchers = {"local": w.launcher}
    h100_spot, _, a100_on_demand = PLACEMENT["candidates"]
    only_h100: dict[str, Any] = {"candidates": [h100_spot, h100_spot, a100_on_demand], "availability_zones": ["us-east-1a", "us-east-1b"]}
    job = w.submit(resource_config={"gpu_count": 8, "placement": only_h100}, training_config={"max_retries": 0})
    w.svc.admit(job.job_id, EXEC)
    w.svc.wait_capacity(job.job_id, EXEC, "cap-1")
    w.svc.prepare(job.job_id, EXEC)
    # When the fleet over H100 spot in both zones finds no room
    assert w.svc.launch(job.job_id, EXEC) == {"next": Next.REQUEUE}
    # Then both zones' pools are blocked and the job is queued again without spending a retry
    assert {p for p, s in health.pools.items() if s.capacity_errors} == {
        "ec2/p5.48xlarge/us-east-1a/spot",
        "ec2/p5.48xlarge/us-east-1b/spot",
    }
    requeued = w.repo.get(job.job_id)
    assert (requeued.status, requeued.retries_used) == (S.QUEUED, 0)
    assert requeued.placement is not None and requeued.placement.tries[-1].outcome == "capacity"
