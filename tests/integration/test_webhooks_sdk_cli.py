"""The SDK's webhook methods (Client and AsyncClient) and `trainplane webhooks ...` against the real API
Lambda behind local mode's SigV4 front door, in process, on moto."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from botocore.credentials import Credentials
from typer.testing import CliRunner

from functions import composition
from functions.adapters.aws import AwsClients
from functions.handlers import api
from localmode.credentials import new_principal
from localmode.frontdoor import FrontDoor
from tests.fakes import RecordingWorkflow
from tests.helpers.aws import fresh_resources
from tests.unit.test_waits import run_async
from trainplane import AsyncClient, Client
from trainplane.cli import app
from trainplane.errors import NotFound, ValidationFailed

ALICE = new_principal("alice")
BOB = new_principal("bob")
URL = "https://93.184.215.14/hooks"  # a public address literal: nothing to resolve in tests


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
    return Client(url, credentials=Credentials(who.access_key_id, who.secret_access_key), region="us-east-1", max_retries=0)


def test_the_sdk_creates_tests_lists_redelivers_and_deletes_a_webhook(url: str) -> None:
    alice, bob = client(url), client(url, BOB)
    created = alice.create_webhook({"url": URL, "event_types": ["job.*"], "ordered": True})
    assert created.secret.startswith("whsec_") and created.owner == ALICE.arn and created.ordered
    assert [h.webhook_id for h in alice.list_webhooks()] == [created.webhook_id]
    assert bob.list_webhooks() == []
    with pytest.raises(NotFound):
        bob.get_webhook(created.webhook_id)
    sent = alice.test_webhook(created.webhook_id)
    assert alice.webhook_deliveries(created.webhook_id).deliveries == []  # queued; no attempt yet
    assert alice.redeliver_webhook(created.webhook_id, event_id=sent.event_id).event_ids == [sent.event_id]
    rotated = alice.rotate_webhook_secret(created.webhook_id)
    assert rotated.secret != created.secret
    alice.delete_webhook(created.webhook_id)
    with pytest.raises(NotFound):
        alice.get_webhook(created.webhook_id)


def test_a_private_url_is_a_validation_error_naming_url(url: str) -> None:
    with pytest.raises(ValidationFailed) as refused:
        client(url).create_webhook({"url": "https://192.168.0.10/hook"})
    assert refused.value.status == 422 and [e.field for e in refused.value.errors] == ["url"]


def test_the_async_client_has_the_same_calls(url: str) -> None:
    async def run() -> list[str]:
        async with AsyncClient(url, credentials=Credentials(ALICE.access_key_id, ALICE.secret_access_key), region="us-east-1") as c:
            created = await c.create_webhook({"url": URL})
            assert created.ordered is False  # by default
            got = await c.get_webhook(created.webhook_id)
            return [created.webhook_id, got.webhook_id]

    first, second = run_async(run())  # not asyncio.run: a browser test may leave a loop running in this thread
    assert first == second


@dataclass
class Output:
    exit_code: int
    stdout: str
    stderr: str


@pytest.fixture
def cli(url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ALICE.access_key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", ALICE.secret_access_key)
    monkeypatch.setenv("TRAINPLANE_ENDPOINT", url)
    monkeypatch.setenv("TRAINPLANE_STATE_DIR", str(tmp_path / "no-state"))
    runner = CliRunner()

    def invoke(*args: str) -> Output:
        result = runner.invoke(app, ["--region", "us-east-1", *args], env={"COLUMNS": "250"}, catch_exceptions=False)
        stdout = "".join(line for line in result.stdout.splitlines(keepends=True) if not line.startswith('{"_aws"'))
        return Output(result.exit_code, stdout, result.stderr)

    return invoke


def test_the_cli_creates_lists_tests_redelivers_and_deletes(cli: Any) -> None:
    created = cli("--output", "json", "webhooks", "create", URL, "-e", "job.*", "--label", "team=nlp", "--ordered")
    assert created.exit_code == 0, created.stderr
    hook = json.loads(created.stdout)
    assert hook["secret"].startswith("whsec_") and hook["labels"] == {"team": "nlp"} and hook["ordered"] is True
    listed = cli("webhooks", "list")
    assert listed.exit_code == 0 and hook["webhook_id"] in listed.stdout
    assert json.loads(cli("webhooks", "get", hook["webhook_id"]).stdout)["event_types"] == ["job.*"]
    tested = cli("--output", "json", "webhooks", "test", hook["webhook_id"])
    event_id = json.loads(tested.stdout)["event_id"]
    assert "queued 1 event" in cli("webhooks", "redeliver", hook["webhook_id"], "--event", event_id).stdout
    assert cli("webhooks", "deliveries", hook["webhook_id"]).exit_code == 0
    assert "deleted" in cli("webhooks", "delete", hook["webhook_id"]).stdout
    refused = cli("webhooks", "create", "https://10.0.0.1/x")
    assert refused.exit_code != 0 and "url" in refused.stderr + refused.stdout
