"""The sweep controller on moto: real DynamoDB repository and JobService, fake trials moved through the
job table's own transitions, metric reports through the lifecycle's hook (SweepHooks)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from functions.adapters.aws import AwsClients
from functions.service.ports import JobQuery
from functions.service.sweeps.controller import SweepController
from schemas.status import JobStatus
from schemas.sweeps import SweepStatus, TrialState
from tests.helpers.aws import emulated_aws, fresh_resources
from tests.helpers.jobs import ALICE, BOB
from tests.helpers.sweeps import TO_TRAINING, Plane, advance

S = JobStatus


@pytest.fixture(scope="module")
def aws() -> Iterator[AwsClients]:
    with emulated_aws() as clients:
        yield clients


@pytest.fixture
def plane(aws: AwsClients) -> Plane:
    return Plane(aws, fresh_resources(aws))


def test_trials_start_up_to_max_parallel_and_the_sweep_completes_after_max_trials(plane: Plane) -> None:
    # Given a random sweep of 4 trials, 2 at a time
    sweep_id = plane.create(maxTrials=4, maxParallelTrials=2)
    # When the controller decides
    decision = plane.controller.decide(sweep_id)
    # Then two trials run, as ordinary jobs of alice labelled with the sweep and their number
    assert decision.started == [0, 1]
    running = plane.running(sweep_id)
    jobs = [plane.jobs.repo.get(t.job_id) for t in running]
    assert [j.labels["sweep_id"] for j in jobs] == [sweep_id, sweep_id] and [j.labels["trial"] for j in jobs] == ["0", "1"]
    assert all(j.owner == ALICE for j in jobs)
    assert jobs[0].training_config.hyperparameters["learning_rate"] == format(running[0].params["learning_rate"], ".10g")
    # and a second decision (a duplicate wake) starts nothing more
    assert plane.controller.decide(sweep_id).started == []
    # When both finish, the next two start; when those finish, the sweep completes with the best trial
    for trial in running:
        plane.finish(trial.job_id, [0.1 * (trial.number + 1), 0.2 * (trial.number + 1)])
    assert plane.controller.decide(sweep_id).started == [2, 3]
    for trial in plane.running(sweep_id):
        plane.finish(trial.job_id, [0.9 if trial.number == 3 else 0.05])
    decision = plane.controller.decide(sweep_id)
    sweep = plane.service.get(sweep_id, plane.alice)
    assert decision.status == "COMPLETED" and sweep.status == SweepStatus.COMPLETED
    assert sweep.counts.completed == 4 and len(sweep.trials) == 4
    assert sweep.best_trial is not None and sweep.best_trial.number == 3 and sweep.best_trial.value == pytest.approx(0.9)
    assert sweep.trials[0].value == pytest.approx(0.2) and sweep.trials[0].intermediate_values == {1: 0.1, 2: 0.2}


def test_grid_visits_every_point_once(plane: Plane) -> None:
    grid = {"learning_rate": {"type": "double", "values": [0.01, 0.1]}, "warmup_steps": {"type": "int", "min": 1, "max": 5, "step": 2}}
    sweep_id = plane.create(method="grid", maxTrials=6, maxParallelTrials=6, parameters=grid)
    plane.controller.decide(sweep_id)
    seen = sorted((t.params["learning_rate"], t.params["warmup_steps"]) for t in plane.trials(sweep_id))
    assert seen == sorted((lr, n) for lr in (0.01, 0.1) for n in (1, 3, 5))


def test_a_losing_trial_is_pruned_by_the_median_rule_and_its_job_shows_why(plane: Plane) -> None:
    sweep_id = plane.create(maxTrials=3, maxParallelTrials=1, earlyStopping={"type": "median", "startupTrials": 1})
    plane.controller.decide(sweep_id)
    first = plane.running(sweep_id)[0]
    plane.finish(first.job_id, [0.5, 0.6, 0.7])
    plane.controller.decide(sweep_id)
    second = plane.running(sweep_id)[0]
    advance(plane.jobs.repo, second.job_id, *TO_TRAINING)
    plane.report(second.job_id, 1, 0.1)
    # When the controller decides on a trial at 0.1 where the finished one had 0.5
    decision = plane.controller.decide(sweep_id)
    # Then it is pruned: its job is stopped with a reason naming the sweep and the rule
    assert decision.pruned == [1]
    job = plane.jobs.repo.get(second.job_id)
    assert job.status == S.CANCELLED  # (no run to stop yet: cancelled at once)
    assert "median early stopping" in plane.jobs.repo.history(second.job_id)[-1].reason
    pruned = plane.trials(sweep_id)[1]
    assert pruned.state == TrialState.PRUNED and "pruned by sweep" in (pruned.reason or "")
    assert len(plane.trials(sweep_id)) == 3  # the pruned trial's slot went to the next one


def test_failed_trials_end_the_sweep_at_max_failed_trials_and_cancel_the_rest(plane: Plane) -> None:
    sweep_id = plane.create(maxTrials=6, maxParallelTrials=3, maxFailedTrials=2)
    plane.controller.decide(sweep_id)
    a, b, c = plane.running(sweep_id)
    for trial in (a, b):
        advance(plane.jobs.repo, trial.job_id, *TO_TRAINING)
        advance(plane.jobs.repo, trial.job_id, S.FAILED, error_message="boom")
    decision = plane.controller.decide(sweep_id)
    assert decision.status == "FAILED"
    sweep = plane.service.get(sweep_id, plane.alice)
    assert sweep.status == SweepStatus.FAILED and "maxFailedTrials=2" in (sweep.status_reason or "")
    assert plane.jobs.repo.get(c.job_id).status == S.CANCELLED
    assert [t.reason for t in sweep.trials[:2]] == ["job FAILED: boom"] * 2


def test_target_value_and_no_improvement_complete_the_sweep_early(plane: Plane) -> None:
    target = plane.create(maxTrials=10, completionCriteria={"targetValue": 0.8})
    plane.controller.decide(target)
    plane.finish(plane.running(target)[0].job_id, [0.85])
    assert plane.controller.decide(target).status == "COMPLETED"
    assert "reached the target" in (plane.service.get(target, plane.alice).status_reason or "")

    patience = plane.create(maxTrials=10, completionCriteria={"noImprovementTrials": 2})
    for value in (0.5, 0.4, 0.3):
        plane.controller.decide(patience)
        plane.finish(plane.running(patience)[0].job_id, [value])
    decision = plane.controller.decide(patience)
    assert decision.status == "COMPLETED" and len(plane.trials(patience)) == 3


def test_a_lost_wake_up_is_covered_by_the_reconciler(plane: Plane) -> None:
    sweep_id = plane.create(maxTrials=2)
    plane.controller.decide(sweep_id)
    plane.finish(plane.running(sweep_id)[0].job_id, [0.3])
    # No wake reaches the controller: the reconciler's pass decides for every active sweep
    decisions = {d.sweep_id: d for d in plane.controller.reconcile()}
    assert decisions[sweep_id].started == [1]


def test_a_trial_claimed_by_a_decision_that_died_is_submitted_once_by_the_next(plane: Plane) -> None:
    sweep_id = plane.create(maxTrials=1)
    sweep, _ = plane.repo.load(sweep_id)
    # Given a decision that claimed trial 0 and died before submitting it
    from functions.service.sweeps.controller import distributions, rebuild_study
    from schemas.sweeps import Trial

    tuning = sweep.hyperparameter_tuning_config
    asked = rebuild_study(tuning, [], 0).ask(distributions(tuning))
    claimed = Trial(number=0, state=TrialState.SUBMITTING, params=asked.params, created_at=plane.jobs.clock() - timedelta(minutes=5))
    assert plane.repo.claim_trial(sweep_id, claimed) == "claimed"
    # When the next decision runs (twice, as two wakes would)
    plane.controller.decide(sweep_id)
    plane.controller.decide(sweep_id)
    # Then exactly one job was submitted for it, with the claimed parameters
    trial = plane.trials(sweep_id)[0]
    assert trial.state == TrialState.RUNNING and trial.params == asked.params
    assert [c.method for c in plane.workflow.calls].count("start") == 1


def test_the_same_seed_samples_the_same_trials(aws: AwsClients) -> None:
    params = []
    for _ in range(2):
        plane = Plane(aws, fresh_resources(aws))
        sweep_id = plane.create(method="bayes", maxTrials=3, maxParallelTrials=3, seed=11)
        plane.controller.decide(sweep_id)
        params.append([t.params for t in plane.trials(sweep_id)])
    assert params[0] == params[1] and len(params[0]) == 3


def test_pause_stops_new_trials_and_pauses_running_ones_resume_goes_on_cancel_ends_all(plane: Plane) -> None:
    sweep_id = plane.create(maxTrials=4, maxParallelTrials=2)
    plane.controller.decide(sweep_id)
    a, b = plane.running(sweep_id)
    advance(plane.jobs.repo, a.job_id, *TO_TRAINING)  # b is still queued
    sweep = plane.service.pause(sweep_id, plane.alice)
    assert sweep.status == SweepStatus.PAUSED
    assert plane.jobs.repo.get(a.job_id).pending_action == "pause"
    plane.finish(b.job_id, [0.4])
    assert plane.controller.decide(sweep_id).started == []  # paused: nothing new
    advance(plane.jobs.repo, a.job_id, S.PAUSED)
    sweep = plane.service.resume(sweep_id, plane.alice)
    assert sweep.status == SweepStatus.RUNNING and plane.jobs.repo.get(a.job_id).status == S.QUEUED
    assert plane.controller.decide(sweep_id).started == [2]
    sweep = plane.service.cancel(sweep_id, plane.alice)
    assert sweep.status == SweepStatus.CANCELLED
    assert {plane.jobs.repo.get(t.job_id).status for t in plane.running(sweep_id)} == {S.CANCELLED}


def test_another_principals_sweep_is_not_found_and_only_finished_sweeps_are_deleted(plane: Plane) -> None:
    from functions.errors import SweepNotFound
    from functions.service.sweeps.service import SweepConflict

    sweep_id = plane.create()
    with pytest.raises(SweepNotFound):
        plane.service.get(sweep_id, plane.jobs.principal(BOB))
    with pytest.raises(SweepConflict):
        plane.service.delete(sweep_id, plane.alice)
    plane.service.cancel(sweep_id, plane.alice)
    plane.service.delete(sweep_id, plane.alice)
    with pytest.raises(SweepNotFound):
        plane.service.get(sweep_id, plane.alice)


def test_a_preempted_trial_that_resumes_is_the_same_trial_and_counts_once(plane: Plane) -> None:
    sweep_id = plane.create(maxTrials=1)
    plane.controller.decide(sweep_id)
    trial = plane.running(sweep_id)[0]
    advance(plane.jobs.repo, trial.job_id, *TO_TRAINING)
    plane.report(trial.job_id, 1, 0.2)
    plane.report(trial.job_id, 2, 0.3)
    # Preempted (resuming from its checkpoint): still the same running trial, nothing new starts
    advance(plane.jobs.repo, trial.job_id, S.PREEMPTED, run_outcome="resume_preempted")
    decision = plane.controller.decide(sweep_id)
    assert decision.started == [] and plane.trials(sweep_id)[0].state == TrialState.RUNNING
    # It resumes from step 1 and reports step 2 again: one value per step
    advance(plane.jobs.repo, trial.job_id, *TO_TRAINING, run_outcome=None)
    plane.report(trial.job_id, 2, 0.35)
    plane.report(trial.job_id, 3, 0.4)
    advance(plane.jobs.repo, trial.job_id, S.COMPLETED)
    assert plane.controller.decide(sweep_id).status == "COMPLETED"
    done = plane.trials(sweep_id)
    assert len(done) == 1 and done[0].intermediate_values == {1: 0.2, 2: 0.35, 3: 0.4} and done[0].value == pytest.approx(0.4)


def test_asha_prunes_a_trial_below_its_rung_and_keeps_its_rungs_in_the_table(plane: Plane) -> None:
    asha = {"type": "asha", "minResource": 1, "reductionFactor": 2}
    sweep_id = plane.create(maxTrials=3, maxParallelTrials=1, earlyStopping=asha)
    for value in (0.9,):
        plane.controller.decide(sweep_id)
        job_id = plane.running(sweep_id)[0].job_id
        advance(plane.jobs.repo, job_id, *TO_TRAINING)
        for step in (1, 2):
            plane.report(job_id, step, value)
            plane.controller.decide(sweep_id)  # each report wakes the controller: it records the rung reached
        advance(plane.jobs.repo, job_id, S.COMPLETED)
        plane.controller.decide(sweep_id)
    loser = plane.running(sweep_id)[0]
    advance(plane.jobs.repo, loser.job_id, *TO_TRAINING)
    plane.report(loser.job_id, 1, 0.1)
    decision = plane.controller.decide(sweep_id)
    assert decision.pruned == [loser.number]
    stored = plane.trials(sweep_id)[loser.number]
    assert "asha early stopping" in (stored.reason or "") and any(k.startswith("completed_rung_") for k in stored.system_attrs)


def _run_trial(plane: Plane, sweep_id: str, values: list[float]) -> tuple[int, list[int]]:
    """Start the next trial and report its values step by step, a decision after each report (as each
    report's wake-up would run one); (its number, the steps at which the controller pruned it)."""
    plane.controller.decide(sweep_id)
    trial = plane.running(sweep_id)[0]
    advance(plane.jobs.repo, trial.job_id, *TO_TRAINING)
    pruned_at = []
    for step, value in enumerate(values, start=1):
        plane.report(trial.job_id, step, value)
        if plane.controller.decide(sweep_id).pruned == [trial.number]:
            pruned_at.append(step)
            break
    if not pruned_at:
        advance(plane.jobs.repo, trial.job_id, S.COMPLETED)
    return trial.number, pruned_at


def test_hyperband_prunes_weak_trials_each_at_its_brackets_rung(plane: Plane) -> None:
    # maxResource unset: the first trial to complete fixes it (4 steps: 5), so 3 brackets, whose first
    # rungs are at steps 1, 2 and 4. A trial's bracket is a hash of (seed, trial number): with seed 2,
    # trials 3 and 4 fall in the bracket that checks at step 1, trial 5 in the one that checks at step 4.
    hyperband = {"type": "hyperband", "minResource": 1, "reductionFactor": 2}
    sweep_id = plane.create(maxTrials=6, maxParallelTrials=1, earlyStopping=hyperband, seed=2)
    strong = [_run_trial(plane, sweep_id, [v] * 4) for v in (0.9, 0.8, 0.85)]
    weak = [_run_trial(plane, sweep_id, [0.1] * 4) for _ in range(3)]
    assert strong == [(0, []), (1, []), (2, [])]
    assert weak == [(3, [1]), (4, [1]), (5, [4])]  # fixed by the seed: the same on every run
    trials = plane.trials(sweep_id)
    for trial in trials[3:]:
        assert trial.state == TrialState.PRUNED and "hyperband early stopping" in (trial.reason or "")
        assert plane.jobs.repo.get(trial.job_id).status == S.CANCELLED
        assert any(k.startswith("completed_rung_") for k in trial.system_attrs)
    assert plane.controller.decide(sweep_id).status == "COMPLETED"


def test_an_ended_trial_moves_into_its_block_and_no_decision_can_create_it_again(plane: Plane) -> None:
    from functions.adapters import sweeps as layout
    from schemas.sweeps import Trial

    sweep_id = plane.create(maxTrials=3)
    plane.controller.decide(sweep_id)
    trial = plane.running(sweep_id)[0]
    plane.report(trial.job_id, 1, 0.25)
    read = plane.trials(sweep_id)[0]
    ended = read.model_copy(update={"state": TrialState.COMPLETE, "value": 0.25, "ended_at": plane.jobs.clock()})
    # A value reported after the decision read the trial refuses the move (the decision reads again)
    plane.report(trial.job_id, 2, 0.5)
    assert plane.repo.update_trial(sweep_id, ended, read.version) is False
    read = plane.trials(sweep_id)[0]
    ended = read.model_copy(update={"state": TrialState.COMPLETE, "value": 0.5, "ended_at": plane.jobs.clock()})
    assert plane.repo.update_trial(sweep_id, ended, read.version) is True
    assert plane.repo.update_trial(sweep_id, ended, read.version) is False  # moved once
    # It reads back whole, from its block (its TRIAL# item is gone: a late report is not recorded)
    (stored,) = plane.trials(sweep_id)
    assert stored.model_dump() == ended.model_dump() and stored.version == read.version + 1
    assert stored.intermediate_values == {1: 0.25, 2: 0.5}
    assert plane.repo.record_value(sweep_id, 0, trial.job_id, 3, 0.9) is False
    keys = [
        i["sk"]["S"]
        for i in plane.repo._ddb.query(
            TableName=plane.repo.table, KeyConditionExpression="pk = :pk", ExpressionAttributeValues={":pk": {"S": f"SWEEP#{sweep_id}"}}
        )["Items"]
    ]
    assert keys == ["DONE#0000", "META"]
    # A decision that read the sweep before trial 0 was claimed, ran and ended cannot create trial 0 again
    again = Trial(number=0, state=TrialState.SUBMITTING, params=stored.params, created_at=plane.jobs.clock())
    assert plane.repo.claim_trial(sweep_id, again) == "taken"
    # An ended trial too large for its share of a block keeps an item of its own, and reads back whole
    plane.controller.decide(sweep_id)
    big = plane.running(sweep_id)[0]
    many = {str(step): {"N": str(step / 1000)} for step in range(1, 400)}  # 399 reports, written at once
    plane.repo._ddb.update_item(
        TableName=plane.repo.table,
        Key=layout._trial_key(sweep_id, big.number),
        UpdateExpression="SET iv = :m",
        ExpressionAttributeValues={":m": {"M": many}},
    )
    read = plane.trials(sweep_id)[1]
    ended = read.model_copy(update={"state": TrialState.FAIL, "reason": "job FAILED: x" * 50, "ended_at": plane.jobs.clock()})
    assert len(read.intermediate_values) == 399 and plane.repo.update_trial(sweep_id, ended, read.version)
    assert plane.trials(sweep_id)[1].model_dump() == ended.model_dump()
    assert plane.repo.claim_trial(sweep_id, again.model_copy(update={"number": 1})) == "taken"
    assert layout.ENTRY_MAX_BYTES * layout.BLOCK < layout.items.MAX_ITEM_BYTES


def test_two_decisions_at_once_create_each_trial_once(plane: Plane) -> None:
    # Decision A reads the sweep, then, before it claims trial 0, decision B runs whole and trial 0 ends
    sweep_id = plane.create(maxTrials=3, maxParallelTrials=1)
    other = SweepController(plane.repo, plane.jobs)
    claim = plane.repo.claim_trial
    raced: list[int] = []

    def claim_after_the_other(sweep: str, trial: Any) -> Any:
        if not raced:
            raced.append(trial.number)
            assert other.decide(sweep_id).started == [0]
            plane.finish(plane.running(sweep_id)[0].job_id, [0.5])
            assert other.decide(sweep_id).started == [1]  # trial 0 ended (moved into its block), trial 1 started
        return claim(sweep, trial)

    plane.repo.claim_trial = claim_after_the_other  # type: ignore[method-assign]
    # A's claim of trial 0 is refused; it reads again and starts nothing (trial 1 runs: the one slot is taken)
    assert plane.controller.decide(sweep_id).started == []
    trials = plane.trials(sweep_id)
    assert [t.number for t in trials] == [0, 1] and raced == [0]
    jobs = plane.jobs.repo.list_jobs(JobQuery(owner=ALICE, labels={"sweep_id": sweep_id}, limit=10))[0]
    assert sorted(j.labels["trial"] for j in jobs) == ["0", "1"]
