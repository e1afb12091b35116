"""The emulated compute behind moto's SageMaker and EC2 (localmode/deploy/emulated_compute/).

The REAL launchers talk to moto's server in this process; the trainer is tests/fake_trainer.py run by
the LocalLauncher; events go to a recording sink instead of the events Lambda. What a client of the
emulated AWS sees must be what it would see in AWS: InProgress while the trainer runs, Stopping then
Stopped after StopTrainingJob, Failed with the trainer's reason; instances that end by themselves and
leave their exit status; the state-change events of each end.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from functions import constants
from functions.adapters.cloudwatch_logs import CloudWatchLogSource
from functions.adapters.launchers.cloud import LaunchCapacityError
from functions.adapters.launchers.ec2 import EC2Launcher
from functions.adapters.launchers.local import LocalLauncher
from functions.adapters.launchers.sagemaker import SageMakerLauncher, describe_training_job
from functions.catalog.events import EC2_SPOT_WARNING, EC2_STATE_CHANGE, SAGEMAKER_STATE_CHANGE
from functions.catalog.instances import select_instance
from functions.service.ports import RunState
from localmode import moto_pin
from localmode.deploy import emulated_compute
from localmode.deploy.emulated_compute.capacity_pools import PoolScript, ScriptedPools
from localmode.deploy.emulated_compute.core import INTERRUPT_TAG, EmulatedCompute
from localmode.deploy.emulated_compute.ec2 import Ec2Compute
from schemas.configs import ResourceConfig
from schemas.job import ErrorType
from schemas.trainer import TrainerEvent
from tests.cloud_fixtures import BUCKET, cloud_settings, make_launch_request
from tests.lifecycle_support import make_job, make_request, wait_until

FAKE_TRAINER = (sys.executable, "-m", "tests.fake_trainer")
REPO_ROOT = Path(__file__).resolve().parents[2]
TRAINER_ENV = {"PYTHONPATH": str(REPO_ROOT)}  # the trainer runs in its own directory
TRAINER_LOG_GROUP = "/trainplane/trainer"


class Recorder:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def __call__(self, event: dict[str, Any]) -> None:
        with self._lock:
            self.events.append(event)

    def of(self, detail_type: str) -> list[dict[str, Any]]:
        with self._lock:
            return [e for e in self.events if e["detail-type"] == detail_type]


class Clients:
    def __init__(self, endpoint_url: str) -> None:
        self.endpoint_url = endpoint_url
        self._clients: dict[str, Any] = {}
        self._lock = threading.Lock()

    def client(self, service: str) -> Any:
        with self._lock:
            if service not in self._clients:
                self._clients[service] = boto3.client(service, endpoint_url=self.endpoint_url, region_name="us-east-1")
            return self._clients[service]


@pytest.fixture(scope="module")
def server() -> Iterator[Clients]:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    saved = os.environ.get("MOTO_EC2_LOAD_DEFAULT_AMIS")
    os.environ["MOTO_EC2_LOAD_DEFAULT_AMIS"] = "false"
    moto_server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto_server.start()
    clients = Clients(f"http://127.0.0.1:{moto_server.get_host_and_port()[1]}")
    clients.client("s3").create_bucket(Bucket=BUCKET)
    clients.client("ec2").create_launch_template(LaunchTemplateName="trainplane-gpu", LaunchTemplateData={"ImageId": "ami-0local"})
    clients.client("iam").create_instance_profile(InstanceProfileName="trainplane-trainer")
    yield clients
    moto_server.stop()
    if saved is None:
        os.environ.pop("MOTO_EC2_LOAD_DEFAULT_AMIS", None)
    else:
        os.environ["MOTO_EC2_LOAD_DEFAULT_AMIS"] = saved


def _emulator(server: Clients, tmp_path: Path, compute: str, pools: ScriptedPools | None = None) -> tuple[EmulatedCompute, Recorder]:
    recorder = Recorder()
    runner = LocalLauncher(
        tmp_path / "runs",
        command=FAKE_TRAINER,
        env=TRAINER_ENV,
        s3_endpoint_url=server.endpoint_url,
        stop_grace_seconds=5,
        tick_seconds=0.3,
    )
    emulator = emulated_compute.create(
        compute,
        server.client,
        runner,
        bucket=BUCKET,
        trainer_log_group=TRAINER_LOG_GROUP,
        sink=recorder,
    )
    if pools is not None:
        assert isinstance(emulator, Ec2Compute)
        emulator.capacity_pools = pools
    emulator.start()
    return emulator, recorder


def _launch_request(server: Clients, job_id: str, *, preemptible: bool = False, **hyper: str) -> Any:
    hyperparameters = {"max_steps": "4", "fake_step_seconds": "0.05", **hyper}
    request = make_launch_request(job_id, preemptible=preemptible, hyperparameters=hyperparameters, resources=ResourceConfig(gpu_count=0))
    key = request.run_spec_uri.removeprefix(f"s3://{BUCKET}/")
    server.client("s3").put_object(Bucket=BUCKET, Key=key, Body=request.run_spec.model_dump_json().encode())
    return request


def _ended(recorder: Recorder, detail_type: str, run_id: str, field: str, value: str) -> dict[str, Any] | None:
    key = "TrainingJobName" if detail_type == SAGEMAKER_STATE_CHANGE else "instance-id"
    return next((e for e in recorder.of(detail_type) if e["detail"].get(key) == run_id and e["detail"].get(field) == value), None)


def _reporting(server: Clients, compute: str, job_id: str) -> bool:
    """The job's trainer has a report in the compute's CloudWatch log group (as the control plane reads it)."""
    job = make_job(make_request()).model_copy(update={"job_id": job_id, "attempt": 1})
    source = CloudWatchLogSource(cloud_settings(compute=compute, trainer_log_group=TRAINER_LOG_GROUP), server)
    return any("TRAINPLANE_EVENT" in line.message for line in source.read(job).lines)


def test_sagemaker_jobs_run_stop_fail_and_are_interrupted_as_in_aws(server: Clients, tmp_path: Path) -> None:
    emulator, recorder = _emulator(server, tmp_path, "sagemaker")
    try:
        launcher = SageMakerLauncher(cloud_settings(), server)
        # Given four jobs: one that completes, one stopped, one that fails on bad data, one spot job reclaimed
        done = launcher.launch(_launch_request(server, "job-done"))
        # Then a fresh job is not Completed at once (moto's own behaviour): it has yet to run
        assert launcher.describe(done).state in {RunState.STARTING, RunState.RUNNING}
        stopped = launcher.launch(_launch_request(server, "job-stop", max_steps="100000"))
        failed = launcher.launch(
            _launch_request(server, "job-fail", fake_fail_at_step="2", fake_exit_code="65", fake_failure="DataError: s3://d/t.jsonl:3: bad")
        )
        spot = launcher.launch(_launch_request(server, "job-spot", preemptible=True, max_steps="100000"))
        sm = server.client("sagemaker")
        wait_until(lambda: launcher.describe(stopped).secondary_status == "Training", what="the long job training")
        wait_until(lambda: launcher.describe(spot).secondary_status == "Training", what="the spot job training")
        # When one is stopped (StopTrainingJob, which moto alone lacks) and the other reclaimed
        launcher.stop(stopped)
        assert launcher.describe(stopped).state in {RunState.STOPPING, RunState.STOPPED}  # the fake trainer stops fast
        sm.add_tags(ResourceArn=spot.extra["arn"], Tags=[{"Key": INTERRUPT_TAG, "Value": "now"}])
        # Then each ends as SageMaker would report it, with a state-change event carrying its tags
        for handle, status in ((done, "Completed"), (stopped, "Stopped"), (failed, "Failed"), (spot, "Stopped")):
            event = wait_until(lambda h=handle, s=status: _ended(recorder, SAGEMAKER_STATE_CHANGE, h.run_id, "TrainingJobStatus", s), 60)
            assert event["detail"]["Tags"]["trainplane:job-id"] == handle.run_id.removeprefix("tp-").rsplit("-a", 1)[0]
        assert launcher.describe(done).state == RunState.COMPLETED
        assert launcher.describe(stopped).state == RunState.STOPPED
        fail = launcher.describe(failed)
        assert (fail.state, fail.error_type) == (RunState.FAILED, ErrorType.DATA_ERROR)
        assert "DataError" in sm.describe_training_job(TrainingJobName=failed.run_id)["FailureReason"]
        preempted = launcher.describe(spot)
        assert (preempted.state, preempted.secondary_status) == (RunState.PREEMPTED, "MaxWaitTimeExceeded")
        # And the finished job shows its times, and its event maps like its describe
        finished = sm.describe_training_job(TrainingJobName=done.run_id)
        assert finished["TrainingTimeInSeconds"] >= 0 and "TrainingEndTime" in finished
        event = _ended(recorder, SAGEMAKER_STATE_CHANGE, done.run_id, "TrainingJobStatus", "Completed")
        assert describe_training_job(event["detail"]).state == RunState.COMPLETED  # type: ignore[index]
        # And the trainer's output, its reports included (the log subscription's channel), is in SageMaker's
        # log group: every line once, in order, in one stream
        job = make_job(make_request()).model_copy(update={"job_id": "job-done", "attempt": 1})
        lines = wait_until(lambda: CloudWatchLogSource(cloud_settings(compute="sagemaker"), server).read(job).lines, what="log lines")
        reports = [TrainerEvent.find_in(line.message) for line in lines if "TRAINPLANE_EVENT" in line.message]
        assert reports and all(r is not None and (r.job_id, r.attempt) == ("job-done", 1) for r in reports)
        seqs = [r.seq for r in reports if r is not None]
        assert seqs == sorted(set(seqs))  # type: ignore[type-var]
        streams = server.client("logs").describe_log_streams(logGroupName="/aws/sagemaker/TrainingJobs", logStreamNamePrefix=done.run_id)
        assert len(streams["logStreams"]) == 1
        # And, as on SageMaker, stdout and stderr are one stream there: the lines say no stream (and carry
        # no local stream tag), the fake trainer's stderr line among them
        assert all(line.stream is None and constants.STREAM_MARK not in line.message for line in lines)
        assert any("says hello on stderr" in line.message for line in lines)
    finally:
        emulator.shutdown()


def test_ec2_instances_run_the_trainer_stop_by_tag_and_end_themselves(server: Clients, tmp_path: Path) -> None:
    emulator, recorder = _emulator(server, tmp_path, "ec2")
    try:
        launcher = EC2Launcher(cloud_settings(), server)
        # Given three instances: one completes, one is stopped gracefully, one is a reclaimed spot instance
        done = launcher.launch(_launch_request(server, "job-ec2-done"))
        stopped = launcher.launch(_launch_request(server, "job-ec2-stop", max_steps="100000"))
        spot = launcher.launch(_launch_request(server, "job-ec2-spot", preemptible=True, max_steps="100000"))
        wait_until(lambda: {stopped.run_id, spot.run_id} <= {r[0] for r in emulator.runs()}, what="trainers started")
        # A trainer's first report comes after it has installed its SIGTERM handler: only then is a stop graceful
        wait_until(lambda: _reporting(server, "ec2", "job-ec2-stop") and _reporting(server, "ec2", "job-ec2-spot"), what="both reporting")
        # When one gets the stop tag and the other the (emulated) spot reclaim
        launcher.stop(stopped)
        server.client("ec2").create_tags(Resources=[spot.run_id], Tags=[{"Key": INTERRUPT_TAG, "Value": "now"}])
        # Then every instance ends by itself: terminated, with its exit status, and an event
        for handle in (done, stopped, spot):
            wait_until(lambda h=handle: _ended(recorder, EC2_STATE_CHANGE, h.run_id, "state", "terminated"), 60, what="an end")
        assert launcher.describe(done).state == RunState.COMPLETED
        assert launcher.describe(stopped).state == RunState.STOPPED
        reclaimed = launcher.describe(spot)
        assert (reclaimed.state, reclaimed.error_type) == (RunState.PREEMPTED, ErrorType.PREEMPTED)
        assert [e["detail"]["instance-id"] for e in recorder.of(EC2_SPOT_WARNING)] == [spot.run_id]
        status = json.loads(server.client("s3").get_object(Bucket=BUCKET, Key=done.extra["exit_status_key"])["Body"].read())
        assert (status["exit_code"], status["instance_id"]) == (0, done.run_id)
        # And a cancelled instance (terminated from outside) takes its trainer down, and says so
        cancelled = launcher.launch(_launch_request(server, "job-ec2-cancel", max_steps="100000"))
        wait_until(lambda: cancelled.run_id in {r[0] for r in emulator.runs()}, what="trainer started")
        launcher.stop(cancelled, graceful=False)
        wait_until(lambda: _ended(recorder, EC2_STATE_CHANGE, cancelled.run_id, "state", "terminated"), 60, what="cancel ends")
        assert launcher.describe(cancelled).state == RunState.STOPPED
    finally:
        emulator.shutdown()


def test_scripted_capacity_pools_refuse_full_pools_and_interrupt_on_time(server: Clients, tmp_path: Path) -> None:
    # Given the CPU type's on-demand pool empty and its spot pool with 1 unit, interrupted from t=0 on
    instance_type = select_instance(ResourceConfig(gpu_count=0), "ec2").instance_type
    pools = ScriptedPools(
        [
            PoolScript(instance_type=instance_type, purchase="on_demand", free=[(0, 0)]),
            PoolScript(instance_type=instance_type, purchase="spot", free=[(0, 1)], interruptions=[0]),
        ]
    )
    emulator, recorder = _emulator(server, tmp_path, "ec2", pools)
    try:
        launcher = EC2Launcher(cloud_settings(), server)
        # When an on-demand launch asks: EC2's capacity error
        with pytest.raises(LaunchCapacityError, match="InsufficientInstanceCapacity"):
            launcher.launch(_launch_request(server, "job-pool-od"))
        # And a spot launch gets the one unit, a second one finds none
        spot = launcher.launch(_launch_request(server, "job-pool-spot", preemptible=True, max_steps="100000"))
        with pytest.raises(LaunchCapacityError):
            launcher.launch(_launch_request(server, "job-pool-spot2", preemptible=True))
        # Then the scripted interruption reclaims the running spot instance, as a spot warning would
        wait_until(lambda: _ended(recorder, EC2_STATE_CHANGE, spot.run_id, "state", "terminated"), 60, what="the interruption")
        assert [e["detail"]["instance-id"] for e in recorder.of(EC2_SPOT_WARNING)] == [spot.run_id]
        assert launcher.describe(spot).state == RunState.PREEMPTED
    finally:
        emulator.shutdown()


def test_the_pin_and_one_emulator_per_process(server: Clients, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a moto version the patches were not written for / Then starting refuses, naming the pin
    runner = LocalLauncher(tmp_path / "runs", command=FAKE_TRAINER)
    emulator = emulated_compute.create("sagemaker", server.client, runner, bucket=BUCKET, trainer_log_group="/g", sink=Recorder())
    monkeypatch.setattr(moto_pin.moto, "__version__", "9.9.9")
    with pytest.raises(RuntimeError, match=r"5\.2\.5"):
        emulator.start()
    with pytest.raises(ValueError, match="no emulated compute"):
        emulated_compute.create("local", server.client, runner, bucket=BUCKET, trainer_log_group="/g")
