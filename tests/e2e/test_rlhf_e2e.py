"""An RLHF job end to end through `trainplane up`: submitted over signed HTTP, its reward script confined
and read by the real trainer (GRPO on trl) in a child process, reward metrics reported, COMPLETED, and
logged to an MLflow run (a file store) and TensorBoard, recorded on the job."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.e2e.conftest import REPO_ROOT, LocalPlane
from tests.e2e.test_lifecycle_e2e import TERMINAL, Api

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_the_rlhf_example_trains_through_local_mode(local_plane: LocalPlane, tmp_path: Path) -> None:
    # Given the shipped RLHF example (paths made absolute, as the CLI does), shortened to a few steps, logging
    # to an MLflow file store and to TensorBoard
    spec = json.loads((REPO_ROOT / "examples" / "jobs" / "rlhf-tiny.json").read_text())
    spec["data_config"]["sources"][0]["path"] = str(REPO_ROOT / "examples" / "data" / "tiny-qa.jsonl")
    spec["training_config"]["rlhf"]["reward_script_path"] = str(REPO_ROOT / "examples" / "rlhf" / "rewards.py")
    spec["training_config"]["hyperparameters"]["max_steps"] = "4"
    store = tmp_path / "mlruns"
    spec["output_config"]["tracking"] = {"mlflow": {"tracking_uri": f"file://{store}", "experiment_name": "e2e-rlhf"}, "tensorboard": {}}
    api = Api(local_plane)

    # When it is submitted
    job_id = api.submit(spec)
    done = api.wait_status(job_id, *TERMINAL, timeout=300)

    # Then it completed with its final checkpoint, and its metrics carry the reward and the KL
    assert done["status"] == "COMPLETED", (done.get("error_message"), api.logs(job_id)[-3000:])
    assert done["progress"]["step"] == 4 and done["latest_checkpoint_id"] == "step-000004"
    points = local_plane.request("GET", f"/jobs/{job_id}/metrics").json()["points"]
    assert [p["step"] for p in points] == [1, 2, 3, 4]
    assert all("reward" in p and "kl" in p and p["tokens_per_second"] for p in points)
    # and the job records its tracker run: one MLflow run, FINISHED, with every step's reward and KL, the labels
    tracked = done["tracking"]
    assert tracked["tensorboard_uri"] == f"s3://{local_plane.bucket}/jobs/{job_id}/tensorboard"
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"file://{store}")
    run = client.get_run(tracked["mlflow_run_id"])
    assert run.info.status == "FINISHED" and run.data.tags["team"] == "demo" and run.data.params["training_type"] == "RLHF"
    for key in ("reward", "kl"):
        history = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))
        assert history == [(p["step"], pytest.approx(p[key])) for p in points], key
