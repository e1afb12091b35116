"""The sweep controller in the stack: its own function, bundle and least-privilege role; woken by the
API, the lifecycle and the events functions; a schedule for the reconciler; nag-clean (the session's
synth fails on any unacknowledged finding)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.infra.conftest import Synth

pytestmark = pytest.mark.infra


def _function(synth: Synth, stage: str, name_part: str) -> tuple[str, dict[str, Any]]:
    functions = synth.resources(stage, "AWS::Lambda::Function")
    return next((k, v) for k, v in functions.items() if name_part in k)


def _role_actions(synth: Synth, stage: str, function_key: str) -> set[str]:
    role = synth.resources(stage, "AWS::Lambda::Function")[function_key]["Properties"]["Role"]["Fn::GetAtt"][0]
    actions: set[str] = set()
    for policy in synth.resources(stage, "AWS::IAM::Policy").values():
        if {"Ref": role} in policy["Properties"]["Roles"]:
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
                found = statement["Action"]
                actions.update([found] if isinstance(found, str) else found)
    return actions


@pytest.mark.parametrize("stage", ["dev", "prod"])
def test_the_controller_is_its_own_function_with_its_own_bundle(synth: Synth, stage: str) -> None:
    _, controller = _function(synth, stage, "SweepsController")
    _, api = _function(synth, stage, "ApiHandler")
    props = controller["Properties"]
    assert props["Handler"] == "functions.handlers.sweeps_controller.handler"
    assert props["Code"] != api["Properties"]["Code"]  # Optuna's bundle, never the API's
    # Everyone else learns its name from the settings
    assert api["Properties"]["Environment"]["Variables"]["TRAINPLANE_SWEEP_CONTROLLER_FUNCTION"] == props["FunctionName"]


@pytest.mark.parametrize("stage", ["dev", "prod"])
def test_the_controllers_role_holds_only_what_a_decision_needs(synth: Synth, stage: str) -> None:
    key, _ = _function(synth, stage, "SweepsController")
    actions = _role_actions(synth, stage, key)
    # (a transaction is authorized item by item: ConditionCheckItem + PutItem for a new trial, DeleteItem +
    # UpdateItem for an ended trial moved into its block)
    needed = {"dynamodb:Query", "dynamodb:UpdateItem", "dynamodb:ConditionCheckItem", "dynamodb:PutItem", "dynamodb:DeleteItem"}
    assert needed | {"states:StartExecution"} <= actions
    assert not {a for a in actions if a.startswith(("iam:", "lambda:", "scheduler:"))}
    assert {a for a in actions if a.startswith("s3:")} <= {"s3:GetObject", "s3:ListBucket"}  # submit's path probes
    assert not any("*" in a for a in actions)


@pytest.mark.parametrize("stage", ["dev", "prod"])
def test_the_api_lifecycle_and_events_may_wake_it_and_a_schedule_reconciles(synth: Synth, stage: str) -> None:
    for part in ("ApiHandler", "LifecycleTasks", "EventsHandler"):
        key, _ = _function(synth, stage, part)
        assert "lambda:InvokeFunction" in _role_actions(synth, stage, key), part
    rules = synth.resources(stage, "AWS::Events::Rule")
    reconcile = [r for k, r in rules.items() if "SweepsReconcile" in k]
    assert len(reconcile) == 1 and reconcile[0]["Properties"]["ScheduleExpression"] == "rate(1 minute)"
    assert "SweepsStatus" in json.dumps(synth.templates[stage]["Outputs"])
