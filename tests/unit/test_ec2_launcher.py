"""EC2Launcher: the RunInstances request, the user data (run for real against fake docker/aws/curl),
status mapping from recorded DescribeInstances responses and exit status objects, stop by tag.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.response import StreamingBody
from botocore.stub import ANY, Stubber

from functions.adapters.launchers.cloud import LaunchCapacityError
from functions.adapters.launchers.ec2 import (
    EC2Launcher,
    build_run_instances_request,
    client_token,
    describe_instance,
    render_user_data,
)
from functions.catalog.instances import select_instance
from functions.catalog.job_names import exit_status_key
from functions.errors import InvalidRequest, Unsupported
from functions.service.ports import LaunchHandle, RunState
from schemas.configs import ResourceConfig
from schemas.job import ErrorType
from tests.cloud_fixtures import BUCKET, IMAGE, cloud_settings, load_event, make_launch_request

INSTANCE = "i-0abcd1234ef567890"
TWO_NODES_CPU = ResourceConfig(gpu_count=0, node_count=2)


class StubClients:
    def __init__(self, **clients: Any) -> None:
        self._clients = clients

    def client(self, service: str) -> Any:
        return self._clients[service]


@pytest.fixture
def stubbed() -> Iterator[tuple[EC2Launcher, Stubber, Stubber]]:
    ec2 = boto3.client("ec2", region_name="us-east-1")
    s3 = boto3.client("s3", region_name="us-east-1")
    with Stubber(ec2) as ec2_stub, Stubber(s3) as s3_stub:
        yield EC2Launcher(cloud_settings(), StubClients(ec2=ec2, s3=s3)), ec2_stub, s3_stub
        ec2_stub.assert_no_pending_responses()
        s3_stub.assert_no_pending_responses()


def test_single_gpu_on_demand_request() -> None:
    # Given a one-GPU job with a label key holding '/' / When its RunInstances request is built
    request = make_launch_request(labels={"team/sub": "nlp"})
    params = build_run_instances_request(request, cloud_settings())
    # Then it launches one g5.xlarge from the template, self-terminating, with its tags and profile
    assert params["LaunchTemplate"] == {"LaunchTemplateName": "trainplane-gpu", "Version": "$Default"}
    assert (params["InstanceType"], params["MinCount"], params["MaxCount"]) == ("g5.xlarge", 1, 1)
    assert params["InstanceInitiatedShutdownBehavior"] == "terminate"
    assert params["MetadataOptions"]["InstanceMetadataTags"] == "enabled"
    assert params["IamInstanceProfile"] == {"Arn": "arn:aws:iam::123456789012:instance-profile/trainplane-trainer"}
    assert params["ClientToken"] == client_token("job-0a1b2c3d", 1)
    assert "InstanceMarketOptions" not in params and "BlockDeviceMappings" not in params
    tags = {t["Key"]: t["Value"] for t in params["TagSpecifications"][0]["Tags"]}
    # instance tags readable from metadata may not contain '/': the label key is made safe
    assert tags == {
        "trainplane:job-id": "job-0a1b2c3d",
        "trainplane:attempt": "1",
        "trainplane:owner": "arn:aws:iam::123456789012:user/alice",
        "trainplane:label:team_sub": "nlp",
    }
    assert "--gpus all" in params["UserData"] and request.run_spec_uri in params["UserData"]


def test_eight_h100_spot_request_with_storage_vpc_and_kms() -> None:
    # Given an 8 x H100 preemptible job asking for 1 TB in a VPC + KMS deployment with a template id
    request = make_launch_request(preemptible=True, resources=ResourceConfig(gpu_count=8, gpu_type="H100", storage_min_mb=1_048_576))
    settings = cloud_settings(
        ec2_launch_template_id="lt-0123", vpc_subnet_ids=("subnet-a",), vpc_security_group_ids=("sg-1",), kms_key_id="key-1"
    )
    # When built
    params = build_run_instances_request(request, settings)
    # Then it is a one-time spot p5 that terminates on interruption, with an encrypted 1 TB root volume
    assert params["InstanceType"] == "p5.48xlarge"
    assert params["LaunchTemplate"] == {"LaunchTemplateId": "lt-0123", "Version": "$Default"}
    assert params["InstanceMarketOptions"] == {
        "MarketType": "spot",
        "SpotOptions": {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"},
    }
    assert params["BlockDeviceMappings"] == [
        {
            "DeviceName": "/dev/sda1",
            "Ebs": {"VolumeSize": 1024, "VolumeType": "gp3", "DeleteOnTermination": True, "Encrypted": True, "KmsKeyId": "key-1"},
        }
    ]
    assert (params["SubnetId"], params["SecurityGroupIds"]) == ("subnet-a", ["sg-1"])


def test_cpu_only_request_has_no_gpu_flags() -> None:
    # Given a CPU-only job / When built / Then an m5.large whose container gets no GPUs
    params = build_run_instances_request(make_launch_request(resources=ResourceConfig(gpu_count=0)), cloud_settings())
    assert params["InstanceType"] == "m5.large"
    assert "--gpus" not in params["UserData"]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"resources": ResourceConfig(gpu_count=9)}, "resource_config.gpu_count"),
        ({"sources": ("./data/train.jsonl",)}, "data_config.sources[0].path"),
        ({"resources": TWO_NODES_CPU, "environment": {"MASTER_ADDR": "10.0.0.1"}}, "training_config.environment.MASTER_ADDR"),
    ],
)
def test_requests_ec2_cannot_run_are_refused_naming_the_field(kwargs: dict[str, Any], field: str) -> None:
    # Given a request nothing fits, local data / When built / Then a 422-style error names the field
    with pytest.raises(InvalidRequest) as caught:
        build_run_instances_request(make_launch_request(**kwargs), cloud_settings())
    assert caught.value.field == field


def test_a_deployment_without_launch_template_is_unsupported() -> None:
    with pytest.raises(Unsupported, match="launch_template"):
        build_run_instances_request(make_launch_request(), cloud_settings(ec2_launch_template_name=None))


def test_launch_sends_a_request_ec2_accepts(stubbed: tuple[EC2Launcher, Stubber, Stubber]) -> None:
    # Given EC2's model of RunInstances (the Stubber validates the request against it)
    launcher, ec2, _ = stubbed
    request = make_launch_request(preemptible=True)
    expected = build_run_instances_request(request, cloud_settings())
    ec2.add_response("run_instances", {"Instances": [{"InstanceId": INSTANCE, "InstanceType": "g5.xlarge"}]}, expected)
    # When launched / Then the handle names the instance and where its exit status will be
    handle = launcher.launch(request)
    assert (handle.launcher, handle.run_id, handle.extra["spot"]) == ("ec2", INSTANCE, "true")
    assert handle.extra["exit_status_key"] == exit_status_key("job-0a1b2c3d", 1) == "jobs/job-0a1b2c3d/runs/001/exit.json"


def test_no_capacity_is_a_capacity_error(stubbed: tuple[EC2Launcher, Stubber, Stubber]) -> None:
    launcher, ec2, _ = stubbed
    ec2.add_client_error("run_instances", "InsufficientInstanceCapacity", "We currently do not have sufficient g5.xlarge capacity")
    with pytest.raises(LaunchCapacityError) as caught:
        launcher.launch(make_launch_request())
    assert caught.value.instance_type == "g5.xlarge"


def _instance(recorded: str, **changes: Any) -> dict[str, Any]:
    instance = load_event(recorded)["Reservations"][0]["Instances"][0]
    instance.update(changes)
    return instance


@pytest.mark.parametrize(
    ("recorded", "exit_status", "state", "error_type"),
    [
        ("ec2_describe_running", None, RunState.RUNNING, None),
        ("ec2_describe_terminated_spot", None, RunState.PREEMPTED, ErrorType.PREEMPTED),
        ("ec2_describe_terminated_by_user_data", "ec2_exit_status_oom", RunState.FAILED, ErrorType.OUT_OF_MEMORY),
        ("ec2_describe_terminated_by_user_data", "ec2_exit_status_spot", RunState.PREEMPTED, ErrorType.PREEMPTED),
        ("ec2_describe_terminated_by_user_data", None, RunState.FAILED, ErrorType.INTERNAL),
        (None, "ec2_exit_status_spot", RunState.PREEMPTED, ErrorType.PREEMPTED),
        (None, None, RunState.UNKNOWN, None),
    ],
)
def test_describe_maps_recorded_instances_and_exit_statuses(
    recorded: str | None, exit_status: str | None, state: RunState, error_type: ErrorType | None
) -> None:
    # Given a recorded instance (or none: it is gone) and the exit status object the user data wrote (or none)
    instance = _instance(recorded) if recorded else None
    status = load_event(exit_status) if exit_status else None
    # When mapped / Then the verdict follows the exit code first, then the instance's StateReason
    description = describe_instance(instance, status, now=1795171000.0)
    assert (description.state, description.error_type) == (state, error_type)


@pytest.mark.parametrize(
    ("exit_status", "tags", "state", "error_type"),
    [
        ({"exit_code": 0, "reason": "exited"}, {}, RunState.COMPLETED, None),
        ({"exit_code": 75, "reason": "stop-graceful"}, {}, RunState.STOPPED, None),
        ({"exit_code": 137, "reason": "stop-graceful"}, {}, RunState.STOPPED, None),
        ({"exit_code": 75, "reason": "stop-graceful"}, {"trainplane:interrupted": "true"}, RunState.PREEMPTED, ErrorType.PREEMPTED),
        ({"exit_code": 75, "reason": "max-runtime"}, {}, RunState.FAILED, ErrorType.TIMEOUT),
        ({"exit_code": 137, "reason": "exited", "oom_killed": True}, {}, RunState.FAILED, ErrorType.OUT_OF_MEMORY),
        ({"exit_code": 65, "reason": "exited", "failure": "DataError: s3://d/t.jsonl:4: bad"}, {}, RunState.FAILED, ErrorType.DATA_ERROR),
        ({"exit_code": 1, "reason": "exited"}, {}, RunState.FAILED, ErrorType.USER_ERROR),
        ({"exit_code": 70, "reason": "image-pull-failed"}, {}, RunState.FAILED, ErrorType.INTERNAL),
    ],
)
def test_exit_statuses_map_to_run_states(
    exit_status: dict[str, Any], tags: dict[str, str], state: RunState, error_type: ErrorType | None
) -> None:
    # Given a terminated instance with these tags and this exit status
    instance = _instance("ec2_describe_terminated_by_user_data", Tags=[{"Key": k, "Value": v} for k, v in tags.items()])
    status = {"started_at": 100.0, "ended_at": 460.0, **exit_status}
    # When mapped / Then the state, error type and the run's seconds are right
    description = describe_instance(instance, status)
    assert (description.state, description.error_type) == (state, error_type)
    assert description.run_seconds == 360.0


def test_a_running_instance_asked_to_stop_is_stopping_and_elapsed_time_counts() -> None:
    instance = _instance("ec2_describe_running", Tags=[{"Key": "trainplane:stop", "Value": "graceful"}])
    description = describe_instance(instance, None, now=1795168900.0 + 600)
    assert description.state == RunState.STOPPING
    assert description.spot is True and description.run_seconds == pytest.approx(600.0)


def test_describe_reads_the_exit_status_from_s3_once_the_instance_ended(stubbed: tuple[EC2Launcher, Stubber, Stubber]) -> None:
    # Given a terminated instance whose user data wrote an OOM exit status
    launcher, ec2, s3 = stubbed
    ec2.add_response("describe_instances", load_event("ec2_describe_terminated_by_user_data"), {"InstanceIds": [INSTANCE]})
    body = json.dumps(load_event("ec2_exit_status_oom")).encode()
    expected = {"Bucket": BUCKET, "Key": exit_status_key("job-0a1b2c3d", 1)}
    s3.add_response("get_object", {"Body": StreamingBody(io.BytesIO(body), len(body))}, expected)
    # When described / Then the trainer's own classification wins
    description = launcher.describe(LaunchHandle("ec2", INSTANCE, 1))
    assert (description.state, description.error_type) == (RunState.FAILED, ErrorType.OUT_OF_MEMORY)
    assert description.run_seconds == pytest.approx(3049.5)


def test_stop_tags_the_instance_and_cancel_also_terminates(stubbed: tuple[EC2Launcher, Stubber, Stubber]) -> None:
    launcher, ec2, _ = stubbed
    handle = LaunchHandle("ec2", INSTANCE, 1)
    ec2.add_response("create_tags", {}, {"Resources": [INSTANCE], "Tags": [{"Key": "trainplane:stop", "Value": "graceful"}]})
    ec2.add_response("create_tags", {}, {"Resources": [INSTANCE], "Tags": [{"Key": "trainplane:stop", "Value": "cancel"}]})
    ec2.add_response("terminate_instances", {}, {"InstanceIds": [INSTANCE]})
    ec2.add_client_error("create_tags", "InvalidInstanceID.NotFound", "The instance ID does not exist")
    # When stopped gracefully, cancelled, then stopped once it is gone / Then no error escapes
    launcher.stop(handle)
    launcher.stop(handle, graceful=False)
    launcher.stop(handle)


def test_spot_warning_mark_and_job_lookup(stubbed: tuple[EC2Launcher, Stubber, Stubber]) -> None:
    launcher, ec2, _ = stubbed
    ec2.add_response("create_tags", {}, {"Resources": [INSTANCE], "Tags": [{"Key": "trainplane:interrupted", "Value": "true"}]})
    ec2.add_response("describe_instances", load_event("ec2_describe_running"), {"InstanceIds": [INSTANCE]})
    ec2.add_client_error("describe_instances", "InvalidInstanceID.NotFound", "gone", expected_params={"InstanceIds": ANY})
    launcher.mark_interrupted(INSTANCE)
    assert launcher.job_ref(INSTANCE) == ("job-0a1b2c3d", 1)
    assert launcher.job_ref("i-0ffffffffffffffff") is None


# --- The user data, run for real against fake docker / aws / curl / shutdown --------------------------

FAKE_DOCKER = """
import os, signal, subprocess, sys, time, json
fake = os.environ["FAKE"]
args = sys.argv[1:]
def path(name): return os.path.join(fake, name)
if args[0] == "login":
    sys.stdin.read(); print(args[-1], file=open(path("logins"), "a")); sys.exit(0)
