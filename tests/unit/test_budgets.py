"""Budgets with fakes (issue 25; docs/BUDGETS.md): admission holds what does not fit, the meter's tick fires
thresholds once and pauses at 100% through the checkpointed path, raising the budget resumes."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from functions.catalog.gpu_types import unit_hourly_usd
from functions.service import budget_meter as meter
from functions.service.budget_actions import resumer
from functions.service.budgets import BudgetGate, BudgetMeter, BudgetService
from functions.service.ports import Transition
from functions.service.principal import Principal
from functions.service.scheduler import LocalCapacity
from schemas.budgets import BudgetPatch, BudgetSpec, Period
from schemas.job import Job, PendingAction
from schemas.status import JobStatus as S
from schemas.teams import WaitReason
from tests.helpers.budgets import InMemoryBudgetRepository, budget
from tests.helpers.jobs import ADMIN, ALICE, T0, make_job
from tests.unit.test_scheduler import World

H100 = unit_hourly_usd("H100")


class Clock:
    def __init__(self, at: datetime) -> None:
        self.at = at

    def __call__(self) -> datetime:
        return self.at


class Stops:
    def __init__(self) -> None:
        self.stopped: list[tuple[str, bool, str]] = []

    def stop_run(self, job: Job, *, graceful: bool, reason: str) -> None:
        self.stopped.append((job.job_id, graceful, reason))


class BudgetWorld(World):
    def __init__(self) -> None:
        super().__init__(LocalCapacity(gpu_slots=0, cpu_slots=4, inventory={"H100": 8}))
        self.clock = Clock(T0 + timedelta(hours=1))
        self.budgets = InMemoryBudgetRepository()
        self.gate = BudgetGate(self.budgets, self.clock)
        self.scheduler.admission = self.gate
        self.stops = Stops()
        self.meter = BudgetMeter(self.budgets, self.repo, self.stops, self.clock)

    def gpu_job(self, gpus: int, *, runtime: int | None = None, priority: int = 5) -> Job:
        scheduling = {"max_runtime_seconds": runtime} if runtime else {}
        return self.waiting(priority=priority, resource_config={"gpu_count": gpus, "gpu_type": "H100"}, scheduling=scheduling)

    def train(self, job: Job) -> Job:
        """The engine's part after the grant: the run starts now."""
        job = self.repo.get(job.job_id)
        for to in (S.PREPARING, S.TRAINING):
            job = self.repo.transition(Transition(job.job_id, job.version, job.status, to, "test"))
        self.repo.annotate(job.job_id, {"run_started_at": self.clock()})
        return self.repo.get(job.job_id)

    def stop(self, job_id: str) -> Job:
        """The engine's part of a pause: the checkpoint is saved, the run ends now, PAUSED."""
        job = self.repo.get(job_id)
        seconds = (self.clock() - job.run_started_at).total_seconds() if job.run_started_at else 0.0
        for to in (S.CHECKPOINTING, S.PAUSED):
            job = self.repo.transition(Transition(job.job_id, job.version, job.status, to, job.pending_reason or "test"))
        cost = {"attempts": [{"attempt": job.attempt, "run_seconds": seconds}]}
        self.repo.annotate(job_id, {"cost": cost, "pending_action": None})
        return self.repo.get(job_id)


def test_a_job_whose_forecast_exceeds_what_is_left_is_held_and_never_started() -> None:
    # Given: 1 USD for the whole deployment, a 4 x H100 hour (far more) and a 2-minute 1 x H100 job (less)
    w = BudgetWorld()
    w.budgets.create(budget("b1", T0, amount_usd=1.0, scope={"kind": "deployment"}))
    big = w.gpu_job(4, runtime=3600)
    small = w.gpu_job(1, runtime=120)

    # When: a pass runs
    result = w.scheduler.run_pass()

    # Then: the big job is held (never granted, so never launched) and does not hold up the small one
    assert result.started == [small.job_id] and w.scheduled() == [f"tok-{small.job_id}"]
    assert w.repo.get(big.job_id).status == S.QUEUED and big.job_id not in w.ledger.holders("local/H100")
    assert w.scheduler.explain(w.repo.get(big.job_id))[2] == WaitReason.BUDGET
    stored = w.budgets.get("b1")
    assert stored.reservations == {small.job_id: pytest.approx(H100 * 120 / 3600, abs=1e-6)}
    # A second pass reserves nothing twice
    w.scheduler.run_pass()
    assert w.budgets.get("b1").version == stored.version


