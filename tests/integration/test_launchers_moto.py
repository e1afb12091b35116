"""The cloud launchers, the CloudWatch log source and the events service against moto (in process).

moto keeps what the launchers send (training job fields, instances with their market options,
profile, tags and user data) so the emulated AWS can be asked what a real account would show.
Where moto lacks an API (StopTrainingJob raises NotImplementedError) botocore's Stubber stands in.
"""

from __future__ import annotations

import base64
import contextlib
import json
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from functions.adapters.cloudwatch_logs import CloudWatchLogSource, log_source_for
from functions.adapters.launchers.ec2 import EC2Launcher
from functions.adapters.launchers.sagemaker import LOG_GROUP, SageMakerLauncher
from functions.catalog.job_names import exit_status_key, training_job_name
from functions.errors import InvalidRequest
from functions.service.ports import LaunchHandle, RunState
from schemas.configs import ResourceConfig
from schemas.job import ErrorType
from tests.cloud_fixtures import BUCKET, cloud_settings, make_launch_request
from tests.lifecycle_support import make_job, make_request

REGION = "us-east-1"


class Clients:
    def __init__(self) -> None:
        self._clients: dict[str, Any] = {}

    def client(self, service: str) -> Any:
        if service not in self._clients:
            self._clients[service] = boto3.client(service, region_name=REGION)
        return self._clients[service]


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[Clients]:
    # moto's EC2 loads thousands of default AMIs per backend (seconds per test); we need none.
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
    with mock_aws():
        clients = Clients()
        clients.client("s3").create_bucket(Bucket=BUCKET)
        yield clients


def _ec2_setup(clients: Clients) -> dict[str, Any]:
    ec2 = clients.client("ec2")
    ec2.create_launch_template(LaunchTemplateName="trainplane-gpu", LaunchTemplateData={"ImageId": "ami-0dlami0gpu0000000"})
    profile = clients.client("iam").create_instance_profile(InstanceProfileName="trainplane-trainer")["InstanceProfile"]["Arn"]
    return {"ec2_instance_profile_arn": profile}


def test_sagemaker_launch_shows_type_spot_checkpoints_limits_and_tags_in_aws(aws: Clients) -> None:
    # Given an 8 x H100 spot job on two nodes with a 10 h limit
    launcher = SageMakerLauncher(cloud_settings(), aws)
    request = make_launch_request(
        preemptible=True, max_runtime_seconds=36_000, resources=ResourceConfig(gpu_count=8, gpu_type="H100", node_count=2)
    )
    # When launched
    handle = launcher.launch(request)
    # Then the emulated AWS shows the training job as a real account would
    job = aws.client("sagemaker").describe_training_job(TrainingJobName=handle.run_id)
    assert job["ResourceConfig"]["InstanceType"] == "ml.p5.48xlarge" and job["ResourceConfig"]["InstanceCount"] == 2
    assert job["EnableManagedSpotTraining"] is True
    assert job["StoppingCondition"] == {"MaxRuntimeInSeconds": 36_000, "MaxWaitTimeInSeconds": 36_000 + 4 * 3600}
    assert job["CheckpointConfig"] == {"S3Uri": f"s3://{BUCKET}/jobs/job-0a1b2c3d/checkpoints", "LocalPath": "/opt/ml/checkpoints"}
    assert job["HyperParameters"]["run_spec"] == request.run_spec_uri
    tags = {t["Key"]: t["Value"] for t in aws.client("sagemaker").list_tags(ResourceArn=handle.extra["arn"])["Tags"]}
    assert tags["trainplane:job-id"] == "job-0a1b2c3d" and tags["trainplane:attempt"] == "1"
    # And describe() maps moto's (instantly) Completed job; a second launch of the attempt is the same run
    assert launcher.describe(handle).state == RunState.COMPLETED
    assert launcher.launch(request).run_id == handle.run_id


def test_sagemaker_stop_where_moto_has_none(aws: Clients) -> None:
    # Given moto raises NotImplementedError for StopTrainingJob: a stubbed client stands in for AWS
    client = boto3.client("sagemaker", region_name=REGION)
    with Stubber(client) as stub:
        stub.add_response("stop_training_job", {}, {"TrainingJobName": "tp-job-0a1b2c3d-a1"})
        launcher = SageMakerLauncher(cloud_settings(), _Only(sagemaker=client))
        launcher.stop(LaunchHandle("sagemaker", "tp-job-0a1b2c3d-a1", 1))
        stub.assert_no_pending_responses()


