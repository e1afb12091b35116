"""SweepHooks on fakes (no moto): which trainer reports become a trial's value, with what arguments, and when
the controller is woken. That the write is conditional on the trial's job is the repository's business
(tests/integration/test_sweeps_guards.py); here: the hook asks for exactly that write, and nothing else."""

from __future__ import annotations

import logging
import time
from types import SimpleNamespace
from typing import Any

import pytest

from functions.errors import SweepNotFound
from functions.service.sweeps.hooks import SweepHooks
from schemas.sweeps import SWEEP_LABEL, TRIAL_LABEL
from schemas.trainer import TrainerEvent, TrainerEventKind

K = TrainerEventKind


class Sweeps:
    def __init__(self, *, accepts: bool = True, fails: BaseException | None = None) -> None:
        self.accepts = accepts
        self.fails = fails
        self.gets: list[str] = []
        self.values: list[tuple[str, int, str, int, float]] = []

    def get(self, sweep_id: str) -> Any:
        self.gets.append(sweep_id)
        if self.fails is not None:
            raise self.fails
        metric = SimpleNamespace(name=f"acc-{sweep_id}")
        return SimpleNamespace(hyperparameter_tuning_config=SimpleNamespace(metric=metric))

    def record_value(self, sweep_id: str, number: int, job_id: str, step: int, value: float) -> bool:
        self.values.append((sweep_id, number, job_id, step, value))
        return self.accepts


class Waker:
    def __init__(self) -> None:
        self.woken: list[str] = []

    def wake(self, sweep_id: str) -> None:
        self.woken.append(sweep_id)


def job(labels: dict[str, str], job_id: str = "j-1") -> Any:
    return SimpleNamespace(job_id=job_id, labels=labels)


def trial_job(sweep_id: str = "s1", number: str = "3") -> Any:
    return job({SWEEP_LABEL: sweep_id, TRIAL_LABEL: number, "team": "x"})


def event(kind: TrainerEventKind, **data: Any) -> TrainerEvent:
    return TrainerEvent(kind=kind, time=time.time(), data=data)


def hooks(sweeps: Sweeps | None = None) -> tuple[SweepHooks, Sweeps, Waker]:
    sweeps = sweeps or Sweeps()
    waker = Waker()
    return SweepHooks(sweeps, waker), sweeps, waker  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", [K.METRICS, K.PROGRESS, K.CHECKPOINT])
def test_a_trial_jobs_metric_is_recorded_as_a_float_and_wakes_the_sweep(kind: TrainerEventKind) -> None:
    hook, sweeps, waker = hooks()
    hook.on_trainer_event(trial_job(), event(kind, step=7, **{"acc-s1": 2}))
    assert sweeps.values == [("s1", 3, "j-1", 7, 2.0)]
    assert isinstance(sweeps.values[0][4], float)
    assert waker.woken == ["s1"]


def test_a_checkpoints_metric_may_sit_in_its_metrics() -> None:
    hook, sweeps, _ = hooks()
    hook.on_trainer_event(trial_job(), event(K.CHECKPOINT, step=5, metrics={"acc-s1": 0.25}))
    assert sweeps.values == [("s1", 3, "j-1", 5, 0.25)]
    hook.on_trainer_event(trial_job(), event(K.CHECKPOINT, step=6, metrics=None))
    assert len(sweeps.values) == 1


def test_only_a_checkpoint_looks_into_metrics() -> None:
    hook, sweeps, waker = hooks()
    hook.on_trainer_event(trial_job(), event(K.METRICS, step=5, metrics={"acc-s1": 0.25}))
    assert sweeps.values == [] and waker.woken == []


@pytest.mark.parametrize(
    "data",
    [
        {"step": 1},  # no value
        {"step": 1, "acc-s1": True},  # a bool is no metric
        {"step": 1, "acc-s1": "0.5"},
        {"step": 1.0, "acc-s1": 0.5},  # the step is an int
        {"acc-s1": 0.5},
        {"step": 1, "accuracy": 0.5},  # another metric than the sweep's
    ],
)
def test_reports_without_the_sweeps_metric_at_a_step_record_nothing(data: dict[str, Any]) -> None:
    hook, sweeps, waker = hooks()
    hook.on_trainer_event(trial_job(), event(K.METRICS, **data))
    assert sweeps.values == [] and waker.woken == []