def test_the_tick_meters_fires_each_threshold_once_pauses_at_100_and_a_raise_resumes() -> None:
    # Given: 1 USD on Alice; two 1 x H100 jobs running, one queued behind them
    w = BudgetWorld()
    w.budgets.create(budget("b1", T0, amount_usd=1.0, scope={"kind": "principal", "value": ALICE}))
    low, high = w.gpu_job(1, runtime=60, priority=3), w.gpu_job(1, runtime=60, priority=7)
    w.scheduler.run_pass()
    low, high = w.train(low), w.train(high)
    rate = 2 * H100
    to_half = 0.5 / rate * 3600  # seconds until 50 cents

    # When: the meter ticks at 0.55 USD, then again (nothing new), then at 0.85 USD
    w.clock.at += timedelta(seconds=to_half * 1.1)
    w.meter.tick()
    w.meter.tick()
    assert [e.percent for e in w.budgets.events] == [50.0]
    w.clock.at += timedelta(seconds=to_half * 0.6)
    w.meter.tick()
    assert [e.percent for e in w.budgets.events] == [50.0, 80.0]
    assert w.stops.stopped == []
    assert w.budgets.get("b1").spent_usd == pytest.approx(rate * to_half * 1.7 / 3600, rel=1e-6)

    # When: it ticks past 1 USD
    w.clock.at += timedelta(seconds=to_half * 0.4)
    result = w.meter.tick()

    # Then: hold and pause fire, both running jobs take the checkpointed pause with reason BUDGET
    assert [(e.percent, e.action) for e in w.budgets.events[2:]] == [(100.0, "hold_new"), (100.0, "pause_running")]
    assert sorted(result.paused or []) == sorted([low.job_id, high.job_id])
    for job_id in (low.job_id, high.job_id):
        job = w.repo.get(job_id)
        assert job.pending_action == PendingAction.PAUSE and job.pending_reason is not None and job.pending_reason.startswith("BUDGET")
    assert {(j, graceful) for j, graceful, _ in w.stops.stopped} == {(low.job_id, True), (high.job_id, True)}
    # A new job waits with reason BUDGET
    queued = w.gpu_job(1, runtime=60)
    w.scheduler.run_pass()
    assert w.repo.get(queued.job_id).status == S.QUEUED and w.scheduler.explain(w.repo.get(queued.job_id))[2] == WaitReason.BUDGET

    # When: the runs stop (PAUSED) and an admin raises the budget
    for job_id in (low.job_id, high.job_id):
        w.stop(job_id)
    w.meter.tick()
    resumed: list[str] = []
    service = BudgetService(w.budgets, lambda arn: "default", resumer(w.repo, resumed.append), clock=w.clock)
    view = service.patch("b1", BudgetPatch(amount_usd=10.0), Principal(ADMIN, is_admin=True))

    # Then: its paused jobs resume, highest priority first; the spend is what they ran, not a second more
    assert resumed == [high.job_id, low.job_id]
    assert view.paused_jobs == [] and view.crossed == []  # 1.05 of 10 USD: below every threshold again
    assert view.spent_usd == pytest.approx(rate * to_half * 2.1 / 3600, rel=1e-6)


def test_a_new_period_starts_with_nothing_spent() -> None:
    now = datetime(2026, 3, 18, 15, tzinfo=T0.tzinfo)
    assert meter.period_start(Period.MONTHLY, now, T0, None) == datetime(2026, 3, 1, tzinfo=T0.tzinfo)
    assert meter.period_start(Period.WEEKLY, now, T0, None) == datetime(2026, 3, 16, tzinfo=T0.tzinfo)  # a Monday
    assert meter.period_start(Period.LIFETIME, now, T0, None) == T0


@pytest.mark.parametrize(
    ("scope", "covered"),
    [
        ({"kind": "deployment"}, True),
        ({"kind": "principal", "value": ALICE}, True),
        ({"kind": "principal", "value": ADMIN}, False),
        ({"kind": "team", "value": "research"}, True),
        ({"kind": "team", "value": "default"}, False),
        ({"kind": "label", "value": "project=llama-ft"}, True),
        ({"kind": "label", "value": "project=other"}, False),
    ],
)
def test_which_budgets_cover_a_job(scope: dict[str, Any], covered: bool) -> None:
    job = make_job(team="research", labels={"project": "llama-ft"})
    assert meter.covers(BudgetSpec.model_validate({"name": "b", "scope": scope, "amount_usd": 1}).scope, job) is covered


