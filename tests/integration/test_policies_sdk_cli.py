"""The SDK's policy methods and `trainplane policies ...` against the real API Lambda behind local mode's
SigV4 front door, in process, on moto: request and response shapes, errors naming fields, put_event."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from functions import composition
from functions.adapters.aws import AwsClients
from functions.handlers import api
from localmode.credentials import new_principal
from localmode.frontdoor import FrontDoor
from schemas.retraining import RetrainingPolicyPatch
from tests.fakes import RecordingWorkflow
from tests.helpers.aws import fresh_resources
from tests.helpers.retraining import policy_body
from trainplane import Client
from trainplane.cli import app
from trainplane.errors import NotFound, ValidationFailed

ALICE = new_principal("alice")
BOB = new_principal("bob")


@pytest.fixture(scope="module")
def front_door(aws: AwsClients) -> Iterator[str]:
    door = FrontDoor("127.0.0.1", 0, principals=[ALICE, BOB], handler=api.lambda_handler, region="us-east-1", account_id="123456789012")
    door.start()
    try:
        yield f"http://127.0.0.1:{door.port}"
    finally:
        door.stop()


@pytest.fixture
def url(aws: AwsClients, front_door: str) -> Iterator[str]:
    composition.configure(settings=fresh_resources(aws), clients=aws, workflow=RecordingWorkflow())
    try:
        yield front_door
    finally:
        composition.reset()


def client(url: str, who: Any = ALICE) -> Client:
    from botocore.credentials import Credentials

    return Client(url, credentials=Credentials(who.access_key_id, who.secret_access_key), region="us-east-1", max_retries=0)


def test_the_sdk_creates_reads_lists_edits_and_deletes_a_policy(url: str) -> None:
    alice, bob = client(url), client(url, BOB)
    # Given a policy created through the SDK
    created = alice.create_policy(policy_body(name="sdk"))
    assert created.owner == ALICE.arn and created.name == "sdk"
    # Then alice reads and lists it; bob does not see it
    assert alice.get_policy(created.policy_id) == created
    assert [p.policy_id for p in alice.list_policies(page_size=1)] == [created.policy_id]
    with pytest.raises(NotFound):
        bob.get_policy(created.policy_id)
    # And an edit given as a model sends only what was set
    edited = alice.update_policy(created.policy_id, RetrainingPolicyPatch(enabled=False))
    assert (edited.enabled, edited.version, edited.input_mapping) == (False, 2, created.input_mapping)
    alice.delete_policy(created.policy_id)
    with pytest.raises(NotFound):
        alice.get_policy(created.policy_id)


def test_the_sdk_raises_validation_errors_naming_the_field(url: str) -> None:
    with pytest.raises(ValidationFailed) as refused:
        client(url).create_policy(policy_body(trigger={"type": "schedule", "expression": "rate(0 minutes)"}))
    assert refused.value.status == 422
    assert [e.field for e in refused.value.errors] == ["trigger.schedule.expression"]


def test_put_event_puts_a_custom_event_on_the_default_bus(url: str, aws: AwsClients) -> None:
    # Given a queue behind a rule on the custom source
    sqs, events = aws.client("sqs"), aws.client("events")
    queue = sqs.create_queue(QueueName="custom-events")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    events.put_rule(Name="custom", EventPattern=json.dumps({"source": ["trainplane.retraining"]}))
    events.put_targets(Rule="custom", Targets=[{"Id": "q", "Arn": arn}])
    # When the SDK puts a drift event
    event_id = client(url).put_event("Drift detected", {"model": "support-bot", "score": 0.42})
    # Then it is on the bus with its id, source and detail
    (message,) = sqs.receive_message(QueueUrl=queue, WaitTimeSeconds=0)["Messages"]
    event = json.loads(message["Body"])
    assert (event["id"], event["source"], event["detail-type"]) == (event_id, "trainplane.retraining", "Drift detected")
    assert event["detail"] == {"model": "support-bot", "score": 0.42}


# --- the CLI -----------------------------------------------------------------------------------------


@pytest.fixture
def cli(url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ALICE.access_key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", ALICE.secret_access_key)
    monkeypatch.setenv("TRAINPLANE_ENDPOINT", url)
    monkeypatch.setenv("TRAINPLANE_STATE_DIR", str(tmp_path / "no-state"))
    runner = CliRunner()

    def invoke(*args: str) -> Output:
        result = runner.invoke(app, ["--region", "us-east-1", *args], env={"COLUMNS": "250"}, catch_exceptions=False)
        # The API Lambda runs in this process: its EMF metrics lines land on the same stdout.
        stdout = "".join(line for line in result.stdout.splitlines(keepends=True) if not line.startswith('{"_aws"'))
        return Output(result.exit_code, stdout, result.stderr)

    return invoke


@dataclass
class Output:
    exit_code: int
    stdout: str
    stderr: str


def test_policies_create_list_get_update_delete_from_the_command_line(cli: Any, tmp_path: Path) -> None:
    # Given a policy file in YAML
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(policy_body(name="from-yaml", daily_cap=3)))
    # When it is created, listed, shown, disabled and deleted
    created = cli("policies", "create", str(path))
    assert created.exit_code == 0, created.stderr
    policy_id = created.stdout.split()[1]
    assert policy_id.startswith("pol-") and "new objects s3://<artifacts>/datasets/fresh/*.jsonl" in created.stdout
    listed = cli("policies", "list")
    assert policy_id in listed.stdout and "from-yaml" in listed.stdout and "skip" in listed.stdout
    shown = cli("policies", "get", policy_id)
    assert "daily cap 3" in shown.stdout and "s3://{detail.bucket.name}/{detail.object.key} -> data_config.sources[0].path" in shown.stdout
    as_json = json.loads(cli("--output", "json", "policies", "get", policy_id).stdout)
    assert as_json["policy_id"] == policy_id and as_json["daily_cap"] == 3
    disabled = cli("policies", "update", policy_id, "--disable")
    assert disabled.exit_code == 0 and "(disabled)" in disabled.stdout
    assert cli("policies", "delete", policy_id).stdout.strip() == f"deleted {policy_id}"
    # Then it is gone: the CLI prints the API's 404 and exits 1
    gone = cli("policies", "get", policy_id)
    assert gone.exit_code == 1 and "not found" in gone.stderr


def test_an_invalid_policy_file_prints_each_field_error(cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(policy_body(input_mapping=[{"source": "id", "target": "training_config.nope"}])))
    result = cli("policies", "create", str(path))
    assert result.exit_code == 1
    assert "error 422" in result.stderr and "input_mapping: input_mapping[0].target 'training_config.nope'" in result.stderr
    assert cli("policies", "update", "pol-x").exit_code == 2  # nothing to change: a usage error
