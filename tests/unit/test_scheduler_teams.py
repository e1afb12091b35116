"""The scheduler with teams (issue 24.2): fair-share admission on a fake clock, wait reasons, and no change
while the default team is the only one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from functions.service.ports import Transition
from functions.service.queues import QueueView
from functions.service.scheduler import LocalCapacity, Scheduler
from functions.service.teams import TeamDirectory
from functions.settings import Settings
from schemas.job import Job, StatusEvent
from schemas.status import JobStatus
from schemas.teams import WaitReason
from tests.helpers.teams import InMemoryTeamRepository, team
from tests.lifecycle_support import make_job, make_request
from tests.unit.test_scheduler import World

T0 = datetime(2026, 1, 1, tzinfo=UTC)
A, B, C = (f"arn:aws:iam::123456789012:user/{n}" for n in ("ann", "ben", "cat"))


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


class TeamWorld(World):
    def __init__(self, gpus: int, *teams: Any, default_team_quotas: str = "") -> None:
        super().__init__(LocalCapacity(gpu_slots=gpus, cpu_slots=1))
        self.clock = Clock()
        self.teams = InMemoryTeamRepository()
        for t in teams:
            self.teams.put(t, None)
        self.directory = TeamDirectory(self.teams, Settings(default_team_quotas=default_team_quotas), self.clock)
        self.scheduler = Scheduler(
            self.repo, self.ledger, LocalCapacity(gpu_slots=gpus, cpu_slots=1), self.rec, self.rec, teams=self.directory
        )

    def gpu_job(self, owner: str, gpus: int = 1, priority: int = 5) -> Job:
        """A QUEUED job of `owner`'s team (as submit records it) waiting for `gpus` H100s."""
        self.n += 1
        request = make_request(
            f"j{self.n}", scheduling_config={"priority": priority}, resource_config={"gpu_count": gpus, "gpu_type": "H100"}
        )
        job = make_job(request, owner=owner, created_at=T0 + timedelta(seconds=self.n))
        job = job.model_copy(update={"team": self.directory.team_of(owner).name})
        self.repo.create(job, StatusEvent(at=job.created_at, to_status=JobStatus.PENDING))
        job = self.repo.transition(Transition(job.job_id, 1, JobStatus.PENDING, JobStatus.QUEUED, "admitted"))
        self.ledger.register_queue(job.queue)
        return self.repo.update(job.job_id, job.version, {"task_token": f"tok-{job.job_id}", "task_token_kind": "capacity"})

    def started(self) -> list[str]:
        return [t.removeprefix("tok-") for t in self.scheduled()]

    def explain(self, job: Job) -> WaitReason | None:
        return self.scheduler.explain(self.repo.get(job.job_id))[2]


def test_a_team_under_its_nominal_quota_is_admitted_before_an_older_borrower() -> None:
    w = TeamWorld(3, team("a", A, H100={"nominal": 2, "borrow_limit": 2}), team("b", B, H100=2), default_team_quotas="H100=0")
    held = [w.gpu_job(A), w.gpu_job(A)]
    w.scheduler.run_pass()
    assert w.started() == [j.job_id for j in held]
    borrower = w.gpu_job(A)  # older, but a is at its nominal 2: it would borrow
    owner = w.gpu_job(B)  # b is within its nominal
    w.scheduler.run_pass()
    assert w.started()[2:] == [owner.job_id]
    assert w.explain(borrower) == WaitReason.COHORT_FULL  # b lends what is idle, but the machine has no GPU left


def test_a_job_its_team_refuses_waits_without_holding_up_other_teams() -> None:
    w = TeamWorld(4, team("a", A, H100=1), team("b", B, H100={"nominal": 1, "borrow_limit": 1}), default_team_quotas="H100=0")
    first = w.gpu_job(A)
    over_quota = w.gpu_job(A)  # a may not borrow at all
    within = w.gpu_job(B)
    too_much = w.gpu_job(B, gpus=2)  # b would borrow 2 > its limit 1
    w.scheduler.run_pass()
    assert w.started() == [first.job_id, within.job_id]
    assert w.explain(over_quota) == WaitReason.QUOTA
    assert w.explain(too_much) == WaitReason.BORROW_LIMIT