if args[0] == "pull":
    sys.exit(0)
if args[0] == "run":
    json.dump(args, open(path("run.json"), "w"))
    proc = subprocess.Popen([sys.executable, path("trainer.py")], start_new_session=True)
    open(path("pid"), "w").write(str(proc.pid)); print("c0ffee"); sys.exit(0)
if args[0] == "inspect":
    fmt = args[2]
    if "Running" in fmt: print("false" if os.path.exists(path("exitcode")) or not os.path.exists(path("pid")) else "true")
    elif "ExitCode" in fmt: print(open(path("exitcode")).read().strip())
    else: print("false")
    sys.exit(0)
if args[0] == "stop":
    grace = float(args[2]); pid = int(open(path("pid")).read())
    os.kill(pid, signal.SIGTERM)
    deadline = time.time() + grace
    while time.time() < deadline and not os.path.exists(path("exitcode")): time.sleep(0.05)
    if not os.path.exists(path("exitcode")):
        os.kill(pid, signal.SIGKILL); open(path("exitcode"), "w").write("137")
    sys.exit(0)
sys.exit(2)
"""

FAKE_TRAINER = """
import os, signal, sys, time
fake = os.environ["FAKE"]; mode = open(os.path.join(fake, "mode")).read().strip()
def done(code):
    tmp = os.path.join(fake, "exitcode.tmp")
    open(tmp, "w").write(str(code)); os.replace(tmp, os.path.join(fake, "exitcode")); sys.exit(0)
