"""Experiment tracking in the trainer (trainer/tracking/): one MLflow run and one TensorBoard curve per
job across a crash after logging past its checkpoint, a resume, a pause (SIGTERM) and a second resume;
a retry's run is a child of its parent's. MLflow: a file store (the client API is the same as against a
server; tests/e2e/test_tracking_e2e.py runs a real `mlflow server`). TensorBoard: the event files read
back with TensorBoard's own EventAccumulator."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
from trainer import tracking
from trainer.events import Events
from trainer.tracking import mlflow_sink
from trainer.tracking import sink as tracking_sink

from schemas.trainer import ExitCode, TrainerEventKind
from tests.trainer.runs import make_spec, metrics_points, run_in_process

STEPS = 10
LABELS = {"team": "nlp", "mlflow.runName": "spoofed"}


class Crash(BaseException):
    """A trainer dying mid-run (no checkpoint at the step it reached)."""


def _spec(root: Path, store: Path, *, job_id: str = "job-1", attempt: int = 1, **plan: Any) -> dict[str, Any]:
    spec = make_spec(
        root,
        "SFT",
        hyperparameters={"max_steps": str(STEPS), "learning_rate": "3e-3", "eval_steps": "4", "async_checkpoint": "false"},
        records=20,
        data_config={"validation_split": 0.2},
        output_config={"checkpoint": {"save_steps": 3, "save_total_limit": 10}},
        job_id=job_id,
        attempt=attempt,
    )
    config = {"mlflow": {"tracking_uri": f"file://{store}", "experiment_name": "tracking-test"}, "tensorboard": {}}
    spec["output_config"]["tracking"] = config
    spec["tracking"] = {"config": config, "job_name": f"name-of-{job_id}", "labels": LABELS, "tensorboard_uri": str(root / "tb"), **plan}
    return spec


def _at_progress(monkeypatch: pytest.MonkeyPatch, step: int, action: Any) -> None:
    original = Events.emit

    def emit(self: Events, kind: TrainerEventKind, data: dict[str, Any] | None = None) -> Any:
        event = original(self, kind, data)
        if kind == TrainerEventKind.PROGRESS and data and data["step"] == step:
            action()
        return event

    monkeypatch.setattr(Events, "emit", emit)


def _crash() -> None:
    raise Crash


def _client(store: Path) -> Any:
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=f"file://{store}")


def _runs(store: Path) -> list[Any]:
    client = _client(store)
    experiment = client.get_experiment_by_name("tracking-test")
    return list(client.search_runs([experiment.experiment_id])) if experiment else []


def _history(store: Path, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in _client(store).get_metric_history(run_id, key))


def _tensorboard(directory: Path, tag: str) -> list[tuple[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(directory))
    accumulator.Reload()
    return [(e.step, e.value) for e in accumulator.Scalars(tag)]


@pytest.mark.slow
def test_one_run_across_a_crash_a_resume_a_pause_and_a_resume_with_a_continuous_curve(tmp_path: Path, monkeypatch, capsys) -> None:
    root, store = tmp_path / "job", tmp_path / "mlruns"
    # Given a job logging to MLflow and TensorBoard whose first attempt flushes every point and dies at
    # step 5, after its checkpoint at step 3 (steps 4 and 5 are logged, then re-done by the next attempt)
    with monkeypatch.context() as patch:
        patch.setattr(tracking, "FLUSH_SECONDS", 0.0)
        _at_progress(patch, 5, _crash)
        first = run_in_process(root, _spec(root, store), patch, capsys)
    assert first.code == ExitCode.INTERNAL_ERROR
    (reported,) = first.of_kind(TrainerEventKind.TRACKING)
    run_id = reported.data["mlflow_run_id"]
    assert reported.data["tensorboard_uri"] == str(root / "tb")
    assert [s for s, _ in _history(store, run_id, "loss")] == [1, 2, 3, 4, 5]

    # When it is resumed (the control plane passes the reported run), paused by SIGTERM at step 7, and
    # resumed again without the run id (found by the job's tag)
    with monkeypatch.context() as patch:
        _at_progress(patch, 7, lambda: os.kill(os.getpid(), signal.SIGTERM))
        second = run_in_process(root, _spec(root, store, attempt=2, mlflow_run_id=run_id), patch, capsys)
    assert second.code == ExitCode.STOPPED_WITH_CHECKPOINT
    assert _runs(store)[0].info.status == "KILLED"
    third = run_in_process(root, _spec(root, store, attempt=3), monkeypatch, capsys)
    assert third.code == ExitCode.COMPLETED

    # Then there is exactly one run, FINISHED, reported by every attempt
    (run,) = _runs(store)
    assert run.info.run_id == run_id and run.info.status == "FINISHED"
    assert {e.data["mlflow_run_id"] for o in (second, third) for e in o.of_kind(TrainerEventKind.TRACKING)} == {run_id}
    # and its loss curve has every step once, with the values metrics.jsonl ends with (the latest attempt's)
    final = {p.step: p for p in metrics_points(root) if p.loss is not None}
    loss = _history(store, run_id, "loss")
    assert [s for s, _ in loss] == list(range(1, STEPS + 1))
    assert loss == [(s, pytest.approx(final[s].loss)) for s in range(1, STEPS + 1)]
    assert [s for s, _ in _history(store, run_id, "eval_loss")] == [4, 8, STEPS]
    # and the checkpoints' steps, the params and the labels are logged
    assert [s for s, _ in _history(store, run_id, tracking_sink.CHECKPOINT_METRIC)] == [3, 6, 7, 9, 10]
    assert run.data.params["max_steps"] == str(STEPS) and run.data.params["training_type"] == "SFT"
    assert run.data.tags["team"] == "nlp" and run.data.tags["label.mlflow.runName"] == "spoofed"
    assert run.data.tags[tracking_sink.JOB_TAG] == "job-1" and run.data.tags["mlflow.runName"] == "job-1"
    assert run.data.tags["trainplane.latest_checkpoint"].endswith("step-000010")
    # and TensorBoard, reading every attempt's event file, shows the same curve, each step once
    assert _tensorboard(root / "tb", "loss") == [(s, pytest.approx(v, rel=1e-6)) for s, v in loss]
    assert len(list((root / "tb").glob("events.out.tfevents.*"))) == 3


@pytest.mark.slow
def test_points_a_tracker_missed_are_filled_in_from_metrics_jsonl_on_resume(tmp_path: Path, monkeypatch, capsys) -> None:
    root, store = tmp_path / "job", tmp_path / "mlruns"

    def down(*_args: Any) -> None:
        raise ConnectionError("tracking server down")

    # Given a first attempt whose tracking server went down after the run was opened, paused at step 5
    with monkeypatch.context() as patch:
        patch.setattr(mlflow_sink.MlflowSink, "send", down)
        _at_progress(patch, 5, lambda: os.kill(os.getpid(), signal.SIGTERM))
        first = run_in_process(root, _spec(root, store), patch, capsys)
    assert first.code == ExitCode.STOPPED_WITH_CHECKPOINT  # the tracker never held the stop's checkpoint back
    run_id = first.of_kind(TrainerEventKind.TRACKING)[0].data["mlflow_run_id"]
    assert _history(store, run_id, "loss") == []
    # When the job resumes with the server back
    second = run_in_process(root, _spec(root, store, attempt=2, mlflow_run_id=run_id), monkeypatch, capsys)
    assert second.code == ExitCode.COMPLETED
    # Then the run has every step once: 1-5 from metrics.jsonl, 6-10 as they were trained
    final = {p.step: p.loss for p in metrics_points(root) if p.loss is not None}
    assert _history(store, run_id, "loss") == [(s, pytest.approx(final[s])) for s in range(1, STEPS + 1)]
    assert [s for s, _ in _history(store, run_id, "eval_loss")] == [4, 8, STEPS]


@pytest.mark.slow
def test_a_retry_is_a_child_run_of_its_parents_run(tmp_path: Path, monkeypatch, capsys) -> None:
    store = tmp_path / "mlruns"
    short = {"max_steps": "2"}
    # Given a parent job that logged its run
    parent_root = tmp_path / "parent"
    parent_spec = _spec(parent_root, store, job_id="parent-1")
    parent_spec["training_config"]["hyperparameters"].update(short)
    parent = run_in_process(parent_root, parent_spec, monkeypatch, capsys)
    assert parent.code == ExitCode.COMPLETED
    parent_run = parent.of_kind(TrainerEventKind.TRACKING)[0].data["mlflow_run_id"]
    # When its retry (a child job) runs
    child_root = tmp_path / "child"
    child_spec = _spec(child_root, store, job_id="child-1", parent_job_id="parent-1")
    child_spec["training_config"]["hyperparameters"].update(short)
    child = run_in_process(child_root, child_spec, monkeypatch, capsys)
    assert child.code == ExitCode.COMPLETED
    # Then it has a run of its own, tagged with its parent's run
    reported = child.of_kind(TrainerEventKind.TRACKING)[0].data
    assert reported["mlflow_run_id"] != parent_run and reported["mlflow_parent_run_id"] == parent_run
    runs = {r.data.tags[tracking_sink.JOB_TAG]: r for r in _runs(store)}
    assert runs["child-1"].data.tags["mlflow.parentRunId"] == parent_run
    assert runs["child-1"].data.tags[tracking_sink.PARENT_JOB_TAG] == "parent-1"
    assert [s for s, _ in _history(store, reported["mlflow_run_id"], "loss")] == [1, 2]


def test_an_unreachable_tracking_server_is_a_user_error_naming_the_field(tmp_path: Path, monkeypatch, capsys) -> None:
    # Given a tracking server nobody listens on (the client's retries cut to none)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    root = tmp_path / "job"
    spec = _spec(root, tmp_path / "unused")
    spec["tracking"]["config"]["mlflow"]["tracking_uri"] = "http://127.0.0.1:9"
    # When the trainer starts
    outcome = run_in_process(root, spec, monkeypatch, capsys)
    # Then it fails as a user error naming the field, before training
    assert outcome.code == ExitCode.USER_ERROR
    assert "output_config.tracking.mlflow.tracking_uri" in outcome.failure_text()
    assert not outcome.of_kind(TrainerEventKind.PROGRESS)