def test_within_a_priority_class_the_team_with_less_decayed_usage_goes_first() -> None:
    w = TeamWorld(1, team("a", A, H100={"nominal": 1}), team("b", B, H100={"nominal": 1}))
    ran = w.gpu_job(A)
    w.scheduler.run_pass()
    # a's job runs ten hours on the fake clock and gives its GPU back: its usage is recorded
    ran = w.repo.update(ran.job_id, w.repo.get(ran.job_id).version, {"run_started_at": w.clock.now, "capacity_pool": "local/gpu"})
    w.clock.now += timedelta(hours=10)
    assert w.scheduler.release(w.repo.get(ran.job_id))
    usage, _ = w.teams.recorded["a"]
    assert usage > 10 * 2  # ten H100 hours, weighted by the H100's price
    older = w.gpu_job(A)
    newer = w.gpu_job(B)
    w.scheduler.run_pass()
    assert w.started()[1:] == [newer.job_id]
    # A higher priority class goes first whatever the usage; the other waits on PRIORITY
    urgent = w.gpu_job(A, priority=9)
    assert w.explain(older) == WaitReason.PRIORITY
    assert w.repo.get(urgent.job_id).status == JobStatus.QUEUED


def test_usage_decays_with_the_half_life_on_the_fake_clock() -> None:
    w = TeamWorld(1, team("a", A, H100=1))
    w.teams.add_usage("a", 64.0, T0, w.directory.half_life_seconds)
    w.clock.now = T0 + timedelta(days=14)
    assert w.directory.usage(["a"], w.clock.now) == {"a": 16.0}


def test_with_only_the_default_team_nothing_changes() -> None:
    w = TeamWorld(2)
    assert w.scheduler._cohort() is None  # today's order: priority, then FIFO over every principal
    jobs = [w.gpu_job(A), w.gpu_job(B), w.gpu_job(C)]
    w.scheduler.run_pass()
    assert w.started() == [j.job_id for j in jobs[:2]]
    assert w.explain(jobs[2]) == WaitReason.COHORT_FULL


def test_the_queue_view_shows_why_each_job_waits() -> None:
    w = TeamWorld(4, team("a", A, H100=1), default_team_quotas="H100=0")
    w.gpu_job(A)
    waiting = w.gpu_job(A)
    w.scheduler.run_pass()
    view = QueueView(w.repo, w.ledger, LocalCapacity(gpu_slots=4, cpu_slots=1), teams=w.directory)
    shown = view.with_position(w.repo.get(waiting.job_id))
    assert (shown.wait_reason, shown.queue_position) == (WaitReason.QUOTA, 0)
    listed = view.list(lambda job: True).queues[0]
    assert [(x.job_id, x.wait_reason) for x in listed.waits] == [(waiting.job_id, WaitReason.QUOTA)]


def test_a_team_under_its_nominal_goes_before_borrowers_even_with_a_job_bigger_than_what_it_has_left() -> None:
    # Given team a under its nominal 2 (holding none) with a 3-GPU job, and borrower b's older 3-GPU job:
    # c lends its idle 3; the pool (5) fits one of them
    w = TeamWorld(
        0,
        team("a", A, H100={"nominal": 2, "borrow_limit": 3}),
        team("b", B, H100={"nominal": 0, "borrow_limit": 3}),
        team("c", C, H100={"nominal": 3}),
        default_team_quotas="H100=0",
    )
    w.scheduler = Scheduler(w.repo, w.ledger, LocalCapacity(gpu_slots=0, inventory={"H100": 5}), w.rec, w.rec, teams=w.directory)
    older = w.gpu_job(B, gpus=3)
    mine = w.gpu_job(A, gpus=3)
    # When a pass runs
    w.scheduler.run_pass()
    # Then a's job goes first (a team under nominal before any borrower), b's waits
    assert w.started() == [mine.job_id]
    assert w.repo.get(older.job_id).status == JobStatus.QUEUED


