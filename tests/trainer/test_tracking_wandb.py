"""Weights & Biases from the trainer (trainer/tracking/wandb_sink.py WandbSink), for real and without a network: W&B's
offline mode writes the run's transaction log (`run-<id>.wandb`) per attempt, the trainer uploads each
attempt's run directory under the job's wandb/ prefix, and the test reads the files back (trainer/wandb_files.py:
wandb's Record protos in its LevelDB-log framing, checksums checked) as `wandb sync` would replay them:
one run id across a crash, a resume, a pause and a resume, a history with every step once, a retry as a new
run in its parent's group carrying the parent's run id. The online path (the API key read from Secrets
Manager, moto's here, and `resume="must"`) is checked with W&B's client replaced by a recorder: no server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from trainer import tracking, wandb_files
from trainer.tracking import sink as tracking_sink
from trainer.tracking import wandb_sink

from schemas.trainer import ExitCode, TrainerEventKind
from tests.trainer.runs import make_spec, metrics_points, run_in_process
from tests.trainer.test_tracking import _at_progress, _crash

STEPS = 10
LABELS = {"team": "nlp"}


def _spec(root: Path, *, job_id: str = "job-1", attempt: int = 1, steps: int = STEPS, **plan: Any) -> dict[str, Any]:
    spec = make_spec(
        root,
        "SFT",
        hyperparameters={"max_steps": str(steps), "learning_rate": "3e-3", "eval_steps": "4", "async_checkpoint": "false"},
        records=20,
        data_config={"validation_split": 0.2},
        output_config={"checkpoint": {"save_steps": 3, "save_total_limit": 10}},
        job_id=job_id,
        attempt=attempt,
    )
    config = {"wandb": {"project": "tracking-test", "mode": "offline"}}
    spec["output_config"]["tracking"] = config
    spec["tracking"] = {"config": config, "job_name": f"name-of-{job_id}", "labels": LABELS, "wandb_uri": str(root / "wandb"), **plan}
    return spec


def _files(root: Path) -> list[bytes]:
    """The job's uploaded run files, in the order `wandb sync` replays one run's files (start time)."""
    data = [path.read_bytes() for path in (root / "wandb").glob("offline-*/*.wandb")]
    return sorted(data, key=lambda d: wandb_files.run_record(d).start_time.ToNanoseconds())


def _curve(files: list[bytes], key: str) -> list[tuple[int, float]]:
    return [(int(row["_step"]), row[key]) for data in files for row in wandb_files.history(data) if key in row]


@pytest.mark.slow
def test_one_offline_run_across_a_crash_a_resume_a_pause_and_a_resume_without_gap_or_overlap(tmp_path: Path, monkeypatch, capsys) -> None:
    root = tmp_path / "job"
    # Given a job logging to W&B offline whose first attempt flushes every point and dies at step 5, after its
    # checkpoint at step 3 (steps 4 and 5 are in its uploaded file, then re-done by the next attempt)
    with monkeypatch.context() as patch:
        patch.setattr(tracking, "FLUSH_SECONDS", 0.0)
        _at_progress(patch, 5, _crash)
        first_attempt = run_in_process(root, _spec(root), patch, capsys)
    assert first_attempt.code == ExitCode.INTERNAL_ERROR
    (first,) = _files(root)
    assert [s for s, _ in _curve([first], "loss")] == [1, 2, 3, 4, 5]

    # When it is resumed with the run id the job recorded, paused by SIGTERM at step 7, and resumed again
    # without it (the earlier attempts' files say the run exists)
    with monkeypatch.context() as patch:
        _at_progress(patch, 7, lambda: os.kill(os.getpid(), signal.SIGTERM))
        second = run_in_process(root, _spec(root, attempt=2, wandb_run_id="job-1"), patch, capsys)
    assert second.code == ExitCode.STOPPED_WITH_CHECKPOINT
    third = run_in_process(root, _spec(root, attempt=3), monkeypatch, capsys)
    assert third.code == ExitCode.COMPLETED

    # Then there are three attempts' files of ONE run: the later ones marked as resuming it
    files = _files(root)
    runs = [wandb_files.run_record(d) for d in files]
    assert [r.run_id for r in runs] == ["job-1"] * 3 and [r.resume for r in runs] == [False, True, True]
    assert {r.project for r in runs} == {"tracking-test"} and {r.run_group for r in runs} == {"job-1"}
    reported = [e.data for o in (second, third) for e in o.of_kind(TrainerEventKind.TRACKING)]
    assert {r["wandb_run_id"] for r in reported} == {"job-1"} and reported[0]["wandb_offline_uri"] == str(root / "wandb")
    # and, replayed in order, a loss curve with every step once (steps only go up across the files), with the
    # values metrics.jsonl ends with (the latest attempt's; resume is exact)
    final = {p.step: p for p in metrics_points(root) if p.loss is not None}
    loss = _curve(files, "loss")
    assert [s for s, _ in loss] == list(range(1, STEPS + 1))
    assert loss == [(s, pytest.approx(final[s].loss, rel=1e-6)) for s in range(1, STEPS + 1)]
    steps = [int(row["_step"]) for d in files for row in wandb_files.history(d)]
    assert steps == sorted(set(steps))
    assert [s for s, _ in _curve(files, "eval_loss")] == [4, 8, STEPS]
    # and the checkpoints' steps, the config (hyperparameters, job) and the labels are logged
    assert [v for _, v in _curve(files, tracking_sink.CHECKPOINT_METRIC)] == [3, 6, 7, 9, 10]
    config = {item.key: item.value_json for item in runs[0].config.update}
    assert config["max_steps"] == f'"{STEPS}"' and config["training_type"] == '"SFT"' and config[tracking_sink.JOB_TAG] == '"job-1"'
    assert list(runs[0].tags) == ["team:nlp"]
    # and wandb's own `sync` finds the three attempts' files where the trainer put them (the job's wandb/ prefix)
    wandb_cli = Path(sys.executable).with_name("wandb")
    listed = subprocess.run([str(wandb_cli), "sync", "--dry-run", str(root / "wandb")], capture_output=True, text=True, timeout=120)
    assert "Would sync 3 run(s)" in listed.stdout + listed.stderr, listed.stdout + listed.stderr


@pytest.mark.slow
def test_a_trainer_opens_its_own_wandb_service_whatever_service_its_environment_names(tmp_path: Path, monkeypatch, capsys) -> None:
    # Given a launcher environment naming another process's wandb-core service (a notebook, a test run that used
    # wandb: W&B puts its address in WANDB_SERVICE, and the launcher's children inherit it)
    monkeypatch.setenv("WANDB_SERVICE", "2-99999-tcp-localhost-1")
    root = tmp_path / "job"
    # When a job logging to W&B runs
    outcome = run_in_process(root, _spec(root, job_id="own-service-1", steps=2), monkeypatch, capsys)
    # Then it completes with its run written by a service of its own
    assert outcome.code == ExitCode.COMPLETED, outcome.stderr[-2000:]
    (data,) = _files(root)
    assert wandb_files.run_record(data).run_id == "own-service-1"


def test_an_offline_retry_is_a_new_run_in_its_parents_group_carrying_the_parents_run(tmp_path: Path, monkeypatch, capsys) -> None:
    # Given a parent job that logged its run
    parent_root, child_root = tmp_path / "parent", tmp_path / "child"
    parent = run_in_process(parent_root, _spec(parent_root, job_id="parent-1", steps=2), monkeypatch, capsys)
    assert parent.code == ExitCode.COMPLETED
    # When its retry (a child job) runs
    child = run_in_process(child_root, _spec(child_root, job_id="child-1", steps=2, parent_job_id="parent-1"), monkeypatch, capsys)
    assert child.code == ExitCode.COMPLETED
    # Then it is a new run of its own (not resumed), grouped with its parent's and carrying its parent's run id
    (data,) = _files(child_root)
    run = wandb_files.run_record(data)
    assert run.run_id == "child-1" and not run.resume and run.run_group == "parent-1"
    config = {item.key: item.value_json for item in run.config.update}
    assert config["trainplane.parent_run_id"] == '"parent-1"' and config[tracking_sink.PARENT_JOB_TAG] == '"parent-1"'
    reported = child.of_kind(TrainerEventKind.TRACKING)[0].data
    assert reported["wandb_parent_run_id"] == "parent-1" and reported["wandb_group"] == "parent-1"
    assert [s for s, _ in _curve([data], "loss")] == [1, 2]


class _Recorder:
    """wandb's client replaced: what the trainer asks of it, for a server that has the run up to step 4."""

    def __init__(self) -> None:
        self.init_args: dict[str, Any] = {}
        self.logged: list[tuple[int, dict[str, float]]] = []

    def module(self, run_dir: Path) -> types.ModuleType:
        recorder = self

        class Run:
            starting_step = 5
            project = "tracking-test"
            url = "https://wandb.example.com/acme/tracking-test/runs/job-1"
            dir = str(run_dir / "files")
            summary: dict[str, str] = {}

            def log(self, values: dict[str, float], step: int) -> None:
                recorder.logged.append((step, values))

            def mark_preempting(self) -> None: ...

            def finish(self, exit_code: int = 0) -> None: ...

        def init(**kwargs: Any) -> Run:
            recorder.init_args = kwargs
            return Run()

        module = types.ModuleType("wandb")
        module.init = init  # type: ignore[attr-defined]
        module.Settings = dict  # type: ignore[attr-defined]
        return module


