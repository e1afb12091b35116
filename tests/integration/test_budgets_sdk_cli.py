"""The SDK's budget calls and the dry run (Client and AsyncClient: one set of steps, trainplane/client_budgets.py)
and `trainplane budgets ...` / `trainplane jobs submit --dry-run` against the real API Lambda behind local mode's
SigV4 front door, in process, on moto."""

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
from functions.service.ports import JobQuery
from localmode.credentials import new_principal
from localmode.frontdoor import FrontDoor
from tests.fakes import RecordingWorkflow
from tests.helpers.aws import fresh_resources
from tests.helpers.forecast import finished_job
from tests.helpers.jobs import request_body
from tests.unit.test_waits import run_async
from trainplane import AsyncClient, Client
from trainplane.cli import app
from trainplane.errors import AuthError, NotFound, ValidationFailed

ADMIN = new_principal("budget-admin")
BOB = new_principal("budget-bob")
BUDGET_CALLS = (
    "create_budget",
    "list_budgets",
    "get_budget",
    "update_budget",
    "raise_budget",
    "delete_budget",
    "override_budget",
    "forecast",
    "forecast_accuracy",
)


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
    settings = fresh_resources(aws, admin_arns=(ADMIN.arn,), local_gpu_inventory="H100=4")
    composition.configure(settings=settings, clients=aws, workflow=RecordingWorkflow())
    try:
        yield front_door
    finally:
        composition.reset()


def _client(who: Any, url: str) -> Client:
    return Client(url, credentials=Credentials(who.access_key_id, who.secret_access_key), region="us-east-1", max_retries=0)


def test_both_clients_have_every_budget_call_with_the_same_arguments() -> None:
    for name in BUDGET_CALLS:
        sync, asynchronous = getattr(Client, name), getattr(AsyncClient, name)
        assert inspect.signature(sync).parameters.keys() == inspect.signature(asynchronous).parameters.keys(), name
        assert inspect.iscoroutinefunction(asynchronous), name


def test_the_sdk_creates_raises_and_deletes_budgets_and_forecasts(url: str) -> None:
    admin, bob = _client(ADMIN, url), _client(BOB, url)
    mine = bob.create_budget({"name": "bob-cap", "scope": {"kind": "principal", "value": BOB.arn}, "amount_usd": 2})
    with pytest.raises(AuthError):
        bob.create_budget({"name": "all", "scope": {"kind": "deployment"}, "amount_usd": 2})
    capped = admin.create_budget({"name": "bob-admin", "scope": {"kind": "principal", "value": BOB.arn}, "amount_usd": 3})
    with pytest.raises(AuthError):
        bob.raise_budget(capped.budget_id, 30)
    with pytest.raises(AuthError):
        bob.override_budget(capped.budget_id, "job-x", "mine")
    assert bob.raise_budget(mine.budget_id, 4).amount_usd == 4
    assert {b.budget_id for b in bob.list_budgets()} == {mine.budget_id, capped.budget_id}

    forecast = bob.forecast(request_body(resource_config={"gpu_count": 1, "gpu_type": "H100"}))
    assert forecast.basis == "prior" and {b.budget_id for b in forecast.budgets} == {mine.budget_id, capped.budget_id}
    with pytest.raises(ValidationFailed):
        bob.forecast(request_body(resource_config={"gpu_count": 9, "gpu_type": "H100"}))
    assert composition.current().repository.list_jobs(JobQuery(owner=None))[0] == []

    async def from_async() -> list[str]:
        async with AsyncClient(url, credentials=Credentials(ADMIN.access_key_id, ADMIN.secret_access_key), region="us-east-1") as client:
            return [b.name for b in await client.list_budgets()]

    assert sorted(run_async(from_async())) == ["bob-admin", "bob-cap"]
    bob.delete_budget(mine.budget_id)
    with pytest.raises(NotFound):
        bob.get_budget(mine.budget_id)