signal.signal(signal.SIGTERM, lambda *_: done(75))
if mode == "complete": time.sleep(0.3); done(0)
if mode == "data-error":
    os.makedirs(os.path.join(fake, "opt_ml", "output"), exist_ok=True)
    open(os.path.join(fake, "opt_ml", "output", "failure"), "w").write("DataError: s3://d/train.jsonl:3: not JSON")
    done(65)
while True: time.sleep(0.05)
"""

FAKE_AWS = """#!/bin/bash
if [ "$1" = ecr ]; then echo "$4" >> "$FAKE/ecr-regions"; echo password; exit 0; fi
if [ "$1" = s3 ] && [ "$2" = cp ]; then
  for last; do :; done; src=""; for a in "$@"; do case "$a" in /*) src="$a";; esac; done
  mkdir -p "$FAKE/s3"; cp "$src" "$FAKE/s3/$(basename "$last")"; exit 0
fi
exit 2
"""

FAKE_CURL = """#!/bin/bash
url=""; for a in "$@"; do case "$a" in http*) url="$a";; esac; done
case "$url" in
  */api/token) echo tok;;
  */meta-data/instance-id) echo i-fake;;
  */meta-data/spot/instance-action) [ -f "$FAKE/spot" ] && cat "$FAKE/spot" || exit 22;;
  */meta-data/tags/instance/trainplane:stop) [ -f "$FAKE/stop" ] && cat "$FAKE/stop" || exit 22;;
  *) exit 22;;
