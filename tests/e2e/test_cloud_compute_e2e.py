"""e2e: `trainplane up --compute sagemaker` and `--compute ec2`: the real launchers against the emulated
AWS, the compute emulated (trainplane/local/emulated_compute.py), run ends delivered as EventBridge
events to the events handler. Checked through the public surfaces only: the HTTP API and the
emulated AWS endpoint of endpoint.json.

Both run the fast stand-in trainer (tests/fake_trainer.py), so that a pause through StopTrainingJob,
a spot interruption, the automatic resume and a cancel fit in a few seconds each.
"""

from __future__ import annotations

import base64
import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import LocalPlane

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "PREEMPTED"}
INTERRUPT_TAG = "trainplane-emulator:interrupt"
# The trainer behind the emulated engines is the fast stand-in honouring the trainer contract: the real
# one runs the same way (the LocalLauncher) and is tested end to end by local mode's own e2e tests.
FAKE_TRAINER = f"{sys.executable} -m tests.fake_trainer"


class CloudPlane(LocalPlane):
    """A plane started with --compute, optionally with another trainer command (the conftest's own
    start() passes no TRAINPLANE_* variable through, so `env` sets it for the child)."""

    def __init__(self, state_dir: Path, compute: str, trainer_command: str | None = None) -> None:
        super().__init__(state_dir)
        self.compute = compute
        self.trainer_command = trainer_command

    def command(self) -> list[str]:
        prefix = ["env", f"TRAINPLANE_TRAINER_COMMAND={self.trainer_command}"] if self.trainer_command else []
        return [*prefix, *super().command(), "--compute", self.compute]


@pytest.fixture(scope="module")
def sagemaker_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CloudPlane]:
    plane = CloudPlane(tmp_path_factory.mktemp("sagemaker") / "state", "sagemaker", FAKE_TRAINER).start()
    yield plane
    plane.stop()


@pytest.fixture(scope="module")
def ec2_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CloudPlane]:
    plane = CloudPlane(tmp_path_factory.mktemp("ec2") / "state", "ec2", FAKE_TRAINER).start()
    yield plane
    plane.stop()


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, plane: LocalPlane) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}\n{plane.log_tail(40)}")


def fake_job(name: str, bucket: str, *, max_steps: str, resources: dict[str, Any]) -> dict[str, Any]:
    """A job for tests/fake_trainer.py: `max_steps` steps of 0.15 s, a checkpoint every 5."""
    return {
        "name": name,
        "labels": {"team": "nlp"},
        "training_config": {
            "training_type": "SFT",
            "base_model": {"model_id": "tiny", "source": "config", "tokenizer_id": "byte", "model_kwargs": {"architecture": "llama"}},
            "hyperparameters": {"max_steps": max_steps},
            "environment": {"fake_step_seconds": "0.15"},  # the fake trainer's knob (tests/fake_trainer.py)
        },
        "data_config": {"sources": [{"path": f"s3://{bucket}/shared/train.jsonl"}]},
        "resource_config": resources,
        "output_config": {"checkpoint": {"save_steps": 5}},
    }


def verb(plane: LocalPlane, job_id: str, name: str, body: dict[str, Any]) -> Any:
    """POST a lifecycle verb; a 409 for a concurrent change (the trainer reporting meanwhile) is retried,
    as a client should."""
    for _ in range(10):
        response = plane.request("POST", f"/jobs/{job_id}/{name}", json=body)
        if response.status_code != 409 or "changed by another request" not in response.text:
            return response
        time.sleep(0.2)
    return response


def get_job(plane: LocalPlane, job_id: str) -> dict[str, Any]:
    response = plane.request("GET", f"/jobs/{job_id}")
    assert response.status_code == 200, response.text
    return dict(response.json())


def submit(plane: LocalPlane, body: dict[str, Any]) -> str:
    response = plane.request("POST", "/jobs", json=body)
    assert response.status_code == 201, response.text
    return str(response.json()["job_id"])