def test_online_reads_the_key_from_secrets_manager_and_continues_the_recorded_run(tmp_path: Path, monkeypatch, capsys) -> None:
    from moto import mock_aws

    root = tmp_path / "job"
    recorder = _Recorder()
    monkeypatch.setitem(sys.modules, "wandb", recorder.module(tmp_path / "run"))
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_SECRETS_MANAGER"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        import boto3

        # Given the owner's W&B key in Secrets Manager (as JSON), and an online job resumed after step 3
        # whose run the server holds up to step 4
        secret = boto3.client("secretsmanager", region_name="us-east-1").create_secret(
            Name="trainplane/123456789012/user/alice/wandb", SecretString='{"api_key": "k-123"}'
        )["ARN"]
        spec = _spec(root, steps=6, wandb_run_id="job-1")
        config = {
            "wandb": {"project": "tracking-test", "entity": "acme", "api_key_secret_arn": secret, "base_url": "https://wandb.example.com"}
        }
        spec["output_config"]["tracking"] = spec["tracking"]["config"] = config
        spec["tracking"]["wandb_uri"] = None
        # When it trains
        outcome = run_in_process(root, spec, monkeypatch, capsys)
    assert outcome.code == ExitCode.COMPLETED
    # Then W&B got the key from the secret, the server, and resume="must" of the job's run
    args = recorder.init_args
    assert args["settings"]["api_key"] == "k-123" and args["settings"]["base_url"] == "https://wandb.example.com"
    assert (args["id"], args["resume"], args["mode"], args["entity"]) == ("job-1", "must", "online", "acme")
    # and only the steps the run does not hold (5 and 6), in order; the run's URL is on the report
    assert [s for s, v in recorder.logged if "loss" in v] == [5, 6]
    assert outcome.of_kind(TrainerEventKind.TRACKING)[0].data["wandb_run_url"] == "https://wandb.example.com/acme/tracking-test/runs/job-1"


