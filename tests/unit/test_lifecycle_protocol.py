"""The state machine definition speaks exactly the protocol of schemas/lifecycle.py (both ways).

Every `action` a Task names is an Action the handler dispatches, and every Action is named by a Task;
every value a Choice routes on is a Next; every Next the service returns to be routed on is routed
somewhere; every Choice ends quietly by default; each wait kind has its waiting Task.
"""

from __future__ import annotations

from typing import Any

import pytest

import infra.statemachine as sm
from functions.handlers.lifecycle import ACTIONS
from schemas.lifecycle import ANSWERS_WAIT, WAIT_RESULTS, Action, Decision, Next, WaitKind

PLACEHOLDERS = {name: f"placeholder-{name}" for name in sm.SUBSTITUTION_NAMES}
# Next values no Choice lists by name: ENDED is every Choice's Default, a cancel answer falls through to it.
UNNAMED = {Next.ENDED} | set(WAIT_RESULTS)


@pytest.fixture(scope="module")
def definition() -> dict[str, Any]:
    return sm.load({**PLACEHOLDERS, "LifecycleFunctionArn": "arn:aws:lambda:us-east-1:123456789012:function:lifecycle"})


def _choices(definition: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: state for name, state in definition["States"].items() if state["Type"] == "Choice"}


def test_the_tasks_name_exactly_the_actions_and_the_handler_dispatches_each(definition: dict[str, Any]) -> None:
    named = set(sm.task_actions(definition).values())
    assert named == {a.value for a in Action}
    assert set(ACTIONS) == set(Action)


def test_every_choice_routes_on_next_values_only_and_ends_by_default(definition: dict[str, Any]) -> None:
    for name, state in _choices(definition).items():
        for choice in state["Choices"]:
            assert choice["Variable"] == "$.task.out.next", name
            assert choice["StringEquals"] in {n.value for n in Next}, f"{name}: {choice['StringEquals']!r} is not a schemas.lifecycle.Next"
        assert state["Default"] == "Ended", name


def test_every_next_the_service_routes_on_is_routed_somewhere(definition: dict[str, Any]) -> None:
    routed = {value for name in _choices(definition) for value in sm.choice_values(definition, name)}
    assert routed == {n.value for n in Next} - {n.value for n in UNNAMED}


def test_each_wait_kind_is_waited_on_and_decisions_answer_only_their_waits(definition: dict[str, Any]) -> None:
    waiting_actions = {
        action for name, action in sm.task_actions(definition).items() if definition["States"][name]["Resource"] == sm.LAMBDA_INVOKE_WAIT
    }
    assert waiting_actions == {"wait_" + kind.value for kind in WaitKind}
    assert set(ANSWERS_WAIT) == set(Decision)
    assert ANSWERS_WAIT[Decision.RESUME] == {WaitKind.RESUME} and ANSWERS_WAIT[Decision.GO] == {WaitKind.CAPACITY}
    # The decisions the machine routes on are Next values; cancel deliberately falls through to Ended.
    assert {Decision.RESUME.value, Decision.GO.value} <= {n.value for n in Next} and Decision.CANCEL.value not in {n.value for n in Next}


def test_the_values_spell_what_the_stored_jobs_hold() -> None:
    # Stored in DynamoDB (task_token_kind, run_outcome) and sent as JSON: they must stay plain strings.
    import json

    assert json.dumps({"next": Next.RESUME_PREEMPTED, "kind": WaitKind.CAPACITY}) == '{"next": "resume_preempted", "kind": "capacity"}'
    assert Next.GO == "go" and isinstance(WaitKind.RUN, str)
