"""DynamoDBPoolHealth on moto: counts that never lose a report, blocks only ever extended, pools read back."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from functions.adapters.dynamodb_items import create_tables
from functions.adapters.pool_health import DynamoDBPoolHealth
from localmode import moto_hooks

TABLE = "jobs-pool-health-test"
POOL = "ec2/p5.48xlarge/us-east-1a/spot"


class Clients:
    def __init__(self) -> None:
        self._ddb = boto3.client("dynamodb", region_name="us-east-1")

    def client(self, service: str) -> Any:
        assert service == "dynamodb"
        return self._ddb


@pytest.fixture
def health() -> Iterator[DynamoDBPoolHealth]:
    with mock_aws():
        clients = Clients()
        create_tables(clients.client("dynamodb"), jobs_table=TABLE, idempotency_table=TABLE + "-idem")
        yield DynamoDBPoolHealth(clients, TABLE)


def test_failures_are_counted_per_kind_and_read_back(health: DynamoDBPoolHealth) -> None:
    # Given two capacity errors and a preemption in one pool
    health.record(POOL, "capacity", 100.0, "InsufficientInstanceCapacity")
    state = health.record(POOL, "capacity", 110.0, "InsufficientInstanceCapacity")
    assert (state.capacity_errors, state.preemptions) == (2, 0)
    health.record(POOL, "preempted", 120.0, "spot reclaimed")
    # Then the states read back name only the known pools
    states = health.states([POOL, "ec2/p4d.24xlarge/us-east-1a/spot"])
    assert list(states) == [POOL]
    assert (states[POOL].capacity_errors, states[POOL].preemptions, states[POOL].last_reason) == (2, 1, "spot reclaimed")


def test_a_block_is_only_ever_extended(health: DynamoDBPoolHealth) -> None:
    # Given a pool blocked until 2000
    health.block(POOL, 2000.0)
    # When a racing reporter writes a shorter block
    health.block(POOL, 1500.0)
    # Then the longer one stays; a longer one replaces it
    assert health.states([POOL])[POOL].blocked_until == 2000.0
    health.block(POOL, 2500.0)
    assert health.states([POOL])[POOL].blocked_until == 2500.0


@pytest.fixture
def atomic_requests() -> Iterator[None]:
    """Each DynamoDB request atomic, as DynamoDB's are: moto alone is not thread-safe (docs/LOCAL_AWS.md) and
    lost one of eight ADDs in CI. Local mode runs moto under the same locks; a read-then-write adapter would
    still lose reports here, since the lock holds one request, not a read and the write after it."""
    installed_here = not moto_hooks.installed()
    moto_hooks.install()
    yield
    if installed_here:
        moto_hooks.uninstall()


@pytest.mark.usefixtures("atomic_requests")
def test_concurrent_reports_are_all_counted(health: DynamoDBPoolHealth) -> None:
    threads = [threading.Thread(target=health.record, args=(POOL, "preempted", 1.0, "r")) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert health.states([POOL])[POOL].preemptions == 8


def test_many_pools_are_read_in_batches(health: DynamoDBPoolHealth) -> None:
    pools = [f"ec2/g5.xlarge/us-east-1a/spot-{i}" for i in range(150)]
    for pool in pools[::10]:
        health.block(pool, 10.0)
    assert sorted(health.states(pools)) == sorted(pools[::10])
