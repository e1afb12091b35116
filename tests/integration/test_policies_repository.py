"""DynamoPolicyRepository on moto, and the same contract checked on the in-memory fake the unit tests use.

The contract tests run once per implementation, so the fake cannot drift from the adapter: item
round trips (hub token kept), owner-scoped paging, conditional edits and deletes, route items, and
the fire bookkeeping that decides duplicates, bursts and caps.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from functions import constants as c
from functions.adapters.aws import AwsClients
from functions.adapters.policies import DynamoPolicyRepository
from functions.errors import InvalidRequest, PolicyConflict, PolicyNotFound
from functions.service.feature_ports import FireClaim, Route
from schemas.retraining import RetrainingPolicy
from tests.helpers.aws import fresh_resources
from tests.helpers.jobs import ALICE, BOB
from tests.helpers.retraining import InMemoryPolicyRepository, policy_body

T0 = datetime(2026, 2, 1, 9, 0, tzinfo=UTC)


@pytest.fixture
def table(aws: AwsClients) -> str:
    return fresh_resources(aws).jobs_table


@pytest.fixture(params=["dynamodb", "fake"])
def repo(request: pytest.FixtureRequest) -> Any:
    if request.param == "fake":
        return InMemoryPolicyRepository()
    return DynamoPolicyRepository(request.getfixturevalue("aws"), request.getfixturevalue("table"))


_n = iter(range(1, 10_000))


def make_policy(owner: str = ALICE, *, created: datetime | None = None, **overrides: Any) -> RetrainingPolicy:
    n = next(_n)
    at = created or T0 + timedelta(seconds=n)
    return RetrainingPolicy.model_validate(
        {**policy_body(**overrides), "policy_id": f"pol-{n:04d}", "owner": owner, "created_at": at, "updated_at": at}
    )


def routes_of(policy: RetrainingPolicy, key: str = "s3#trainplane-artifacts") -> list[Route]:
    return [Route(key, policy.policy_id, policy.owner, {"prefix": "datasets/fresh/", "suffix": ".jsonl"})]


def claim(policy: RetrainingPolicy, event_id: str, at: datetime, *, seen: datetime | None = None, count: int = 1) -> FireClaim:
    return FireClaim(event_id, at, policy.version, seen, at.date().isoformat(), count)


# --- contract ------------------------------------------------------------------------------------


def test_a_policy_round_trips_with_its_hub_token(repo: Any) -> None:
    # Given a policy whose template pushes to the hub with a token
    body = policy_body()
    body["job_template"]["output_config"] = {"push_to_hub": True, "hub_repo_id": "org/m", "hub_token": "hf_secret"}
    policy = make_policy(**body)
    # When it is stored and read back / Then it is equal, the token included (the API masks it, storage must not)
    repo.create(policy, routes_of(policy))
    got = repo.get(policy.policy_id)
    assert got == policy
    assert got.job_template.output_config.hub_token is not None
    assert got.job_template.output_config.hub_token.get_secret_value() == "hf_secret"
    with pytest.raises(PolicyNotFound):
        repo.get("pol-missing")
    with pytest.raises(PolicyConflict):
        repo.create(policy, [])


def test_an_event_pattern_keeps_its_numbers_and_types(repo: Any) -> None:
    # Given a pattern with a float threshold, an int, a bool and a null
    pattern = {"source": ["trainplane.retraining"], "detail": {"score": [{"numeric": [">", 0.3, "<=", 2]}], "ok": [True, None]}}
    policy = make_policy(trigger={"type": "event", "pattern": pattern}, input_mapping=[])
    route = Route("event#trainplane.retraining", policy.policy_id, policy.owner, {"pattern": pattern})
    repo.create(policy, [route])
    # Then both the policy and its route read back exactly (0.3 stays a float: the matcher compares numbers)
    assert repo.get(policy.policy_id).trigger.pattern == pattern  # type: ignore[union-attr]
    assert repo.routes("event#trainplane.retraining")[0].match == {"pattern": pattern}


def test_listing_is_per_owner_newest_first_with_tokens_bound_to_the_listing(repo: Any) -> None:
    # Given two of alice's policies and one of bob's
    older, newer = make_policy(), make_policy()
    bobs = make_policy(BOB)
    for p in (older, newer, bobs):
        repo.create(p, [])
    # When alice pages one at a time, and everybody's are listed
    first, token = repo.list_policies(ALICE, 1, None)
    second, last = repo.list_policies(ALICE, 1, token)
    everyone, _ = repo.list_policies(None, 10, None)
    # Then alice sees hers newest first, never bob's; the admin listing holds all; tokens stay in their listing
    assert [p.policy_id for p in first + second] == [newer.policy_id, older.policy_id]
    assert last is None or repo.list_policies(ALICE, 1, last)[0] == []
    assert {p.policy_id for p in everyone} == {older.policy_id, newer.policy_id, bobs.policy_id}
    with pytest.raises(InvalidRequest) as foreign:
        repo.list_policies(BOB, 1, token)
    assert foreign.value.field == "next_token"
    assert {p.policy_id for p in repo.all_policies()} == {older.policy_id, newer.policy_id, bobs.policy_id}


def test_update_writes_the_configuration_if_the_version_still_holds(repo: Any) -> None:
    # Given a policy that has fired (bookkeeping written by claim_fire, which bumps no version)
    policy = make_policy()
    repo.create(policy, routes_of(policy))
    assert repo.claim_fire(policy.policy_id, claim(policy, "e1", T0)) == "claimed"
    # When an edit made on version 1 is written, and a stale one after it
    edited = policy.model_copy(update={"min_interval_seconds": 300, "daily_cap": None, "version": 2, "updated_at": T0})
    new_routes = routes_of(policy, "s3#team-data")
    stored = repo.update(edited, 1, routes_of(policy), new_routes)
    with pytest.raises(PolicyConflict):
        repo.update(edited, 1, new_routes, new_routes)
    # Then the configuration changed, the fire bookkeeping was kept, and the routes moved
    assert (stored.version, stored.min_interval_seconds, stored.last_event_id) == (2, 300, "e1")
    assert repo.routes("s3#trainplane-artifacts") == [] and [r.policy_id for r in repo.routes("s3#team-data")] == [policy.policy_id]
    assert repo.routes("s3#team-data")[0].match == {"prefix": "datasets/fresh/", "suffix": ".jsonl"}


def test_delete_takes_the_routes_and_decisions_with_it(repo: Any) -> None:
    policy = make_policy()
    repo.create(policy, routes_of(policy))
    repo.record_decision(policy.policy_id, "e1", "coalesced", T0, "burst")
    with pytest.raises(PolicyConflict):
        repo.delete(policy.policy_id, 7, routes_of(policy))
    repo.delete(policy.policy_id, 1, routes_of(policy))
    with pytest.raises(PolicyNotFound):
        repo.get(policy.policy_id)
    assert repo.routes("s3#trainplane-artifacts") == []
    assert repo.event_record(policy.policy_id, "e1") is None
    with pytest.raises(PolicyNotFound):
        repo.delete(policy.policy_id, 1, [])


def test_claim_fire_decides_once_per_event_and_only_on_the_policy_as_read(repo: Any) -> None:
    policy = make_policy()
    repo.create(policy, [])
    # The first claim wins and records the fire on the policy
    assert repo.claim_fire(policy.policy_id, claim(policy, "e1", T0)) == "claimed"
    fired = repo.get(policy.policy_id)
    assert (fired.last_fired_at, fired.last_event_id, fired.fired_day, fired.fired_today) == (T0, "e1", "2026-02-01", 1)
    record = repo.event_record(policy.policy_id, "e1")
    assert (record.state, record.outcome, record.at) == ("claimed", "started", T0)
    # The same event again is a duplicate, even with the right bookkeeping
    assert repo.claim_fire(policy.policy_id, claim(policy, "e1", T0 + timedelta(seconds=1), seen=T0, count=2)) == "duplicate"
    # Another event decided on the old reading (no fire seen) lost: another fire got there first
    assert repo.claim_fire(policy.policy_id, claim(policy, "e2", T0 + timedelta(seconds=2))) == "changed"
    # Decided on the current reading, it wins
    assert repo.claim_fire(policy.policy_id, claim(policy, "e2", T0 + timedelta(seconds=2), seen=T0, count=2)) == "claimed"
    # A claim on an edited (version 2) or disabled policy decides again
    edited = fired.model_copy(update={"version": 2, "enabled": False, "updated_at": T0})
    repo.update(edited, 1, [], [])
    stale = FireClaim("e3", T0 + timedelta(seconds=3), 1, T0 + timedelta(seconds=2), "2026-02-01", 3)
    assert repo.claim_fire(policy.policy_id, stale) == "changed"
    current = FireClaim("e3", T0 + timedelta(seconds=3), 2, T0 + timedelta(seconds=2), "2026-02-01", 3)
    assert repo.claim_fire(policy.policy_id, current) == "changed"  # disabled
    assert repo.event_record(policy.policy_id, "e3") is None  # a lost claim leaves nothing behind


def test_two_events_decided_on_one_reading_after_a_fire_one_claims(repo: Any) -> None:
    # Given a policy that fired once (e1 at T0), read by the deliveries of e2 and e3 before either claimed
    policy = make_policy()
    repo.create(policy, [])
    assert repo.claim_fire(policy.policy_id, claim(policy, "e1", T0)) == "claimed"
    # When both claim on that reading (last fire T0, one fire today)
    outcomes = [repo.claim_fire(policy.policy_id, claim(policy, e, T0 + timedelta(seconds=1), seen=T0, count=2)) for e in ("e2", "e3")]
    # Then one claimed; the other decides again (its burst and cap rules see e2's fire), leaving nothing behind
    assert outcomes == ["claimed", "changed"]
    fired = repo.get(policy.policy_id)
    assert (fired.last_event_id, fired.fired_today) == ("e2", 2) and repo.event_record(policy.policy_id, "e3") is None


def test_a_claim_decided_before_an_edit_decides_again(repo: Any) -> None:
    # Given an enabled policy edited (version 2) after a delivery read version 1
    policy = make_policy()
    repo.create(policy, [])
    repo.update(policy.model_copy(update={"version": 2, "min_interval_seconds": 3600, "updated_at": T0}), 1, [], [])
    # When the delivery claims on its reading, then on the edited one
    assert repo.claim_fire(policy.policy_id, claim(policy, "e1", T0)) == "changed"
    assert repo.event_record(policy.policy_id, "e1") is None
    edited = repo.get(policy.policy_id)
    assert repo.claim_fire(policy.policy_id, claim(edited, "e1", T0)) == "claimed"


def test_an_edit_and_a_delete_decided_on_one_read_one_wins(repo: Any) -> None:
    policy = make_policy()
    repo.create(policy, routes_of(policy))
    repo.update(policy.model_copy(update={"version": 2, "enabled": False, "updated_at": T0}), 1, routes_of(policy), routes_of(policy))
    with pytest.raises(PolicyConflict):
        repo.delete(policy.policy_id, 1, routes_of(policy))
    with pytest.raises(PolicyConflict):
        repo.update(policy.model_copy(update={"version": 2, "description": "late", "updated_at": T0}), 1, [], [])
    stored = repo.get(policy.policy_id)
    assert (stored.version, stored.enabled, stored.description) == (2, False, policy.description)


def test_complete_fire_names_the_last_job_only_for_the_newest_fire(repo: Any) -> None:
    policy = make_policy()
    repo.create(policy, [])
    repo.claim_fire(policy.policy_id, claim(policy, "e1", T0))
    repo.claim_fire(policy.policy_id, claim(policy, "e2", T0 + timedelta(seconds=1), seen=T0, count=2))
    # The newer fire completes first, the older one late
    assert repo.complete_fire(policy.policy_id, "e2", "job-2") is True
    assert repo.complete_fire(policy.policy_id, "e1", "job-1") is False
    assert repo.get(policy.policy_id).last_job_id == "job-2"
    done = repo.event_record(policy.policy_id, "e1")
    assert (done.state, done.job_id) == ("done", "job-1")


def test_take_over_renews_a_claim_once(repo: Any) -> None:
    policy = make_policy()
    repo.create(policy, [])
    repo.claim_fire(policy.policy_id, claim(policy, "e1", T0))
    later = T0 + timedelta(minutes=5)
    assert repo.take_over(policy.policy_id, "e1", T0, later) is True
    assert repo.take_over(policy.policy_id, "e1", T0, later) is False  # someone (us) already renewed it
    assert repo.event_record(policy.policy_id, "e1").at == later
    repo.complete_fire(policy.policy_id, "e1", "job-1")
    assert repo.take_over(policy.policy_id, "e1", later, later + timedelta(minutes=5)) is False  # done claims stay done


def test_record_decision_keeps_the_first(repo: Any) -> None:
    policy = make_policy()
    repo.create(policy, [])
    assert repo.record_decision(policy.policy_id, "e1", "skipped_running", T0, "job-1 running") is True
    assert repo.record_decision(policy.policy_id, "e1", "coalesced", T0, "") is False
    assert repo.claim_fire(policy.policy_id, claim(policy, "e1", T0)) == "duplicate"
    record = repo.event_record(policy.policy_id, "e1")
    assert (record.state, record.outcome, record.detail) == ("done", "skipped_running", "job-1 running")


def _serialize_moto_calls(repo: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # moto's DynamoDB backend is not thread-safe (docs/LOCAL_AWS.md); DynamoDB applies each call atomically.
    # One lock per API call restores that, and keeps the races between calls.
    if isinstance(repo, DynamoPolicyRepository):
        client = repo._ddb
        real = client._make_api_call
        lock = threading.Lock()

        def locked(*args: Any, **kwargs: Any) -> Any:
            with lock:
                return real(*args, **kwargs)

        monkeypatch.setattr(client, "_make_api_call", locked)


@pytest.mark.parametrize("same_event", [True, False], ids=["one-event", "a-burst"])
def test_racing_claims_on_one_reading_have_one_winner(repo: Any, monkeypatch: pytest.MonkeyPatch, same_event: bool) -> None:
    # Given six deliveries that all read the policy before any fired
    _serialize_moto_calls(repo, monkeypatch)
    policy = make_policy()
    repo.create(policy, [])
    barrier = threading.Barrier(6)
    outcomes: list[str] = []
    lock = threading.Lock()

    def run(i: int) -> None:
        event_id = "same" if same_event else f"burst-{i}"
        barrier.wait()
        outcome = repo.claim_fire(policy.policy_id, claim(policy, event_id, T0 + timedelta(microseconds=i)))
        with lock:
            outcomes.append(outcome)

    # When they claim at once
    threads = [threading.Thread(target=run, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Then exactly one claimed; the others are duplicates (one event) or must decide again (a burst)
    loser = "duplicate" if same_event else "changed"
    assert sorted(outcomes) == sorted(["claimed"] + [loser] * 5), outcomes
    assert repo.get(policy.policy_id).fired_today == 1


# --- DynamoDB specifics --------------------------------------------------------------------------


def test_items_use_their_own_partitions_and_the_owner_index_prefix(aws: AwsClients, table: str) -> None:
    # Given a stored policy with a route and a decision
    repo = DynamoPolicyRepository(aws, table)
    policy = make_policy()
    repo.create(policy, routes_of(policy))
    repo.record_decision(policy.policy_id, "e1", "capped", T0)
    # Then the items are where TABLE_DESIGN says, and never in a job listing's partitions
    ddb = aws.dynamodb()
    meta = ddb.get_item(TableName=table, Key={c.PK: {"S": f"POLICY#{policy.policy_id}"}, c.SK: {"S": "META"}})["Item"]
    assert meta[c.GSI_OWNER_PK]["S"] == f"POLICYOWNER#{ALICE}" and meta[c.GSI_ALL_PK]["S"] == "POLICIES"
    assert c.GSI_QUEUE_PK not in meta
    route = ddb.get_item(TableName=table, Key={c.PK: {"S": "ROUTE#s3#trainplane-artifacts"}, c.SK: {"S": f"POLICY#{policy.policy_id}"}})
    assert route["Item"]["policy_id"]["S"] == policy.policy_id
    decision = ddb.get_item(TableName=table, Key={c.PK: {"S": f"POLICY#{policy.policy_id}"}, c.SK: {"S": "EVENT#e1"}})["Item"]
    assert int(decision["expires_at"]["N"]) > T0.timestamp() + 24 * 3600  # outlives EventBridge's day of retries
    jobs_listing = ddb.query(
        TableName=table,
        IndexName=c.GSI_OWNER,
        KeyConditionExpression="#p = :p",
        ExpressionAttributeNames={"#p": c.GSI_OWNER_PK},
        ExpressionAttributeValues={":p": {"S": f"OWNER#{ALICE}"}},
    )
    assert jobs_listing["Items"] == []