def test_ec2_launch_shows_type_spot_profile_tags_and_user_data_in_aws(aws: Clients) -> None:
    # Given a launch template and an instance profile in the account, and a spot single-GPU job
    settings = cloud_settings(**_ec2_setup(aws))
    launcher = EC2Launcher(settings, aws)
    request = make_launch_request(preemptible=True, max_runtime_seconds=7200)
    # When launched
    handle = launcher.launch(request)
    # Then the instance is a spot g5.xlarge with the profile, the tags, metadata tags on, and our user data
    ec2 = aws.client("ec2")
    instance = ec2.describe_instances(InstanceIds=[handle.run_id])["Reservations"][0]["Instances"][0]
    assert instance["InstanceType"] == "g5.xlarge" and instance["InstanceLifecycle"] == "spot"
    assert instance["IamInstanceProfile"]["Arn"] == settings.ec2_instance_profile_arn
    assert instance["MetadataOptions"]["InstanceMetadataTags"] == "enabled"
    tags = {t["Key"]: t["Value"] for t in instance["Tags"]}
    assert (tags["trainplane:job-id"], tags["trainplane:attempt"]) == ("job-0a1b2c3d", "1")
    raw = ec2.describe_instance_attribute(InstanceId=handle.run_id, Attribute="userData")["UserData"]["Value"]
    user_data = base64.b64decode(raw).decode()
    assert request.run_spec_uri in user_data and "MAX_RUNTIME_SECONDS=7200" in user_data
    shutdown = ec2.describe_instance_attribute(InstanceId=handle.run_id, Attribute="instanceInitiatedShutdownBehavior")
    assert shutdown["InstanceInitiatedShutdownBehavior"]["Value"] == "terminate"
    # And the launcher finds the job from the instance, and sees it running (moto starts it at once)
    assert launcher.job_ref(handle.run_id) == ("job-0a1b2c3d", 1)
    assert launcher.describe(handle).state in {RunState.STARTING, RunState.RUNNING}


OWN_IMAGE = "210987654321.dkr.ecr.eu-west-1.amazonaws.com/team/trainer:v2"


def test_a_jobs_own_image_is_what_sagemaker_and_ec2_run(aws: Clients) -> None:
    # Given a deployment that allows the team's ECR repository, and a job naming an image from it
    settings = cloud_settings(custom_image_repositories=("210987654321.dkr.ecr.eu-west-1.amazonaws.com/team/",), **_ec2_setup(aws))
    request = make_launch_request(image=OWN_IMAGE)
    # When SageMaker launches it / Then the training job runs that image, not the deployment's trainer image
    handle = SageMakerLauncher(settings, aws).launch(request)
    job = aws.client("sagemaker").describe_training_job(TrainingJobName=handle.run_id)
    assert job["AlgorithmSpecification"]["TrainingImage"] == OWN_IMAGE
    # And on EC2 the instance's user data pulls and runs that image
    instance_id = EC2Launcher(settings, aws).launch(request).run_id
    raw = aws.client("ec2").describe_instance_attribute(InstanceId=instance_id, Attribute="userData")["UserData"]["Value"]
    user_data = base64.b64decode(raw).decode()
    assert f"IMAGE_URI={OWN_IMAGE}" in user_data and settings.trainer_image_uri not in user_data
    # And a job without one runs the deployment's trainer image
    plain = SageMakerLauncher(settings, aws).launch(make_launch_request(job_id="job-plain"))
    described = aws.client("sagemaker").describe_training_job(TrainingJobName=plain.run_id)
    assert described["AlgorithmSpecification"]["TrainingImage"] == settings.trainer_image_uri


def test_ec2_stop_then_end_from_the_exit_status(aws: Clients) -> None:
    # Given a running instance
    launcher = EC2Launcher(cloud_settings(**_ec2_setup(aws)), aws)
    handle = launcher.launch(make_launch_request())
    # When a graceful stop is asked / Then the instance carries the request for its watcher and is stopping
    launcher.stop(handle)
    assert launcher.describe(handle).state == RunState.STOPPING
    # When its user data wrote "stopped with a checkpoint" and the instance terminated itself
    aws.client("s3").put_object(
        Bucket=BUCKET,
        Key=exit_status_key("job-0a1b2c3d", 1),
        Body=json.dumps({"exit_code": 75, "reason": "stop-graceful", "started_at": 100.0, "ended_at": 400.0}),
    )
    aws.client("ec2").terminate_instances(InstanceIds=[handle.run_id])
    # Then the run is STOPPED and lasted 300 s
    description = launcher.describe(handle)
    assert (description.state, description.run_seconds, description.instance_type) == (RunState.STOPPED, 300.0, "g5.xlarge")


