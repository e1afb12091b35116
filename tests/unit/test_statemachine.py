"""The state machine definition: one file, substitutions, structure, routing, and what moto's parser accepts."""

from __future__ import annotations

import json
from collections import deque

import pytest

import infra.statemachine as sm
from functions.handlers.lifecycle import ACTIONS

ARN = "arn:aws:lambda:us-east-1:123456789012:function:trainplane-lifecycle"
SUBS = {"LifecycleFunctionArn": ARN, "JobsTableName": "jobs", "ArtifactsBucketName": "bucket", "EventBusName": "default"}

# What each task may return as "next" (functions/service/lifecycle.py) and where the machine must go.
ROUTES = {
    "AdmitOutcome": {"wait_capacity": "WaitForCapacity", "failed": "Failed", "ended": "Ended", "paused": "WaitForResume"},
    "CapacityOutcome": {"go": "Prepare", "cancel": "Ended", "ended": "Ended", "failed": "Failed"},
    "PrepareOutcome": {"launch": "Launch", "failed": "Failed", "ended": "Ended", "paused": "Ended"},
    "LaunchOutcome": {"wait": "WaitForRun", "failed": "Failed", "ended": "Ended", "requeue": "Admit"},
    "RunOutcome": {
        "completed": "Completed",
        "paused": "WaitForResume",
        "requeue": "Admit",
        "resume_preempted": "Admit",
        "wait": "WaitForRun",
        "failed": "Failed",
        "ended": "Ended",
        "cancel": "Ended",
    },
    "ResumeOutcome": {"resume": "Admit", "cancel": "Ended", "ended": "Ended"},
}


@pytest.fixture(scope="module")
def definition() -> dict:
    return sm.load(SUBS)


def _route(definition: dict, choice: str, value: str) -> str:
    state = definition["States"][choice]
    for rule in state["Choices"]:
        if rule["StringEquals"] == value:
            return rule["Next"]
    return state["Default"]


def test_template_uses_only_the_agreed_placeholders() -> None:
    # Given the raw template
    names = sm.placeholders()
    # Then it names only the four agreed substitutions, and at least the Lambda it invokes
    assert names <= set(sm.SUBSTITUTION_NAMES)
    assert "LifecycleFunctionArn" in names


def test_render_substitutes_and_escapes(definition: dict) -> None:
    # Given rendered text, Then no placeholder is left and the ARN landed in every task
    text = sm.render(SUBS)
    assert "${" not in text
    tasks = [s for s in definition["States"].values() if s["Type"] == "Task"]
    assert tasks and all(t["Parameters"]["FunctionName"] == ARN for t in tasks)
    # And a value with JSON metacharacters cannot break the document
    weird = sm.load({**SUBS, "LifecycleFunctionArn": 'arn"with\\quote'})
    assert weird["States"]["Admit"]["Parameters"]["FunctionName"] == 'arn"with\\quote'


def test_render_refuses_unknown_and_missing_names() -> None:
    with pytest.raises(sm.DefinitionError, match="unknown substitution name"):
        sm.render({**SUBS, "Typo": "x"})
    with pytest.raises(sm.DefinitionError, match=r"missing substitution.*LifecycleFunctionArn"):
        sm.render({})


def test_every_state_is_reachable_and_every_reference_resolves(definition: dict) -> None:
    # Given the definition, Then validation passes and every state can be entered from StartAt
    sm.validate(definition)
    assert sm.reachable(definition) == set(definition["States"])


@pytest.mark.parametrize(
    ("breakage", "message"),
    [
        (lambda d: d["States"]["Admit"].__setitem__("Next", "Nowhere"), "no such state"),
        (lambda d: d["States"].__setitem__("Island", {"Type": "Succeed"}), "unreachable state"),
        (lambda d: d["States"]["Prepare"].__setitem__("Resource", "arn:aws:states:::sqs:sendMessage"), "not the Lambda invoke"),
        (lambda d: d["States"]["WaitForRun"]["Parameters"]["Payload"].pop("token.$"), "exactly when it waits"),
        (lambda d: d["States"]["Launch"].pop("Next"), "neither Next nor End"),
        (lambda d: d["States"]["WaitForRun"].pop("TimeoutSecondsPath"), "HeartbeatSeconds needs a TimeoutSeconds"),
    ],
)
def test_validate_catches_broken_definitions(definition: dict, breakage, message: str) -> None:  # type: ignore[no-untyped-def]
    # Given a definition broken in one way
    broken = json.loads(json.dumps(definition))
    breakage(broken)
    # Then validation names the problem
    with pytest.raises(sm.DefinitionError, match=message):
        sm.validate(broken)


