"""A budget's `cancel` threshold with fakes (issue 25; docs/BUDGETS.md): only when asked for, it cancels the
covered running and waiting jobs through the job's own cancel, with reason BUDGET, and says so in its event."""

from __future__ import annotations

from datetime import timedelta

from functions.errors import IllegalTransition
from functions.service.budget_actions import cancel_reason
from functions.service.ports import Transition
from schemas.budgets import BudgetSpec, ThresholdAction, default_thresholds
from schemas.job import Job
from schemas.status import TERMINAL
from schemas.status import JobStatus as S
from schemas.teams import WaitReason
from tests.helpers.budgets import budget
from tests.helpers.jobs import T0
from tests.unit.test_budgets import H100, BudgetWorld

LABEL = {"project": "llama-ft"}


class Cancels:
    """The job's own cancel as JobService.cancel makes it: one conditional transition to CANCELLED."""

    def __init__(self, w: BudgetWorld) -> None:
        self.w = w
        self.calls: list[tuple[str, str]] = []

    def __call__(self, job_id: str, reason: str) -> object:
        job = self.w.repo.get(job_id)
        if job.status in TERMINAL:
            raise IllegalTransition(job_id, job.status, "cancel", frozenset())
        self.calls.append((job_id, reason))
        cancelled = self.w.repo.transition(Transition(job_id, job.version, job.status, S.CANCELLED, reason, "system"))
        if job.run_started_at is not None:  # the engine's part: the stopped run's end prices its attempt
            seconds = (self.w.clock() - job.run_started_at).total_seconds()
            self.w.repo.annotate(job_id, {"cost": {"attempts": [{"attempt": job.attempt, "run_seconds": seconds}]}})
        return cancelled


def labelled(w: BudgetWorld, job: Job) -> Job:
    w.repo.annotate(job.job_id, {"labels": LABEL})
    return w.repo.get(job.job_id)


def _world(thresholds: list[dict[str, object]]) -> tuple[BudgetWorld, Cancels]:
    w = BudgetWorld()
    cancels = Cancels(w)
    w.meter.cancel = cancels
    scope = {"kind": "label", "value": "project=llama-ft"}
    w.budgets.create(budget("b1", T0, amount_usd=0.2, scope=scope, thresholds=thresholds))
    return w, cancels


def test_cancel_is_never_in_the_default_ladder_but_may_be_asked_for() -> None:
    assert ThresholdAction.CANCEL not in {t.action for t in default_thresholds()}
    asked = [{"percent": 120, "action": "cancel"}]
    spec = BudgetSpec.model_validate({"name": "b", "scope": {"kind": "deployment"}, "amount_usd": 1, "thresholds": asked})
    assert [(t.percent, t.action) for t in spec.thresholds] == [(120.0, ThresholdAction.CANCEL)]


def test_a_cancel_threshold_cancels_the_covered_running_and_waiting_jobs_with_reason_budget() -> None:
    # Given: a 0.20 USD budget on a label that pauses at 100% and also cancels at 100%; a running covered job,
    # a covered job waiting (its forecast does not fit), and a job of no such label
    w, cancels = _world([{"percent": 100, "action": "pause_running"}, {"percent": 100, "action": "cancel"}])
    running = labelled(w, w.gpu_job(1, runtime=60))  # its forecast (0.11 USD) fits
    w.scheduler.run_pass()
    running = w.train(w.repo.get(running.job_id))
    waiting = labelled(w, w.gpu_job(4))
    other = w.gpu_job(1, runtime=60)
    w.scheduler.run_pass()
    assert w.repo.get(waiting.job_id).status == S.QUEUED

    # When: the running job has cost past the amount and the meter ticks
    w.clock.at += timedelta(seconds=0.25 / H100 * 3600)
    result = w.meter.tick()

    # Then: both covered jobs are cancelled through the cancel path, reason BUDGET; none is paused (cancel wins)
    reason = cancel_reason(w.budgets.get("b1"), 100.0)
    assert reason.startswith("BUDGET: budget 'b1' (b1) reached 100%")
    assert sorted(cancels.calls) == sorted([(running.job_id, reason), (waiting.job_id, reason)])
    assert sorted(result.cancelled or []) == sorted([running.job_id, waiting.job_id]) and result.paused == []
    assert w.stops.stopped == [] and w.repo.get(running.job_id).pending_action is None
    for job_id in (running.job_id, waiting.job_id):
        assert w.repo.get(job_id).status == S.CANCELLED
        assert w.repo.history(job_id)[-1].reason == reason
    assert w.repo.get(other.job_id).status != S.CANCELLED  # not covered
    # And the budget's event says what it did: the cancel threshold lists them, the pause threshold none
    by_action = {e.action: e for e in w.budgets.events}
    assert sorted(by_action["cancel"].cancelled_job_ids) == sorted([running.job_id, waiting.job_id])
    assert by_action["pause_running"].paused_job_ids == [] and w.budgets.get("b1").paused_jobs == []

    # When: it ticks again; Then: nothing more is cancelled and no event fires twice
    events = len(w.budgets.events)
    assert w.meter.tick().cancelled == [] and len(w.budgets.events) == events

    # When: a new covered job is submitted; Then: admission holds it (BUDGET) and the next tick cancels it
    late = labelled(w, w.gpu_job(1, runtime=60))
    w.scheduler.run_pass()
    assert w.scheduler.explain(w.repo.get(late.job_id))[2] == WaitReason.BUDGET
    assert w.meter.tick().cancelled == [late.job_id] and w.repo.get(late.job_id).status == S.CANCELLED


def test_below_the_cancel_threshold_nothing_is_cancelled_and_an_overridden_job_never_is() -> None:
    # Given: a budget that cancels at 150% only; a covered running job past 100% but below 150%
    w, cancels = _world([{"percent": 150, "action": "cancel"}])
    job = labelled(w, w.gpu_job(1, runtime=60))
    w.scheduler.run_pass()
    job = w.train(w.repo.get(job.job_id))
    w.clock.at += timedelta(seconds=0.25 / H100 * 3600)
    # Then: nothing is cancelled nor waits on it before 150%
    assert w.meter.tick().cancelled == [] and cancels.calls == []
    # When: an admin let the job run over the budget and the spend passes 150%
    stored = w.budgets.get("b1")
    w.budgets.put(stored.model_copy(update={"overrides": {job.job_id: "deadline"}}), stored.version)
    w.clock.at += timedelta(seconds=0.2 / H100 * 3600)
    result = w.meter.tick()
    # Then: the threshold fires (its event names no job) and the overridden job runs on
    assert result.cancelled == [] and cancels.calls == [] and w.repo.get(job.job_id).status == S.TRAINING
    assert [(e.action, e.cancelled_job_ids) for e in w.budgets.events] == [("cancel", [])]
