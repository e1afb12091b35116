"""The lifecycle as data (schemas/status.py): reachability, terminal states, and the verbs' sets."""

from __future__ import annotations

import itertools
from collections import deque

import pytest

from schemas.status import EDITABLE, PAUSABLE, RUNNING, TERMINAL, TRANSITIONS, JobStatus, can_transition, is_terminal, sources_of

S = JobStatus


def reachable_from(start: JobStatus) -> set[JobStatus]:
    seen, todo = {start}, deque([start])
    while todo:
        for nxt in TRANSITIONS[todo.popleft()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_the_table_covers_every_status() -> None:
    assert set(TRANSITIONS) == set(JobStatus)


def test_every_status_is_reachable_from_pending() -> None:
    assert reachable_from(S.PENDING) == set(JobStatus)


def test_the_happy_path_is_allowed_step_by_step() -> None:
    path = [S.PENDING, S.QUEUED, S.SCHEDULING, S.PREPARING, S.TRAINING, S.CHECKPOINTING, S.EVALUATING, S.EXPORTING, S.COMPLETED]
    for current, nxt in itertools.pairwise(path):
        assert can_transition(current, nxt), (current, nxt)


@pytest.mark.parametrize("status", sorted(TERMINAL))
def test_terminal_states_have_no_exits_except_preempted_back_to_the_queue(status: JobStatus) -> None:
    assert is_terminal(status)
    expected = {S.QUEUED} if status == S.PREEMPTED else set()
    assert set(TRANSITIONS[status]) == expected


@pytest.mark.parametrize("status", sorted(set(JobStatus) - TERMINAL))
def test_cancel_is_possible_from_every_non_terminal_status(status: JobStatus) -> None:
    assert not is_terminal(status)
    assert can_transition(status, S.CANCELLED)


def test_no_status_moves_to_itself() -> None:
    assert all(status not in targets for status, targets in TRANSITIONS.items())


def test_pause_and_resume_branches() -> None:
    # PAUSED is entered only from where the trainer can checkpoint, and leaves only to the queue or cancel
    assert sources_of(S.PAUSED) == PAUSABLE == {S.TRAINING, S.CHECKPOINTING}
    assert TRANSITIONS[S.PAUSED] == {S.QUEUED, S.CANCELLED}


def test_the_sets_the_verbs_use() -> None:
    assert {S.COMPLETED, S.FAILED, S.CANCELLED, S.PREEMPTED} == TERMINAL
    assert {S.PENDING, S.QUEUED, S.FAILED} == EDITABLE
    assert RUNNING.isdisjoint(TERMINAL) and PAUSABLE <= RUNNING
    # Every running state can fail, be preempted or go back to the queue (preemption by the scheduler)
    for status in RUNNING:
        assert {S.FAILED, S.PREEMPTED, S.QUEUED, S.CANCELLED} <= TRANSITIONS[status], status


def test_sources_of_is_the_inverse_of_the_table() -> None:
    for target in JobStatus:
        assert sources_of(target) == {s for s, targets in TRANSITIONS.items() if target in targets}
    assert sources_of(S.PENDING) == frozenset()
