"""Budgets in the jobs table (functions/adapters/budgets.py) on moto: versioned writes, a deterministic race of
two reservations for the last dollars (exactly one wins), and a tick's threshold event in the outbox."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from functions.adapters.budgets import DynamoBudgetRepository
from functions.adapters.outbox import DynamoOutbox
from functions.catalog import own_events as et
from functions.catalog.gpu_types import unit_hourly_usd
from functions.errors import BudgetChanged, BudgetNotFound
from functions.service.budgets import BudgetGate, BudgetMeter, Hold
from schemas.events import BudgetThresholdCrossed
from schemas.job import StatusEvent
from schemas.status import JobStatus as S
from tests.fakes import InMemoryJobRepository
from tests.helpers.aws import fresh_resources
from tests.helpers.budgets import budget
from tests.helpers.jobs import T0, make_job
from tests.helpers.races import StaleRead, winners
from tests.unit.test_budgets import Clock, Stops

H100 = unit_hourly_usd("H100")


def _repo(aws: Any) -> tuple[DynamoBudgetRepository, str]:
    table = fresh_resources(aws).jobs_table
    return DynamoBudgetRepository(aws, table), table


def _h100_job(job_id: str, seconds: int, **changes: Any) -> Any:
    request = {"resource_config": {"gpu_count": 1, "gpu_type": "H100"}, "scheduling_config": {"max_runtime_seconds": seconds}}
    return make_job(job_id=job_id, request=request, **changes)


def test_a_budget_is_written_on_its_version(aws: Any) -> None:
    repo, _ = _repo(aws)
    repo.create(budget("b1", T0, amount_usd=2.0, scope={"kind": "deployment"}))
    stored = repo.get("b1")
    assert stored.version == 1 and [b.budget_id for b in repo.list()] == ["b1"]
    updated = repo.put(stored.model_copy(update={"amount_usd": 3.0}), 1)
    assert updated.version == 2 and repo.get("b1").amount_usd == 3.0
    with pytest.raises(BudgetChanged):
        repo.put(stored.model_copy(update={"amount_usd": 9.0}), 1)  # a stale version loses
    assert repo.delete("b1") and not repo.delete("b1")
    with pytest.raises(BudgetNotFound):
        repo.get("b1")


def test_two_racing_reservations_for_the_last_dollars_exactly_one_wins(aws: Any) -> None:
    # Given: a budget with room for one 30-minute H100 job, not two
    repo, _ = _repo(aws)
    repo.create(budget("b1", T0, amount_usd=round(H100 * 0.75, 6), scope={"kind": "deployment"}))
    gate = BudgetGate(repo, Clock(T0))
    first, second = _h100_job("job-a", 1800), _h100_job("job-b", 1800)

    # When: two passes admit them, both deciding on the budget as it was before either wrote
    outcomes = StaleRead(repo, "get").run(lambda: gate.hold(first), lambda: gate.hold(second))

    # Then: exactly one reservation is stored; the other job is held with reason BUDGET (after re-reading)
    assert winners(outcomes, lambda o: o.won and o.value is None) == [0]
    held = outcomes[1].value
    assert isinstance(held, Hold) and held.message.startswith("BUDGET")
    assert list(repo.get("b1").reservations) == ["job-a"]


def test_a_ticks_threshold_events_are_in_the_outbox_with_the_crossing(aws: Any) -> None:
    # Given: 1 USD and one H100 job that has run past 0.8 USD
    repo, table = _repo(aws)
    repo.create(budget("b1", T0, amount_usd=1.0, scope={"kind": "deployment"}))
    jobs = InMemoryJobRepository()
    job = _h100_job("job-a", 36000, status=S.TRAINING, run_started_at=T0, created_at=T0)
    jobs.create(job, StatusEvent(at=T0, to_status=S.TRAINING))
    clock = Clock(T0 + timedelta(hours=0.85 / H100))

    # When: the meter ticks twice
    BudgetMeter(repo, jobs, Stops(), clock).tick()
    BudgetMeter(repo, jobs, Stops(), clock).tick()

    # Then: one event per crossed threshold (50%, 80%), numbered 1, 2, stored with the crossing
    records = [r for r in DynamoOutbox(aws, table).pending() if r.detail_type == et.BUDGET_THRESHOLD.detail_type]
    details = [BudgetThresholdCrossed.model_validate_json(r.detail) for r in records]
    assert [(d.percent, d.sequence, d.action) for d in details] == [(50.0, 1, "notify"), (80.0, 2, "notify")]
    assert repo.get("b1").crossed == [50.0, 80.0] and repo.get("b1").event_seq == 2
