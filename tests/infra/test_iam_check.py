"""make iam-check (scripts/iam_check.py) judges recorded calls with a real IAM evaluator: it passes the calls
the stack grants and reports the one a template without its grant would deny (docs/DEPLOY.md)."""

from __future__ import annotations

import copy
import json
import threading
from pathlib import Path
from typing import Any

from functions import composition
from functions.settings import Settings
from localmode import iam_calls
from scripts import iam_check
from tests.infra.conftest import Synth

SETTINGS = Settings(jobs_table="trainplane-jobs-7", artifacts_bucket="trainplane-artifacts-7", compute="sagemaker")


def _record(path: Path, caller: str, service: str, operation: str, params: dict[str, Any]) -> None:
    composition.configure(settings=SETTINGS)
    try:
        iam_calls.record(caller, service, operation, params, "us-east-1", path=str(path))
    finally:
        composition.reset()


def _calls(tmp_path: Path) -> Path:
    # What the API does on submit and on GET /jobs/{id}/logs, as the recorder writes it.
    path = tmp_path / "calls.jsonl"
    _record(path, "Api", "dynamodb", "PutItem", {"TableName": SETTINGS.jobs_table, "Item": {}})
    _record(path, "Api", "s3", "ListObjectsV2", {"Bucket": SETTINGS.artifacts_bucket, "Prefix": "jobs/job-1/logs/"})
    return path


def _check(path: Path, template: dict[str, Any]) -> tuple[int, list[str]]:
    templates = {engine: iam_check.Template(template) for engine in iam_check.ENGINES}
    return iam_check.check(path, templates, justified=set())


def _without(template: dict[str, Any], role_prefix: str, action: str) -> dict[str, Any]:
    mutated = copy.deepcopy(template)
    for resource in mutated["Resources"].values():
        if resource["Type"] == "AWS::IAM::Policy" and any(r["Ref"].startswith(role_prefix) for r in resource["Properties"]["Roles"]):
            for statement in resource["Properties"]["PolicyDocument"]["Statement"]:
                actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
                statement["Action"] = [a for a in actions if a != action] or ["none:Nothing"]
    return mutated


def test_the_stack_allows_the_recorded_calls(synth: Synth, tmp_path: Path) -> None:
    denied, lines = _check(_calls(tmp_path), synth.templates["dev"])
    assert denied == 0, "\n".join(lines)
    assert lines[0].startswith("2 calls by 1 roles: 0 denied, ")


def test_a_dropped_grant_is_reported_as_the_denied_call(synth: Synth, tmp_path: Path) -> None:
    # Given a copy of the template whose API role lost dynamodb:PutItem
    mutated = _without(synth.templates["dev"], "ApiHandlerRole", "dynamodb:PutItem")
    # When the same calls are checked against it
    denied, lines = _check(_calls(tmp_path), mutated)
    # Then the check fails naming that call, its role and its resource (the stack's table)
    assert denied == 1
    assert any(
        line.startswith("DENIED Api (sagemaker): dynamodb:PutItem on arn:aws:dynamodb:us-east-1:123456789012:table/trainplane-dev-jobs")
        and "ImplicitlyDenied" in line
        for line in lines
    ), lines
    assert lines[0].startswith("2 calls by 1 roles: 1 denied, ")


def test_conditions_are_evaluated(synth: Synth, tmp_path: Path) -> None:
    # The API may list the bucket under jobs/ only (s3:prefix): another prefix is denied.
    path = tmp_path / "calls.jsonl"
    _record(path, "Api", "s3", "ListObjectsV2", {"Bucket": SETTINGS.artifacts_bucket, "Prefix": "secrets/"})
    denied, lines = _check(path, synth.templates["dev"])
    assert denied == 1
    assert '{"s3:prefix": "secrets/"}' in lines[2], lines


def test_the_deployment_bus_resolves_to_the_stack_bus(synth: Synth, tmp_path: Path) -> None:
    # The event publisher puts the control plane's events on the deployment's own bus: local mode's name for
    # it (settings.trainplane_bus_name) is the token the template's bus resolves, and the publisher may put there.
    path = tmp_path / "calls.jsonl"
    _record(path, "EventPublisher", "events", "PutEvents", {"Entries": [{"EventBusName": SETTINGS.trainplane_bus_name, "Detail": "{}"}]})
    template = iam_check.Template(synth.templates["dev"])
    assert template.tokens["TrainplaneBus"] == template.name(template.logical("EventBus") or "")
    denied, lines = _check(path, synth.templates["dev"])
    assert denied == 0, "\n".join(lines)
    # and a bus the stack does not own is denied
    other = tmp_path / "other.jsonl"
    _record(other, "EventPublisher", "events", "PutEvents", {"Entries": [{"EventBusName": "someone-elses-bus", "Detail": "{}"}]})
    denied, lines = _check(other, synth.templates["dev"])
    assert denied == 1 and "event-bus/someone-elses-bus" in lines[2], lines


def test_the_tests_own_calls_are_counted_and_a_control_plane_call_outside_any_role_fails(synth: Synth, tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    # A test seeding the emulated AWS through the control plane's client: the tests' own call, not evaluated.
    _record(path, iam_calls.UNATTRIBUTED, "dynamodb", "CreateTable", {"TableName": SETTINGS.jobs_table})
    denied, lines = _check(path, synth.templates["dev"])
    assert denied == 0, lines
    assert "1 calls by the tests themselves" in lines[1] and "'dynamodb:CreateTable': 1" in lines[1], lines
    # The same call from a thread no test started (a local-mode loop outside any role) is the control plane's own.
    worker = threading.Thread(
        target=iam_calls.record,
        args=(iam_calls.UNATTRIBUTED, "dynamodb", "GetItem", {"TableName": SETTINGS.jobs_table}, "us-east-1", str(path)),
    )
    worker.start()
    worker.join()
    denied, lines = _check(path, synth.templates["dev"])
    assert denied == 1, lines
    assert any(line.startswith("UNATTRIBUTED (no frame of this repository) dynamodb:GetItem [x1]") for line in lines), lines


def test_the_main_entry_fails_on_a_denied_call(synth: Synth, tmp_path: Path, capsys: Any) -> None:
    template = tmp_path / "template.json"
    template.write_text(json.dumps(_without(synth.templates["dev"], "ApiHandlerRole", "dynamodb:PutItem")))
    code = iam_check.main(["--calls", str(_calls(tmp_path)), "--template-sagemaker", str(template), "--template-ec2", str(template)])
    assert code == 1
    assert "1 denied" in capsys.readouterr().out
