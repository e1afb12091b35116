"""The `trainplane` CLI and SDK against a real `trainplane up` (tests/e2e/conftest.py's shared plane).

Most jobs here ask for 1024 GPUs: the local scheduler refuses them at once (FAILED, CAPACITY), so
the tests exercise the API and the lifecycle without spending CPU on trainers. One slow test runs a
real tiny LoRA to completion through `jobs submit --wait`.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from botocore.credentials import Credentials
from typer.testing import CliRunner, Result

from schemas.status import JobStatus
from tests.e2e.conftest import REPO_ROOT, LocalPlane
from trainplane import AuthError, Client
from trainplane.cli import app

pytestmark = pytest.mark.e2e

REFUSED_GPUS = 1024  # the schema's maximum: no machine running these tests has that many


# Never read (these jobs do not get to run), but named where local mode allows local files (docs/SECURITY.md).
UNREAD_DATA = str(REPO_ROOT / "examples" / "data" / "tiny-qa.jsonl")


def job_doc(run: str, *, gpus: int = REFUSED_GPUS, name: str = "cli-e2e", data: str = UNREAD_DATA) -> dict[str, Any]:
    return {
        "name": name,
        "labels": {"suite": "cli-e2e", "run": run},
        "training_config": {
            "training_type": "LORA",
            "base_model": {
                "model_id": "tiny-llama",
                "source": "config",
                "tokenizer_id": "byte",
                "model_kwargs": {
                    "architecture": "llama",
                    "hidden_size": 32,
                    "intermediate_size": 64,
                    "num_hidden_layers": 1,
                    "num_attention_heads": 4,
                    "num_key_value_heads": 2,
                },
            },
            "hyperparameters": {"max_steps": "4", "learning_rate": "0.01", "logging_steps": "1"},
        },
        "data_config": {"sources": [{"path": data}], "batch_size": 2, "max_seq_length": 64},
        "resource_config": {"gpu_count": gpus},
        "output_config": {"checkpoint": {"save_steps": 2}},
    }


def cli(plane: LocalPlane, *args: str, principal: str | None = "alice") -> Result:
    chosen = ["--principal", principal] if principal else []
    return CliRunner().invoke(app, ["--state-dir", str(plane.state_dir), *chosen, *args], env={"COLUMNS": "250"})


def write(tmp_path: Path, doc: dict[str, Any], name: str = "job.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


def test_submit_list_watch_events_delete_through_the_cli(local_plane: LocalPlane, tmp_path: Path) -> None:
    # Given a job file that the local scheduler will refuse
    run = uuid.uuid4().hex[:8]
    path = write(tmp_path, job_doc(run))
    # When alice submits it, lists by label, and watches it to its end
    submitted = cli(local_plane, "-o", "json", "jobs", "submit", path)
    assert submitted.exit_code == 0, submitted.output
    job_id = json.loads(submitted.stdout)["job_id"]
    listed = cli(local_plane, "jobs", "list", "--label", f"run={run}", "--label", "suite=cli-e2e")
    watched = cli(local_plane, "jobs", "watch", job_id, "--timeout", "60", "--poll", "0.5")
    # Then the list shows it, and watch ends at FAILED with the scheduler's reason and exit 1
    assert job_id in listed.stdout
    assert watched.exit_code == 1, watched.output
    assert "FAILED" in watched.stdout
    assert "1024 GPU(s)" in watched.stdout
    # And its history and record say the same
    events = cli(local_plane, "-o", "json", "jobs", "events", job_id)
    statuses = [e["to"] for e in json.loads(events.stdout)["events"]]
    assert statuses[0] == "PENDING"
    assert statuses[-1] == "FAILED"
    record = json.loads(cli(local_plane, "jobs", "get", job_id, "--json").stdout)
    assert record["error_type"] == "CAPACITY"
    # When it is deleted  Then it is gone (404, exit 1)
    assert cli(local_plane, "jobs", "delete", job_id).exit_code == 0
    gone = cli(local_plane, "jobs", "get", job_id)
    assert gone.exit_code == 1
    assert "404" in gone.stderr


def test_cancel_and_conflicting_verbs_through_the_cli(local_plane: LocalPlane, tmp_path: Path) -> None:
    # Given a freshly submitted job
    path = write(tmp_path, job_doc(uuid.uuid4().hex[:8]))
    job_id = json.loads(cli(local_plane, "-o", "json", "jobs", "submit", path).stdout)["job_id"]
    # When it is paused (never TRAINING) and cancelled (or already refused by the scheduler)
    paused = cli(local_plane, "jobs", "pause", job_id)
    cancelled = cli(local_plane, "jobs", "cancel", job_id, "--reason", "e2e")
    # Then pause is a 409 naming the allowed states, and the job ends CANCELLED or FAILED
    assert paused.exit_code == 1
    assert "409" in paused.stderr
    final = Client(state_dir=local_plane.state_dir, principal="alice").wait(job_id, timeout=60, poll=0.5)
    if cancelled.exit_code == 0:
        assert final.status == JobStatus.CANCELLED
    else:  # the scheduler refused it first: cancelling a finished job is a conflict
        assert "409" in cancelled.stderr
        assert final.status == JobStatus.FAILED


def test_another_principals_job_is_not_found(local_plane: LocalPlane, tmp_path: Path) -> None:
    # Given a job of the admin
    path = write(tmp_path, job_doc(uuid.uuid4().hex[:8]))
    job_id = json.loads(cli(local_plane, "-o", "json", "jobs", "submit", path, principal="admin").stdout)["job_id"]
    # When alice asks for it  Then 404, exit 1
    result = cli(local_plane, "jobs", "get", job_id, principal="alice")
    assert result.exit_code == 1
    assert "404" in result.stderr


def test_invalid_file_gets_the_apis_field_errors(local_plane: LocalPlane, tmp_path: Path) -> None:
    # Given a job with a bad priority and a misspelt field
    doc = job_doc("bad")
    doc["scheduling_config"] = {"priority": 11}
    doc["data_config"]["batchsize"] = 4
    # When it is submitted  Then the API's 422 names both fields
    result = cli(local_plane, "jobs", "submit", write(tmp_path, doc))
    assert result.exit_code == 1
    assert "422" in result.stderr
    assert "scheduling_config.priority" in result.stderr
    assert "data_config.batchsize" in result.stderr


def test_discovery_without_principal_signs_as_local_modes_first_principal(local_plane: LocalPlane) -> None:
    # Given the suite's dummy AWS keys in the environment (unknown to local mode)
    # When the CLI resolves the endpoint from the state dir alone
    result = cli(local_plane, "-o", "json", "endpoint", principal=None)
    info = json.loads(result.stdout)
    # Then it talks to the plane as its first principal
    assert info["url"] == local_plane.api_url
    assert info["access_key_id"] == local_plane.credentials[0]["access_key_id"]
    assert cli(local_plane, "summary", principal=None).exit_code == 0


def test_sdk_with_unknown_keys_is_refused_with_403(local_plane: LocalPlane) -> None:
    # Given a client with keys the plane does not know  When it calls  Then AuthError (403)
    client = Client(local_plane.api_url, credentials=Credentials("AKIDUNKNOWN", "nope"), region=local_plane.region)
    with pytest.raises(AuthError) as caught:
        client.summary()
    assert caught.value.status == 403


def test_sdk_list_follows_pages_over_the_real_api(local_plane: LocalPlane) -> None:
    # Given five jobs with one run label
    run = uuid.uuid4().hex[:8]
    client = Client(state_dir=local_plane.state_dir, principal="alice")
    ids = [client.submit(job_doc(run, name=f"page-{i}")).job_id for i in range(5)]
    # When they are listed two to a page
    listed = [job.job_id for job in client.list(labels={"run": run}, page_size=2)]
    # Then all five come back once, newest first
    assert listed == list(reversed(ids))


@pytest.mark.slow
def test_submit_wait_trains_a_tiny_lora_to_completion(local_plane: LocalPlane, tmp_path: Path) -> None:
    # Given a small dataset and a 4-step CPU LoRA job
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"Q: {i} plus 1?\nA:", "completion": f" {i + 1}"}) + "\n" for i in range(32)))
    path = write(tmp_path, job_doc(uuid.uuid4().hex[:8], gpus=0, data=str(data)))
    # When it is submitted with --wait
    result = cli(local_plane, "jobs", "submit", path, "--wait", "--timeout", "240")
    # Then the CLI returns 0 at COMPLETED, and its metrics, checkpoints and logs are there
    assert result.exit_code == 0, result.output + result.stderr
    assert "COMPLETED" in result.stdout
    job_id = result.stdout.split()[1]
    metrics = json.loads(cli(local_plane, "-o", "json", "jobs", "metrics", job_id).stdout)["points"]
    assert max(p["step"] for p in metrics) == 4
    record = json.loads(cli(local_plane, "jobs", "get", job_id, "--json").stdout)
    assert record["latest_checkpoint_id"] == "step-000004"
    logs = cli(local_plane, "jobs", "logs", job_id)
    assert logs.exit_code == 0
    assert logs.stdout.strip()
