"""The forecast learns from finished jobs (issue 25 point 6; functions/service/forecast_learning.py)."""

from __future__ import annotations

import threading

import pytest

from functions.service import budget_meter as meter
from functions.service.forecast_learning import ForecastLearner
from schemas.job import Job
from schemas.status import JobStatus
from tests.helpers.forecast import InMemoryShapeRecords, finished_job


def test_with_no_history_the_forecast_is_the_documented_prior() -> None:
    learner = ForecastLearner(InMemoryShapeRecords())
    guess = learner.forecast(finished_job(100, 0.0, status=JobStatus.PENDING))
    assert guess.basis == "prior" and guess.seconds == meter.PRIOR_SECONDS


def test_finished_jobs_teach_seconds_per_step_and_the_forecast_scales_with_steps() -> None:
    # Given: three finished 1 x H100 LoRA jobs at 0.5 s/step (different sizes)
    learner = ForecastLearner(InMemoryShapeRecords())
    for steps in (100, 400, 1000):
        assert learner.record(finished_job(steps, steps * 0.5, tokens_per_second=900.0))

    # When: a 2,000-step job of the same shape is forecast
    guess = learner.forecast(finished_job(2000, 0.0, status=JobStatus.PENDING))

    # Then: steps x measured seconds/step, with a range around it, at the shape's rate
    assert guess.seconds == pytest.approx(1000.0)
    assert guess.low_seconds < 1000.0 < guess.high_seconds
    assert "steps x measured seconds/step (3 finished jobs" in guess.basis
    assert guess.hourly_usd == meter.unit_rate(finished_job(1, 1.0))
    [shape] = learner.accuracy().shapes
    assert shape.shape == "H100x1/LORA/1B-3B" and shape.count == 3
    assert shape.seconds_per_step == pytest.approx(0.5) and shape.tokens_per_second == 900.0


def test_a_fixed_startup_is_learned_so_short_runs_do_not_skew_long_ones() -> None:
    # Given: runs of 100, 400 and 1,000 steps, each 60 s of startup then 0.5 s/step
    learner = ForecastLearner(InMemoryShapeRecords())
    for steps in (100, 400, 1000):
        learner.record(finished_job(steps, 60.0 + steps * 0.5))

    # Then: a 4,000-step run is forecast at 60 + 2,000 s (plain seconds/step would say far more: 0.56..1.1 s/step)
    guess = learner.forecast(finished_job(4000, 0.0, status=JobStatus.PENDING))
    assert guess.seconds == pytest.approx(2060.0)
    assert guess.basis.startswith("startup + steps x measured seconds/step")


def test_where_run_time_does_not_grow_with_steps_the_forecast_is_the_startup_not_steps_x_seconds_per_step() -> None:
    # Given: runs of 10, 50 and 100 steps that all took about 30 s (loading the model dominates; the load varied)
    learner = ForecastLearner(InMemoryShapeRecords())
    for steps, seconds in ((10, 31.0), (50, 29.0), (100, 30.0)):
        assert learner.record(finished_job(steps, seconds))

    # When: a 20-step run is forecast
    guess = learner.forecast(finished_job(20, 0.0, status=JobStatus.PENDING))

    # Then: about the runs' 30 s (a flat fit), not 20 x their seconds/step (0.3..3 s/step: 6..62 s, median 12 s)
    assert guess.seconds == pytest.approx(30.0, abs=1.0)
    assert guess.basis.startswith("startup + steps x measured seconds/step")


def test_another_shape_does_not_learn_from_these_jobs() -> None:
    learner = ForecastLearner(InMemoryShapeRecords())
    learner.record(finished_job(100, 50.0))
    assert learner.forecast(finished_job(100, 0.0, gpus=2, status=JobStatus.PENDING)).basis == "prior"


