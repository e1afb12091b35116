"""DynamoDBCapacityLedger on moto: claims within capacity, idempotent, never double-booked under races."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from functions.adapters.capacity import DynamoDBCapacityLedger
from functions.adapters.dynamodb_items import create_tables

TABLE = "jobs-capacity-test"


class Clients:
    def __init__(self) -> None:
        self._ddb = boto3.client("dynamodb", region_name="us-east-1")

    def client(self, service: str) -> Any:
        assert service == "dynamodb"
        return self._ddb


@pytest.fixture
def ledger() -> Iterator[DynamoDBCapacityLedger]:
    with mock_aws():
        clients = Clients()
        create_tables(clients.client("dynamodb"), jobs_table=TABLE, idempotency_table=TABLE + "-idem")
        yield DynamoDBCapacityLedger(clients, TABLE)


def test_claims_fit_within_capacity_and_are_made_once(ledger: DynamoDBCapacityLedger) -> None:
    assert ledger.claim("local/gpu", "a", 2, 3)
    assert not ledger.claim("local/gpu", "a", 2, 3)  # already held: not a second claim (nor a second owner of it)
    assert not ledger.claim("local/gpu", "b", 2, 3)
    assert ledger.claim("local/gpu", "c", 1, 3)
    assert ledger.holders("local/gpu") == {"a": 2, "c": 1}
    assert not ledger.claim("local/gpu", "d", 4, 3)  # more than the pool will ever have
    assert ledger.pools() == ["local/gpu"]


def test_release_gives_units_back_once(ledger: DynamoDBCapacityLedger) -> None:
    ledger.claim("q/H100", "a", 8, 8)
    assert ledger.release("q/H100", "a")
    assert not ledger.release("q/H100", "a")
    assert ledger.holders("q/H100") == {}
    assert ledger.claim("q/H100", "b", 8, 8)


def test_queues_are_registered_once(ledger: DynamoDBCapacityLedger) -> None:
    for queue in ("default", "research", "default"):
        ledger.register_queue(queue)
    assert ledger.queues() == ["default", "research"]


def test_racing_claims_never_exceed_capacity(ledger: DynamoDBCapacityLedger) -> None:
    # moto's DynamoDB is not atomic under threads by itself (docs/LOCAL_AWS.md); local mode runs it with the
    # process-wide lock of localmode.moto_hooks, as DynamoDB itself is atomic per item.
    from localmode import moto_hooks

    moto_hooks.install()
    results: dict[str, bool] = {}
    barrier = threading.Barrier(10)

    def claim(job: str) -> None:
        barrier.wait()
        results[job] = ledger.claim("local/cpu", job, 1, 3)

    threads = [threading.Thread(target=claim, args=(f"j{i}",)) for i in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = sorted(j for j, ok in results.items() if ok)
    assert len(winners) == 3
    assert sorted(ledger.holders("local/cpu")) == winners
