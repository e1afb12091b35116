"""Kueue's two fair-sharing rules (issue 24.3): a borrower preempts another team's borrowing only while its share
with the job stays <= the target's share without it (LessThanOrEqualToFinalShare), else only while it is below
the target's share with it (LessThanInitialShare); never so that the target could preempt back."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import example, given, settings
from hypothesis import strategies as st

from functions.service.fair_share import Ask, Cohort, FairSharingRule, Holder, fair_sharing_victims
from functions.service.ports import Transition
from functions.service.scheduler import LocalCapacity
from schemas.job import PendingAction
from schemas.status import JobStatus
from schemas.teams import Team, WaitReason
from tests.helpers.teams import team
from tests.unit.test_scheduler_reclaim import _holder, _training
from tests.unit.test_scheduler_teams import A, B, C, TeamWorld

FINAL, INITIAL = FairSharingRule.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE, FairSharingRule.LESS_THAN_INITIAL_SHARE


def _cohort(*teams: Team, held: list[tuple[str, int]]) -> tuple[Cohort, list[Holder]]:
    cohort = Cohort(teams={t.name: t for t in teams})
    holders = [_holder(i, name, units, float(i)) for i, (name, units) in enumerate(held)]
    for h in holders:
        cohort.hold(h.ask)
    return cohort, holders


def _teams(a_weight: float = 1.0) -> tuple[Team, ...]:
    return (
        team("a", weight=a_weight, H100={"nominal": 0, "borrow_limit": 8}),
        team("b", H100={"nominal": 0, "borrow_limit": 8}),
        team("c", H100={"nominal": 8}),
    )


def test_the_first_rule_takes_from_a_team_whose_share_stays_at_or_above_the_preemptors() -> None:
    # Given a borrowing 6 units of c's idle 8 in three jobs, b borrowing nothing
    cohort, holders = _cohort(*_teams(), held=[("a", 2), ("a", 2), ("a", 2)])
    # When b asks for 2 (its share with the job: 2) and 2 units must be freed
    victims, rule = fair_sharing_victims(Ask("b", "H100", 2, "ben"), holders, 2, cohort)
    # Then one of a's jobs (a keeps a share of 4 >= 2), by the first rule, the one losing least work
    assert rule == FINAL and [v.job.job_id for v in victims] == [holders[0].job.job_id]


def test_the_second_rule_applies_only_when_the_first_frees_too_little() -> None:
    # Given a borrowing 3 units in one job: without it a's share would be 0 < b's 2 (the first rule refuses)
    cohort, holders = _cohort(*_teams(), held=[("a", 3)])
    victims, rule = fair_sharing_victims(Ask("b", "H100", 2, "ben"), holders, 2, cohort)
    # Then the second rule takes it: b's share with its job (2) is below a's with the job (3)
    assert rule == INITIAL and victims == holders


def test_neither_rule_takes_from_a_team_whose_share_is_not_above_the_preemptors() -> None:
    # Equal shares (2 and 2): nothing, even where b would be served first (it has used less: a higher factor);
    # a heavier weight makes a's share smaller than b's: nothing either
    cohort, holders = _cohort(*_teams(), held=[("a", 2)])
    assert fair_sharing_victims(Ask("b", "H100", 2, "ben"), holders, 2, cohort) == ([], None)
    cohort.usage = {"a": 10.0, "b": 0.0}
    assert fair_sharing_victims(Ask("b", "H100", 2, "ben"), holders, 2, cohort) == ([], None)
    cohort, holders = _cohort(*_teams(a_weight=4.0), held=[("a", 2), ("a", 2), ("a", 2)])
    assert fair_sharing_victims(Ask("b", "H100", 2, "ben"), holders, 2, cohort) == ([], None)
    # And never from a team within its nominal quota (c holding its own)
    cohort, holders = _cohort(*_teams(), held=[("c", 4), ("a", 2)])
    assert fair_sharing_victims(Ask("b", "H100", 1, "ben"), holders, 4, cohort) == ([], None)


def _borrowed_world() -> TeamWorld:
    """c's 8 idle H100s all borrowed by a (4 jobs of 2), training for more than the minimum run time."""
    w = TeamWorld(0, *_teams(), default_team_quotas="H100=0")
    w.teams.put(team("a", A, H100={"nominal": 0, "borrow_limit": 8}), w.teams.get("a").version)
    w.teams.put(team("b", B, H100={"nominal": 0, "borrow_limit": 8}), w.teams.get("b").version)
    w.teams.put(team("c", C, H100={"nominal": 8}), w.teams.get("c").version)
    w.scheduler = type(w.scheduler)(w.repo, w.ledger, LocalCapacity(gpu_slots=0, inventory={"H100": 8}), w.rec, w.rec, teams=w.directory)
    borrowed = [w.gpu_job(A, gpus=2) for _ in range(4)]
    w.scheduler.run_pass()
    for job in borrowed:
        _training(w, job)
    w.clock.now += timedelta(minutes=11)
    return w