def test_each_job_is_scored_against_the_forecast_before_it_was_learned() -> None:
    # Given: the first job is forecast by the prior (3,600 s) and took 1,800 s; the second by the first (0.5 s/step)
    learner = ForecastLearner(InMemoryShapeRecords())
    learner.record(finished_job(3600, 1800.0))
    learner.record(finished_job(1000, 600.0))

    # Then: errors 100% (3600 vs 1800) and 16.667% (500 vs 600): the median of the two
    [shape] = learner.accuracy().shapes
    assert shape.scored == 2
    assert shape.median_abs_error_percent == pytest.approx((100.0 + 100 / 6) / 2, abs=0.01)


def test_a_completion_recorded_twice_counts_once_and_unfinished_jobs_teach_nothing() -> None:
    learner = ForecastLearner(InMemoryShapeRecords())
    job = finished_job(100, 50.0)
    assert learner.record(job) is True
    assert learner.record(job) is False
    assert learner.record(finished_job(100, 50.0, status=JobStatus.FAILED)) is False
    assert learner.record(finished_job(100, 0.0)) is False  # no measured run time
    assert learner.accuracy().shapes[0].count == 1


def test_without_max_steps_the_shape_durations_are_the_forecast_and_the_cap_bounds_it() -> None:
    learner = ForecastLearner(InMemoryShapeRecords())
    for seconds in (900.0, 1000.0, 1100.0):
        learner.record(finished_job(100, seconds))
    open_ended = finished_job(100, 0.0, status=JobStatus.PENDING)
    open_ended.training_config.hyperparameters.pop("max_steps")
    guess = learner.forecast(open_ended)
    assert guess.seconds == pytest.approx(1000.0) and guess.basis.startswith("the shape's measured durations")
    capped = finished_job(100, 0.0, status=JobStatus.PENDING, scheduling={"max_runtime_seconds": 30})
    assert learner.forecast(capped).high_seconds == 30.0


def test_completions_racing_on_one_shape_are_all_recorded() -> None:
    # Given: 16 completions of one shape recorded at once (conditional puts; the losers re-read)
    records = InMemoryShapeRecords()
    learner = ForecastLearner(records)
    jobs = [finished_job(100, 50.0 + i) for i in range(16)]
    barrier = threading.Barrier(len(jobs))
    added: list[bool] = []

    def record(job: Job) -> None:
        barrier.wait()
        added.append(learner.record(job))

    threads = [threading.Thread(target=record, args=(job,)) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    # Then: none lost
    assert added == [True] * len(jobs)
    [record_] = records.list()
    assert record_.count == 16 and sorted(record_.job_ids) == sorted(j.job_id for j in jobs)


def test_the_lifecycle_teaches_the_forecast_each_completed_job_once_and_no_failed_one() -> None:
    from functions.service.ports import RunDescription, RunState
    from schemas.trainer import TrainerEventKind
    from tests.unit.test_statemachine_tasks import World, event

    # Given: the lifecycle wired to a learner (as functions/composition.py wires it)
    w = World()
    records = InMemoryShapeRecords()
    w.svc.completions = ForecastLearner(records).record

    def run(max_steps: int) -> str:
        job = w.submit(max_steps=max_steps)
        w.to_training(job.job_id)
        w.svc.on_trainer_event(job.job_id, 1, event(TrainerEventKind.PROGRESS, step=4, total_steps=4, loss=1.0))
        return job.job_id

    # When: one job completes (its end reported twice: the launcher monitor and the reconciler), another fails
    done = run(4)
    finished = RunDescription(state=RunState.COMPLETED, run_seconds=42.0)
    w.svc.on_run_finished(done, 1, finished)
    w.svc.on_run_finished(done, 1, finished)
    failed = run(4)
    w.svc.on_run_finished(failed, 1, RunDescription(state=RunState.FAILED, run_seconds=10.0))
    assert w.repo.get(done).status == JobStatus.COMPLETED and w.repo.get(failed).status == JobStatus.FAILED

    # Then: the completed one is learned from once, with its measured seconds per step; the failed one not
    [record] = records.list()
    assert record.job_ids == [done] and record.durations == [42.0]
    assert record.seconds_per_step == [pytest.approx(42.0 / 4)]
