"""e2e: `trainplane up --compute sagemaker` and `--compute ec2`: the real launchers against the emulated
AWS, the compute emulated (localmode/deploy/emulated_compute/), run ends delivered as EventBridge
events to the events handler, the trainer's reports through the emulated CloudWatch Logs and its
subscription filter (localmode/deploy/trainer_reports.py). Checked through the public surfaces only: the
HTTP API and the emulated AWS endpoint of endpoint.json.

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

    def __init__(self, state_dir: Path, compute: str, trainer_command: str | None = None, env: dict[str, str] | None = None) -> None:
        super().__init__(state_dir, env=env)
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


@pytest.fixture(scope="module")
def local_fake_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CloudPlane]:
    """--compute local with the same stand-in trainer: what the cloud engines' records must equal."""
    plane = CloudPlane(tmp_path_factory.mktemp("local") / "state", "local", FAKE_TRAINER).start()
    yield plane
    plane.stop()


@pytest.fixture(scope="module")
def cut_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CloudPlane]:
    """--compute sagemaker with the reports' channel down: every subscription delivery is dropped."""
    env = {"TRAINPLANE_LOCAL_DROP_TRAINER_REPORTS": "1"}
    plane = CloudPlane(tmp_path_factory.mktemp("cut") / "state", "sagemaker", FAKE_TRAINER, env=env).start()
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


RESOURCES = {
    "local": {"gpu_count": 0},
    "sagemaker": {"gpu_count": 0, "cpu_cores": 4, "ram_min_mb": 16_000},
    "ec2": {"gpu_count": 1, "gpu_type": "T4"},
}


def reported_job(name: str, plane: CloudPlane, max_steps: str) -> dict[str, Any]:
    """12 steps, checkpoints at 4 and 8; best by loss with greater-is-better, so best (4) != latest (8)."""
    body = fake_job(name, plane.bucket, max_steps=max_steps, resources=RESOURCES[plane.compute])
    body["output_config"] = {"checkpoint": {"save_steps": 4, "metric_for_best_model": "loss", "greater_is_better": True}}
    return body


def record(plane: CloudPlane, job: dict[str, Any]) -> dict[str, Any]:
    """What the trainer's reports decide on a job's record, comparable across engines."""
    events = plane.request("GET", f"/jobs/{job['job_id']}/events").json()["events"]
    progress = job["progress"]
    return {
        "status": job["status"],
        "checkpoints": [(c["checkpoint_id"], c["step"], c["metrics"]) for c in job["checkpoints"]],
        "latest": job["latest_checkpoint_id"],
        "best": job["best_checkpoint_id"],
        "progress": (progress["step"], progress.get("total_steps"), progress["percent"], progress.get("loss")),
        "phases": sorted({(e["from"], e["to"]) for e in events if e["actor"] == "trainer"}),
    }


def test_the_record_shows_phases_progress_and_checkpoints_exactly_as_with_compute_local(
    local_fake_plane: CloudPlane, sagemaker_plane: CloudPlane, ec2_plane: CloudPlane
) -> None:
    # Given the same job on compute local (the stdout reader) and on both cloud engines (the log subscription)
    planes = [local_fake_plane, sagemaker_plane, ec2_plane]
    jobs = {plane.compute: submit(plane, reported_job(f"reports-{plane.compute}", plane, "12")) for plane in planes}
    # When they complete
    done = {p.compute: wait_for(lambda p=p: ended(p, jobs[p.compute], "COMPLETED"), 180, f"{p.compute} to complete", p) for p in planes}
    records = {p.compute: record(p, done[p.compute]) for p in planes}
    # Then the local record is what the stand-in reported...
    assert records["local"] == {
        "status": "COMPLETED",
        "checkpoints": [("step-000004", 4, {"loss": 0.2}), ("step-000008", 8, {"loss": round(1 / 9, 6)})],
        "latest": "step-000008",
        "best": "step-000004",
        "progress": (12, 12, 100.0, round(1 / 13, 6)),
        "phases": sorted(
            {("TRAINING", "CHECKPOINTING"), ("CHECKPOINTING", "TRAINING"), ("TRAINING", "EXPORTING"), ("EXPORTING", "COMPLETED")}
        ),
    }
    # ...and SageMaker's and EC2's records are the same, phases included: the reports took the cloud's channel
    assert records["sagemaker"] == records["local"]
    assert records["ec2"] == records["local"]
    streams = sagemaker_plane.client("logs").describe_log_streams(logGroupName="/aws/sagemaker/TrainingJobs")["logStreams"]
    assert any(s["logStreamName"].startswith(f"tp-{jobs['sagemaker']}-a1/") for s in streams)
    # The channel is the log group's subscription filter to the events function, as deployed in the cloud
    for plane, group in ((sagemaker_plane, "/aws/sagemaker/TrainingJobs"), (ec2_plane, "/trainplane/trainer")):
        (subscription,) = plane.client("logs").describe_subscription_filters(logGroupName=group)["subscriptionFilters"]
        assert subscription["filterPattern"] == '"TRAINPLANE_EVENT"'
        assert subscription["destinationArn"].endswith(":function:trainplane-events")


