"""Reclaim (issue 24.3): a team within its nominal quota takes lent GPUs back by pausing borrowers through the
checkpointed pause path; never before their minimum run time; never back and forth."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from functions.service.fair_share import Ask, Cohort, Holder, reclaim_victims
from functions.service.ports import Reclaim, Transition
from functions.service.scheduler import RECLAIM_RULE, LocalCapacity
from schemas.job import CheckpointRef, Job, PendingAction
from schemas.status import JobStatus
from schemas.teams import WaitReason
from tests.helpers.teams import team
from tests.unit.test_scheduler_teams import T0, A, B, TeamWorld


def _world() -> TeamWorld:
    w = TeamWorld(0, team("a", A, H100={"nominal": 4}), team("b", B, H100={"nominal": 0, "borrow_limit": 4}), default_team_quotas="H100=0")
    w.scheduler = type(w.scheduler)(w.repo, w.ledger, LocalCapacity(gpu_slots=0, inventory={"H100": 4}), w.rec, w.rec, teams=w.directory)
    return w


def _training(w: TeamWorld, job: Job) -> Job:
    job = w.repo.get(job.job_id)
    for to in (JobStatus.PREPARING, JobStatus.TRAINING):
        job = w.repo.transition(Transition(job.job_id, job.version, job.status, to, "test"))
    return w.repo.update(job.job_id, job.version, {"run_started_at": w.clock.now})


def test_a_lender_takes_its_gpus_back_from_the_borrower_that_loses_least_after_its_minimum_run() -> None:
    w = _world()
    borrowed = [w.gpu_job(B, gpus=2), w.gpu_job(B, gpus=2)]
    w.scheduler.run_pass()
    borrowed = [_training(w, j) for j in borrowed]
    # the second borrower checkpointed a minute before the reclaim: it loses less
    w.clock.now += timedelta(minutes=9)
    saved = CheckpointRef(checkpoint_id="ckpt-1", step=10, uri="s3://b/c", created_at=w.clock.now)
    w.repo.update(borrowed[1].job_id, borrowed[1].version, {"checkpoints": [saved], "latest_checkpoint_id": "ckpt-1"})

    # Given: the lender's job arrives while the borrowers have run 9 minutes (< the 10 minute minimum)
    mine = w.gpu_job(A, gpus=2)
    assert w.scheduler.run_pass().preempting == []
    assert w.explain(mine) == WaitReason.COHORT_FULL

    # When: a pass runs after their minimum run time
    w.clock.now += timedelta(minutes=2)
    result = w.scheduler.run_pass()

    # Then: one borrower (the one with less work since its checkpoint) is paused through the checkpointed path
    assert result.preempting == [borrowed[1].job_id]
    victim = w.repo.get(borrowed[1].job_id)
    assert victim.pending_action == PendingAction.PREEMPT and "reclaimed by team a" in (victim.pending_reason or "")
    assert victim.reclaims == 1
    assert w.rec.stops == [(victim.job_id, True)]
    # and its Trainplane Job Reclaimed event went with that very update: victim, beneficiary, rule, work lost
    assert w.repo.reclaims == [
        (
            victim.job_id,
            Reclaim(
                team="b",
                gpu_type="H100",
                gpus=2,
                beneficiary_job_id=mine.job_id,
                beneficiary_team="a",
                rule=RECLAIM_RULE,
                work_lost_gpu_seconds=2 * 120.0,  # 2 GPUs x the 2 minutes since its checkpoint
            ),
        )
    ]
    # and a pass while it checkpoints asks nothing more of anyone
    assert w.scheduler.run_pass().preempting == []

    # When: the victim's checkpointed stop ends (CHECKPOINTING -> QUEUED, same job id) and its claim is released
    assert w.scheduler.release(victim.model_copy(update={"capacity_pool": "local/H100"}))
    requeued = w.repo.update(victim.job_id, victim.version, {"pending_action": None, "task_token": None, "task_token_kind": None})
    requeued = w.repo.transition(Transition(victim.job_id, requeued.version, requeued.status, JobStatus.QUEUED, "reclaimed"))
    w.repo.update(victim.job_id, requeued.version, {"task_token": f"tok-{victim.job_id}", "task_token_kind": "capacity"})
    w.clock.now += timedelta(hours=1)
    w.scheduler.run_pass()

    # Then: the lender's job starts; the borrower waits and never reclaims back
    assert f"tok-{mine.job_id}" in w.scheduled()
    assert w.repo.get(victim.job_id).status == JobStatus.QUEUED
    assert w.explain(victim) == WaitReason.COHORT_FULL
    _training(w, mine)
    assert w.scheduler.run_pass().preempting == []


def _holder(n: int, team_name: str, units: int, lost: float) -> Holder:
    from tests.lifecycle_support import make_job, make_request

    job = make_job(make_request(f"h{n}"), created_at=T0 + timedelta(seconds=n)).model_copy(update={"team": team_name})
    return Holder(job, Ask(team_name, "H100", units, f"owner-{n}"), units, lost)


@settings(deadline=None)  # a property, not a timing: a loaded machine must not fail it (it did once, under a CI run)
@given(
    nominal=st.lists(st.integers(0, 6), min_size=3, max_size=3),
    held=st.lists(st.tuples(st.integers(0, 2), st.integers(1, 3), st.floats(0, 1e5)), max_size=12),
    waiting_team=st.integers(0, 2),
    units=st.integers(1, 4),
)
def test_reclaim_takes_only_from_borrowers_and_never_back(
    nominal: list[int], held: list[tuple[int, int, float]], waiting_team: int, units: int
) -> None:
    names = ["a", "b", "c"]
    teams = {n: team(n, H100={"nominal": q, "borrow_limit": 100}) for n, q in zip(names, nominal, strict=True)}
    cohort = Cohort(teams=teams)
    holders = [_holder(i, names[t], u, lost) for i, (t, u, lost) in enumerate(held)]
    for h in holders:
        cohort.hold(h.ask)
    ask = Ask(names[waiting_team], "H100", units, "waiter")
    free_needed = units
    victims = reclaim_victims(ask, holders, free_needed, cohort)
    if not victims:
        return
    # Only a team within nominal reclaims, only from other teams' borrowing, and frees what it needs
    assert not cohort.borrowing(ask)
    assert all(v.ask.team != ask.team and cohort.borrowed(v.ask.team, "H100") > 0 for v in victims)
    assert sum(v.units for v in victims) >= free_needed
    # After it: the beneficiary is within nominal, so no victim's job can ever reclaim from it
    after = Cohort(teams=teams)
    remaining = [h for h in holders if h not in victims]
    for h in remaining:
        after.hold(h.ask)
    after.hold(ask)
    beneficiary = Holder(holders[0].job.model_copy(update={"job_id": "beneficiary"}), ask, units, 0.0)
    for v in victims:
        back = reclaim_victims(v.ask, [*remaining, beneficiary], v.units, after)
        assert all(h.ask.team != ask.team for h in back)


def test_a_job_that_opted_out_of_reclaim_never_borrows_and_a_job_reclaimed_n_times_keeps_its_place() -> None:
    w = _world()
    # An opted-out job of the borrowing team waits on QUOTA: it would run on reclaimable capacity
    request_job = w.gpu_job(B, gpus=1)
    opted_out = w.repo.update(
        request_job.job_id,
        request_job.version,
        {"scheduling_config": request_job.scheduling_config.model_copy(update={"reclaimable": False})},
    )
    w.scheduler.run_pass()
    assert w.scheduled() == [] and w.explain(opted_out) == WaitReason.QUOTA

    # A borrower reclaimed max_reclaims times already is not reclaimed again
    spent = w.gpu_job(B, gpus=4)
    w.repo.update(opted_out.job_id, w.repo.get(opted_out.job_id).version, {"task_token": None, "task_token_kind": None})
    w.scheduler.run_pass()
    running = _training(w, spent)
    w.repo.update(running.job_id, running.version, {"reclaims": w.directory.settings.max_reclaims})
    w.gpu_job(A, gpus=2)
    w.clock.now += timedelta(hours=1)
    assert w.scheduler.run_pass().preempting == []
    assert w.repo.get(spent.job_id).pending_action is None
