"""The SDK's team calls (Client and AsyncClient: one set of steps, trainplane/operations.py) and
`trainplane teams ...` against the real API Lambda behind local mode's SigV4 front door, in process, on moto."""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterator
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
from schemas.teams import TeamSpec
from tests.fakes import RecordingWorkflow
from tests.helpers.aws import fresh_resources
from tests.unit.test_waits import run_async
from trainplane import AsyncClient, Client
from trainplane.cli import app
from trainplane.errors import AuthError, NotFound

ADMIN = new_principal("root-admin")
BOB = new_principal("bob")
TEAM_CALLS = ("list_teams", "get_team", "put_team", "delete_team")


@pytest.fixture(scope="module")
def front_door(aws: AwsClients) -> Iterator[str]:
    door = FrontDoor("127.0.0.1", 0, principals=[ADMIN, BOB], handler=api.lambda_handler, region="us-east-1", account_id="123456789012")
    door.start()
    try:
        yield f"http://127.0.0.1:{door.port}"
    finally:
        door.stop()


@pytest.fixture
def url(aws: AwsClients, front_door: str) -> Iterator[str]:
    composition.configure(settings=fresh_resources(aws, admin_arns=(ADMIN.arn,)), clients=aws, workflow=RecordingWorkflow())
    try:
        yield front_door
    finally:
        composition.reset()


def _credentials(who: Any) -> Credentials:
    return Credentials(who.access_key_id, who.secret_access_key)


def test_both_clients_have_every_team_call_with_the_same_arguments() -> None:
    for name in TEAM_CALLS:
        sync, asynchronous = getattr(Client, name), getattr(AsyncClient, name)
        assert inspect.signature(sync).parameters.keys() == inspect.signature(asynchronous).parameters.keys(), name
        assert inspect.iscoroutinefunction(asynchronous), name


def test_the_sdk_defines_reads_and_deletes_a_team(url: str) -> None:
    admin = Client(url, credentials=_credentials(ADMIN), region="us-east-1", max_retries=0)
    bob = Client(url, credentials=_credentials(BOB), region="us-east-1", max_retries=0)
    members = {"arns": [BOB.arn], "cognito_groups": ["cv-team"]}
    spec = TeamSpec.model_validate({"members": members, "quotas": {"H100": {"nominal": 2}}, "max_priority": 7})
    stored = admin.put_team("vision", spec)
    assert (stored.name, stored.version, stored.max_priority) == ("vision", 1, 7)
    assert [t.members.cognito_groups for t in admin.list_teams() if t.name == "vision"] == [["cv-team"]]
    with pytest.raises(AuthError):
        bob.put_team("vision", {"weight": 5})
    assert [t.name for t in bob.list_teams()] == ["vision"]  # his own team, decided from his identity
    assert [r.gpu_type for r in bob.get_team("vision").types] == ["H100"]

    async def from_async() -> list[str]:
        async with AsyncClient(url, credentials=_credentials(ADMIN), region="us-east-1") as client:
            return [t.name for t in await client.list_teams()]

    assert run_async(from_async()) == ["default", "vision"]
    admin.delete_team("vision")
    with pytest.raises(NotFound):
        admin.get_team("vision")


def test_the_cli_puts_lists_and_gets_teams(url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ADMIN.access_key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", ADMIN.secret_access_key)
    monkeypatch.setenv("TRAINPLANE_ENDPOINT", url)
    monkeypatch.setenv("TRAINPLANE_STATE_DIR", str(tmp_path / "no-state"))
    runner = CliRunner()
    doc = tmp_path / "team.json"
    members = {"arns": [BOB.arn], "cognito_groups": ["nlp-research"]}
    doc.write_text(json.dumps({"members": members, "quotas": {"A100": {"nominal": 4, "borrow_limit": "50%"}}, "weight": 2}))

    def invoke(*args: str) -> Any:
        return runner.invoke(app, list(args), env={"COLUMNS": "250"}, catch_exceptions=False)

    put = invoke("teams", "put", "nlp", str(doc))
    assert put.exit_code == 0 and "team nlp stored (version 1)" in put.output, put.output
    listed = invoke("teams", "list")
    assert "nlp" in listed.output and "A100=4 (+50% borrow" in listed.output, listed.output
    assert f"{BOB.arn}, group:nlp-research" in listed.output, listed.output
    assert f"members: {BOB.arn}, group:nlp-research" in invoke("teams", "get", "nlp").output
    got = invoke("--output", "json", "teams", "get", "nlp")
    shown = "\n".join(line for line in got.stdout.splitlines() if not line.startswith('{"_aws"'))  # the Lambda's metrics, in process
    row = {"gpu_type": "A100", "nominal": 4, "in_use": 0, "borrowed": 0, "lent": 0, "queued": 0, "usage": 0.0}
    assert json.loads(shown)["types"][0] == row
    assert invoke("teams", "delete", "nlp").exit_code == 0
    missing = invoke("teams", "get", "nlp")
    assert missing.exit_code == 1 and "not found" in missing.output