esac
"""


def _run_user_data(
    tmp_path: Path, mode: str, *, spot: bool, stop: str | None, environment: dict[str, str], image: str | None = None, **settings: Any
) -> Path:
    fake = tmp_path / "fake"
    bin_dir = tmp_path / "bin"
    fake.mkdir()
    bin_dir.mkdir()
    (fake / "mode").write_text(mode)
    (fake / "trainer.py").write_text(textwrap.dedent(FAKE_TRAINER))
    if spot:
        (fake / "spot").write_text('{"action": "terminate", "time": "2026-11-20T10:32:00Z"}')
    if stop:
        (fake / "stop").write_text(stop)
    scripts = {
        "docker": f"#!{sys.executable}\n{textwrap.dedent(FAKE_DOCKER)}",
        "aws": FAKE_AWS,
        "curl": FAKE_CURL,
        "shutdown": '#!/bin/bash\ntouch "$FAKE/shutdown"\n',
    }
    for name, text in scripts.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    request = make_launch_request(environment=environment, image=image)
    script = tmp_path / "user_data.sh"
    script.write_text(render_user_data(request, cloud_settings(**settings), select_instance(request.run_spec.resource_config, "ec2")))
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "FAKE": str(fake),
        "TRAINPLANE_UD_POLL_SECONDS": "0.1",
        "TRAINPLANE_UD_BOOT_LOG": str(fake / "bootstrap.log"),
        "TRAINPLANE_UD_OPT_ML": str(fake / "opt_ml"),
        "TRAINPLANE_UD_IMDS": "http://imds.invalid/latest",
    }
    subprocess.run(["bash", str(script)], env=env, timeout=60, check=True, capture_output=True)
    return fake


def test_user_data_is_valid_bash_and_quotes_every_value() -> None:
    # Given an environment value that tries to break out of its quotes
    request = make_launch_request(environment={"EVIL": "a'; touch /tmp/pwned #", "PLAIN": "1"})
    script = render_user_data(request, cloud_settings(), select_instance(request.run_spec.resource_config, "ec2"))
    # Then every placeholder is filled and bash parses the result
    assert "@@" not in script and IMAGE in script
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)


@pytest.mark.parametrize(
    ("mode", "spot", "stop", "exit_code", "reason", "state", "error_type"),
    [
        ("complete", False, None, 0, "exited", RunState.COMPLETED, None),
        ("wait", True, None, 75, "spot-interruption", RunState.PREEMPTED, ErrorType.PREEMPTED),
        ("wait", False, "graceful", 75, "stop-graceful", RunState.STOPPED, None),
        ("data-error", False, None, 65, "exited", RunState.FAILED, ErrorType.DATA_ERROR),
    ],
)
def test_user_data_runs_the_trainer_watches_and_reports(
    tmp_path: Path, mode: str, spot: bool, stop: str | None, exit_code: int, reason: str, state: RunState, error_type: ErrorType | None
) -> None:
    # Given the rendered user data on a fake host (docker/aws/curl stand-ins), a trainer that completes,
    # waits for SIGTERM (spot notice / stop tag) or fails on bad data
    fake = _run_user_data(tmp_path, mode, spot=spot, stop=stop, environment={"EVIL": "a'; touch /tmp/pwned #"})
    # When it has run / Then it wrote the exit status and its log to S3 and powered the instance off
    status = json.loads((fake / "s3" / "exit.json").read_text())
    assert (status["exit_code"], status["reason"], status["interrupted"]) == (exit_code, reason, spot)
    assert (fake / "s3" / "bootstrap.log").exists() and (fake / "shutdown").exists()
    # And the container got the trainer contract, the hostile value intact as one argument
    run_args = json.loads((fake / "run.json").read_text())
    assert "EVIL=a'; touch /tmp/pwned #" in run_args
    assert f"TRAINPLANE_RUN_SPEC=s3://{BUCKET}/jobs/job-0a1b2c3d/config/run-001.json" in run_args
    assert run_args[-1] == IMAGE and "awslogs-stream=job-0a1b2c3d/001/trainer" in run_args
    # And the launcher's describe() reads that status to the right verdict
    description = describe_instance(_instance("ec2_describe_terminated_by_user_data"), status)
    assert (description.state, description.error_type) == (state, error_type)


# --- multi-node -----------------------------------------------------------------------------------

TWO_NODES = ResourceConfig(gpu_count=8, gpu_type="H100", node_count=2)
NODES = ["i-0node0000000000000", "i-0node1111111111111"]


def test_a_multi_node_request_launches_every_node_at_once_into_the_placement_group() -> None:
    # Given a 2 x 8 H100 job / When its RunInstances request is built
    params = build_run_instances_request(make_launch_request(resources=TWO_NODES), cloud_settings())
    # Then one call starts both nodes or none, packed in the deployment's cluster placement group
    assert (params["InstanceType"], params["MinCount"], params["MaxCount"]) == ("p5.48xlarge", 2, 2)
    assert params["Placement"] == {"GroupName": "trainplane-multinode"}
    # And the user data knows the node count and where the rendezvous object will be
    assert "NODE_COUNT=2\n" in params["UserData"]
    assert f"RENDEZVOUS_URI=s3://{BUCKET}/jobs/job-0a1b2c3d/runs/001/rendezvous.json\n" in params["UserData"]
    # A single node needs no group
    assert "Placement" not in build_run_instances_request(make_launch_request(), cloud_settings())


def test_multi_node_without_a_placement_group_setting_is_unsupported() -> None:
    with pytest.raises(Unsupported, match="ec2_placement_group"):
        build_run_instances_request(make_launch_request(resources=TWO_NODES), cloud_settings(ec2_placement_group=None))


def test_multi_node_launch_writes_the_rendezvous_from_run_instances(stubbed: tuple[EC2Launcher, Stubber, Stubber]) -> None:
    # Given EC2 returning the two nodes out of launch-index order
    launcher, ec2, s3 = stubbed
    request = make_launch_request(resources=TWO_NODES)
    instances = [
        {"InstanceId": NODES[1], "AmiLaunchIndex": 1, "PrivateIpAddress": "10.0.1.11"},
        {"InstanceId": NODES[0], "AmiLaunchIndex": 0, "PrivateIpAddress": "10.0.1.10"},
    ]
    ec2.add_response("run_instances", {"Instances": instances}, build_run_instances_request(request, cloud_settings()))
    expected = {
        "job_id": "job-0a1b2c3d",
        "attempt": 1,
        "node_count": 2,
        "master_addr": "10.0.1.10",
        "master_port": 29500,
        "nodes": [
            {"rank": 0, "instance_id": NODES[0], "private_ip": "10.0.1.10"},
            {"rank": 1, "instance_id": NODES[1], "private_ip": "10.0.1.11"},
        ],
    }
    s3.add_response(
        "put_object",
        {},
        {"Bucket": BUCKET, "Key": "jobs/job-0a1b2c3d/runs/001/rendezvous.json", "Body": json.dumps(expected).encode(), "ContentType": ANY},
    )
    # When launched / Then the master is launch index 0's private address, and the handle lists the nodes in rank order
    handle = launcher.launch(request)
    assert handle.run_id == ",".join(NODES) and handle.extra["instance_count"] == "2"


def _node(state: str, **changes: Any) -> dict[str, Any]:
    recorded = "ec2_describe_running" if state == "running" else "ec2_describe_terminated_by_user_data"
    return _instance(recorded, **changes)


def _describe_nodes(
    stubbed: tuple[EC2Launcher, Stubber, Stubber],
    nodes: list[dict[str, Any]],
    statuses: dict[str, dict[str, Any] | None],
    then: tuple[tuple[str, dict[str, Any]], ...] = (),
) -> Any:
    launcher, ec2, s3 = stubbed
    ec2.add_response("describe_instances", {"Reservations": [{"Instances": nodes}]}, {"InstanceIds": NODES})
    for operation, params in then:
        ec2.add_response(operation, {}, params)
    for key, status in statuses.items():
        if status is None:
            s3.add_client_error("get_object", "NoSuchKey", expected_params={"Bucket": BUCKET, "Key": key})
        else:
            body = json.dumps(status).encode()
            s3.add_response("get_object", {"Body": StreamingBody(io.BytesIO(body), len(body))}, {"Bucket": BUCKET, "Key": key})
    handle = LaunchHandle("ec2", ",".join(NODES), 1, {"exit_status_key": exit_status_key("job-0a1b2c3d", 1)})
    return launcher.describe(handle)


STOPPED_STATUS = {"exit_code": 75, "reason": "stop-graceful", "started_at": 1.0, "ended_at": 11.0}
NODE1_KEY = "jobs/job-0a1b2c3d/runs/001/exit-node1.json"


def test_a_lost_node_preempts_the_whole_run_and_the_survivor_is_terminated(stubbed: tuple[EC2Launcher, Stubber, Stubber]) -> None:
    # Given node 0 still running and node 1 terminated by EC2 (spot reclaimed) with no exit status
    nodes = [
        _node("running", InstanceId=NODES[0]),
        _instance("ec2_describe_terminated_spot", InstanceId=NODES[1]),
    ]
    terminate = (
        ("create_tags", {"Resources": [NODES[0]], "Tags": [{"Key": "trainplane:stop", "Value": "cancel"}]}),
        ("terminate_instances", {"InstanceIds": [NODES[0]]}),
    )
    # When described / Then the run is PREEMPTED (resumed from the last checkpoint), node 0 terminated with it
    description = _describe_nodes(stubbed, nodes, {NODE1_KEY: None}, terminate)
    assert (description.state, description.error_type) == (RunState.PREEMPTED, ErrorType.PREEMPTED)
    assert "node 1 of 2 lost" in (description.message or "") and description.instance_count == 2


def test_a_node_that_stopped_gracefully_waits_for_rank_0s_checkpoint(stubbed: tuple[EC2Launcher, Stubber, Stubber]) -> None:
    # Given a pause: node 1 ended with its exit status (stopped), node 0 (rank 0) still saving the checkpoint
    nodes = [_node("running", InstanceId=NODES[0]), _node("terminated", InstanceId=NODES[1])]
    # When described / Then the run is still STOPPING and nothing is terminated
    assert _describe_nodes(stubbed, nodes, {NODE1_KEY: STOPPED_STATUS}).state == RunState.STOPPING


def test_all_nodes_stopped_is_a_stopped_run_and_a_failed_node_fails_it(stubbed: tuple[EC2Launcher, Stubber, Stubber]) -> None:
    nodes = [_node("terminated", InstanceId=NODES[0]), _node("terminated", InstanceId=NODES[1])]
    node0 = exit_status_key("job-0a1b2c3d", 1)
    assert _describe_nodes(stubbed, nodes, {node0: STOPPED_STATUS, NODE1_KEY: STOPPED_STATUS}).state == RunState.STOPPED
    failed = {"exit_code": 65, "reason": "exited", "failure": "DataError: bad line", "started_at": 1.0, "ended_at": 2.0}
    description = _describe_nodes(stubbed, nodes, {node0: STOPPED_STATUS, NODE1_KEY: failed})
    assert (description.state, description.error_type) == (RunState.FAILED, ErrorType.DATA_ERROR)
    assert (description.message or "").startswith("node 1 of 2:")


def test_stop_reaches_every_node(stubbed: tuple[EC2Launcher, Stubber, Stubber]) -> None:
    launcher, ec2, _ = stubbed
    ec2.add_response("create_tags", {}, {"Resources": NODES, "Tags": [{"Key": "trainplane:stop", "Value": "graceful"}]})
    launcher.stop(LaunchHandle("ec2", ",".join(NODES), 1), graceful=True)


FAKE_AWS_RENDEZVOUS = """#!/bin/bash
if [ "$1" = ecr ]; then echo password; exit 0; fi
if [ "$1" = s3 ] && [ "$2" = cp ]; then
  for last; do :; done
  if [ "$last" = - ]; then [ -f "$FAKE/rendezvous.json" ] && cat "$FAKE/rendezvous.json" && exit 0; exit 1; fi
  src=""; for a in "$@"; do case "$a" in /*) src="$a";; esac; done
  mkdir -p "$FAKE/s3"; cp "$src" "$FAKE/s3/$(basename "$last")"; exit 0
fi
exit 2
"""

FAKE_CURL_NODE1 = FAKE_CURL.replace("*) exit 22;;", "*/meta-data/ami-launch-index) echo 1;;\n  *) exit 22;;")


