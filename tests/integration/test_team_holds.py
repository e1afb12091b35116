"""The ledger's team holds on DynamoDB (moto): a claim that names its team's hold books the pool's units and
the team's in one transaction, or neither; a release gives both back (functions/adapters/capacity.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from functions.adapters.aws import AwsClients
from functions.adapters.capacity import DynamoDBCapacityLedger
from functions.service.ports import TeamHold
from tests.helpers.aws import emulated_aws, fresh_resources
from tests.helpers.races import StaleRead

B_H100 = TeamHold("b", "H100", limit=4)


@pytest.fixture(scope="module")
def aws() -> Iterator[AwsClients]:
    with emulated_aws() as clients:
        yield clients


@pytest.fixture
def ledger(aws: AwsClients) -> DynamoDBCapacityLedger:
    return DynamoDBCapacityLedger(aws, fresh_resources(aws).jobs_table)


def test_two_claims_in_two_pools_that_each_fit_the_team_but_not_both_exactly_one_wins(ledger: DynamoDBCapacityLedger) -> None:
    # Given team b holding 1 of its 4 H100s in queue q1's pool, and two jobs of 2 each decided on "3 left"
    assert ledger.claim("q1/H100", "held", 1, 8, team=B_H100)
    # When each claims in its own queue's pool (both pools have room)
    outcomes = [ledger.claim(pool, job, 2, 8, team=B_H100) for pool, job in (("q1/H100", "a"), ("q2/H100", "b"))]
    # Then one holds its units, the other none, in its pool and in the team's hold
    assert outcomes == [True, False]
    assert ledger.team_holders("b", "H100") == {"held": 1, "a": 2}
    assert ledger.holders("q1/H100") == {"held": 1, "a": 2} and ledger.holders("q2/H100") == {}
    # And a claim without a team hold (teams inactive) is the pool's alone, as before
    assert ledger.claim("q2/H100", "c", 2, 8) and ledger.team_holders("b", "H100") == {"held": 1, "a": 2}


def test_a_release_gives_the_units_back_to_the_pool_and_the_team_once(ledger: DynamoDBCapacityLedger) -> None:
    # Given a job holding 3 of team b's 4, and two releases that both read it
    ledger.claim("q1/H100", "a", 3, 8, team=B_H100)
    outcomes = StaleRead(ledger, "holders").run(lambda: ledger.release("q1/H100", "a"), lambda: ledger.release("q1/H100", "a"))
    # Then one gave the units back to both, the other nothing: the team may hold its 4 again, not 5
    assert [o.value for o in outcomes] == [True, False]
    assert ledger.holders("q1/H100") == {} and ledger.team_holders("b", "H100") == {}
    assert ledger.claim("q2/H100", "b", 4, 8, team=B_H100) is True
    assert ledger.claim("q1/H100", "c", 1, 8, team=B_H100) is False


def test_a_pool_from_before_team_holds_takes_team_claims(aws: AwsClients, ledger: DynamoDBCapacityLedger) -> None:
    # Given a pool item written before team holds existed (no team_claims map) with a claim in it
    assert ledger.claim("q1/H100", "old", 1, 8)
    client = aws.client("dynamodb")
    client.update_item(TableName=ledger.table, Key=ledger._key("q1/H100"), UpdateExpression="REMOVE team_claims")
    # When a new process's ledger claims with a team hold, and both claims are released
    fresh = DynamoDBCapacityLedger(aws, ledger.table)
    assert fresh.claim("q1/H100", "new", 2, 8, team=B_H100)
    assert fresh.release("q1/H100", "old") and fresh.release("q1/H100", "new")
    # Then both pool and team are empty
    assert fresh.holders("q1/H100") == {} and fresh.team_holders("b", "H100") == {}
