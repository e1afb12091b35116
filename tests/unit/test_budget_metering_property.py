"""A property of the meter over random job mixes (issue 25, docs/BUDGETS.md "The overshoot bound"): whatever the
jobs' GPU types, counts and start times, the tick length and the checkpoint grace,

- the budget's spend after the runs stop is exactly the sum of each job's rate x the seconds it ran, and
- it passes the amount by at most the running jobs' rates x (tick + grace) (budget_meter.overshoot_bound_usd),
- and no job is asked to pause before a tick finds the spend at the amount.

Time is simulated (a clock the test moves), never waited for.
"""

from __future__ import annotations

import math
from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from functions.catalog.gpu_types import unit_hourly_usd
from functions.service import budget_meter as meter
from functions.service.budgets import BudgetMeter
from functions.service.ports import Transition
from schemas.job import PendingAction, StatusEvent
from schemas.status import JobStatus as S
from tests.fakes import InMemoryJobRepository
from tests.helpers.budgets import InMemoryBudgetRepository, budget
from tests.helpers.jobs import T0, make_job, request_body
from tests.unit.test_budgets import Clock, Stops

GPU_TYPES = ["H100", "A100", "L4", "T4"]
jobs_strategy = st.lists(
    st.tuples(st.sampled_from(GPU_TYPES), st.integers(1, 8), st.integers(1, 4), st.integers(0, 900)), min_size=1, max_size=6
)


@settings(max_examples=60, deadline=None)
@given(mix=jobs_strategy, hours=st.floats(0.02, 0.5), tick=st.integers(30, 600), grace=st.integers(0, 300))
def test_metering_is_exact_and_the_overshoot_is_within_the_bound(
    mix: list[tuple[str, int, int, int]], hours: float, tick: int, grace: int
) -> None:
    # Given: jobs of random shapes (GPU type, GPUs per node, nodes), each starting at its own time
    repo, budgets, stops, clock = InMemoryJobRepository(), InMemoryBudgetRepository(), Stops(), Clock(T0)
    rates = [n * nodes * unit_hourly_usd(t) for t, n, nodes, _ in mix]
    amount = round(sum(rates) * hours, 6)
    budgets.create(budget("b", T0, amount_usd=amount, scope={"kind": "deployment"}))
    tick_meter = BudgetMeter(budgets, repo, stops, clock)
    starts = {f"job-{i}": T0 + timedelta(seconds=offset) for i, (*_, offset) in enumerate(mix)}
    stopped_at: dict[str, float] = {}
    pending: dict[str, float] = {}  # job -> when its checkpointed pause ends the run (request + grace)
    started: set[str] = set()
    first_pause_spent: float | None = None

    def start_due(now: float) -> None:
        for i, (gpu_type, n, nodes, offset) in enumerate(mix):
            job_id = f"job-{i}"
            if job_id not in started and offset <= now:
                training = {**request_body()["training_config"], "framework": {"distributed": {"world_size": nodes}}}
                request = {"resource_config": {"gpu_count": n, "gpu_type": gpu_type, "node_count": nodes}, "training_config": training}
                job = make_job(job_id=job_id, request=request, created_at=T0, status=S.TRAINING, run_started_at=starts[job_id])
                repo.create(job, StatusEvent(at=T0, to_status=S.TRAINING))
                started.add(job_id)

    def stop_due(until: float) -> None:
        for job_id, at in sorted(pending.items(), key=lambda p: p[1]):
            if at <= until:
                clock.at = T0 + timedelta(seconds=at)
                job = repo.get(job_id)
                for to in (S.CHECKPOINTING, S.PAUSED):
                    job = repo.transition(Transition(job_id, job.version, job.status, to, "budget pause"))
                ran = (clock.at - starts[job_id]).total_seconds()
                repo.annotate(job_id, {"cost": {"attempts": [{"attempt": job.attempt, "run_seconds": ran}]}, "pending_action": None})
                stopped_at[job_id] = ran
                del pending[job_id]

    # When: the meter ticks every `tick` seconds until every job's run has stopped
    now = 0.0
    while len(stopped_at) < len(mix):
        now += tick
        stop_due(now)
        start_due(now)
        clock.at = T0 + timedelta(seconds=now)
        spent_before = sum(meter.accrued_usd(repo.get(j), clock.at) for j in started)
        result = tick_meter.tick()
        for job_id in result.paused or []:
            assert repo.get(job_id).pending_action == PendingAction.PAUSE
            pending[job_id] = now + grace
            if first_pause_spent is None:
                first_pause_spent = spent_before
        assert now < 10 * 24 * 3600, "the budget never stopped the jobs"
        if len(started) == len(mix) and not pending and not result.paused and len(stopped_at) < len(mix):
            assert budgets.get("b").spent_usd < amount + 1e-6  # still running: only below the amount
    tick_meter.tick()

    # Then: the spend is each job's rate x the seconds it ran, and the overshoot is within the bound
    spent = budgets.get("b").spent_usd
    expected = math.fsum(rates[i] * stopped_at[f"job-{i}"] / 3600 for i in range(len(mix)))
    assert abs(spent - expected) <= 1e-6 * (len(mix) + 1)
    assert first_pause_spent is not None and first_pause_spent >= amount - 1e-6  # no pause before the amount
    assert spent - amount <= meter.overshoot_bound_usd(rates, tick, grace) + 1e-6
