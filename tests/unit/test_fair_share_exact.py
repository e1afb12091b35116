"""Fair share's rules pinned value by value (functions/service/fair_share.py; `make mutation`'s fair_share module).

Each test names the decision it pins: a quota's missing type, a limit as a percentage, a member cap at exactly
its value, a team back within nominal, the weighted share that orders reclaim and fair-sharing victims, the
lenders' split of what borrowers hold. The scheduler's own tests reach these rules through a pass; these read
the answers themselves.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

import pytest

from functions.catalog.gpu_types import unit_hourly_usd
from functions.service.fair_share import (
    Ask,
    Cohort,
    FairSharingRule,
    Holder,
    Standing,
    _Order,
    admission_order,
    factor,
    fair_sharing_victims,
    reclaim_victims,
    work_lost,
)
from functions.service.ports import TeamHold
from schemas.job import CheckpointRef, Job
from schemas.teams import Team, WaitReason
from tests.helpers.teams import team
from tests.lifecycle_support import make_job, make_request

T0 = datetime(2026, 1, 1, tzinfo=UTC)
FINAL, INITIAL = FairSharingRule.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE, FairSharingRule.LESS_THAN_INITIAL_SHARE


def _job(n: int, team_name: str | None = None, *, gpus: int = 1, reclaimable: bool = True, gpu_type: str = "H100") -> Job:
    request = make_request(
        f"j{n}", resource_config={"gpu_count": gpus, "gpu_type": gpu_type}, scheduling_config={"reclaimable": reclaimable}
    )
    return make_job(request, created_at=T0 + timedelta(seconds=n)).model_copy(update={"team": team_name})


def _holder(n: int, team_name: str, units: int, lost: float, *, gpu_type: str = "H100") -> Holder:
    return Holder(_job(n, team_name), Ask(team_name, gpu_type, units, f"owner-{n}"), units, lost)


def _cohort(*teams: Team, held: Iterable[Holder] = (), usage: dict[str, float] | None = None) -> Cohort:
    cohort = Cohort(teams={t.name: t for t in teams}, usage=usage or {})
    for h in held:
        cohort.hold(h.ask)
    return cohort


def _ids(holders: list[Holder]) -> list[str]:
    return [h.job.job_id for h in holders]


# --- the factor, the ask, holding ---------------------------------------------------------------


def test_the_factor_counts_any_usage_and_needs_a_weight() -> None:
    assert factor(0.5, 0.5, 1.0, 2.0) == 0.25  # a total usage under one unit still counts
    assert factor(1.0, 2.0, 0.0, 0.0) == 1.0  # no weight at all: everyone at 1, not a division by zero


def test_an_ask_is_the_jobs_team_type_units_owner_and_reclaimability() -> None:
    job = _job(1, None, gpus=2, reclaimable=False)
    assert Ask.of(job, "dflt") == Ask("dflt", "H100", 2, job.owner, False)
    assert Ask.of(job.model_copy(update={"team": "a"}), "dflt").team == "a"
    urgent = job.model_copy(update={"scheduling_config": job.scheduling_config.model_copy(update={"priority": 9})})
    assert Ask.of(urgent, "dflt").priority == 9


def test_holding_adds_units_and_one_job_per_hold_for_the_member() -> None:
    cohort = _cohort(team("a", H100=8))
    cohort.hold(Ask("a", "H100", 3, "ann"))
    cohort.hold(Ask("a", "H100", 2, "ann"))
    assert (cohort.in_use[("a", "H100")], cohort.member_units["ann"], cohort.member_jobs["ann"]) == (5, 5, 2)


# --- quotas ---------------------------------------------------------------------------------------


def test_a_type_without_a_quota_has_nothing_nominal_borrowable_or_lendable() -> None:
    cohort = _cohort(team("a", H100=4))
    assert (cohort.nominal("a", "T4"), cohort.borrow_limit("a", "T4"), cohort.lendable("a", "T4")) == (0, 0, 0)


def test_a_percentage_borrow_limit_is_of_nominal() -> None:
    cohort = _cohort(team("a", H100={"nominal": 4, "borrow_limit": "50%"}))
    assert cohort.borrow_limit("a", "H100") == 2


def test_a_team_over_its_nominal_lends_nothing() -> None:
    cohort = _cohort(team("a", H100={"nominal": 4, "borrow_limit": 4}), held=[_holder(1, "a", 6, 0.0)])
    assert cohort.lendable("a", "H100") == 0


def test_the_hold_a_claim_enforces_is_nominal_plus_borrow_limit_only_for_a_reclaimable_job() -> None:
    cohort = _cohort(team("a", H100={"nominal": 4, "borrow_limit": 2}))
    assert cohort.hold_for(Ask("a", "H100", 1, "ann")) == TeamHold("a", "H100", 6)
    assert cohort.hold_for(Ask("a", "H100", 1, "ann", reclaimable=False)) == TeamHold("a", "H100", 4)


def _deficit_cohort(a_holds: int) -> Cohort:
    # b borrows 4 units; c lends at most 2 of its idle 4: the lenders are 2 short before a borrows anything
    teams = (
        team("a", H100={"nominal": 4, "borrow_limit": 8}),
        team("b", H100={"nominal": 0, "borrow_limit": 8}),
        team("c", H100={"nominal": 4, "lend_limit": 2}),
    )
    return _cohort(*teams, held=[_holder(1, "b", 4, 0.0), *([_holder(2, "a", a_holds, 0.0)] if a_holds else [])])


def test_the_cohort_deficit_is_nothing_within_nominal_and_what_others_borrow_beyond_what_is_lent() -> None:
    assert _deficit_cohort(1).cohort_deficit(Ask("a", "H100", 2, "ann")) == 0  # within nominal
    assert _deficit_cohort(2).cohort_deficit(Ask("a", "H100", 2, "ann")) == 0  # exactly at nominal
    assert _deficit_cohort(3).cohort_deficit(Ask("a", "H100", 2, "ann")) == 3  # one beyond: 4 + 1 - 2


def _share_cohort(a_holds: int, b_holds: int) -> Cohort:
    teams = (
        team("a", H100={"nominal": 4, "borrow_limit": 8}),
        team("b", H100={"nominal": 0, "borrow_limit": 8}),
        team("c", H100=16),
    )
    return _cohort(*teams, held=[_holder(1, "a", a_holds, 0.0), _holder(2, "b", b_holds, 0.0)])


def test_others_borrow_more_compares_with_the_askers_share_after_the_job() -> None:
    assert not _share_cohort(6, 2).others_borrow_more(Ask("a", "H100", 1, "ann"))  # a's 3 against b's 2
    assert not _share_cohort(6, 3).others_borrow_more(Ask("a", "H100", 2, "ann"))  # a's 4 against b's 3
    assert not _share_cohort(6, 4).others_borrow_more(Ask("a", "H100", 2, "ann"))  # equal shares: not more
    assert _share_cohort(6, 5).others_borrow_more(Ask("a", "H100", 2, "ann"))


def test_a_member_cap_admits_exactly_its_value() -> None:
    capped = Team.model_validate({"name": "a", "quotas": {"H100": {"nominal": 8}}, "member_caps": {"max_gpus": 4}})
    cohort = _cohort(capped)
    cohort.hold(Ask("a", "H100", 2, "ann"))
    assert cohort.refusal(Ask("a", "H100", 2, "ann")) is None
    assert cohort.refusal(Ask("a", "H100", 3, "ann")) == WaitReason.QUOTA


def test_factors_count_a_team_without_usage_as_unused() -> None:
    cohort = _cohort(team("a", H100=4), team("b", H100=4), usage={"a": 10.0})
    assert cohort.factors() == {"a": 0.25, "b": 1.0}


def test_lenders_share_what_borrowers_hold_by_what_each_lends_rounded_down() -> None:
    teams = (team("l1", H100=6), team("l2", H100=2), team("b", H100={"nominal": 0, "borrow_limit": 8}))
    cohort = _cohort(*teams, held=[_holder(1, "b", 3, 0.0)])
    assert (cohort.lent("l1", "H100"), cohort.lent("l2", "H100"), cohort.lent("b", "H100")) == (2, 0, 0)
    assert isinstance(cohort.lent("l1", "H100"), int)
    busy = _cohort(*teams, held=[_holder(1, "l1", 6, 0.0), _holder(2, "l2", 2, 0.0)])
    assert busy.lent("l1", "H100") == 0  # nobody lends anything


# --- the admission order and work lost -----------------------------------------------------------


def test_a_job_without_a_team_is_asked_of_the_default_team() -> None:
    cohort = _cohort(team("default", H100=4))
    [(job, ask)] = admission_order([_job(1, None)], cohort, "default")
    assert ask.team == "default" and job.team is None


def test_work_lost_is_nothing_before_a_run_and_ignores_undated_checkpoints() -> None:
    job = _job(1, "a")
    assert work_lost(job, 2, T0) == 0.0  # never started
    started = job.model_copy(update={"run_started_at": T0, "checkpoints": [CheckpointRef(checkpoint_id="c", step=1, uri="s3://b/c")]})
    assert work_lost(started, 2, T0 + timedelta(seconds=30)) == 60.0
    ahead = started.model_copy(
        update={"checkpoints": [CheckpointRef(checkpoint_id="c", step=1, uri="s3://b/c", created_at=T0 + timedelta(seconds=40))]}
    )
    assert work_lost(ahead, 2, T0 + timedelta(seconds=30)) == 0.0  # a checkpoint dated after now loses nothing


# --- reclaim -------------------------------------------------------------------------------------


def _lender_and_borrowers(*held: Holder, usage: dict[str, float] | None = None, x_weight: float = 1.0) -> Cohort:
    teams = (
        team("w", H100=8, A100=8),
        team("x", weight=x_weight, H100={"nominal": 0, "borrow_limit": 8}, A100={"nominal": 0, "borrow_limit": 8}),
        team("y", H100={"nominal": 0, "borrow_limit": 8}),
    )
    return _cohort(*teams, held=list(held), usage=usage)


def test_reclaim_takes_first_from_the_team_with_the_highest_usage_per_weight() -> None:
    x1, y1 = _holder(1, "x", 1, 0.0), _holder(2, "y", 1, 0.0)
    # x used 10 with weight 2 (5 a unit of weight), y 6 with weight 1: y first
    weighted = _lender_and_borrowers(x1, y1, usage={"x": 10.0, "y": 6.0}, x_weight=2.0)
    assert _ids(reclaim_victims(Ask("w", "H100", 1, "wes"), [x1, y1], 1, weighted)) == [y1.job.job_id]
    # x used a little, y nothing recorded: x first
    unrecorded = _lender_and_borrowers(x1, y1, usage={"x": 0.5})
    assert _ids(reclaim_victims(Ask("w", "H100", 1, "wes"), [y1, x1], 1, unrecorded)) == [x1.job.job_id]


def test_reclaim_skips_another_types_jobs_and_goes_on_to_the_next() -> None:
    other_type = _holder(1, "x", 4, 0.0, gpu_type="A100")
    same_type = _holder(2, "x", 2, 50.0)
    cohort = _lender_and_borrowers(other_type, same_type)
    assert _ids(reclaim_victims(Ask("w", "H100", 2, "wes"), [other_type, same_type], 2, cohort)) == [same_type.job.job_id]


def test_reclaim_takes_a_single_borrowed_unit() -> None:
    one = _holder(1, "x", 1, 0.0)
    assert _ids(reclaim_victims(Ask("w", "H100", 1, "wes"), [one], 1, _lender_and_borrowers(one))) == [one.job.job_id]


def test_reclaim_stops_taking_from_a_team_back_within_nominal_and_goes_on_to_the_next_team() -> None:
    # x (nominal 1) holds 4 in three jobs: it borrows 3; y borrows 1; x's usage puts it first
    x2, x1a, x1b, y1 = _holder(1, "x", 2, 0.0), _holder(2, "x", 1, 1.0), _holder(3, "x", 1, 2.0), _holder(4, "y", 1, 0.0)
    teams = (team("w", H100=8), team("x", H100={"nominal": 1, "borrow_limit": 8}), team("y", H100={"nominal": 0, "borrow_limit": 8}))
    cohort = _cohort(*teams, held=[x2, x1a, x1b, y1], usage={"x": 5.0})
    got = reclaim_victims(Ask("w", "H100", 4, "wes"), [x2, x1a, x1b, y1], 4, cohort)
    # x gives back its 3 borrowed units (its last unit is its own nominal), then y its 1
    assert _ids(got) == [x2.job.job_id, x1a.job.job_id, y1.job.job_id]


def test_reclaim_frees_all_that_is_needed_or_nothing() -> None:
    one = _holder(1, "x", 1, 0.0)
    cohort = _lender_and_borrowers(one)
    assert reclaim_victims(Ask("w", "H100", 3, "wes"), [one], 3, cohort) == []
    assert reclaim_victims(Ask("w", "H100", 2, "wes"), [one], 2, cohort) == []


# --- Kueue's fair sharing ------------------------------------------------------------------------


def _borrowers(*held: Holder, w_weight: float = 1.0) -> Cohort:
    teams = (
        team("w", weight=w_weight, H100={"nominal": 0, "borrow_limit": 16}),
        team("a", H100={"nominal": 0, "borrow_limit": 16}, A100={"nominal": 0, "borrow_limit": 16}),
        team("b", H100={"nominal": 0, "borrow_limit": 16}),
        team("c", H100=32, A100=32),
    )
    return _cohort(*teams, held=list(held))


def test_fair_sharing_takes_from_the_highest_share_now_counting_what_it_already_lost() -> None:
    a = [_holder(i, "a", 2, 10.0 + i) for i in range(1, 4)]  # a's share 6
    b = [_holder(i, "b", 2, float(i - 10)) for i in range(11, 13)]  # b's share 4, less work lost
    victims, rule = fair_sharing_victims(Ask("w", "H100", 2, "wes"), [*a, *b], 4, _borrowers(*a, *b))
    # a first (6 > 4); then a's 4 ties b's 4: b's job loses less; b keeps 2, exactly the preemptor's 2 (allowed)
    assert rule == FINAL and _ids(victims) == [a[0].job.job_id, b[0].job.job_id]


def test_fair_sharing_weighs_only_other_teams_jobs_of_the_type() -> None:
    a_h100 = [_holder(1, "a", 2, 10.0), _holder(2, "a", 2, 11.0)]
    a_a100 = _holder(3, "a", 6, 0.0, gpu_type="A100")
    victims, rule = fair_sharing_victims(Ask("w", "H100", 2, "wes"), [a_a100, *a_h100], 2, _borrowers(a_a100, *a_h100))
    assert rule == FINAL and _ids(victims) == [a_h100[0].job.job_id]


def test_the_second_rule_weighs_each_victim_against_the_smallest_job_its_team_lost() -> None:
    a = [_holder(1, "a", 1, 0.0), _holder(2, "a", 3, 1.0), _holder(3, "a", 3, 2.0)]  # a's share 7
    victims, rule = fair_sharing_victims(Ask("w", "H100", 2, "wes"), a, 7, _borrowers(*a))
    # the first rule frees 4 of 7; the second refuses a's last job (a taking back its 1-unit job would hold 1 < 2)
    assert (victims, rule) == ([], None)


def test_the_second_rule_takes_a_team_just_above_the_preemptor() -> None:
    one = _holder(1, "a", 1, 0.0)  # a's share 1; w, weight 2, asks 1: its share 0.5
    victims, rule = fair_sharing_victims(Ask("w", "H100", 1, "wes"), [one], 1, _borrowers(one, w_weight=2.0))
    assert rule == INITIAL and _ids(victims) == [one.job.job_id]


def test_the_second_rule_never_weighs_another_types_jobs() -> None:
    h100 = _holder(1, "a", 3, 0.0)  # a's H100 share 3; w asks 2: the first rule refuses (a would keep 0 < 2)
    a100 = _holder(2, "a", 6, 0.0, gpu_type="A100")  # a larger share of another type
    victims, rule = fair_sharing_victims(Ask("w", "H100", 2, "wes"), [a100, h100], 2, _borrowers(h100, a100))
    assert rule == INITIAL and _ids(victims) == [h100.job.job_id]


def test_a_job_whose_team_was_deleted_while_it_waited_is_ordered_as_the_default_teams() -> None:
    cohort = _cohort(team("default", H100=4), team("a", H100=4))
    gone, kept = _job(1, "gone", reclaimable=False), _job(2, "a")
    order = admission_order([gone, kept], cohort, "default")
    assert [(job, ask.team, ask.reclaimable) for job, ask in order] == [(gone, "default", False), (kept, "a", True)]


# --- where a job leaves its team: the order's standing, and who holds room ------------------------


def test_a_jobs_standing_is_within_up_to_nominal_then_overshoot_from_under_it_then_borrower() -> None:
    assert Standing.of(1, 1, 2) == Standing.WITHIN  # exactly at nominal after the job
    assert Standing.of(1, 2, 2) == Standing.OVERSHOOT  # one under, two more
    assert Standing.of(2, 1, 2) == Standing.BORROWER  # at nominal already
    assert Standing.WITHIN < Standing.OVERSHOOT < Standing.BORROWER


def test_overshoots_go_by_where_they_leave_their_team_halfway_through_the_job_then_by_factor() -> None:
    teams = (team("a", H100={"nominal": 2, "borrow_limit": 8}), team("b", H100={"nominal": 4, "borrow_limit": 8}))
    cohort = _cohort(*teams, held=[_holder(1, "a", 1, 0.0), _holder(2, "b", 3, 0.0)], usage={"a": 0.0, "b": 100.0})
    # a: (1 + 3/2)/2 = 1.25; b: (3 + 2/2)/4 = 1.0. b's goes first though a's factor is higher
    order = admission_order([_job(3, "a", gpus=3), _job(4, "b", gpus=2)], cohort, "default")
    assert [j.name for j, _ in order] == ["j4", "j3"]
    # a's 2-GPU job: (1 + 1)/2 = 1.0, level with b's: the higher factor (a's) goes first
    order = admission_order([_job(4, "b", gpus=2), _job(5, "a", gpus=2)], cohort, "default")
    assert [j.name for j, _ in order] == ["j5", "j4"]
    # Halfway, not a third of the way: b holding 2 of 4 with 3 GPUs, (2 + 1.5)/4 = 0.875, before a holding none
    # of 2 with 4, (0 + 2)/2 = 1.0 (a third of the way would put a's first: 0.67 against b's 0.75)
    cohort = _cohort(*teams, held=[_holder(1, "b", 2, 0.0)], usage={"a": 0.0, "b": 100.0})
    order = admission_order([_job(6, "a", gpus=4), _job(7, "b", gpus=3)], cohort, "default")
    assert [j.name for j, _ in order] == ["j7", "j6"]


def test_overshoots_weigh_the_teams_holdings_of_every_type_at_their_unit_prices() -> None:
    # a (nominal 2 H100s, 4 A100s) holds 1 H100 and no A100: short of its A100 quota (its jobs too big, say);
    # b (4 and 8) holds 3 H100s and 7 A100s. Both ask 2 H100s, each one under its H100 nominal: level by the
    # H100s alone, (1 + 1)/2 = (3 + 1)/4 = 1.0, where b's higher factor would go first
    teams = (
        team("a", H100={"nominal": 2, "borrow_limit": 8}, A100={"nominal": 4}),
        team("b", H100={"nominal": 4, "borrow_limit": 8}, A100={"nominal": 8}),
    )
    held = [_holder(1, "a", 1, 0.0), _holder(2, "b", 3, 0.0), _holder(3, "b", 7, 0.0, gpu_type="A100")]
    cohort = _cohort(*teams, held=held, usage={"a": 100.0, "b": 0.0})
    h100, a100 = unit_hourly_usd("H100"), unit_hourly_usd("A100")
    a = (1 * h100 + h100) / (2 * h100 + 4 * a100)
    b = (3 * h100 + 7 * a100 + h100) / (4 * h100 + 8 * a100)
    assert a < b < 1.0
    # Then a's goes first: price-weighted over both types it holds the smaller fraction of its nominal quotas
    order = admission_order([_job(4, "b", gpus=2), _job(5, "a", gpus=2)], cohort, "default")
    assert [j.name for j, _ in order] == ["j5", "j4"]
    # and the order counts what it admits before: after a's older job of its 4 A100s (within nominal, first) a
    # would hold all its nominal quotas' worth halfway through its H100 job, more than b: b's goes first
    order = admission_order([_job(4, "b", gpus=2), _job(5, "a", gpus=4, gpu_type="A100"), _job(6, "a", gpus=2)], cohort, "default")
    assert [j.name for j, _ in order] == ["j5", "j4", "j6"]


def test_an_overshoot_ranks_by_the_teams_holding_plus_half_the_job_over_its_nominal_quotas_at_unit_prices() -> None:
    teams = (team("a", H100={"nominal": 2, "borrow_limit": 8}, A100={"nominal": 4}), team("b", H100=4))
    ranks = _Order(_cohort(*teams, held=[_holder(1, "a", 1, 0.0), _holder(2, "a", 3, 0.0, gpu_type="A100")]))
    h100, a100 = unit_hourly_usd("H100"), unit_hourly_usd("A100")
    nominal = 2 * h100 + 4 * a100
    standing, place, _ = ranks.rank(Ask("a", "H100", 2, "al"))
    assert standing == Standing.OVERSHOOT and place == pytest.approx((h100 + 3 * a100 + h100) / nominal)
    ranks.hold(Ask("a", "A100", 1, "al"))
    assert ranks.rank(Ask("a", "H100", 3, "al"))[1] == pytest.approx((h100 + 4 * a100 + 1.5 * h100) / nominal)
    # with units of the job's type fewer (a preempted job's): 4 A100s held, one H100 less
    assert ranks.rank(Ask("a", "H100", 3, "al"), less=1) == (Standing.OVERSHOOT, pytest.approx((4 * a100 + 1.5 * h100) / nominal), -1.0)
    assert ranks.rank(Ask("b", "H100", 6, "bo"))[1] == pytest.approx(0.75)  # nothing held: 3 of its 4


def test_a_borrower_ranks_by_what_its_team_borrows_halfway_through_the_job_per_weight_times_factor() -> None:
    teams = (team("a", weight=2, H100={"nominal": 2, "borrow_limit": 8}), team("b", H100={"nominal": 0, "borrow_limit": 8}))
    cohort = _cohort(*teams, held=[_holder(1, "a", 3, 0.0)], usage={"a": 30.0, "b": 10.0})
    factors = cohort.factors()
    ranks = _Order(cohort)
    # a holds 3 of its nominal 2: a 2-GPU job borrows 1 + 1 halfway through it
    assert ranks.rank(Ask("a", "H100", 2, "al")) == (Standing.BORROWER, pytest.approx(2 / (2 * factors["a"])), -factors["a"])
    assert ranks.rank(Ask("b", "H100", 3, "bo")) == (Standing.BORROWER, pytest.approx(1.5 / factors["b"]), -factors["b"])
    # within nominal: no place, only the factor
    assert ranks.rank(Ask("a", "A100", 0, "al"))[:2] == (Standing.WITHIN, 0.0)


def test_a_team_of_a_higher_factor_borrows_more_in_proportion_not_everything() -> None:
    # Given two borrowers of equal weight: b has used less (the higher factor) and already borrows 4, a nothing
    teams = (team("a", H100={"nominal": 0, "borrow_limit": 8}), team("b", H100={"nominal": 0, "borrow_limit": 8}))
    cohort = _cohort(*teams, held=[_holder(1, "b", 4, 0.0)], usage={"a": 20.0, "b": 10.0})
    factors = cohort.factors()
    assert factors["b"] > factors["a"] and 0.5 / factors["a"] < 4.5 / factors["b"]
    # Then a's job goes first (half a GPU borrowed per a's weight x F, against b's four and a half per its)
    order = admission_order([_job(2, "b"), _job(3, "a")], cohort, "default")
    assert [j.name for j, _ in order] == ["j3", "j2"]
    # and with nothing borrowed by either, b's (the higher factor) goes first
    cohort = _cohort(*teams, usage={"a": 20.0, "b": 10.0})
    assert [j.name for j, _ in admission_order([_job(3, "a"), _job(2, "b")], cohort, "default")] == ["j2", "j3"]


def test_a_borrower_of_a_team_whose_factor_underflows_to_zero_goes_last() -> None:
    teams = (
        team("a", weight=0.001, H100={"nominal": 0, "borrow_limit": 8}),
        team("b", weight=1000, H100={"nominal": 0, "borrow_limit": 8}),
    )
    cohort = _cohort(*teams, usage={"a": 1.0, "b": 0.0})
    assert cohort.factors()["a"] == 0.0
    assert _Order(cohort).rank(Ask("a", "H100", 1, "al"))[1] == math.inf
    order = admission_order([_job(1, "a"), _job(2, "b", gpus=8)], cohort, "default")
    assert [j.name for j, _ in order] == ["j2", "j1"]


def _room_cohort(b_holds: int, *, lend: str | int = "100%") -> Cohort:
    teams = (
        team("a", H100={"nominal": 2, "lend_limit": lend}),
        team("b", H100={"nominal": 4, "borrow_limit": 8, "lend_limit": 0}),
        team("c", H100={"nominal": 6, "lend_limit": 1}),
        team("d", A100=8),  # no H100 quota: it lends none
    )
    return _cohort(*teams, held=[_holder(1, "b", b_holds, 0.0)] if b_holds else [])


def test_a_team_under_nominal_holds_room_while_the_others_could_ever_lend_what_its_job_takes_beyond() -> None:
    # the others could lend a's 2 and c's 1 (b's own lend limit is not counted)
    assert _room_cohort(3).holds_room_for(Ask("b", "H100", 4, "ben"))  # 3 beyond: exactly what they could lend
    assert not _room_cohort(3).holds_room_for(Ask("b", "H100", 5, "ben"))  # 4 beyond: never
    assert not _room_cohort(4).holds_room_for(Ask("b", "H100", 1, "ben"))  # at nominal: a borrower
    assert _room_cohort(0).holds_room_for(Ask("b", "H100", 7, "ben"))
    assert not _room_cohort(3, lend="50%").holds_room_for(Ask("b", "H100", 4, "ben"))  # a lends 1 of its 2