def test_the_scheduler_preempts_a_bigger_borrower_for_a_smaller_one_through_the_checkpointed_pause() -> None:
    # Given c's 8 idle H100s all borrowed by a (4 jobs of 2) for more than the minimum run time
    w = _borrowed_world()
    # When b asks for 2
    mine = w.gpu_job(B, gpus=2)
    result = w.scheduler.run_pass()
    # Then exactly one of a's jobs is paused through the checkpointed path, by the first rule
    assert len(result.preempting) == 1
    victim = w.repo.get(result.preempting[0])
    assert victim.pending_action == PendingAction.PREEMPT and victim.reclaims == 1
    assert f"reclaimed by team b for job {mine.job_id}" in (victim.pending_reason or "") and "fair sharing" in (victim.pending_reason or "")
    assert [r.rule for _, r in w.repo.reclaims] == [FINAL.value]
    assert w.explain(mine) == WaitReason.COHORT_FULL
    # and a pass while it checkpoints asks nothing more of anyone
    assert w.scheduler.run_pass().preempting == []


@settings(deadline=None, max_examples=300)
# Kueue's second rule asked of each pick in turn would take a's 1 and 5 for b's 6 (b's share 7 < a's 9, then < 8),
# leaving a at 3: a taking its 1 back (share 4) could then preempt b's other job under the first rule.
@example(nominal=[0, 0, 0], weights=[1.0, 1.0, 1.0], held=[(0, 1), (0, 5), (0, 3), (1, 1)], waiting_team=1, units=6, needed=6)
@given(
    nominal=st.lists(st.integers(0, 4), min_size=3, max_size=3),
    weights=st.lists(st.sampled_from([0.5, 1.0, 2.0, 3.0]), min_size=3, max_size=3),
    held=st.lists(st.tuples(st.integers(0, 2), st.integers(1, 4)), max_size=12),
    waiting_team=st.integers(0, 2),
    units=st.integers(1, 4),
    needed=st.integers(1, 8),
)
def test_fair_sharing_never_lets_a_victims_team_preempt_back(
    nominal: list[int], weights: list[float], held: list[tuple[int, int]], waiting_team: int, units: int, needed: int
) -> None:
    names = ["a", "b", "c"]
    teams = [team(n, weight=wt, H100={"nominal": q, "borrow_limit": 100}) for n, q, wt in zip(names, nominal, weights, strict=True)]
    cohort, holders = _cohort(*teams, held=[(names[t], u) for t, u in held])
    ask = Ask(names[waiting_team], "H100", units, "waiter")
    victims, rule = fair_sharing_victims(ask, holders, needed, cohort)
    if not victims:
        assert rule is None
        return
    # Victims: other teams' jobs, from teams beyond nominal, enough of them, each allowed by the rule
    preemptor = cohort.share(ask.team, "H100", units)
    assert all(v.ask.team != ask.team for v in victims) and sum(v.units for v in victims) >= needed
    for v in victims:
        lost = sum(x.units for x in victims if x.ask.team == v.ask.team)
        final = cohort.share(v.ask.team, "H100", -lost)
        assert preemptor <= final if rule == FINAL else preemptor < cohort.share(v.ask.team, "H100", -lost + v.units)
    # After it, no victim's team asking for that job back may take anything from the preemptor's team
    after = Cohort(teams=cohort.teams)
    remaining = [h for h in holders if h not in victims]
    for h in remaining:
        after.hold(h.ask)
    after.hold(ask)
    beneficiary = Holder(holders[0].job.model_copy(update={"job_id": "beneficiary"}), ask, units, 0.0)
    for v in victims:
        back, _ = fair_sharing_victims(v.ask, [*remaining, beneficiary], v.units, after)
        assert all(h.ask.team != ask.team for h in back)


def test_a_borrower_preempts_only_jobs_it_would_be_served_before() -> None:
    # Given a borrowing 6 units in three jobs, b borrowing nothing: the first rule would take one of a's jobs for b
    cohort, holders = _cohort(*_teams(), held=[("a", 2), ("a", 2), ("a", 2)])
    # When b has used so much more than a that its 2-GPU job (1 borrowed halfway, per weight x F) ranks after
    # a's preempted job back in the queue (a borrowing 4 + 1 halfway through it, per weight x a's F)
    cohort.usage = {"a": 1.0, "b": 100.0}
    factors = cohort.factors()
    assert 1 / factors["b"] > 5 / factors["a"]
    # Then b takes nothing: the room would go back to a's job in the next pass, and b would preempt again
    assert fair_sharing_victims(Ask("b", "H100", 2, "ben"), holders, 2, cohort) == ([], None)
    # Equal factors: b ranks first (1 against 5): the share rules decide, and allow it
    cohort.usage = {"a": 10.0, "b": 10.0}
    assert fair_sharing_victims(Ask("b", "H100", 2, "ben"), holders, 2, cohort)[1] == FINAL
    # A higher priority class is served first whatever the factors; a lower one never preempts a higher one
    cohort.usage = {"a": 1.0, "b": 100.0}
    assert fair_sharing_victims(Ask("b", "H100", 2, "ben", priority=6), holders, 2, cohort)[1] == FINAL
    cohort.usage = {"a": 10.0, "b": 10.0}
    assert fair_sharing_victims(Ask("b", "H100", 2, "ben", priority=4), holders, 2, cohort) == ([], None)