def training(plane: LocalPlane, job_id: str) -> dict[str, Any] | None:
    job = get_job(plane, job_id)
    if job["status"] in {"FAILED", "CANCELLED"}:
        raise AssertionError(f"job {job_id} ended {job['status']}: {job.get('error_type')} {job.get('error_message')}")
    return job if job["status"] in {"TRAINING", "CHECKPOINTING"} and job.get("run_handle") else None


def ended(plane: LocalPlane, job_id: str, status: str) -> dict[str, Any] | None:
    job = get_job(plane, job_id)
    if job["status"] in TERMINAL - {"PREEMPTED"} and job["status"] != status:
        raise AssertionError(f"job {job_id} ended {job['status']}: {job.get('error_type')} {job.get('error_message')}")
    return job if job["status"] == status else None


def test_sagemaker_compute_trains_pauses_with_stop_training_job_resumes_and_completes(sagemaker_plane: CloudPlane) -> None:
    plane = sagemaker_plane
    # Given a job asking for 4 vCPUs and 16 GB, on spot, 30 min max
    body = fake_job("sm-pause", plane.bucket, max_steps="60", resources={"gpu_count": 0, "cpu_cores": 4, "ram_min_mb": 16_000})
    body["scheduling_config"] = {"preemptible": True, "max_runtime_seconds": 1800}
    # When it is submitted
    job_id = submit(plane, body)
    job = wait_for(lambda: training(plane, job_id), 120, "the job training", plane)
    # Then the emulated AWS shows its training job: type, spot, checkpoint location, runtime limit, tags
    sm = plane.client("sagemaker")
    first = job["run_handle"]["run_id"]
    described = sm.describe_training_job(TrainingJobName=first)
    assert described["ResourceConfig"]["InstanceType"] == "ml.m5.xlarge"
    assert described["EnableManagedSpotTraining"] is True
    assert described["CheckpointConfig"] == {"S3Uri": f"s3://{plane.bucket}/jobs/{job_id}/checkpoints", "LocalPath": "/opt/ml/checkpoints"}
    assert described["StoppingCondition"]["MaxRuntimeInSeconds"] == 1800
    assert described["StoppingCondition"]["MaxWaitTimeInSeconds"] >= 1800
    assert described["TrainingJobStatus"] == "InProgress"
    tags = {t["Key"]: t["Value"] for t in sm.list_tags(ResourceArn=described["TrainingJobArn"])["Tags"]}
    assert (tags["trainplane:job-id"], tags["trainplane:attempt"], tags["trainplane:label:team"]) == (job_id, "1", "nlp")
    assert tags["trainplane:owner"] == plane.principal("alice")["arn"]
    # When it is paused after a checkpoint (the graceful stop is StopTrainingJob), then resumed
    wait_for(lambda: get_job(plane, job_id).get("latest_checkpoint_id"), 60, "a first checkpoint", plane)
    pause = verb(plane, job_id, "pause", {"save_checkpoint": True})
    assert pause.status_code in {200, 202}, pause.text
    wait_for(lambda: ended(plane, job_id, "PAUSED"), 120, "the pause", plane)
    assert sm.describe_training_job(TrainingJobName=first)["TrainingJobStatus"] == "Stopped"
    assert verb(plane, job_id, "resume", {"checkpoint_id": ""}).status_code in {200, 202}
    # Then it trains on as attempt 2, a new training job, and completes
    done = wait_for(lambda: ended(plane, job_id, "COMPLETED"), 180, "the resumed job to complete", plane)
    second = done["run_handle"]["run_id"]
    assert second != first and sm.describe_training_job(TrainingJobName=second)["TrainingJobStatus"] == "Completed"
    # And both attempts are priced (spot: SageMaker bills less than the run) and logged, in CloudWatch too
    assert [a["attempt"] for a in done["cost"]["attempts"]] == [1, 2]
    assert done["cost"]["instance_type"] == "ml.m5.xlarge" and done["cost"]["spot_savings_usd"] > 0
    logs = plane.request("GET", f"/jobs/{job_id}/logs").json()
    assert {line["attempt"] for line in logs["lines"]} == {1, 2}
    streams = plane.client("logs").describe_log_streams(logGroupName="/aws/sagemaker/TrainingJobs")["logStreams"]
    assert {s["logStreamName"].split("/")[0] for s in streams} >= {first, second}