def test_the_forecast_is_the_jobs_cap_or_the_documented_prior() -> None:
    capped = make_job(request={"resource_config": {"gpu_count": 2, "gpu_type": "H100"}, "scheduling_config": {"max_runtime_seconds": 900}})
    guess = meter.forecast(capped)
    assert guess.basis == "max_runtime_seconds" and guess.hourly_usd == pytest.approx(2 * H100)
    assert guess.high_usd == pytest.approx(2 * H100 / 4) and meter.reservation_usd(capped) == pytest.approx(2 * H100 / 4)
    prior = meter.forecast(make_job(request={"resource_config": {"gpu_count": 1, "gpu_type": "H100"}}))
    assert (prior.basis, prior.low_seconds, prior.seconds, prior.high_seconds) == ("prior", 1800.0, 3600.0, 14400.0)


def test_a_new_period_resumes_what_the_last_one_paused() -> None:
    # Given: a monthly budget on Alice that paused her job in January
    w = BudgetWorld()
    w.budgets.create(budget("b1", T0, amount_usd=0.2, scope={"kind": "principal", "value": ALICE}, period="monthly"))
    job = w.gpu_job(1, runtime=60)
    w.scheduler.run_pass()
    w.train(job)
    w.clock.at += timedelta(minutes=5)
    assert w.meter.tick().paused == [job.job_id]
    w.stop(job.job_id)
    resumed: list[str] = []
    w.meter.resume = resumer(w.repo, resumed.append)
    w.meter.tick()
    assert resumed == [] and w.budgets.get("b1").paused_jobs == [job.job_id]  # still January: it stays paused

    # When: the first tick of February
    w.clock.at = datetime(2026, 2, 1, 0, 0, 30, tzinfo=T0.tzinfo)
    w.meter.tick()

    # Then: it resumes, and the new period starts with nothing spent or crossed
    stored = w.budgets.get("b1")
    assert resumed == [job.job_id] and stored.paused_jobs == [] and stored.crossed == []
    assert stored.period_start == datetime(2026, 2, 1, tzinfo=T0.tzinfo) and stored.spent_usd == 0.0


def test_a_tick_without_budgets_reads_no_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    w = BudgetWorld()
    job = w.gpu_job(1, runtime=60)
    w.scheduler.run_pass()
    w.train(job)

    def never(*_: Any, **__: Any) -> Any:
        raise AssertionError("the tick listed jobs for no budget")

    monkeypatch.setattr(w.repo, "list_jobs", never)
    result = w.meter.tick()
    assert (result.budgets, result.jobs) == (0, 0)


def test_through_the_lifecycle_a_held_job_is_never_launched_and_a_raise_lets_it_run() -> None:
    # Given: the lifecycle engine's tasks (tests/unit/test_statemachine_tasks.py) with the budgets' admission
    from tests.unit.test_statemachine_tasks import EXEC
    from tests.unit.test_statemachine_tasks import World as Engine

    w = Engine()
    budgets = InMemoryBudgetRepository()
    budgets.create(budget("b1", T0, amount_usd=0.01, scope={"kind": "deployment"}))  # a CPU job's prior is 0.384 USD
    w.scheduler.admission = BudgetGate(budgets, Clock(T0))
    job = w.submit(max_steps=4)

    # When: it is admitted and waits for capacity
    assert w.svc.admit(job.job_id, EXEC) == {"next": "wait_capacity"}
    assert w.svc.wait_capacity(job.job_id, EXEC, f"cap-{job.job_id}") == {"next": "waiting"}

    # Then: held with reason BUDGET: never granted, so never launched (the launcher recorded no call)
    assert w.tokens.answers == [] and w.launcher.launched == []
    assert w.repo.get(job.job_id).status == S.QUEUED
    assert w.scheduler.explain(w.repo.get(job.job_id))[2] == WaitReason.BUDGET

    # When: the budget is raised and a pass runs; Then: it is granted and launched once
    service = BudgetService(budgets, lambda arn: "default", lambda ids: ids, clock=Clock(T0))
    service.patch("b1", BudgetPatch(amount_usd=1.0), Principal(ADMIN, is_admin=True))
    w.scheduler.run_pass()
    assert w.tokens.answers == [(f"cap-{job.job_id}", {"next": "go"})]
    assert w.svc.prepare(job.job_id, EXEC) == {"next": "launch"}
    assert w.svc.launch(job.job_id, EXEC)["next"] == "wait" and len(w.launcher.launched) == 1