def test_a_team_under_its_nominal_quota_preempts_borrowers_whatever_its_factor() -> None:
    # Given b with a nominal of 1 it does not use and the highest usage (the lowest factor), a borrowing 6
    teams = (team("a", H100={"nominal": 0, "borrow_limit": 8}), team("b", H100={"nominal": 1, "borrow_limit": 8}), team("c", H100=8))
    cohort, holders = _cohort(*teams, held=[("a", 2), ("a", 2), ("a", 2)])
    cohort.usage = {"a": 10.0, "b": 50.0}
    # When b's 3-unit job takes it beyond nominal (an overshoot: served before every borrower)
    victims, rule = fair_sharing_victims(Ask("b", "H100", 3, "ben"), holders, 2, cohort)
    # Then it preempts by the share rules alone
    assert rule == FINAL and [v.job.job_id for v in victims] == [holders[0].job.job_id]


def test_a_fair_sharing_preemption_happens_only_where_the_room_goes_to_the_preemptor() -> None:
    # Given c's 8 H100s lent: a borrows all 8 (4 jobs of 2) and keeps one more queued
    w = _borrowed_world()
    more = w.gpu_job(A, gpus=2)
    # When b, which has used far more than a (its weight x F under a seventh of a's), asks for 2: a's job back in
    # the queue (a borrowing 6 + 1 halfway through it) would rank before b's (1 halfway through it)
    w.teams.add_usage("b", 5000.0, w.clock.now, w.directory.half_life_seconds)
    mine = w.gpu_job(B, gpus=2)
    # Then b preempts nothing (the room would go to a's queued job, and b would preempt again, pass after pass)
    assert w.scheduler.run_pass().preempting == []
    assert w.explain(mine) == WaitReason.COHORT_FULL
    # When a's usage grows past b's: b is served first, and preempts one of a's jobs
    w.teams.add_usage("a", 20000.0, w.clock.now, w.directory.half_life_seconds)
    preempting = w.scheduler.run_pass().preempting
    assert len(preempting) == 1
    victim = w.repo.get(preempting[0])
    w.scheduler.release(victim)
    requeued = w.repo.update(victim.job_id, victim.version, {"pending_action": None})
    requeued = w.repo.transition(Transition(victim.job_id, requeued.version, requeued.status, JobStatus.QUEUED, "reclaimed"))
    w.repo.update(victim.job_id, requeued.version, {"task_token": f"tok-{victim.job_id}", "task_token_kind": "capacity"})
    # Then the room its checkpointed stop gives back goes to b's job, not to a's queued one nor to the victim
    result = w.scheduler.run_pass()
    assert result.started == [mine.job_id] and result.preempting == []
    assert w.repo.get(more.job_id).status == w.repo.get(victim.job_id).status == JobStatus.QUEUED


def test_a_borrower_never_preempts_a_job_that_ties_with_it_back_in_the_queue() -> None:
    # Given a borrowing 3 in one job, b borrowing 1 and asking 1 more, equal weights and factors: the second rule
    # would allow it (b's share with the job, 2, is below a's with its job, 3)
    cohort, holders = _cohort(*_teams(), held=[("a", 3), ("b", 1)])
    # but back in the queue a's job (1.5 borrowed halfway through it) ties with b's (1 + 0.5): FIFO would give
    # the room back to a's older job. Then nothing is taken
    assert fair_sharing_victims(Ask("b", "H100", 1, "ben"), holders, 1, cohort) == ([], None)


def test_a_higher_priority_borrower_still_never_takes_a_job_of_a_team_within_its_nominal_quota() -> None:
    # Given c within its nominal (4 of 8) and a borrowing 2: b's urgent job (priority 6, served before any of
    # theirs) needs 4
    cohort, holders = _cohort(*_teams(), held=[("c", 4), ("a", 2)])
    # Then not c's job (its own quota), and a's 2 are too few: nothing is taken
    assert fair_sharing_victims(Ask("b", "H100", 1, "ben", priority=6), holders, 4, cohort) == ([], None)
    # while 2 needed are a's (the higher priority is served first)
    victims, _ = fair_sharing_victims(Ask("b", "H100", 1, "ben", priority=6), holders, 2, cohort)
    assert [v.ask.team for v in victims] == ["a"]


def test_each_victim_is_weighed_with_its_team_less_only_the_jobs_chosen_before_it() -> None:
    # Given a borrowing 8 in four jobs of 2, b asking 2 and 6 to be freed: three of a's jobs, the third leaving
    # a at exactly b's share with its job (2), which the first rule allows
    cohort, holders = _cohort(*_teams(), held=[("a", 2), ("a", 2), ("a", 2), ("a", 2)])
    victims, rule = fair_sharing_victims(Ask("b", "H100", 2, "ben"), holders, 6, cohort)
    # Then three, by the first rule: weighing the candidates of one step does not count any of them as gone
    assert rule == FINAL and [v.job.job_id for v in victims] == [h.job.job_id for h in holders[:3]]