def test_ec2_compute_spot_interruption_resumes_and_cancel_terminates(ec2_plane: CloudPlane) -> None:
    plane = ec2_plane
    ec2 = plane.client("ec2")
    # Given a preemptible T4 job with a 15 min limit
    body = fake_job("ec2-spot", plane.bucket, max_steps="40", resources={"gpu_count": 1, "gpu_type": "T4"})
    body["labels"] = {"team": "vision"}
    body["scheduling_config"] = {"preemptible": True, "max_runtime_seconds": 900}
    job_id = submit(plane, body)
    job = wait_for(lambda: training(plane, job_id), 120, "the job training", plane)
    # Then the emulated AWS shows its instance: type, spot, profile, tags, self-terminating, the run spec in its user data
    first = job["run_handle"]["run_id"]
    instance = ec2.describe_instances(InstanceIds=[first])["Reservations"][0]["Instances"][0]
    assert instance["InstanceType"] == "g4dn.xlarge" and instance["InstanceLifecycle"] == "spot"
    assert instance["IamInstanceProfile"]["Arn"].endswith("instance-profile/trainplane-trainer")
    tags = {t["Key"]: t["Value"] for t in instance["Tags"]}
    assert (tags["trainplane:job-id"], tags["trainplane:attempt"], tags["trainplane:label:team"]) == (job_id, "1", "vision")
    user_data = base64.b64decode(ec2.describe_instance_attribute(InstanceId=first, Attribute="userData")["UserData"]["Value"]).decode()
    assert f"jobs/{job_id}/config/run-001.json" in user_data and "MAX_RUNTIME_SECONDS=900" in user_data
    shutdown = ec2.describe_instance_attribute(InstanceId=first, Attribute="instanceInitiatedShutdownBehavior")
    assert shutdown["InstanceInitiatedShutdownBehavior"]["Value"] == "terminate"
    # When spot reclaims the instance after a checkpoint
    wait_for(lambda: get_job(plane, job_id).get("latest_checkpoint_id"), 60, "a first checkpoint", plane)
    ec2.create_tags(Resources=[first], Tags=[{"Key": INTERRUPT_TAG, "Value": "now"}])
    # Then the job is preempted, resumed on a new instance from its checkpoint, and completes
    done = wait_for(lambda: ended(plane, job_id, "COMPLETED"), 180, "the resumed job to complete", plane)
    history = [(e["from"], e["to"]) for e in plane.request("GET", f"/jobs/{job_id}/events").json()["events"]]
    assert ("TRAINING", "PREEMPTED") in history or ("CHECKPOINTING", "PREEMPTED") in history
    assert done["attempt"] == 2 and done["preemptions"] == 1
    assert ec2.describe_instances(InstanceIds=[first])["Reservations"][0]["Instances"][0]["State"]["Name"] == "terminated"
    status = json.loads(plane.client("s3").get_object(Bucket=plane.bucket, Key=f"jobs/{job_id}/runs/001/exit.json")["Body"].read())
    assert status["interrupted"] is True
    assert [a["attempt"] for a in done["cost"]["attempts"]] == [1, 2] and done["cost"]["instance_type"] == "g4dn.xlarge"
    # When another job is cancelled while it trains
    body["name"], body["training_config"]["hyperparameters"]["max_steps"] = "ec2-cancel", "100000"
    other = submit(plane, body)
    running = wait_for(lambda: training(plane, other), 120, "the second job training", plane)
    assert verb(plane, other, "cancel", {"reason": "no longer needed"}).status_code in {200, 202}
    # Then it is CANCELLED and its instance is gone
    wait_for(lambda: ended(plane, other, "CANCELLED"), 120, "the cancel", plane)
    instance_id = running["run_handle"]["run_id"]
    state = lambda: ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]["State"]["Name"]  # noqa: E731
    wait_for(lambda: state() == "terminated", 60, "the instance to terminate", plane)
