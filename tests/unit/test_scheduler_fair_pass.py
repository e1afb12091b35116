"""The scheduler's fair-share pass, answer by answer (functions/service/scheduler.py: `_serve_pool_fairly` and
`_reclaim`; `make mutation`'s scheduler module): what a pass counts as waiting, the budget hold, the fair-sharing
reclaim a borrower's COHORT_FULL asks for (its record and reason), the minimum run time at exactly its value, a
team's later jobs behind its refused one, and which holders' units a reclaim counts as on their way back."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from functions.errors import ConcurrentModification
from functions.service.ports import Reclaim, Transition
from functions.service.scheduler import RECLAIM_RULE, LocalCapacity
from schemas.job import Job, PendingAction
from schemas.teams import Team
from tests.helpers.teams import team
from tests.unit.test_scheduler_reclaim import _training
from tests.unit.test_scheduler_teams import A, B, C, TeamWorld


def _world(h100: int, *teams: Team, admission: Any = None) -> TeamWorld:
    w = TeamWorld(0, *teams, default_team_quotas="H100=0")
    capacity = LocalCapacity(gpu_slots=0, inventory={"H100": h100})
    w.scheduler = type(w.scheduler)(w.repo, w.ledger, capacity, w.rec, w.rec, teams=w.directory, admission=admission)
    return w


class HoldOne:
    """A budget hold (functions/service/scheduler.py's Admission) on one job."""

    def __init__(self) -> None:
        self.held: str | None = None

    def hold(self, job: Job) -> object | None:
        return "budget" if job.job_id == self.held else None

    def would_hold(self, job: Job) -> object | None:
        return self.hold(job)

    def released(self, job: Job) -> None:
        pass


def test_a_budget_held_job_waits_and_the_next_one_starts() -> None:
    admission = HoldOne()
    w = _world(2, team("a", A, H100=2), admission=admission)
    held, free = w.gpu_job(A), w.gpu_job(A)
    admission.held = held.job_id
    result = w.scheduler.run_pass()
    assert (w.started(), result.waiting) == ([free.job_id], 1)


def test_a_pass_counts_each_refused_job_and_everything_behind_a_full_pool_once() -> None:
    w = _world(1, team("a", A, H100=4), team("b", B, H100=0))
    refused = w.gpu_job(B, priority=9)  # first in order; b may not borrow: QUOTA
    first, second, third = w.gpu_job(A), w.gpu_job(A), w.gpu_job(A)
    result = w.scheduler.run_pass()
    assert w.started() == [first.job_id]
    assert result.waiting == 3  # the refused job, then the two behind the full pool
    assert {refused.job_id, second.job_id, third.job_id}.isdisjoint(w.started())


def _borrowers_world() -> tuple[TeamWorld, list[Job]]:
    # a borrows all 4 of c's idle H100s in four jobs; b (nominal 0) then asks for 1: COHORT_FULL, and a's share
    # (4) is above b's with the job (1): Kueue's fair sharing lets b take one of a's jobs back
    w = _world(
        4,
        team("a", A, H100={"nominal": 0, "borrow_limit": 4}),
        team("b", B, H100={"nominal": 0, "borrow_limit": 4}),
        team("c", C, H100=4),
    )
    running = [w.gpu_job(A) for _ in range(4)]
    w.scheduler.run_pass()
    return w, [_training(w, j) for j in running]


def test_a_borrower_refused_cohort_full_takes_back_from_a_larger_borrower_by_fair_sharing() -> None:
    w, running = _borrowers_world()
    # 600.0625 s after they started: past the minimum run, a fractional work lost
    w.clock.now += timedelta(seconds=600, microseconds=62_500)
    mine, behind = w.gpu_job(B), w.gpu_job(B)
    result = w.scheduler.run_pass()
    victim = running[0]
    assert result.preempting == [victim.job_id]
    assert result.waiting == 2  # both of b's jobs: the second waits behind the first (FIFO inside a team)
    got = w.repo.get(victim.job_id)
    assert got.pending_action == PendingAction.PREEMPT and got.reclaims == 1
    assert got.pending_reason == (
        f"reclaimed by team b for job {mine.job_id}: team a's borrowed share exceeds team b's "
        "(fair sharing, LessThanOrEqualToFinalShare) (work lost 600 GPU-s since its last checkpoint)"
    )
    assert w.repo.reclaims == [
        (
            victim.job_id,
            Reclaim(
                team="a",
                gpu_type="H100",
                gpus=1,
                beneficiary_job_id=mine.job_id,
                beneficiary_team="b",
                rule="LessThanOrEqualToFinalShare",
                work_lost_gpu_seconds=600.1,
            ),
        )
    ]
    assert behind.job_id not in w.started()
    # a pass while the victim checkpoints counts its unit as on the way back: nobody else is asked
    again = w.scheduler.run_pass()
    assert (again.preempting, again.waiting) == ([], 2)


def test_a_borrower_waits_for_the_lenders_limit_even_with_gpus_free_and_takes_back_by_fair_sharing() -> None:
    # 8 H100s; c lends at most 4 of its 8 and a borrows those 4: 4 GPUs are free, but none are c's to lend
    w = _world(
        8,
        team("a", A, H100={"nominal": 0, "borrow_limit": 8}),
        team("b", B, H100={"nominal": 0, "borrow_limit": 8}),
        team("c", C, H100={"nominal": 8, "lend_limit": 4}),
    )
    running = [w.gpu_job(A) for _ in range(4)]
    w.scheduler.run_pass()
    running = [_training(w, j) for j in running]
    w.clock.now += timedelta(hours=1)
    mine = w.gpu_job(B)
    result = w.scheduler.run_pass()
    assert mine.job_id not in w.started()  # COHORT_FULL: refused though the pool has room
    assert (result.preempting, result.waiting) == ([running[0].job_id], 1)


def test_a_lender_reclaims_from_a_borrower_that_ran_exactly_the_minimum() -> None:
    w = _world(4, team("a", A, H100={"nominal": 4}), team("b", B, H100={"nominal": 0, "borrow_limit": 4}))
    borrowed = [w.gpu_job(B, gpus=2), w.gpu_job(B, gpus=2)]
    w.scheduler.run_pass()
    borrowed = [_training(w, j) for j in borrowed]
    w.clock.now += timedelta(seconds=w.directory.settings.reclaim_min_run_seconds)
    mine = w.gpu_job(A, gpus=2)
    result = w.scheduler.run_pass()
    assert result.preempting == [borrowed[0].job_id]
    got = w.repo.get(borrowed[0].job_id)
    assert got.pending_reason == (
        f"reclaimed by team a for job {mine.job_id}: team b borrowed beyond its nominal H100 quota "
        "(work lost 1200 GPU-s since its last checkpoint)"
    )
    assert [r.rule for _, r in w.repo.reclaims] == [RECLAIM_RULE]


def test_a_job_without_a_team_is_served_as_the_default_teams() -> None:
    w = _world(2, team("a", A, H100=2), team("default", H100=2))
    job = w.gpu_job(C)
    w.repo.update(job.job_id, w.repo.get(job.job_id).version, {"team": None})  # submitted before teams existed
    w.scheduler.run_pass()
    assert w.started() == [job.job_id]


def test_a_job_refused_on_its_borrow_limit_reclaims_nothing() -> None:
    w, _ = _borrowers_world()
    w.clock.now += timedelta(hours=1)
    w.teams.put(team("b", B, H100={"nominal": 0, "borrow_limit": 0}), 1)  # b may not borrow any more: QUOTA
    w.gpu_job(B)
    result = w.scheduler.run_pass()
    assert (result.preempting, result.waiting) == ([], 1)


def test_a_budget_hold_behind_a_refused_job_adds_to_the_waiting_count() -> None:
    admission = HoldOne()
    w = _world(2, team("a", A, H100=2), team("b", B, H100=0), admission=admission)
    w.gpu_job(B, priority=9)  # QUOTA: b may not borrow
    held, free = w.gpu_job(A), w.gpu_job(A)
    admission.held = held.job_id
    result = w.scheduler.run_pass()
    assert (w.started(), result.waiting) == ([free.job_id], 2)


def test_a_job_a_concurrent_pass_claimed_is_passed_over_and_the_next_one_served() -> None:
    w = _world(2, team("a", A, H100=2))
    taken, next_one = w.gpu_job(A), w.gpu_job(A)
    assert w.ledger.claim("local/H100", taken.job_id, 1, 2)  # a racing pass claimed it and is starting it
    w.scheduler.run_pass()
    assert w.started() == [next_one.job_id]


def test_a_team_hold_a_racing_pass_filled_refuses_its_job_and_the_next_team_is_served() -> None:
    w = _world(2, team("a", A, H100={"nominal": 2}), team("b", B, H100={"nominal": 2}))
    w.ledger.teams_held[("a", "H100")] = {"elsewhere": 2}  # a racing pass admitted a's 2 units in another pool
    w.teams.put(team("c", C, H100=0), None)
    w.gpu_job(C, priority=9)  # first in order: QUOTA (c may not borrow)
    refused, other = w.gpu_job(A, gpus=2), w.gpu_job(B, gpus=2)
    result = w.scheduler.run_pass()
    assert (w.started(), result.waiting) == ([other.job_id], 2)
    assert refused.job_id not in w.started()


def test_with_nothing_to_reclaim_a_higher_priority_job_preempts_its_own_teams_lower_one() -> None:
    w = _world(1, team("a", A, H100=2))
    low = w.gpu_job(A, priority=1)
    w.repo.update(low.job_id, low.version, {"scheduling_config": low.scheduling_config.model_copy(update={"preemptible": True})})
    w.scheduler.run_pass()
    low = _training(w, low)
    urgent = w.gpu_job(A, priority=9)
    result = w.scheduler.run_pass()
    assert result.preempting == [low.job_id]
    assert w.repo.get(low.job_id).pending_reason == f"preempted by higher-priority job {urgent.job_id} (priority 9 > 1)"


def test_a_lender_skips_its_own_jobs_and_an_orphan_claim_and_reclaims_a_single_borrowed_gpu() -> None:
    w = _world(5, team("a", A, H100={"nominal": 4}), team("b", B, H100={"nominal": 0, "borrow_limit": 4}))
    assert w.ledger.claim("local/H100", "job-deleted", 1, 5)  # a claim whose job is gone (the reconciler's business)
    mine_running = w.gpu_job(A)
    w.scheduler.run_pass()
    borrowed = w.gpu_job(B)
    w.scheduler.run_pass()
    _training(w, mine_running)
    borrowed = _training(w, borrowed)
    w.clock.now += timedelta(hours=1)
    w.gpu_job(A, gpus=3)  # a within nominal (1 + 3 = 4); 2 free: b's 1 borrowed GPU must come back
    assert w.scheduler.run_pass().preempting == [borrowed.job_id]


def test_a_job_that_another_writer_changed_gives_its_claim_back_and_the_next_one_starts() -> None:
    w = _world(1, team("a", A, H100=2))
    changed, next_one = w.gpu_job(A), w.gpu_job(A)
    transition = w.repo.transition

    def racing(t: Transition) -> Job:
        if t.job_id == changed.job_id:
            raise ConcurrentModification(t.job_id)  # cancelled or edited after the pass read it
        return transition(t)

    w.repo.transition = racing  # type: ignore[method-assign]
    w.scheduler.run_pass()
    assert w.ledger.holders("local/H100") == {next_one.job_id: 1}
    assert w.started() == [next_one.job_id]


def test_two_victims_on_their_way_back_are_both_counted_by_the_next_pass() -> None:
    w, running = _borrowers_world()
    w.clock.now += timedelta(hours=1)
    w.gpu_job(B, gpus=2)  # b's share with it 2, a's 4: two of a's 1-GPU jobs by the first rule
    assert w.scheduler.run_pass().preempting == [running[0].job_id, running[1].job_id]
    assert w.scheduler.run_pass().preempting == []  # both units are on their way back: nobody else


def test_a_reclaim_under_way_asks_no_priority_preemption_as_well() -> None:
    # a (nominal 4) runs a low-priority preemptible 3-GPU job; b borrows the fourth GPU
    w = _world(4, team("a", A, H100={"nominal": 4}), team("b", B, H100={"nominal": 0, "borrow_limit": 4}))
    low = w.gpu_job(A, gpus=3, priority=1)
    low = w.repo.update(low.job_id, low.version, {"scheduling_config": low.scheduling_config.model_copy(update={"preemptible": True})})
    borrowed = w.gpu_job(B)
    w.scheduler.run_pass()
    low, borrowed = _training(w, low), _training(w, borrowed)
    w.clock.now += timedelta(hours=1)
    w.gpu_job(A, priority=9)  # within a's nominal: the borrowed GPU comes back; a's own job keeps running
    assert w.scheduler.run_pass().preempting == [borrowed.job_id]
    assert w.scheduler.run_pass().preempting == []  # the reclaimed GPU is on its way back: still nothing more
    assert w.repo.get(low.job_id).pending_action is None


# --- a team's later jobs in the same pass, and which holders' units a reclaim counts as on their way back ---


def test_a_borrowers_later_larger_job_behind_its_refused_one_asks_no_reclaim_of_its_own() -> None:
    w, running = _borrowers_world()
    w.clock.now += timedelta(hours=1)
    first, larger = w.gpu_job(B), w.gpu_job(B, gpus=2)  # both COHORT_FULL; a's share (4) above b's with either
    result = w.scheduler.run_pass()
    # The first job's reclaim takes one of a's jobs back; the 2-GPU job waits behind it (FIFO inside a team)
    # and asks nothing: on the pass's snapshot it would pick that same victim again and one more of a's jobs
    assert (result.preempting, result.waiting) == ([running[0].job_id], 2)
    assert [r.beneficiary_job_id for _, r in w.repo.reclaims] == [first.job_id]
    assert [w.repo.get(j.job_id).pending_action for j in running[1:]] == [None, None, None]
    assert larger.job_id not in w.started()


def test_a_team_whose_hold_a_racing_pass_filled_starts_none_of_its_later_smaller_jobs() -> None:
    w = _world(4, team("a", A, H100={"nominal": 2}))
    w.ledger.teams_held[("a", "H100")] = {"elsewhere": 1}  # a racing pass admitted 1 of a's 2 units in another pool
    refused, smaller = w.gpu_job(A, gpus=2), w.gpu_job(A)  # the hold refuses the first; the second would fit it
    result = w.scheduler.run_pass()
    # Behind its refused job a team's later ones wait too (FIFO inside a team), though the pool has room
    assert (w.started(), result.waiting) == ([], 2)
    assert w.ledger.holders("local/H100") == {}
    assert {refused.job_id, smaller.job_id}.isdisjoint(w.started())


def _keyed(w: TeamWorld) -> None:
    """Reads as the DynamoDB repository does: its key is `JOB#` + the id, so a read without an id is an error
    (the in-memory dict would answer JobNotFound, as for a deleted job)."""
    get = w.repo.get

    def keyed(job_id: str) -> Job:
        if not isinstance(job_id, str):
            raise TypeError(f"a job id is a string, not {job_id!r}")
        return get(job_id)

    w.repo.get = keyed  # type: ignore[method-assign]


def test_a_reclaim_after_a_start_in_the_same_pass_reads_the_new_holder_and_skips_it() -> None:
    w = _world(4, team("a", A, H100={"nominal": 3}), team("b", B, H100={"nominal": 0, "borrow_limit": 4}))
    borrowed = [w.gpu_job(B) for _ in range(3)]
    w.scheduler.run_pass()
    borrowed = [_training(w, j) for j in borrowed]
    w.clock.now += timedelta(hours=1)
    _keyed(w)
    first, second = w.gpu_job(A), w.gpu_job(A)
    # The first takes the free GPU (a claim the pass's snapshot does not hold); the second, within a's nominal,
    # finds the pool full and reclaims one of b's: the new holder is read by its id and, a's own, skipped
    result = w.scheduler.run_pass()
    assert (w.started()[3:], result.preempting, result.waiting) == ([first.job_id], [borrowed[0].job_id], 1)
    assert [r.beneficiary_job_id for _, r in w.repo.reclaims] == [second.job_id]


def test_a_priority_preemption_under_way_in_a_team_within_nominal_is_not_counted_for_a_reclaim() -> None:
    # a and c within nominal (2 each); b borrows 3 GPUs, c runs a low-priority preemptible job on the fourth
    w = _world(
        4, team("a", A, H100={"nominal": 2}), team("b", B, H100={"nominal": 0, "borrow_limit": 4}), team("c", C, H100={"nominal": 2})
    )
    borrowed = [w.gpu_job(B) for _ in range(3)]
    low = w.gpu_job(C, priority=1)
    w.repo.update(low.job_id, low.version, {"scheduling_config": low.scheduling_config.model_copy(update={"preemptible": True})})
    w.scheduler.run_pass()
    borrowed, low = [_training(w, j) for j in borrowed], _training(w, low)
    # c's urgent job arrives before b's jobs have run their minimum: nothing to reclaim, c's low job is preempted
    w.clock.now += timedelta(minutes=1)
    urgent = w.gpu_job(C, priority=7)
    assert w.scheduler.run_pass().preempting == [low.job_id]
    # Then a's 2-GPU job: low's GPU is on its way back to c's urgent job, not to a, so two of b's come back
    w.clock.now += timedelta(hours=1)
    mine = w.gpu_job(A, gpus=2, priority=9)
    result = w.scheduler.run_pass()
    assert result.preempting == [borrowed[0].job_id, borrowed[1].job_id]
    assert {r.beneficiary_job_id for _, r in w.repo.reclaims} == {mine.job_id}
    assert w.repo.get(borrowed[2].job_id).pending_action is None
    assert urgent.job_id not in w.started()


def test_a_borrowers_own_job_on_its_way_to_a_lender_is_not_counted_for_its_fair_sharing_reclaim() -> None:
    # 8 H100s, all c's (nominal 8), lent: a borrows 5, b borrows 3 and has used the most by far
    w = _world(
        8,
        team("a", A, H100={"nominal": 0, "borrow_limit": 8}),
        team("b", B, H100={"nominal": 0, "borrow_limit": 8}),
        team("c", C, H100={"nominal": 8}),
    )
    a_jobs = [w.gpu_job(A) for _ in range(5)]
    b_jobs = [w.gpu_job(B) for _ in range(3)]
    w.scheduler.run_pass()
    a_jobs, b_jobs = [_training(w, j) for j in a_jobs], [_training(w, j) for j in b_jobs]
    w.clock.now += timedelta(hours=1)
    w.teams.add_usage("b", 1000.0, w.clock.now, w.directory.half_life_seconds)
    # c takes one GPU back: from b, the borrower with the most usage
    lender = w.gpu_job(C)
    assert w.scheduler.run_pass().preempting == [b_jobs[0].job_id]
    # b's urgent job: COHORT_FULL, and a's share (5) is above b's with it (4). b's GPU on its way back is c's,
    # not b's: by fair sharing one of a's jobs comes back for it (and c's job still counts b's GPU as incoming)
    urgent = w.gpu_job(B, priority=9)
    result = w.scheduler.run_pass()
    assert result.preempting == [a_jobs[0].job_id]
    assert [(r.beneficiary_job_id, r.team) for _, r in w.repo.reclaims] == [(lender.job_id, "b"), (urgent.job_id, "a")]
    assert [w.repo.get(j.job_id).pending_action for j in a_jobs[1:]] == [None] * 4


def test_a_pass_reads_the_teams_once_and_builds_its_cohort_from_that_read() -> None:
    # Given two teams with queued jobs, and the directory's reads of every team counted
    w = _world(2, team("a", A, H100=1), team("b", B, H100=1))
    w.gpu_job(A), w.gpu_job(B)
    reads: list[int] = []
    every_team = w.directory.teams

    def counted() -> dict[str, Team]:
        reads.append(1)
        return every_team()

    w.directory.teams = counted  # type: ignore[method-assign]
    # When a pass runs
    w.scheduler.run_pass()
    # Then the teams were read once: the cohort is built from the pass's own read, not a second one
    assert len(reads) == 1 and len(w.started()) == 2
