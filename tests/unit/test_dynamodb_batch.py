"""functions/adapters/dynamodb_batch.py: deletes of many keys against a fake BatchWriteItem that keeps
DynamoDB's own rules, which moto does not enforce: at most 25 requests per call, no key twice in a call
(ValidationException), and requests it may leave unprocessed (throttling) for the caller to send again."""

from __future__ import annotations

from typing import Any

import pytest

from functions.adapters import dynamodb_batch as batch

TABLE = "t"


class Table:
    def __init__(self, n: int, *, unprocessed: list[int] | None = None) -> None:
        self.items = {f"k{i}" for i in range(n)}
        self.calls: list[list[str]] = []
        self.unprocessed = list(unprocessed or [])  # per call: how many of its last requests it leaves

    def batch_write_item(self, RequestItems: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
        (table, requests), *others = RequestItems.items()
        assert table == TABLE and not others
        keys = [r["DeleteRequest"]["Key"]["pk"]["S"] for r in requests]
        if len(keys) > 25 or len(set(keys)) != len(keys):
            raise ValueError("ValidationException: at most 25 requests, each key once")
        self.calls.append(keys)
        left = self.unprocessed.pop(0) if self.unprocessed else 0
        done, rest = keys[: len(keys) - left], requests[len(keys) - left :]
        self.items -= set(done)
        return {"UnprocessedItems": {TABLE: rest} if rest else {}}


def keys(n: int) -> list[dict[str, Any]]:
    return [{"pk": {"S": f"k{i}"}} for i in range(n)]


@pytest.fixture
def pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    slept: list[float] = []
    monkeypatch.setattr(batch.time, "sleep", slept.append)
    return slept


def test_many_keys_go_in_batches_of_25_each_key_once(pauses: list[float]) -> None:
    table = Table(60)
    batch.delete_keys(table, TABLE, keys(60), "a test")
    assert [len(call) for call in table.calls] == [25, 25, 10]
    assert sorted(k for call in table.calls for k in call) == sorted(f"k{i}" for i in range(60))
    assert table.items == set() and pauses == []


def test_exactly_one_batch_and_none(pauses: list[float]) -> None:
    table = Table(25)
    batch.delete_keys(table, TABLE, keys(25), "a test")
    assert [len(call) for call in table.calls] == [25] and table.items == set()
    empty = Table(0)
    batch.delete_keys(empty, TABLE, [], "a test")
    assert empty.calls == []


def test_what_is_left_unprocessed_is_sent_again_after_a_growing_pause(pauses: list[float]) -> None:
    table = Table(30, unprocessed=[3, 2, 0])
    batch.delete_keys(table, TABLE, keys(30), "a test")
    assert table.calls == [[f"k{i}" for i in range(25)], ["k22", "k23", "k24"], ["k23", "k24"], [f"k{i}" for i in range(25, 30)]]
    assert table.items == set()
    assert pauses == [0.05, 0.1]


def test_keys_still_unprocessed_after_every_attempt_are_an_error_naming_them(pauses: list[float]) -> None:
    table = Table(30, unprocessed=[4] * batch.ATTEMPTS)
    with pytest.raises(RuntimeError, match="could not delete 4 items of sweep s-1"):
        batch.delete_keys(table, TABLE, keys(30), "sweep s-1")
    assert len(table.calls) == batch.ATTEMPTS and table.calls[-1] == ["k21", "k22", "k23", "k24"]
    assert pauses == [0.05 * 2**a for a in range(batch.ATTEMPTS)]
    assert {f"k{i}" for i in range(25, 30)} <= table.items  # the next batch was not started