def test_user_data_of_node_1_finds_the_master_through_the_rendezvous(tmp_path: Path) -> None:
    # Given node 1 of a 2-node job (launch index 1) whose rendezvous object names node 0's address
    fake = tmp_path / "fake"
    bin_dir = tmp_path / "bin"
    fake.mkdir()
    bin_dir.mkdir()
    (fake / "mode").write_text("complete")
    (fake / "trainer.py").write_text(textwrap.dedent(FAKE_TRAINER))
    (fake / "rendezvous.json").write_text(json.dumps({"master_addr": "10.0.1.10", "master_port": 29500}))
    scripts = {
        "docker": f"#!{sys.executable}\n{textwrap.dedent(FAKE_DOCKER)}",
        "aws": FAKE_AWS_RENDEZVOUS,
        "curl": FAKE_CURL_NODE1,
        "shutdown": '#!/bin/bash\ntouch "$FAKE/shutdown"\n',
    }
    for name, text in scripts.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    request = make_launch_request(resources=ResourceConfig(gpu_count=0, node_count=2))
    script = tmp_path / "user_data.sh"
    script.write_text(render_user_data(request, cloud_settings(), select_instance(request.run_spec.resource_config, "ec2")))
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "FAKE": str(fake),
        "TRAINPLANE_UD_POLL_SECONDS": "0.1",
        "TRAINPLANE_UD_BOOT_LOG": str(fake / "bootstrap.log"),
        "TRAINPLANE_UD_OPT_ML": str(fake / "opt_ml"),
        "TRAINPLANE_UD_IMDS": "http://imds.invalid/latest",
    }
    # When it runs
    subprocess.run(["bash", str(script)], env=env, timeout=60, check=True, capture_output=True)
    # Then the trainer got its rank and the master from the rendezvous, and node 1's status and log are its own
    run_args = json.loads((fake / "run.json").read_text())
    for expected in ("NODE_RANK=1", "NNODES=2", "MASTER_ADDR=10.0.1.10", "MASTER_PORT=29500"):
        assert expected in run_args
    assert "awslogs-stream=job-0a1b2c3d/001/trainer-node1" in run_args
    assert json.loads((fake / "s3" / "exit-node1.json").read_text())["exit_code"] == 0
    assert not (fake / "s3" / "exit.json").exists()