@pytest.mark.parametrize("engine", ["sagemaker", "ec2"])
def test_pause_lands_with_its_checkpoint_and_resumes_by_checkpoint_id(engine: str, request: pytest.FixtureRequest) -> None:
    plane: CloudPlane = request.getfixturevalue(f"{engine}_plane")
    # Given a job that has reported its first two checkpoints
    job_id = submit(plane, reported_job(f"pause-{engine}", plane, "200"))
    wait_for(lambda: (get_job(plane, job_id).get("latest_checkpoint_id") or "") >= "step-000008", 120, "checkpoint step-000008", plane)
    # When it is paused (the trainer saves one more checkpoint on its way out)
    assert verb(plane, job_id, "pause", {"save_checkpoint": True}).status_code in {200, 202}
    paused = wait_for(lambda: ended(plane, job_id, "PAUSED"), 120, "the pause", plane)
    # Then the PAUSED record already names the pause's checkpoint as the latest (it is on S3)
    s3 = plane.client("s3")
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=plane.bucket, Prefix=f"jobs/{job_id}/checkpoints/")["Contents"]]
    on_s3 = sorted({k.split("/")[3] for k in keys if k.endswith("/manifest.json")})
    assert paused["latest_checkpoint_id"] == on_s3[-1] >= "step-000008"
    recorded = [c["checkpoint_id"] for c in paused["checkpoints"]]
    assert on_s3[-1] in recorded and set(recorded) <= set(on_s3) and paused["best_checkpoint_id"] == "step-000004"
    # When it is resumed from the first checkpoint by its id
    assert verb(plane, job_id, "resume", {"checkpoint_id": "step-000004"}).status_code in {200, 202}
    # Then attempt 2 trains from step 4 (the run spec says so) and reports on the cloud channel again
    running = wait_for(
        lambda: (j := get_job(plane, job_id))["attempt"] == 2 and j["progress"].get("attempt") == 2 and j, 120, "attempt 2", plane
    )
    spec = json.loads(s3.get_object(Bucket=plane.bucket, Key=f"jobs/{job_id}/config/run-002.json")["Body"].read())
    assert spec["resume_from"] == f"s3://{plane.bucket}/jobs/{job_id}/checkpoints/step-000004"
    history = plane.request("GET", f"/jobs/{job_id}/events").json()["events"]
    assert any("resuming from" in e["reason"] and e["reason"].endswith("step-000004") for e in history)
    assert running["status"] in {"TRAINING", "CHECKPOINTING"}
    assert verb(plane, job_id, "cancel", {"reason": "enough"}).status_code in {200, 202}
    wait_for(lambda: ended(plane, job_id, "CANCELLED"), 120, "the cancel", plane)


def test_with_the_reports_channel_cut_the_record_ends_in_the_same_state(local_fake_plane: CloudPlane, cut_plane: CloudPlane) -> None:
    # Given the same job on compute local and on SageMaker whose log subscription drops every delivery
    reference = submit(local_fake_plane, reported_job("reference", local_fake_plane, "12"))
    body = reported_job("cut", cut_plane, "12")
    body["training_config"]["environment"]["fake_step_seconds"] = "0.5"  # long enough to be seen training
    cut = submit(cut_plane, body)
    expected = record(local_fake_plane, wait_for(lambda: ended(local_fake_plane, reference, "COMPLETED"), 180, "local", local_fake_plane))
    # When the cut one trains: no report arrives (no phase change, no progress, no checkpoint)...
    training_job = wait_for(lambda: training(cut_plane, cut), 120, "the cut job training", cut_plane)
    assert training_job["progress"]["step"] == 0 and not training_job["checkpoints"]
    # ...and completes
    done = wait_for(lambda: ended(cut_plane, cut, "COMPLETED"), 180, "the cut job to complete", cut_plane)
    # Then its record was caught up from S3 (manifests, metrics.jsonl) to the same final state; only the
    # phase history, which exists nowhere but in the reports, is missing
    got = record(cut_plane, done)
    assert got["phases"] == [("TRAINING", "COMPLETED")]  # the run's end, decided from SageMaker's event
    assert {**got, "phases": expected["phases"]} == expected