def test_the_cli_creates_lists_raises_and_dry_runs(url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ADMIN.access_key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", ADMIN.secret_access_key)
    monkeypatch.setenv("TRAINPLANE_ENDPOINT", url)
    monkeypatch.setenv("TRAINPLANE_STATE_DIR", str(tmp_path / "no-state"))
    runner = CliRunner()
    doc = tmp_path / "budget.json"
    doc.write_text(json.dumps({"name": "everyone", "scope": {"kind": "deployment"}, "amount_usd": 5, "period": "lifetime"}))
    job = tmp_path / "job.json"
    job.write_text(
        json.dumps(request_body(resource_config={"gpu_count": 2, "gpu_type": "H100"}, scheduling_config={"max_runtime_seconds": 600}))
    )

    def invoke(*args: str) -> Any:
        return runner.invoke(app, list(args), env={"COLUMNS": "250"}, catch_exceptions=False)

    created = invoke("budgets", "create", str(doc))
    assert created.exit_code == 0 and "created budget" in created.output and "spent 0.0000 of 5.00 USD" in created.output, created.output
    budget_id = created.output.split("budget ")[1].split(" ")[0]
    assert "everyone" in invoke("budgets", "list").output
    raised = invoke("budgets", "raise", budget_id, "7")
    assert raised.exit_code == 0 and "of 7.00 USD" in raised.output, raised.output
    dry = invoke("jobs", "submit", str(job), "--dry-run")
    assert dry.exit_code == 0 and "dry run: nothing was created" in dry.output and "2 x H100" in dry.output, dry.output
    assert f"budget everyone ({budget_id}): 7.0000 USD left" in dry.output
    assert composition.current().repository.list_jobs(JobQuery(owner=None))[0] == []
    missing = invoke("budgets", "override", budget_id, "job-missing", "--reason", "deadline")
    assert missing.exit_code == 1 and "job job-missing not found" in missing.output, missing.output
    assert invoke("budgets", "delete", budget_id).exit_code == 0
    assert invoke("budgets", "get", budget_id).exit_code == 1


def test_the_sdk_and_the_cli_show_the_forecast_accuracy_per_shape(url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Given: two completed H100 x 1 LoRA jobs learned from (as the lifecycle records a completion)
    for steps in (100, 400):
        assert composition.forecast_learner().record(finished_job(steps, steps * 0.5, tokens_per_second=800.0))

    # Then: the SDK, the AsyncClient and the CLI give the shape's count and median error
    [shape] = _client(BOB, url).forecast_accuracy().shapes
    assert (shape.shape, shape.count, shape.seconds_per_step, shape.tokens_per_second) == ("H100x1/LORA/1B-3B", 2, 0.5, 800.0)
    assert shape.median_abs_error_percent is not None

    async def from_async() -> int:
        async with AsyncClient(url, credentials=Credentials(BOB.access_key_id, BOB.secret_access_key), region="us-east-1") as client:
            return (await client.forecast_accuracy()).shapes[0].count

    assert run_async(from_async()) == 2
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", BOB.access_key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", BOB.secret_access_key)
    monkeypatch.setenv("TRAINPLANE_ENDPOINT", url)
    monkeypatch.setenv("TRAINPLANE_STATE_DIR", str(tmp_path / "no-state"))
    shown = CliRunner().invoke(app, ["budgets", "forecast-accuracy"], env={"COLUMNS": "250"}, catch_exceptions=False)
    assert shown.exit_code == 0 and "H100x1/LORA/1B-3B" in shown.output, shown.output
    assert f"{shape.median_abs_error_percent:.1f}%" in shown.output, shown.output
    as_json = CliRunner().invoke(app, ["--output", "json", "budgets", "forecast-accuracy"], catch_exceptions=False)
    document = as_json.output[as_json.output.index('{\n  "shapes"') :]  # after the in-process API's metric lines
    assert as_json.exit_code == 0 and json.loads(document)["shapes"][0]["count"] == 2, as_json.output