@pytest.mark.parametrize("number", ["", "x", "-1", "1.5"])
def test_a_job_without_a_trial_number_records_nothing(number: str, caplog: pytest.LogCaptureFixture) -> None:
    hook, sweeps, waker = hooks()
    with caplog.at_level(logging.WARNING):
        hook.on_trainer_event(trial_job(number=number), event(K.METRICS, step=1, **{"acc-s1": 0.5}))
        hook.on_trainer_event(job({SWEEP_LABEL: "s1"}), event(K.METRICS, step=1, **{"acc-s1": 0.5}))
    assert sweeps.values == [] and waker.woken == []  # nothing recorded: nothing to decide
    assert caplog.records == []  # skipped as no trial's, not failed


@pytest.mark.parametrize("labels", [{}, {SWEEP_LABEL: ""}, {TRIAL_LABEL: "0"}])
def test_jobs_of_no_sweep_cost_nothing(labels: dict[str, str]) -> None:
    hook, sweeps, waker = hooks()
    for kind in K:
        hook.on_trainer_event(job(labels), event(kind, step=1, accuracy=0.5))
    hook.on_job_changed(job(labels))
    assert (sweeps.gets, sweeps.values, waker.woken) == ([], [], [])


def test_a_refused_value_wakes_nothing_but_phases_and_ends_always_wake() -> None:
    hook, sweeps, waker = hooks(Sweeps(accepts=False))
    hook.on_trainer_event(trial_job(), event(K.METRICS, step=1, **{"acc-s1": 0.5}))
    assert len(sweeps.values) == 1 and waker.woken == []
    for kind in (K.PHASE, K.DONE, K.FAILURE):
        hook.on_trainer_event(trial_job(), event(kind, step=1, **{"acc-s1": 0.5}))
    assert waker.woken == ["s1"] * 3 and len(sweeps.values) == 1
    hook.on_trainer_event(trial_job(), event(K.TRACKING, step=1, **{"acc-s1": 0.5}))
    assert waker.woken == ["s1"] * 3 and sweeps.gets == ["s1"]


def test_the_metric_name_is_read_once_per_sweep() -> None:
    hook, sweeps, _ = hooks()
    for step in (1, 2):
        hook.on_trainer_event(trial_job("s1"), event(K.METRICS, step=step, **{"acc-s1": 0.5}))
        hook.on_trainer_event(trial_job("s2"), event(K.METRICS, step=step, **{"acc-s2": 0.5}))
    assert sweeps.gets == ["s1", "s2"]
    assert [v[0] for v in sweeps.values] == ["s1", "s2", "s1", "s2"]


def test_a_deleted_sweep_leaves_its_jobs_alone() -> None:
    hook, sweeps, waker = hooks(Sweeps(fails=SweepNotFound("s1")))
    hook.on_trainer_event(trial_job(), event(K.METRICS, step=1, **{"acc-s1": 0.5}))
    assert sweeps.values == [] and waker.woken == []


def test_a_failure_to_record_is_logged_not_raised_and_wakes_nothing(caplog: pytest.LogCaptureFixture) -> None:
    hook, sweeps, waker = hooks(Sweeps(fails=RuntimeError("throttled")))
    with caplog.at_level(logging.ERROR, logger="functions.service.sweeps.hooks"):
        hook.on_trainer_event(trial_job(), event(K.METRICS, step=1, **{"acc-s1": 0.5}))
    assert sweeps.gets == ["s1"] and sweeps.values == [] and waker.woken == []
    assert "the metric of j-1 was not recorded" in caplog.text


def test_a_changed_trial_job_wakes_its_sweep_and_a_default_waker_does_nothing() -> None:
    hook, _, waker = hooks()
    hook.on_job_changed(trial_job("s9"))
    assert waker.woken == ["s9"]
    quiet = SweepHooks(Sweeps())  # type: ignore[arg-type]
    quiet.on_job_changed(trial_job("s9"))
    quiet.on_trainer_event(trial_job(), event(K.DONE))
