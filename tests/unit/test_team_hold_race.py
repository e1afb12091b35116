"""A team's quota is a conditional write, not a pass's opinion (issue 24's "done when"): two scheduler passes
that both read the cohort before either admitted anything never take a team beyond its nominal quota plus its
borrow limit; the ledger's claim carries the team's hold (functions/service/ports.py TeamHold)."""

from __future__ import annotations

from functions.service.ports import Transition
from functions.service.scheduler import CloudCapacity, Scheduler
from schemas.job import Job
from schemas.status import JobStatus
from tests.helpers.races import StaleRead
from tests.helpers.teams import team
from tests.unit.test_scheduler_teams import A, B, TeamWorld


def _world() -> TeamWorld:
    # Two queues, each its own H100 pool without a quota of its own: the team's hold is the only limit
    w = TeamWorld(0, team("a", A, H100={"nominal": 8}), team("b", B, H100={"nominal": 0, "borrow_limit": 2}), default_team_quotas="H100=0")
    w.scheduler = Scheduler(w.repo, w.ledger, CloudCapacity(), w.rec, w.rec, teams=w.directory)
    return w


def _queued(w: TeamWorld, owner: str, queue: str, gpus: int) -> Job:
    job = w.waiting(queue, resource_config={"gpu_count": gpus, "gpu_type": "H100"})
    return w.repo.update(job.job_id, job.version, {"team": w.directory.team_of(owner).name})


def _running(w: TeamWorld, job: Job) -> None:
    job = w.repo.get(job.job_id)
    for to in (JobStatus.PREPARING, JobStatus.TRAINING):
        job = w.repo.transition(Transition(job.job_id, job.version, job.status, to, "test"))


def test_two_passes_on_one_read_admit_one_borrower_within_the_borrow_limit() -> None:
    w = _world()
    # Given team a holding 1 H100 in each queue's pool (both pools exist), and b (borrow limit 2) with a 2-GPU
    # job waiting in each queue: each alone fits b's limit, both would not
    for queue in ("q1", "q2"):
        held = _queued(w, A, queue, 1)
        w.scheduler.run_pass([queue])
        _running(w, held)
    first, second = _queued(w, B, "q1", 2), _queued(w, B, "q2", 2)
    # When a pass over q1 and one over q2 both decide on the holdings as they were before either claimed
    outcomes = StaleRead(w.ledger, "holders").run(lambda: w.scheduler.run_pass(["q1"]), lambda: w.scheduler.run_pass(["q2"]))
    # Then exactly one of b's jobs starts: the other's claim is refused by b's hold, not by its pool
    started = [job_id for o in outcomes for job_id in o.value.started]
    assert started == [first.job_id]
    assert w.repo.get(second.job_id).status == JobStatus.QUEUED
    assert w.ledger.team_holders("b", "H100") == {first.job_id: 2}
    assert outcomes[1].value.waiting == 1 and outcomes[1].value.preempting == []


def test_a_release_gives_the_units_back_to_the_team_hold() -> None:
    w = _world()
    job = _queued(w, B, "q1", 2)
    w.scheduler.run_pass()
    assert w.ledger.team_holders("b", "H100") == {job.job_id: 2}
    # When its capacity is released (the run ended), b may borrow again
    assert w.scheduler.release(w.repo.get(job.job_id))
    assert w.ledger.team_holders("b", "H100") == {}
    again = _queued(w, B, "q2", 2)
    assert w.scheduler.run_pass().started == [again.job_id]