@pytest.mark.parametrize(
    ("image", "logins", "regions"),
    [
        (None, [IMAGE.split("/")[0]], ["us-east-1"]),
        ("210987654321.dkr.ecr.eu-west-1.amazonaws.com/team/trainer:v2", ["210987654321.dkr.ecr.eu-west-1.amazonaws.com"], ["eu-west-1"]),
        ("ghcr.io/team/trainer:v2", [], []),
    ],
)
def test_user_data_runs_a_jobs_own_image_logging_in_only_to_ecr(
    tmp_path: Path, image: str | None, logins: list[str], regions: list[str]
) -> None:
    # Given a job naming its own image from a repository the deployment allows (or none: the trainer image)
    allowed = ("210987654321.dkr.ecr.eu-west-1.amazonaws.com/team", "ghcr.io/team")
    fake = _run_user_data(tmp_path, "complete", spot=False, stop=None, environment={}, image=image, custom_image_repositories=allowed)
    # Then the container ran that image, under the same trainer contract
    run_args = json.loads((fake / "run.json").read_text())
    assert run_args[-1] == (image or IMAGE)
    assert f"TRAINPLANE_RUN_SPEC=s3://{BUCKET}/jobs/job-0a1b2c3d/config/run-001.json" in run_args
    # And the host logged in to an ECR registry in that registry's region, and to no other registry
    read = lambda name: (fake / name).read_text().split() if (fake / name).exists() else []  # noqa: E731
    assert (read("logins"), read("ecr-regions")) == (logins, regions)
    assert json.loads((fake / "s3" / "exit.json").read_text())["exit_code"] == 0


def test_a_jobs_image_no_longer_allowed_is_refused_at_launch() -> None:
    # Given a job whose image the deployment stopped allowing after it was submitted
    request = make_launch_request(image="ghcr.io/team/trainer:v2")
    # When its attempt is launched / Then the launch is refused naming the field (the job's error)
    with pytest.raises(InvalidRequest) as caught:
        render_user_data(request, cloud_settings(), select_instance(request.run_spec.resource_config, "ec2"))
    assert caught.value.field == "training_config.image" and "allows no custom images" in caught.value.message
