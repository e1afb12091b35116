"""The guards of a sweep's data, each tested by forcing the interleaving it exists for (tests/helpers/races.py):
a job that is not the trial's writes no value, whatever its labels; a take-over adopts only the owner's
job; a claim, a trial's move into its block and a sweep's status are each won once by writers that
all read the same state."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

from functions.adapters import sweeps as layout
from functions.adapters.aws import AwsClients
from functions.service.sweeps.controller import SweepController, distributions, rebuild_study
from functions.service.sweeps.service import trial_labels
from schemas.job import SubmitJobRequest
from schemas.status import JobStatus
from schemas.sweeps import SweepStatus, Trial, TrialState
from tests.helpers.aws import emulated_aws, fresh_resources
from tests.helpers.jobs import ALICE, BOB, request_body
from tests.helpers.races import StaleRead
from tests.helpers.sweeps import TO_TRAINING, Plane, advance, metric_event

S = JobStatus


@pytest.fixture(scope="module")
def aws() -> Iterator[AwsClients]:
    with emulated_aws() as clients:
        yield clients


@pytest.fixture
def plane(aws: AwsClients) -> Plane:
    return Plane(aws, fresh_resources(aws))


def _labelled_job(plane: Plane, owner: str, sweep_id: str, number: int) -> str:
    """A job carrying a sweep's labels that the sweep did not start (a request cannot set them: this is the
    service's internal path, standing for a job stored with them however it came to be)."""
    principal = plane.jobs.principal(owner)
    request = SubmitJobRequest.model_validate(request_body(name="intruder"))
    job = plane.jobs.submit(request, principal, labels=trial_labels(sweep_id, number))
    advance(plane.jobs.repo, job.job_id, *TO_TRAINING)
    return job.job_id


def _half_claimed(plane: Plane, sweep_id: str, number: int) -> Trial:
    """Trial `number` claimed by a decision that died before it recorded a job (its lease long over)."""
    sweep, trials = plane.repo.load(sweep_id)
    tuning = sweep.hyperparameter_tuning_config
    asked = rebuild_study(tuning, trials, number).ask(distributions(tuning))
    trial = Trial(number=number, state=TrialState.SUBMITTING, params=asked.params, created_at=plane.jobs.clock() - timedelta(minutes=5))
    assert plane.repo.claim_trial(sweep_id, trial) == "claimed"
    return trial


# --- 1. values come from the trial's own job only -------------------------------------------------


def test_another_principals_job_labelled_with_a_sweep_changes_no_trial(plane: Plane) -> None:
    # Given alice's sweep whose trial 0 reported 0.5 at step 1
    sweep_id = plane.create(maxTrials=2, maxParallelTrials=1)
    plane.controller.decide(sweep_id)
    (trial,) = plane.running(sweep_id)
    advance(plane.jobs.repo, trial.job_id, *TO_TRAINING)
    plane.report(trial.job_id, 1, 0.5)
    # When bob's job, and a job of alice's that is not the trial's, both labelled with the sweep's id and trial 0, report
    for intruder in (_labelled_job(plane, BOB, sweep_id, 0), _labelled_job(plane, ALICE, sweep_id, 0)):
        plane.hooks.on_trainer_event(plane.jobs.repo.get(intruder), metric_event(1, 99.0))
        plane.hooks.on_trainer_event(plane.jobs.repo.get(intruder), metric_event(2, 99.0))
    # Then trial 0 holds what its own job reported, nothing else
    (stored,) = plane.trials(sweep_id)
    assert stored.intermediate_values == {1: 0.5}
    # And its own job still reports
    plane.report(trial.job_id, 2, 0.6)
    assert plane.trials(sweep_id)[0].intermediate_values == {1: 0.5, 2: 0.6}


def test_a_trial_stored_before_its_native_job_id_takes_its_own_jobs_values_only(plane: Plane) -> None:
    # Given a running trial stored by the version before the native job_id (its job only in its doc)
    sweep_id = plane.create(maxTrials=1)
    plane.controller.decide(sweep_id)
    (trial,) = plane.running(sweep_id)
    key = layout._trial_key(sweep_id, 0)
    names = {"#j": layout.JOB_ATTR}
    plane.repo._ddb.update_item(TableName=plane.repo.table, Key=key, UpdateExpression="REMOVE #j", ExpressionAttributeNames=names)
    # When another job of the same owner, then the trial's own, report
    intruder = _labelled_job(plane, ALICE, sweep_id, 0)
    assert plane.repo.record_value(sweep_id, 0, intruder, 1, 99.0) is False
    assert plane.repo.record_value(sweep_id, 0, trial.job_id, 1, 0.5) is True
    # Then only the trial's own value is there
    assert plane.trials(sweep_id)[0].intermediate_values == {1: 0.5}