def test_a_secret_that_cannot_be_read_is_a_user_error_naming_the_field(tmp_path: Path, monkeypatch, capsys) -> None:
    from moto import mock_aws

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_SECRETS_MANAGER"):
        monkeypatch.delenv(name, raising=False)
    root = tmp_path / "job"
    spec = _spec(root)
    arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:trainplane/123456789012/user/alice/missing"
    config = {"wandb": {"project": "p", "api_key_secret_arn": arn}}
    spec["output_config"]["tracking"] = spec["tracking"]["config"] = config
    with mock_aws():
        outcome = run_in_process(root, spec, monkeypatch, capsys)
    assert outcome.code == ExitCode.USER_ERROR
    assert "output_config.tracking.wandb.api_key_secret_arn" in outcome.failure_text()
    assert not outcome.of_kind(TrainerEventKind.PROGRESS)


def test_the_trainer_refuses_a_secret_outside_its_access_set_before_reading_it(tmp_path: Path, monkeypatch, capsys) -> None:
    # Given a run spec whose access set grants alice's secrets, naming bob's (the control plane bypassed)
    root = tmp_path / "job"
    spec = _spec(root)
    bobs = "arn:aws:secretsmanager:us-east-1:123456789012:secret:trainplane/123456789012/user/bob/wandb"
    config = {"wandb": {"project": "p", "api_key_secret_arn": bobs}}
    spec["output_config"]["tracking"] = spec["tracking"]["config"] = config
    alice = "arn:aws:iam::123456789012:user/alice"
    spec["access"] = {"owner": alice, "read": [str(tmp_path)], "write": [str(tmp_path)], "secrets": ["trainplane/123456789012/user/alice/"]}
    # When the trainer starts
    outcome = run_in_process(root, spec, monkeypatch, capsys)
    # Then it refuses, naming the field, before training (and before any AWS call: no credentials here)
    assert outcome.code == ExitCode.USER_ERROR
    assert "output_config.tracking.wandb.api_key_secret_arn: this job may not read the secret" in outcome.failure_text()
    assert not outcome.of_kind(TrainerEventKind.PROGRESS)


def test_steps_only_go_up_a_failed_send_is_retried_without_a_step_twice_and_a_late_checkpoint_lands_at_the_latest_step() -> None:
    # Given a W&B sink (its run a recorder) whose run holds steps up to 1, and whose client fails once at step 3
    logged: list[tuple[int, dict[str, float]]] = []
    failures = [ConnectionError("wandb-core gone")]

    class Run:
        summary: dict[str, str] = {}

        def log(self, values: dict[str, float], step: int) -> None:
            if step == 3 and failures:
                raise failures.pop()
            logged.append((step, values))

    sink = wandb_sink.WandbSink.__new__(wandb_sink.WandbSink)
    sink.run, sink.offline, sink.uri, sink.floor, sink.sent_step = Run(), False, None, 1, 1
    sink._buffer, sink._tags = [], {}
    for step in (1, 2, 3, 4):
        sink.log({"loss": float(step)}, step)
    # When the send fails at step 3, its points are given back and sent again
    points, tags = sink.take()
    with pytest.raises(ConnectionError):
        sink.send(points, tags)
    sink.give_back(points, tags)
    sink.send(*sink.take())
    # and a checkpoint of step 3 arrives (an asynchronous save) after step 4 was sent
    sink.log({tracking_sink.CHECKPOINT_METRIC: 3.0}, 3)
    sink.send(*sink.take())
    # Then every step above the run's is logged once, in order, and the checkpoint at step 4 with its own step
    assert logged == [(2, {"loss": 2.0}), (3, {"loss": 3.0}), (4, {"loss": 4.0}), (4, {tracking_sink.CHECKPOINT_METRIC: 3.0})]