def test_ec2_cancel_terminates_and_a_spot_mark_makes_the_end_a_preemption(aws: Clients) -> None:
    launcher = EC2Launcher(cloud_settings(**_ec2_setup(aws)), aws)
    cancelled = launcher.launch(make_launch_request("job-cancel"))
    spot = launcher.launch(make_launch_request("job-spot", preemptible=True))
    # When one is cancelled and the other gets a spot warning, then ends without an exit status
    launcher.stop(cancelled, graceful=False)
    launcher.mark_interrupted(spot.run_id)
    aws.client("ec2").terminate_instances(InstanceIds=[spot.run_id])
    # Then the cancelled one is STOPPED, the other PREEMPTED
    assert launcher.describe(cancelled).state == RunState.STOPPED
    preempted = launcher.describe(spot)
    assert (preempted.state, preempted.error_type) == (RunState.PREEMPTED, ErrorType.PREEMPTED)
    # And an instance id that never existed is UNKNOWN, stops quietly
    gone = LaunchHandle("ec2", "i-0123456789abcdef0", 1, {"exit_status_key": "jobs/none/runs/001/exit.json"})
    assert launcher.describe(gone).state == RunState.UNKNOWN
    launcher.stop(gone)


def test_ec2_multi_node_launch_rendezvous_and_the_nodes_stop_together(aws: Clients) -> None:
    # Given a 2-node job (2 x 8 H100) and a record of what is sent to EC2 (moto drops Placement.GroupName)
    launcher = EC2Launcher(cloud_settings(**_ec2_setup(aws)), aws)
    sent: dict[str, Any] = {}
    aws.client("ec2").meta.events.register("provide-client-params.ec2.RunInstances", lambda params, **_: sent.update(params))
    request = make_launch_request("job-2n", resources=ResourceConfig(gpu_count=8, gpu_type="H100", node_count=2))
    # When launched
    handle = launcher.launch(request)
    # Then one RunInstances call started both nodes into the cluster placement group, with one user data
    assert (sent["MinCount"], sent["MaxCount"], sent["Placement"]) == (2, 2, {"GroupName": "trainplane-multinode"})
    ec2 = aws.client("ec2")
    ids = handle.run_id.split(",")
    instances = {i["InstanceId"]: i for r in ec2.describe_instances(InstanceIds=ids)["Reservations"] for i in r["Instances"]}
    assert [instances[i]["AmiLaunchIndex"] for i in ids] == [0, 1]
    assert {i["InstanceType"] for i in instances.values()} == {"p5.48xlarge"}
    user_data = {base64.b64decode(ec2.describe_instance_attribute(InstanceId=i, Attribute="userData")["UserData"]["Value"]) for i in ids}
    assert len(user_data) == 1 and b"NODE_COUNT=2\n" in user_data.pop()
    # And the rendezvous object names node 0's private address as the master, every node by rank
    body = aws.client("s3").get_object(Bucket=BUCKET, Key="jobs/job-2n/runs/001/rendezvous.json")["Body"].read()
    rendezvous = json.loads(body)
    assert rendezvous["master_addr"] == instances[ids[0]]["PrivateIpAddress"] and rendezvous["master_port"] == 29500
    assert [(n["rank"], n["instance_id"]) for n in rendezvous["nodes"]] == [(0, ids[0]), (1, ids[1])]
    # And every node is the job's current run for the events handler
    assert {launcher.job_ref(i) for i in ids} == {("job-2n", 1)}
    assert launcher.describe(handle).state in {RunState.STARTING, RunState.RUNNING}
    # When node 1 ends without an exit status (gone, as a dead host), while node 0 still runs
    ec2.terminate_instances(InstanceIds=[ids[1]])
    # Then the run is over for all: node 0 is terminated with it, not left waiting in a collective
    assert launcher.describe(handle).state in {RunState.FAILED, RunState.PREEMPTED}
    state = ec2.describe_instances(InstanceIds=[ids[0]])["Reservations"][0]["Instances"][0]["State"]["Name"]
    assert state in {"shutting-down", "terminated"}


def _put_lines(logs: Any, group: str, stream: str, start_ms: int, messages: list[str]) -> None:
    with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
        logs.create_log_group(logGroupName=group)
    logs.create_log_stream(logGroupName=group, logStreamName=stream)
    events = [{"timestamp": start_ms + i, "message": m} for i, m in enumerate(messages)]
    logs.put_log_events(logGroupName=group, logStreamName=stream, logEvents=events)