def test_the_take_over_adopts_only_the_sweep_owners_job(plane: Plane) -> None:
    # Given trial 0 half-claimed, and only bob's job labelled with it
    sweep_id = plane.create(maxTrials=2, maxParallelTrials=2)
    _half_claimed(plane, sweep_id, 0)
    bobs = _labelled_job(plane, BOB, sweep_id, 0)
    # When the next decision takes trial 0 over
    plane.controller.decide(sweep_id)
    # Then it submitted trial 0 as alice's own job, and bob's job is nobody's trial
    first = plane.trials(sweep_id)[0]
    assert first.job_id is not None and first.job_id != bobs
    assert plane.jobs.repo.get(first.job_id).owner == ALICE
    assert plane.repo.record_value(sweep_id, 0, bobs, 1, 99.0) is False


def test_the_take_over_adopts_the_owners_job_submitted_before_the_decision_died(plane: Plane) -> None:
    # Given trial 0 half-claimed, its job (alice's) submitted, and bob's labelled job newer
    sweep_id = plane.create(maxTrials=1)
    _half_claimed(plane, sweep_id, 0)
    alices = _labelled_job(plane, ALICE, sweep_id, 0)
    _labelled_job(plane, BOB, sweep_id, 0)
    starts = plane.workflow.methods().count("start")
    # When the next decision takes it over
    plane.controller.decide(sweep_id)
    # Then it adopted alice's job, submitted nothing, and takes that job's values
    assert plane.trials(sweep_id)[0].job_id == alices and plane.workflow.methods().count("start") == starts
    assert plane.repo.record_value(sweep_id, 0, alices, 1, 0.5) is True


# --- 2. one winner among writers that read the same state -----------------------------------------


def test_a_second_claim_of_a_running_trial_is_taken_and_keeps_its_job(plane: Plane) -> None:
    # Given trial 0 running as its job
    sweep_id = plane.create(maxTrials=2, maxParallelTrials=1)
    plane.controller.decide(sweep_id)
    (running,) = plane.running(sweep_id)
    # When a decision that read the sweep before trial 0 existed claims it
    again = Trial(number=0, state=TrialState.SUBMITTING, params=running.params, created_at=plane.jobs.clock())
    assert plane.repo.claim_trial(sweep_id, again) == "taken"
    # Then trial 0 is unchanged: running, its job recorded, its job's values taken
    (stored,) = plane.trials(sweep_id)
    assert (stored.state, stored.job_id, stored.version) == (TrialState.RUNNING, running.job_id, running.version)
    assert plane.repo.record_value(sweep_id, 0, running.job_id, 1, 0.5) is True


def test_two_decisions_on_one_read_start_each_trial_once(plane: Plane) -> None:
    # Given two decisions that both load the sweep before either claims a trial
    sweep_id = plane.create(maxTrials=4, maxParallelTrials=2)
    other = SweepController(plane.repo, plane.jobs)
    # When both decide
    outcomes = StaleRead(plane.repo, "load").run(lambda: plane.controller.decide(sweep_id), lambda: other.decide(sweep_id))
    # Then the first starts trials 0 and 1; the second's claims are refused, it reads again, and starts none
    assert [o.value.started for o in outcomes] == [[0, 1], []]
    assert plane.workflow.methods().count("start") == 2
    assert sorted(t.job_id for t in plane.trials(sweep_id)) == sorted({t.job_id for t in plane.trials(sweep_id)})


def test_two_decisions_on_one_read_end_a_trial_once(plane: Plane) -> None:
    # Given trial 0's job completed, read by two decisions before either wrote
    sweep_id = plane.create(maxTrials=3, maxParallelTrials=1)
    plane.controller.decide(sweep_id)
    (trial,) = plane.running(sweep_id)
    plane.finish(trial.job_id, [0.5])
    read = plane.trials(sweep_id)[0]
    before = plane.repo._ddb.get_item(TableName=plane.repo.table, Key=layout._trial_key(sweep_id, 0))["Item"]
    ended = read.model_copy(update={"state": TrialState.COMPLETE, "value": 0.5, "ended_at": plane.jobs.clock()})
    # When both move it into its block
    outcomes = [plane.repo.update_trial(sweep_id, ended, read.version) for _ in range(2)]
    # Then one moved it; the trial is there once, ended
    assert outcomes.count(True) == 1
    assert [(t.number, t.state) for t in plane.trials(sweep_id)] == [(0, TrialState.COMPLETE)]
    # And even were its TRIAL# item back as the decisions read it, its block entry is never written twice
    plane.repo._ddb.put_item(TableName=plane.repo.table, Item=before)
    other = read.model_copy(update={"state": TrialState.FAIL, "reason": "late", "ended_at": plane.jobs.clock()})
    assert plane.repo.update_trial(sweep_id, other, read.version) is False
    block = plane.repo._ddb.get_item(TableName=plane.repo.table, Key=layout._block_key(sweep_id, 0))["Item"]
    assert '"state":"COMPLETE"' in block["t0"]["S"]


