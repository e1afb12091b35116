"""Fair share between teams (functions/service/fair_share.py): the factor, quota refusals, the admission order."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from functions.catalog.gpu_types import decayed, gpu_type_of, unit_hourly_usd
from functions.service.fair_share import Ask, Cohort, admission_order, factor
from schemas.configs import ResourceConfig
from schemas.teams import TypeQuota, WaitReason, limit_units
from tests.helpers.teams import team
from tests.lifecycle_support import make_job, make_request

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_the_factor_is_one_unused_a_half_at_its_share_and_falls_above_it() -> None:
    assert factor(0.0, 0.0, 1.0, 2.0) == 1.0
    assert factor(50.0, 100.0, 1.0, 2.0) == 0.5
    assert factor(100.0, 100.0, 1.0, 2.0) == 0.25
    assert factor(100.0, 100.0, 1.0, 1.0) == 0.5


def test_usage_halves_every_half_life() -> None:
    assert decayed(8.0, T0, T0 + timedelta(days=7), 7 * 24 * 3600.0) == 4.0
    assert decayed(8.0, T0, T0 + timedelta(days=21), 7 * 24 * 3600.0) == 1.0


def test_gpu_types_and_their_prices_come_from_the_catalog() -> None:
    assert gpu_type_of(ResourceConfig(gpu_count=0)) == "cpu"
    assert gpu_type_of(ResourceConfig(gpu_count=1, gpu_type="nvidia a10g")) == "A10G"
    assert gpu_type_of(ResourceConfig(gpu_count=1, gpu_type="A100-80GB")) == "A100-80GB"
    assert gpu_type_of(ResourceConfig(gpu_count=1, gpu_type="A100")) == "A100"
    assert unit_hourly_usd("H100") > unit_hourly_usd("A100") > unit_hourly_usd("L4") > unit_hourly_usd("T4")
    assert unit_hourly_usd("A100-80GB") > unit_hourly_usd("A100")


def test_limits_are_units_or_percentages_of_nominal() -> None:
    assert limit_units(3, 8) == 3
    assert limit_units("50%", 8) == 4
    assert TypeQuota(nominal=8, borrow_limit="25%").borrow_limit == "25%"


def _cohort(**teams_in_use: int) -> Cohort:
    teams = {
        "a": team("a", H100={"nominal": 4, "borrow_limit": 2}),
        "b": team("b", H100={"nominal": 4, "lend_limit": "50%"}),
        "c": team("c", H100=0),
    }
    cohort = Cohort(teams=teams)
    for name, units in teams_in_use.items():
        cohort.hold(Ask(name, "H100", units, f"owner-{name}"))
    return cohort


def test_a_team_within_nominal_is_admitted_and_beyond_it_borrows_only_within_its_limits() -> None:
    cohort = _cohort(a=4)
    assert cohort.refusal(Ask("a", "H100", 1, "x")) is None  # borrows 1 of b's 2 lendable (50% of 4)
    assert cohort.refusal(Ask("a", "H100", 3, "x")) == WaitReason.BORROW_LIMIT  # 3 > its borrow limit 2
    assert cohort.refusal(Ask("c", "H100", 1, "x")) == WaitReason.QUOTA  # no borrow limit at all
    busy = _cohort(a=4, b=3)  # b lends at most its idle 1
    assert busy.refusal(Ask("a", "H100", 2, "x")) == WaitReason.COHORT_FULL
    assert busy.refusal(Ask("a", "H100", 1, "x")) is None
    assert busy.refusal(Ask("b", "H100", 1, "x")) is None  # b's own nominal


def test_member_caps_bound_one_member() -> None:
    capped = team("a", H100=8).model_copy(update={"member_caps": team("a").member_caps.model_copy(update={"max_running_jobs": 1})})
    cohort = Cohort(teams={"a": capped})
    cohort.hold(Ask("a", "H100", 1, "alice"))
    assert cohort.refusal(Ask("a", "H100", 1, "alice")) == WaitReason.QUOTA
    assert cohort.refusal(Ask("a", "H100", 1, "bob")) is None


def _job(n: int, team_name: str, priority: int = 5, gpus: int = 1):
    request = make_request(f"j{n}", scheduling_config={"priority": priority}, resource_config={"gpu_count": gpus, "gpu_type": "H100"})
    return make_job(request, created_at=T0 + timedelta(seconds=n)).model_copy(update={"team": team_name})


def test_within_a_priority_class_teams_under_nominal_go_first_then_by_fair_share_then_fifo() -> None:
    teams = {"a": team("a", weight=1, H100=2), "b": team("b", weight=1, H100=2), "c": team("c", weight=1, H100=0)}
    cohort = Cohort(teams=teams, usage={"a": 100.0, "b": 10.0, "c": 0.0})
    jobs = [_job(1, "c"), _job(2, "a"), _job(3, "a"), _job(4, "b"), _job(5, "a"), _job(6, "b", priority=9)]
    order = [j.name for j, _ in admission_order(jobs, cohort, "default")]
    # b's priority-9 job first; then within nominal: b (less usage) before a, a's FIFO; then borrowers: c (unused) before a
    assert order == ["j6", "j4", "j2", "j3", "j1", "j5"]


@given(
    usage=st.lists(st.floats(min_value=0, max_value=1e6, allow_nan=False), min_size=3, max_size=3),
    weight=st.floats(min_value=0.1, max_value=100),
    picks=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 3)), min_size=1, max_size=30),
)
def test_fair_share_order_property(usage: list[float], weight: float, picks: list[tuple[int, int]]) -> None:
    """Among borrowers (no nominal quota) of equal weight asking one GPU each: priority classes never
    interleave, a team's jobs keep their FIFO order within a class, and within a class a team of a higher
    factor never has fewer jobs in the order than a team of a lower one, up to its own last job: borrowed
    units per unit of weight x F (fair_share._Order) give a team that used less proportionally more."""
    names = ["a", "b", "c"]
    teams = {n: team(n, weight=weight, H100={"nominal": 0, "borrow_limit": 100}) for n in names}
    cohort = Cohort(teams=teams, usage=dict(zip(names, usage, strict=True)))
    jobs = [_job(i, names[t], priority=5 + p % 2) for i, (t, p) in enumerate(picks)]
    order = [j for j, _ in admission_order(jobs, cohort, "default")]
    assert sorted(j.job_id for j in order) == sorted(j.job_id for j in jobs)
    factors = cohort.factors()
    assert [j.priority for j in order] == sorted((j.priority for j in order), reverse=True)
    for n in names:
        for priority in (5, 6):
            mine = [j.created_at for j in order if j.team == n and j.priority == priority]
            assert mine == sorted(mine)  # FIFO inside a team, within a priority class
    first_class = [j.team or "" for j in order if j.priority == order[0].priority]  # nobody holds anything before it
    for high in names:
        for low in names:
            if factors[high] <= factors[low] or high not in first_class:
                continue
            last = max(i for i, t in enumerate(first_class) if t == high)
            for end in range(last + 1):
                prefix = first_class[: end + 1]
                assert prefix.count(high) >= prefix.count(low)


def test_a_job_that_fits_within_its_teams_nominal_goes_before_another_teams_job_that_overshoots_it() -> None:
    # Given c (unused: the highest factor) one GPU under its nominal 6 with a 3-GPU head, which would take it 2
    # beyond, and b (heavy usage: a low factor) two under its nominal 4 with a 1-GPU head
    teams = {
        "b": team("b", weight=2, H100={"nominal": 4, "borrow_limit": 12}),
        "c": team("c", weight=3, H100={"nominal": 6, "borrow_limit": 12}),
    }
    cohort = Cohort(teams=teams, usage={"b": 500.0, "c": 0.0})
    cohort.in_use[("b", "H100")], cohort.in_use[("c", "H100")] = 2, 5
    assert cohort.factors()["c"] > cohort.factors()["b"]
    overshoot, within = _job(1, "c", gpus=3), _job(2, "b")
    # Then b's job, which keeps b within its nominal, is offered first; c's, older and of the higher factor, after
    order = [j.name for j, _ in admission_order([overshoot, within], cohort, "default")]
    assert order == ["j2", "j1"]