def test_cloudwatch_logs_of_every_attempt_in_order_paged_and_followed(aws: Clients) -> None:
    # Given a SageMaker job on its third attempt: attempt 1 logged 4 lines, attempt 2 none, attempt 3 two hosts
    job = make_job(make_request()).model_copy(update={"job_id": "job-logs", "attempt": 3})
    logs = aws.client("logs")
    t0 = int(time.time() * 1000) - 60_000
    _put_lines(logs, LOG_GROUP, f"{training_job_name('job-logs', 1)}/algo-1-1700000000", t0, ["a1 l0", "a1 l1", "a1 l2", "a1 l3"])
    _put_lines(logs, LOG_GROUP, f"{training_job_name('job-logs', 3)}/algo-1-1700000100", t0 + 10_000, ["a3 l0"])
    _put_lines(logs, LOG_GROUP, f"{training_job_name('job-logs', 3)}/algo-2-1700000100", t0 + 10_001, ["a3 host2"])
    _put_lines(logs, LOG_GROUP, "tp-other-job-a1/algo-1-1", t0, ["not ours"])
    source = CloudWatchLogSource(cloud_settings(compute="sagemaker"), aws)
    # When read whole
    whole = source.read(job)
    # Then every attempt's lines come in attempt order, other hosts named, nothing of other jobs
    assert [(line.attempt, line.message) for line in whole.lines] == [
        (1, "a1 l0"),
        (1, "a1 l1"),
        (1, "a1 l2"),
        (1, "a1 l3"),
        (3, "a3 l0"),
        (3, "[algo-2] a3 host2"),
    ]
    assert whole.next_token is None and whole.lines[0].timestamp == pytest.approx(t0 / 1000)
    # When read three lines at a time / Then the pages join up to the whole
    pages, token = [], None
    while True:
        page = source.read(job, next_token=token, limit=3)
        pages.extend(page.lines)
        token = page.next_token
        if token is None:
            break
    assert [line.message for line in pages] == [line.message for line in whole.lines]
    # When followed from the last line seen in attempt 1 / Then only what came after it
    since = whole.lines[3].timestamp
    assert [line.message for line in source.read(job, since=since).lines] == ["a3 l0", "[algo-2] a3 host2"]
    # And a token this API never gave is a 422 naming the field
    with pytest.raises(InvalidRequest) as caught:
        source.read(job, next_token="not-a-token")
    assert caught.value.field == "next_token"


def test_ec2_logs_and_the_source_per_compute(aws: Clients) -> None:
    # Given an EC2 job whose group does not exist yet, then one line
    settings = cloud_settings(compute="ec2")
    job = make_job(make_request()).model_copy(update={"job_id": "job-ec2", "attempt": 1})
    source = log_source_for(settings, aws)
    assert source is not None and source.read(job).lines == []
    _put_lines(aws.client("logs"), settings.trainer_log_group, "job-ec2/001/trainer", int(time.time() * 1000), ["hello"])
    assert [(line.attempt, line.message) for line in source.read(job).lines] == [(1, "hello")]
    # And local compute reads its own files (no CloudWatch source)
    assert log_source_for(cloud_settings(compute="local"), aws) is None


class _Only:
    def __init__(self, **clients: Any) -> None:
        self._clients = clients

    def client(self, service: str) -> Any:
        return self._clients[service]


def test_cloudwatch_cursor_resumes_after_the_last_line_even_within_one_millisecond(aws: Clients) -> None:
    # Given an attempt whose first three lines share one millisecond
    job = make_job(make_request()).model_copy(update={"job_id": "job-cursor", "attempt": 1})
    logs = aws.client("logs")
    stream = f"{training_job_name('job-cursor', 1)}/algo-1-1700000000"
    t0 = int(time.time() * 1000) - 30_000
    with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
        logs.create_log_group(logGroupName=LOG_GROUP)
    logs.create_log_stream(logGroupName=LOG_GROUP, logStreamName=stream)
    logs.put_log_events(logGroupName=LOG_GROUP, logStreamName=stream, logEvents=[{"timestamp": t0, "message": m} for m in ("a", "b", "c")])
    source = CloudWatchLogSource(cloud_settings(compute="sagemaker"), aws)
    # When a follower reads two lines, then the rest from its cursor, as the log grows (same ms, then later)
    first = source.read(job, limit=2)
    logs.put_log_events(
        logGroupName=LOG_GROUP, logStreamName=stream, logEvents=[{"timestamp": t0, "message": "d"}, {"timestamp": t0 + 5, "message": "e"}]
    )
    second = source.read(job, next_token=first.cursor)
    third = source.read(job, next_token=second.cursor)
    # Then every line came exactly once, and an empty read keeps the cursor
    assert [line.message for line in first.lines + second.lines] == ["a", "b", "c", "d", "e"]
    assert third.lines == [] and third.cursor == second.cursor
    with pytest.raises(InvalidRequest):
        source.read(job, next_token="c.not-base64-json")
