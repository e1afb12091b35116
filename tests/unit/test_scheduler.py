"""The scheduler: order, capacity claims that cannot double-book, preemption, queue position."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from functions.catalog.quotas import parse_quotas
from functions.service.ports import Transition
from functions.service.scheduler import CloudCapacity, LocalCapacity, NeverFits, Scheduler, detect_local_gpus
from schemas.job import Job, PendingAction, StatusEvent
from schemas.status import JobStatus
from tests.fakes import InMemoryJobRepository
from tests.lifecycle_support import InMemoryLedger, make_job, make_request

S = JobStatus
T0 = datetime(2026, 1, 1, tzinfo=UTC)


class Recorder:
    def __init__(self) -> None:
        self.answers: list[tuple[str, dict[str, Any]]] = []
        self.stops: list[tuple[str, bool]] = []
        self._lock = threading.Lock()

    def send_success(self, token: str, output: Any) -> bool:
        with self._lock:
            self.answers.append((token, dict(output)))
        return True

    def stop_run(self, job: Job, *, graceful: bool, reason: str) -> None:
        self.stops.append((job.job_id, graceful))


class World:
    def __init__(self, capacity: Any = None) -> None:
        self.repo = InMemoryJobRepository()
        self.ledger = InMemoryLedger()
        self.rec = Recorder()
        self.scheduler = Scheduler(self.repo, self.ledger, capacity or LocalCapacity(gpu_slots=0, cpu_slots=1), self.rec, self.rec)
        self.n = 0

    def waiting(self, queue: str = "default", priority: int = 5, *, token: bool = True, **kwargs: Any) -> Job:
        self.n += 1
        job = make_job(
            make_request(f"j{self.n}", scheduling_config={"queue": queue, "priority": priority, **kwargs.pop("scheduling", {})}, **kwargs),
            created_at=T0 + timedelta(seconds=self.n),
        )
        self.repo.create(job, StatusEvent(at=job.created_at, to_status=S.PENDING))
        job = self.repo.transition(Transition(job.job_id, 1, S.PENDING, S.QUEUED, "admitted"))
        self.ledger.register_queue(queue)
        if token:
            job = self.repo.update(job.job_id, job.version, {"task_token": f"tok-{job.job_id}", "task_token_kind": "capacity"})
        return job

    def running(self, priority: int, *, preemptible: bool) -> Job:
        job = self.waiting(priority=priority, scheduling={"preemptible": preemptible})
        self.scheduler.run_pass()
        job = self.repo.get(job.job_id)
        assert job.status == S.SCHEDULING
        for to in (S.PREPARING, S.TRAINING):
            job = self.repo.transition(Transition(job.job_id, job.version, job.status, to, "test"))
        return job

    def scheduled(self) -> list[str]:
        return [t for t, out in self.rec.answers if out == {"next": "go"}]


def test_priority_first_then_fifo_across_queues_sharing_a_pool() -> None:
    w = World(LocalCapacity(gpu_slots=0, cpu_slots=3))
    a = w.waiting("default", 5)
    b = w.waiting("research", 9)
    c = w.waiting("default", 5)
    w.waiting("default", 1)
    # When a pass runs with three slots
    result = w.scheduler.run_pass()
    # Then the highest priority goes first, then the older of two equals; the lowest waits
    assert result.started == [b.job_id, a.job_id, c.job_id] and result.waiting == 1
    assert w.scheduled() == [f"tok-{b.job_id}", f"tok-{a.job_id}", f"tok-{c.job_id}"]
    assert {w.repo.get(j.job_id).status for j in (a, b, c)} == {S.SCHEDULING}
    assert w.repo.get(b.job_id).capacity_pool == "local/cpu"


def test_a_job_without_a_capacity_token_is_not_started() -> None:
    w = World()
    job = w.waiting(token=False)
    assert w.scheduler.run_pass().started == []
    assert w.repo.get(job.job_id).status == S.QUEUED


def test_released_capacity_goes_to_the_next_job() -> None:
    w = World()
    first, second = w.waiting(), w.waiting()
    w.scheduler.run_pass()
    assert w.repo.get(second.job_id).status == S.QUEUED
    # When the first job's claim is released
    assert w.scheduler.release(w.repo.get(first.job_id))
    w.scheduler.run_pass()
    # Then the second starts
    assert w.repo.get(second.job_id).status == S.SCHEDULING


def test_racing_passes_never_double_book() -> None:
    w = World(LocalCapacity(gpu_slots=0, cpu_slots=2))
    jobs = [w.waiting() for _ in range(12)]
    barrier = threading.Barrier(8)

    def run() -> None:
        barrier.wait()
        for _ in range(5):
            w.scheduler.run_pass()

    threads = [threading.Thread(target=run) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    started = [j.job_id for j in jobs if w.repo.get(j.job_id).status == S.SCHEDULING]
    # Then exactly two jobs hold the two slots, each answered once
    assert started == [jobs[0].job_id, jobs[1].job_id]
    assert w.ledger.holders("local/cpu") == {jobs[0].job_id: 1, jobs[1].job_id: 1}
    assert sorted(w.scheduled()) == sorted(f"tok-{j}" for j in started)


def test_strict_order_no_backfill_past_a_job_that_does_not_fit() -> None:
    w = World(LocalCapacity(gpu_slots=2, cpu_slots=1))
    big = w.waiting(resource_config={"gpu_count": 2}, priority=9)
    small = w.waiting(resource_config={"gpu_count": 1}, priority=5)
    holder = w.waiting(resource_config={"gpu_count": 1}, priority=9)
    w.ledger.claim("local/gpu", "someone", 1, 2)
    # When the big job (head of the line) cannot fit, Then neither does anyone behind it jump ahead
    result = w.scheduler.run_pass()
    assert result.started == []
    assert {w.repo.get(j.job_id).status for j in (big, small, holder)} == {S.QUEUED}


def test_higher_priority_waiting_job_preempts_a_lower_preemptible_one() -> None:
    w = World()
    victim = w.running(priority=2, preemptible=True)
    urgent = w.waiting(priority=8)
    # When a pass finds no room for the urgent job
    result = w.scheduler.run_pass()
    # Then the preemptible job is asked to stop gracefully, with pending_action "preempt"
    assert result.preempting == [victim.job_id] and w.rec.stops == [(victim.job_id, True)]
    assert w.repo.get(victim.job_id).pending_action == PendingAction.PREEMPT
    assert w.repo.get(urgent.job_id).status == S.QUEUED
    # And a second pass does not stop it again while it is on its way out
    w.scheduler.run_pass()
    assert w.rec.stops == [(victim.job_id, True)]


@pytest.mark.parametrize(("priority", "preemptible"), [(2, False), (8, True), (5, True)])
def test_no_preemption_of_protected_or_equal_priority_jobs(priority: int, preemptible: bool) -> None:
    w = World()
    w.running(priority=priority, preemptible=preemptible)
    w.waiting(priority=5 if priority != 2 else 8)
    assert w.scheduler.run_pass().preempting == [] and w.rec.stops == []


def test_capacity_models() -> None:
    local = LocalCapacity(gpu_slots=2, cpu_slots=3)
    cpu = make_job(make_request(resource_config={"gpu_count": 0}))
    gpu = make_job(make_request(resource_config={"gpu_count": 2}))
    assert local.demand(cpu).pool == "local/cpu" and local.capacity("local/cpu") == 3
    assert local.demand(gpu).units == 2
    with pytest.raises(NeverFits, match="asks for 4 GPU"):
        local.demand(make_job(make_request(resource_config={"gpu_count": 2, "node_count": 2}, training_config=_world(4))))
    quotas = parse_quotas("default:H100=8, research:*=4, *:*=16, *:cpu=32")
    cloud = CloudCapacity(quotas)
    h100 = make_job(make_request(resource_config={"gpu_count": 8, "gpu_type": "H100"}))
    assert cloud.demand(h100).pool == "default/H100" and cloud.capacity("default/H100") == 8
    assert cloud.capacity("research/A100") == 4 and cloud.capacity("other/L4") == 16 and cloud.capacity("x/cpu") == 32
    assert CloudCapacity().capacity("default/H100") > 10_000  # no quota configured: AWS's own limits apply
    with pytest.raises(NeverFits, match="quota of 8"):
        cloud.demand(
            make_job(make_request(resource_config={"gpu_count": 8, "gpu_type": "H100", "node_count": 2}, training_config=_world(16)))
        )
    with pytest.raises(ValueError, match="'default:H100' is not 'queue:gpu_type=count'"):
        parse_quotas("default:H100")


def test_detects_gpus_with_nvidia_smi_and_without(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H100 (UUID: a)'\necho 'GPU 1: NVIDIA H100 (UUID: b)'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert detect_local_gpus() == 2
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert detect_local_gpus() == 0


def test_queue_position_and_estimated_wait() -> None:
    w = World(LocalCapacity(gpu_slots=0, cpu_slots=2))
    ahead = [w.waiting(scheduling={"max_runtime_seconds": 600}) for _ in range(3)]
    me = w.waiting()
    position, eta = w.scheduler.position(w.repo.get(me.job_id))
    # Three ahead over two slots: two waves of (about) 600 s each
    assert position == 3 and eta == 1200.0
    assert w.scheduler.position(w.repo.get(ahead[0].job_id)) == (0, 0.0)
    w.scheduler.run_pass()
    assert w.scheduler.position(w.repo.get(ahead[0].job_id)) == (None, None)


def test_a_pass_reads_only_as_deep_into_the_queue_as_could_start() -> None:
    w = World(LocalCapacity(gpu_slots=0, cpu_slots=3))
    for _ in range(30):
        w.waiting()
    limits: list[int] = []
    real = w.repo.queued

    def spy(queue: str, limit: int = 100) -> list[Job]:
        limits.append(limit)
        return real(queue, limit)

    w.repo.queued = spy  # type: ignore[method-assign]
    # No claim yet: a first, shallow read; then, with 1 unit free, just that plus a look-ahead
    assert len(w.scheduler.run_pass().started) == 3
    w.scheduler.release(w.repo.get(w.scheduled()[0].removeprefix("tok-")))
    assert len(w.scheduler.run_pass().started) == 1
    assert limits == [10, 3]


def test_an_arrival_is_worth_a_pass_only_if_it_could_start_or_preempt() -> None:
    w = World()
    first = w.waiting()
    assert w.scheduler.worth_a_pass(first)  # the slot is free
    w.scheduler.run_pass()
    later = w.waiting(priority=9)
    assert not w.scheduler.worth_a_pass(later)  # full, and the holder is not preemptible
    w2 = World()
    w2.running(priority=2, preemptible=True)
    assert w2.scheduler.worth_a_pass(w2.waiting(priority=9))
    assert not w2.scheduler.worth_a_pass(w2.waiting(priority=1))


def _world(size: int) -> dict[str, object]:
    # A multi-node job runs one worker per GPU: world_size = node_count x gpu_count (submit checks it).
    return {"framework": {"distributed": {"world_size": size}}}