def test_every_task_action_is_one_the_handler_knows(definition: dict) -> None:
    actions = set(sm.task_actions(definition).values())
    assert actions == set(ACTIONS)


@pytest.mark.parametrize("choice", sorted(ROUTES))
def test_each_task_outcome_routes_where_the_lifecycle_expects(definition: dict, choice: str) -> None:
    for value, target in ROUTES[choice].items():
        assert _route(definition, choice, value) == target, f"{choice}: {value!r}"


def test_waiting_states_and_retries(definition: dict) -> None:
    states = definition["States"]
    # Waits are callbacks (task tokens), never polling loops: no Wait state at all
    assert not [n for n, s in states.items() if s["Type"] == "Wait"]
    waits = {n for n, s in states.items() if s.get("Resource") == sm.LAMBDA_INVOKE_WAIT}
    assert waits == {"WaitForCapacity", "WaitForRun", "WaitForResume"}
    # The run wait has a heartbeat and a timeout taken from what Launch computed
    assert states["WaitForRun"]["HeartbeatSecondsPath"] == "$.task.out.heartbeat_seconds"
    assert states["WaitForRun"]["TimeoutSecondsPath"] == "$.task.out.timeout_seconds"
    assert any("States.Timeout" in c["ErrorEquals"] and c["Next"] == "RunTimedOut" for c in states["WaitForRun"]["Catch"])
    # Transient Lambda errors are retried with backoff on every task but the last-resort one
    for name, state in states.items():
        if state["Type"] != "Task" or name == "Crashed":
            continue
        retry = state["Retry"][0]
        assert {"Lambda.ServiceException", "Lambda.TooManyRequestsException", "TransientError"} <= set(retry["ErrorEquals"])
        assert retry["BackoffRate"] >= 2 and retry["MaxAttempts"] >= 3
        assert state["Catch"][-1] == {"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "Crashed"}
    # A launch is never retried on a timeout (it could start a second run)
    assert "States.Timeout" not in states["Launch"]["Retry"][0]["ErrorEquals"]


def test_happy_path_is_well_under_25_state_transitions(definition: dict) -> None:
    # Given the happy path's outcomes, When walking the machine from StartAt to Completed
    happy = {
        "AdmitOutcome": "wait_capacity",
        "CapacityOutcome": "go",
        "PrepareOutcome": "launch",
        "LaunchOutcome": "wait",
        "RunOutcome": "completed",
    }
    path, name = [], definition["StartAt"]
    while True:
        path.append(name)
        state = definition["States"][name]
        if state["Type"] in {"Succeed", "Fail"}:
            break
        name = _route(definition, name, happy[name]) if state["Type"] == "Choice" else state["Next"]
    # Then it takes at most 25 transitions (each entered state is one)
    assert path[-1] == "Completed"
    assert len(path) <= 25, path


def test_shortest_paths_exist_to_every_end(definition: dict) -> None:
    edges = sm.graph(definition)
    seen = {definition["StartAt"]}
    queue = deque([definition["StartAt"]])
    while queue:
        for nxt in edges[queue.popleft()]:
            if nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
    assert {"Completed", "Ended", "Failed"} <= seen


@pytest.mark.slow
def test_moto_parser_accepts_the_definition_and_rejects_a_broken_one() -> None:
    import boto3
    from moto import mock_aws

    from localmode.moto_pin import MOTO_CONFIG

    text = sm.render(SUBS)
    with mock_aws(config=MOTO_CONFIG):
        client = boto3.client("stepfunctions", region_name="us-east-1")
        # Given the rendered definition, When moto's ASL parser reads it, Then it is accepted
        client.create_state_machine(name="lifecycle", definition=text, roleArn="arn:aws:iam::123456789012:role/sfn")
        # And the same parser does reject a malformed one (so the check above means something)
        broken = json.loads(text)
        broken["States"]["Admit"]["Retry"][0]["BackoffRate"] = "fast"
        with pytest.raises(client.exceptions.ClientError, match="ASLParserException"):
            client.create_state_machine(name="broken", definition=json.dumps(broken), roleArn="arn:aws:iam::123456789012:role/sfn")
