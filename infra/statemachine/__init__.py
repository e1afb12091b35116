"""The lifecycle state machine: ONE ASL file, loaded by both the CDK stack and local mode.

`lifecycle.asl.json` holds `${Name}` placeholders (the CDK `definition_substitutions` syntax). Both
deployments call `render()` with the same names, so what runs in moto is what runs in AWS. `validate()`
checks the structure offline (every reference resolves, every state is reachable, every task is an
action the lifecycle Lambda knows) the way a deploy-time linter would, without deploying anything.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

DEFINITION_PATH = Path(__file__).with_name("lifecycle.asl.json")

# The only placeholders the definition may use; the CDK stack passes exactly these.
SUBSTITUTION_NAMES: tuple[str, ...] = ("LifecycleFunctionArn", "JobsTableName", "ArtifactsBucketName", "EventBusName")

_PLACEHOLDER = re.compile(r"\$\{([A-Za-z0-9_]+)\}")
_TERMINAL_TYPES = {"Succeed", "Fail"}
# Task resources this definition may use: the Lambda invoke integration, plain or waiting on a token.
LAMBDA_INVOKE = "arn:aws:states:::lambda:invoke"
LAMBDA_INVOKE_WAIT = "arn:aws:states:::lambda:invoke.waitForTaskToken"


class DefinitionError(ValueError):
    """The definition (or its substitutions) is not one we can deploy."""


def load_template() -> str:
    """The raw definition text, placeholders included (what the CDK stack hands to DefinitionBody)."""
    return DEFINITION_PATH.read_text(encoding="utf-8")


def placeholders(text: str | None = None) -> set[str]:
    return set(_PLACEHOLDER.findall(load_template() if text is None else text))


def render(substitutions: Mapping[str, str]) -> str:
    """The definition with every placeholder replaced; refuses unknown or missing names."""
    unknown = set(substitutions) - set(SUBSTITUTION_NAMES)
    if unknown:
        raise DefinitionError(f"unknown substitution name(s): {', '.join(sorted(unknown))}; allowed: {', '.join(SUBSTITUTION_NAMES)}")
    text = load_template()
    missing = placeholders(text) - set(substitutions)
    if missing:
        raise DefinitionError(f"missing substitution(s): {', '.join(sorted(missing))}")
    for name, value in substitutions.items():
        # json.dumps()[1:-1]: a value is always spliced inside a JSON string literal.
        text = text.replace("${" + name + "}", json.dumps(value)[1:-1])
    validate(json.loads(text))
    return text


def load(substitutions: Mapping[str, str]) -> dict[str, Any]:
    return json.loads(render(substitutions))


def _successors(state: Mapping[str, Any]) -> Iterator[str]:
    if "Next" in state:
        yield state["Next"]
    if "Default" in state:
        yield state["Default"]
    for choice in state.get("Choices", []):
        yield choice["Next"]
    for catcher in state.get("Catch", []):
        yield catcher["Next"]


def graph(definition: Mapping[str, Any]) -> dict[str, set[str]]:
    return {name: set(_successors(state)) for name, state in definition["States"].items()}


def reachable(definition: Mapping[str, Any]) -> set[str]:
    edges = graph(definition)
    seen: set[str] = set()
    todo = [definition["StartAt"]]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo.extend(edges.get(name, ()))
    return seen


def task_actions(definition: Mapping[str, Any]) -> dict[str, str]:
    """State name -> the lifecycle action its Lambda payload names."""
    return {name: state["Parameters"]["Payload"]["action"] for name, state in definition["States"].items() if state["Type"] == "Task"}


def choice_values(definition: Mapping[str, Any], state_name: str) -> set[str]:
    return {c["StringEquals"] for c in definition["States"][state_name].get("Choices", [])}


def validate(definition: Mapping[str, Any]) -> None:
    """Structural checks Step Functions itself would make at create time, plus our own conventions."""
    states = definition.get("States")
    if not isinstance(states, dict) or not states:
        raise DefinitionError("States is missing or empty")
    if definition.get("StartAt") not in states:
        raise DefinitionError(f"StartAt {definition.get('StartAt')!r} is not a state")
    problems: list[str] = []
    for name, state in states.items():
        kind = state.get("Type")
        for target in _successors(state):
            if target not in states:
                problems.append(f"{name} -> {target!r}: no such state")
        if kind not in _TERMINAL_TYPES and kind != "Choice" and "Next" not in state and not state.get("End"):
            problems.append(f"{name}: neither Next nor End")
        if kind == "Task":
            problems.extend(_task_problems(name, state))
    leftover = _PLACEHOLDER.findall(json.dumps(definition))
    if leftover:
        problems.append(f"unsubstituted placeholder(s): {', '.join(sorted(set(leftover)))}")
    unreachable = set(states) - reachable(definition)
    if unreachable:
        problems.append(f"unreachable state(s): {', '.join(sorted(unreachable))}")
    if problems:
        raise DefinitionError("; ".join(problems))


def _task_problems(name: str, state: Mapping[str, Any]) -> list[str]:
    problems: list[str] = []
    resource = state.get("Resource")
    if resource not in {LAMBDA_INVOKE, LAMBDA_INVOKE_WAIT}:
        problems.append(f"{name}: resource {resource!r} is not the Lambda invoke integration")
        return problems
    payload = state.get("Parameters", {}).get("Payload", {})
    if "action" not in payload or "job_id.$" not in payload:
        problems.append(f"{name}: the payload must carry 'action' and 'job_id.$'")
    waits = resource == LAMBDA_INVOKE_WAIT
    if waits != ("token.$" in payload):
        problems.append(f"{name}: a task passes $$.Task.Token exactly when it waits for it")
    if "HeartbeatSecondsPath" in state and "TimeoutSecondsPath" not in state and "TimeoutSeconds" not in state:
        # Without a timeout the engine caps a heartbeat task at 60 s (moto) or rejects it (AWS).
        problems.append(f"{name}: HeartbeatSeconds needs a TimeoutSeconds")
    return problems
