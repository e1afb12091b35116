"""Experiment tracking end to end (docs/TRACKING.md): a real `mlflow server` started here, `trainplane up`,
and the real tiny trainer. One job is paused, resumed, preempted (its trainer killed with -9) and
resumed automatically: it leaves exactly ONE MLflow run whose loss history has every step once, the
job records that run, and its TensorBoard event files (one per attempt, in the job's own S3 prefix)
read back as the same curve; its offline W&B run files (one directory per attempt, in the job's own
prefix) replay as ONE W&B run with every step once. A retry of the job is a child run of that run, and
a new W&B run in its group."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from trainer import wandb_files

from tests.e2e.conftest import LocalPlane
from tests.e2e.test_lifecycle_e2e import TERMINAL, Api, real_spec

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

STEPS = 24
EXPERIMENT = "e2e-tracking"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class MlflowServer:
    def __init__(self, root: Path) -> None:
        self.port = _free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "MLFLOW_ALLOW_FILE_STORE": "true", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        mlflow = [sys.executable, "-m", "mlflow"]
        # A file store: no database migrations at start-up (the server's own start is slow enough).
        args = ["server", "--backend-store-uri", f"file://{root / 'store'}", "--artifacts-destination", str(root / "artifacts")]
        args += ["--host", "127.0.0.1", "--port", str(self.port), "--workers", "1"]
        self.log = root / "server.log"
        with self.log.open("wb") as out:
            # Its own session: the CLI starts uvicorn as a child, and the teardown ends both.
            self.process = subprocess.Popen([*mlflow, *args], env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log.read_text()[-3000:]
            try:
                if requests.get(f"{self.uri}/health", timeout=2).ok:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.5)
        raise AssertionError(f"mlflow server not up after {timeout}s: {self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.process.wait(timeout=15)
                return
            except subprocess.TimeoutExpired:
                continue

    def client(self) -> Any:
        from mlflow import MlflowClient

        return MlflowClient(tracking_uri=self.uri)


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    server = MlflowServer(tmp_path_factory.mktemp("mlflow"))
    try:
        yield server  # started, not waited for: it comes up while local mode does
    finally:
        server.stop()


def _runs_of(server: MlflowServer, job_id: str) -> list[Any]:
    client = server.client()
    experiment = client.get_experiment_by_name(EXPERIMENT)
    return list(client.search_runs([experiment.experiment_id], filter_string=f"tags.`trainplane.job_id` = '{job_id}'"))


def _tensorboard_losses(plane: LocalPlane, job_id: str, into: Path) -> list[int]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    s3 = plane.client("s3")
    listed = s3.list_objects_v2(Bucket=plane.bucket, Prefix=f"jobs/{job_id}/tensorboard/")
    keys = sorted(o["Key"] for o in listed.get("Contents", []))
    assert len(keys) == 3, keys  # one event file per attempt
    for key in keys:
        s3.download_file(plane.bucket, key, str(into / key.rsplit("/", 1)[1]))
    accumulator = EventAccumulator(str(into))
    accumulator.Reload()
    return [e.step for e in accumulator.Scalars("loss")]


def _wandb_files(plane: LocalPlane, job_id: str) -> list[bytes]:
    """The job's offline W&B run files in the emulated S3, in the order `wandb sync` replays one run's (start time)."""
    s3 = plane.client("s3")
    listed = s3.list_objects_v2(Bucket=plane.bucket, Prefix=f"jobs/{job_id}/wandb/")
    keys = [o["Key"] for o in listed.get("Contents", []) if o["Key"].endswith(".wandb")]
    data = [s3.get_object(Bucket=plane.bucket, Key=key)["Body"].read() for key in keys]
    return sorted(data, key=lambda d: wandb_files.run_record(d).start_time.ToNanoseconds())


def test_pause_resume_preempt_leave_one_mlflow_run_and_a_retry_a_child_run(
    mlflow_server: MlflowServer, local_plane: LocalPlane, tmp_path: Path
) -> None:
    api = Api(local_plane)
    mlflow_server.wait_ready()
    # Given a real (tiny) job logging to the MLflow server and to TensorBoard
    spec = real_spec("e2e-tracking", max_steps=STEPS, save_steps=4)
    # Slowed by gradient accumulation (set in data_config here), so that the pause and the kill land mid-training
    del spec["training_config"]["hyperparameters"]["gradient_accumulation_steps"]
    spec["data_config"]["gradient_accumulation_steps"] = 64
    spec["output_config"]["tracking"] = {
        "mlflow": {"tracking_uri": mlflow_server.uri, "experiment_name": EXPERIMENT},
        "tensorboard": {},
        "wandb": {"project": EXPERIMENT, "mode": "offline"},
    }
    job_id = api.submit(spec)
    # When it is paused mid-training, and resumed
    api.wait(job_id, lambda j: j["status"] in {"TRAINING", "CHECKPOINTING"} and j["progress"]["step"] >= 2, 240, "a few steps")
    api.verb(job_id, "pause", {"save_checkpoint": True})
    paused = api.wait_status(job_id, "PAUSED", *TERMINAL, timeout=120)
    assert paused["status"] == "PAUSED", paused.get("error_message")
    assert paused["checkpoints"], api.logs(job_id)[-4000:]
    paused_step = paused["checkpoints"][-1]["step"]
    api.verb(job_id, "resume", {"checkpoint_id": ""})
    # and its second attempt, past a checkpoint of its own, is preempted (the trainer killed with -9)
    running = api.wait(
        job_id,
        lambda j: j["attempt"] == 2 and j["status"] in {"TRAINING", "CHECKPOINTING"} and (j["checkpoints"][-1]["step"] > paused_step),
        240,
        "a checkpoint of attempt 2",
    )
    assert running["progress"]["step"] < STEPS, "the job finished before it could be preempted"
    os.killpg(int(running["run_handle"]["run_id"]), signal.SIGKILL)
    # (PREEMPTED on the way is not an end here: it is resumed automatically)
    done = api.wait_status(job_id, "COMPLETED", "FAILED", "CANCELLED", timeout=300)
    # Then it completes on a third attempt, after a preemption
    assert done["status"] == "COMPLETED" and done["attempt"] == 3, done.get("error_message")
    assert "PREEMPTED" in api.statuses(job_id)
    # and there is exactly one MLflow run for it, the one the job records, FINISHED
    (run,) = _runs_of(mlflow_server, job_id)
    assert done["tracking"]["mlflow_run_id"] == run.info.run_id and run.info.status == "FINISHED"
    assert done["tracking"]["mlflow_run_url"].startswith(mlflow_server.uri)
    # whose loss history has every step exactly once, the values metrics.jsonl ends with
    history = mlflow_server.client().get_metric_history(run.info.run_id, "loss")
    assert sorted(m.step for m in history) == list(range(1, STEPS + 1))
    checkpoint_steps = {m.step for m in mlflow_server.client().get_metric_history(run.info.run_id, "checkpoint_step")}
    assert {paused_step, 4, 8, 12, STEPS} <= checkpoint_steps
    # with the job's labels and hyperparameters
    assert run.data.tags["team"] == "demo" and run.data.params["max_steps"] == str(STEPS)
    # and TensorBoard reads the same continuous curve from the three attempts' event files
    assert _tensorboard_losses(local_plane, job_id, tmp_path) == list(range(1, STEPS + 1))
    # and W&B's offline files, one per attempt (the one killed with -9: what its last upload held, if it got that
    # far), are ONE run, the later ones resuming it, the one the job records, whose steps, replayed in order, go
    # 1..N once each (no gap, no overlap: the next attempt starts above what the files hold)
    files = _wandb_files(local_plane, job_id)
    runs = [wandb_files.run_record(d) for d in files]
    assert len(runs) in (2, 3) and [(r.run_id, r.resume) for r in runs] == [(job_id, False)] + [(job_id, True)] * (len(runs) - 1)
    assert done["tracking"]["wandb_run_id"] == job_id and done["tracking"]["wandb_offline_uri"].endswith(f"jobs/{job_id}/wandb")
    wandb_loss = [int(row["_step"]) for d in files for row in wandb_files.history(d) if "loss" in row]
    assert wandb_loss == list(range(1, STEPS + 1))

    # When the job is retried (a child job, from its last checkpoint)
    child = api.verb(job_id, "retry", {}, expect=201)
    child_done = api.wait_status(child["job_id"], *TERMINAL, timeout=240)
    # Then the child job has its own run, a child of the parent's run
    assert child_done["status"] == "COMPLETED", child_done.get("error_message")
    (child_run,) = _runs_of(mlflow_server, child["job_id"])
    assert child_run.info.run_id != run.info.run_id
    assert child_run.data.tags["mlflow.parentRunId"] == run.info.run_id
    assert child_done["tracking"]["mlflow_parent_run_id"] == run.info.run_id
    # and a W&B run of its own in the parent's group, carrying the parent's run
    (child_file,) = _wandb_files(local_plane, child["job_id"])
    child_wandb = wandb_files.run_record(child_file)
    assert (child_wandb.run_id, child_wandb.run_group, child_wandb.resume) == (child["job_id"], job_id, False)
    assert child_done["tracking"]["wandb_parent_run_id"] == job_id