def _three_teams_holding(a: int, b: int, c: int) -> TeamWorld:
    """12 H100s; a, b, c (weights 1, 2, 3; nominal 2, 4, 6; each may borrow the whole pool) holding a, b, c of
    them with 1-GPU jobs; b has used the most, c nothing (c's factor is the highest, b's the lowest)."""
    quota = {"borrow_limit": 12}
    w = TeamWorld(
        0,
        team("a", A, weight=1, H100={"nominal": 2, **quota}),
        team("b", B, weight=2, H100={"nominal": 4, **quota}),
        team("c", C, weight=3, H100={"nominal": 6, **quota}),
        default_team_quotas="H100=0",
    )
    w.scheduler = Scheduler(w.repo, w.ledger, LocalCapacity(gpu_slots=0, inventory={"H100": 12}), w.rec, w.rec, teams=w.directory)
    for owner, units in ((A, a), (B, b), (C, c)):
        for _ in range(units):
            w.gpu_job(owner)
    w.scheduler.run_pass()
    assert len(w.started()) == a + b + c
    w.teams.add_usage("a", 100.0, T0, w.directory.half_life_seconds)
    w.teams.add_usage("b", 500.0, T0, w.directory.half_life_seconds)
    return w


def test_a_job_within_its_teams_nominal_starts_before_another_teams_job_that_would_overshoot_its_own() -> None:
    # Given c (the highest factor) one under its nominal 6 with a 3-GPU job that would take it 2 beyond it, and
    # b (the lowest factor) two under its nominal 4 with a 1-GPU job; 3 GPUs free
    w = _three_teams_holding(2, 2, 5)
    overshoot = w.gpu_job(C, gpus=3)
    within = w.gpu_job(B)
    # When a pass runs
    w.scheduler.run_pass()
    # Then b's job starts; c's waits: it would borrow b's idle GPU, which b's queue still wants
    assert w.started()[9:] == [within.job_id]
    assert w.explain(overshoot) == WaitReason.COHORT_FULL


def test_a_team_under_its_nominal_waiting_for_room_holds_back_other_teams_borrowing() -> None:
    # Given b one under its nominal 4 with a 3-GPU job (it needs 2 of the others' idle quota, and only a's 1
    # is idle: COHORT_FULL), and c at its nominal with a 1-GPU job that would borrow; 2 GPUs free
    w = _three_teams_holding(1, 3, 6)
    waiting = w.gpu_job(B, gpus=3)
    borrower = w.gpu_job(C)
    # When a pass runs
    result = w.scheduler.run_pass()
    # Then c borrows nothing: the idle GPUs are a's and b's own quota, and b waits for them (both count as waiting)
    assert (w.started()[10:], result.waiting) == ([], 2)
    assert (w.explain(waiting), w.repo.get(borrower.job_id).status) == (WaitReason.COHORT_FULL, JobStatus.QUEUED)


def test_a_team_waiting_for_room_holds_back_borrowing_only_a_later_job_within_its_own_nominal_still_starts() -> None:
    # Given b's urgent 3-GPU job waiting for room as above, and a's lower-priority job within a's nominal 2
    w = _three_teams_holding(1, 3, 6)
    waiting = w.gpu_job(B, gpus=3, priority=7)
    borrower = w.gpu_job(C, priority=7)  # held back
    within = w.gpu_job(A)
    w.scheduler.run_pass()
    # Then a's job starts: it takes a's own quota, not what b waits for
    assert w.started()[10:] == [within.job_id]
    assert (w.explain(waiting), w.repo.get(borrower.job_id).status) == (WaitReason.COHORT_FULL, JobStatus.QUEUED)


def test_a_held_back_team_keeps_its_fifo_its_later_job_within_nominal_waits_behind_the_held_back_one() -> None:
    # Given b waiting for room (one of its nominal 4 held, a 5-GPU job: 2 beyond, only c's 1 idle), and c one
    # under its nominal with a 2-GPU job (an overshoot, held back) before a 1-GPU job that would fit c's nominal
    w = _three_teams_holding(2, 1, 5)
    w.gpu_job(B, gpus=5)
    held_back, behind = w.gpu_job(C, gpus=2), w.gpu_job(C)
    w.scheduler.run_pass()
    # Then neither of c's starts: the later one waits behind the held-back one, FIFO inside the team
    assert w.started()[8:] == []
    assert {w.repo.get(j.job_id).status for j in (held_back, behind)} == {JobStatus.QUEUED}


def test_a_team_whose_job_is_admitted_within_nominal_holds_back_nobody() -> None:
    # Given a, holding none of its nominal 2, with a 1-GPU job, and c at its nominal with a 1-GPU job to borrow
    w = _three_teams_holding(0, 4, 6)
    within, borrower = w.gpu_job(A), w.gpu_job(C)
    w.scheduler.run_pass()
    # Then both start: a waits for nothing, so c may borrow a's other idle GPU
    assert w.started()[10:] == [within.job_id, borrower.job_id]
