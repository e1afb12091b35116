"""localmode/iam_calls.py records each AWS call with the role that makes it in the cloud (make iam-check)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import boto3
import pytest

from functions.adapters.aws import AwsClients
from localmode import iam_calls
from tests.helpers.api_lambda import Api

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's calls into a file of its own (the run's recording is on: tests/conftest.py)."""
    assert iam_calls.enabled(), "tests/conftest.py switches the recording on for every run"
    path = tmp_path / "calls.jsonl"
    monkeypatch.setattr(iam_calls, "_path", str(path))
    return path


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_handler_s_calls_are_its_role_s(call: Api, recorded: Path) -> None:
    # When the API Lambda handles a submit
    job = call.submit()
    # Then its writes are recorded as the Api role's, on the deployment's jobs table (a token the check resolves)
    lines = _lines(recorded)
    assert lines and {line["caller"] for line in lines} == {"Api"}
    # the submit's transaction: each item is authorized as its own action on its table
    (transaction,) = [line for line in lines if line["operation"] == "TransactWriteItems"]
    jobs_table = "arn:aws:dynamodb:us-east-1:123456789012:table/${JobsTable}"
    assert {"action": "dynamodb:PutItem", "resource": jobs_table, "context": {}} in transaction["authorizations"]
    assert job["job_id"]


def test_a_control_plane_call_outside_a_handler_is_unattributed_and_other_clients_are_not_recorded(aws: AwsClients, recorded: Path) -> None:
    boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="iam-calls-bucket")  # a test's own client: not recorded
    clients = AwsClients(region="us-east-1")
    clients.s3().list_buckets()  # the control plane's client, called by no function
    with iam_calls.acting_as("Sweeps"):
        clients.s3().list_objects_v2(Bucket="iam-calls-bucket", Prefix="data/p/")
    lines = _lines(recorded)
    assert [(line["caller"], line["operation"]) for line in lines] == [("unattributed", "ListBuckets"), ("Sweeps", "ListObjectsV2")]
    assert lines[1]["authorizations"] == [
        {"action": "s3:ListBucket", "resource": "arn:aws:s3:::iam-calls-bucket", "context": {"s3:prefix": "data/p/"}}
    ]


def test_every_node_of_a_multi_node_launch_carries_the_instance_profile(aws: AwsClients, recorded: Path) -> None:
    # Given two instances of one RunInstances call with the trainer profile (moto associates it with the first only)
    iam = boto3.client("iam", region_name="us-east-1")
    profile = iam.create_instance_profile(InstanceProfileName="iam-calls-trainer")["InstanceProfile"]["Arn"]
    ec2 = boto3.client("ec2", region_name="us-east-1")
    reservation = ec2.run_instances(ImageId="ami-12c6146b", MinCount=2, MaxCount=2, IamInstanceProfile={"Arn": profile})
    ids = [i["InstanceId"] for i in reservation["Instances"]]
    # When the control plane tags both (a pause of the run)
    with iam_calls.acting_as("Api"):
        AwsClients(region="us-east-1").client("ec2").create_tags(Resources=ids, Tags=[{"Key": "trainplane:stop", "Value": "graceful"}])
    # Then each node's authorization carries the profile, as AWS fills ec2:InstanceProfile for every instance of the call
    (line,) = _lines(recorded)
    assert [a["context"] for a in line["authorizations"]] == [{"ec2:InstanceProfile": profile}] * 2


def test_the_trainer_subprocess_records_as_its_role(recorded: Path) -> None:
    # Given the environment the emulated compute gives its trainers while recording
    env = {**os.environ, **iam_calls.trainer_environment("SageMakerTrainer", "trainplane-artifacts-9", "sagemaker")}
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(REPO_ROOT)])
    # When a process there calls S3 (nothing listens: the call is recorded before it is sent, then fails)
    code = (
        "import boto3, botocore.config\n"
        "s3 = boto3.client('s3', endpoint_url='http://127.0.0.1:9', region_name='us-east-1',"
        " config=botocore.config.Config(retries={'total_max_attempts': 1}, connect_timeout=1))\n"
        "try:\n    s3.put_object(Bucket='trainplane-artifacts-9', Key='jobs/j/checkpoints/x', Body=b'1')\n"
        "except Exception:\n    pass\n"
    )
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=60)
    # Then the call is the trainer role's, on the deployment's bucket
    (line,) = _lines(recorded)
    assert line["caller"] == "SageMakerTrainer"
    assert line["compute"] == "sagemaker"
    assert line["authorizations"] == [
        {"action": "s3:PutObject", "resource": "arn:aws:s3:::${ArtifactsBucket}/jobs/j/checkpoints/x", "context": {}}
    ]