def test_two_status_changes_of_a_sweep_on_one_read_one_wins(plane: Plane) -> None:
    # Given a sweep read by two writers (a pause and an end)
    sweep_id = plane.create()
    read = plane.repo.get(sweep_id)
    paused = read.model_copy(update={"status": SweepStatus.PAUSED})
    ended = read.model_copy(update={"status": SweepStatus.CANCELLED})
    # When both write on the version they read
    outcomes = [plane.repo.update(paused, read.version), plane.repo.update(ended, read.version)]
    # Then the first wins, the second is refused and changes nothing
    assert outcomes == [True, False]
    stored = plane.repo.get(sweep_id)
    assert (stored.status, stored.version) == (SweepStatus.PAUSED, read.version + 1)
    # And a delete on the stale version is refused too
    assert plane.repo.delete(sweep_id, read.version) is False and plane.repo.get(sweep_id).status == SweepStatus.PAUSED


def test_a_trial_changed_since_the_read_is_not_written_on_that_read(plane: Plane) -> None:
    # Given trial 0 read by a decision, then marked to be pruned by another (its version moves on)
    sweep_id = plane.create(maxTrials=2, maxParallelTrials=1)
    plane.controller.decide(sweep_id)
    (read,) = plane.running(sweep_id)
    marked = read.model_copy(update={"prune_requested": True, "reason": "pruned"})
    assert plane.repo.update_trial(sweep_id, marked, read.version) is True
    # When the first decision ends it on what it read
    failed = read.model_copy(update={"state": TrialState.FAIL, "reason": "job FAILED", "ended_at": plane.jobs.clock()})
    # Then that is refused (it decides again on the stored trial), as is any other write on that read
    assert plane.repo.update_trial(sweep_id, failed, read.version) is False
    assert plane.repo.update_trial(sweep_id, read.model_copy(update={"system_attrs": {"rung": 1}}), read.version) is False
    (stored,) = plane.trials(sweep_id)
    assert (stored.state, stored.prune_requested, stored.version) == (TrialState.RUNNING, True, read.version + 1)


# --- the reserved labels: a trial job's retry is no trial; its edits still work ----------------------


def test_a_retry_of_a_trial_job_is_not_the_trial_and_does_not_carry_its_labels(plane: Plane) -> None:
    from schemas.api import PatchJobRequest, RetryRequest

    # Given trial 0's job, edited while queued (a trial job stays editable), then failed
    sweep_id = plane.create(maxTrials=1)
    plane.controller.decide(sweep_id)
    (trial,) = plane.running(sweep_id)
    edited = plane.jobs.patch(trial.job_id, plane.alice, PatchJobRequest(priority=7))
    assert edited.scheduling_config.priority == 7 and edited.labels == trial_labels(sweep_id, 0) | {"team": "support"}
    advance(plane.jobs.repo, trial.job_id, *TO_TRAINING)
    advance(plane.jobs.repo, trial.job_id, S.FAILED)
    # When alice retries it
    child = plane.jobs.retry(trial.job_id, plane.alice, RetryRequest())
    # Then the child keeps the template's labels but not the sweep's, and reports nothing into trial 0
    assert child.labels == {"team": "support"} and child.parent_job_id == trial.job_id
    plane.hooks.on_trainer_event(plane.jobs.repo.get(child.job_id), metric_event(1, 99.0))
    assert plane.repo.record_value(sweep_id, 0, child.job_id, 1, 99.0) is False
    assert plane.trials(sweep_id)[0].intermediate_values == {}


def test_a_parameter_aimed_at_a_reserved_label_is_refused_at_create(plane: Plane) -> None:
    from functions.errors import InvalidRequest

    body = {"type": "categorical", "values": ["a", "b"], "target": "labels.sweep_id"}
    with pytest.raises(InvalidRequest) as refused:
        plane.create(parameters={"tag": body})
    assert "label 'sweep_id' is reserved" in str(refused.value)
