"""Teams by Cognito group through the API Lambda and moto's user pool (issue 24): two dashboard users of one
role and one session name, in different groups, land in the teams naming their groups; the groups come from
the pool, looked up by the sub API Gateway reports, never from the request."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError
from botocore.stub import Stubber

from functions.adapters.aws import AwsClients
from functions.adapters.cognito_groups import RETRY_AFTER_SECONDS, CognitoUserGroups
from functions.errors import GroupsUnavailable
from functions.service.feature_ports import CognitoUser
from tests.helpers.api_lambda import Api
from tests.helpers.events import Caller, dashboard_user
from tests.helpers.jobs import ADMIN, ALICE, request_body
from tests.integration.conftest import composed_api

ADMIN_CALLER = Caller("admin", ADMIN, unique_id="AIDAEXAMPLEADMIN")
ALICE_CALLER = Caller("alice", ALICE, unique_id="AIDAEXAMPLEALICE")
ANA_ID, BEN_ID = "us-east-1:11111111-2222-3333-4444-555555555555", "us-east-1:99999999-8888-7777-6666-555555555555"


class Pool:
    def __init__(self, aws: AwsClients) -> None:
        self.idp = aws.client("cognito-idp")
        self.id = self.idp.create_user_pool(PoolName="dashboard-users")["UserPool"]["Id"]

    def user(self, name: str, *groups: str) -> str:
        created = self.idp.admin_create_user(UserPoolId=self.id, Username=name, MessageAction="SUPPRESS")["User"]
        for group in groups:
            self.group(group)
            self.idp.admin_add_user_to_group(UserPoolId=self.id, Username=name, GroupName=group)
        return next(a["Value"] for a in created["Attributes"] if a["Name"] == "sub")

    def group(self, group: str) -> None:
        with contextlib.suppress(self.idp.exceptions.GroupExistsException):
            self.idp.create_group(UserPoolId=self.id, GroupName=group)


@pytest.fixture
def pool(aws: AwsClients) -> Pool:
    return Pool(aws)


@pytest.fixture
def call(aws: AwsClients, pool: Pool) -> Iterator[Api]:
    with composed_api(aws, dashboard_user_pool_id=pool.id) as api:
        yield api


def _team(name: str, **rules: Any) -> dict[str, Any]:
    return {"quotas": {"cpu": {"nominal": 2}}, **rules}


def test_two_dashboard_users_in_different_groups_are_in_their_groups_teams(call: Api, pool: Pool) -> None:
    # Given: ana in ml-research, ben in vision, both signed in through the same role and session name
    ana = dashboard_user("ana", ANA_ID, pool.id, pool.user("ana", "ml-research", "readers"))
    ben = dashboard_user("ben", BEN_ID, pool.id, pool.user("ben", "vision"))
    research = _team("research", members={"cognito_groups": ["ml-research"]}, max_priority=6)
    vision = _team("vision", members={"arns": [ALICE], "cognito_groups": ["vision"]}, queues=["default"])
    assert call.route("PUT", "/teams/{team}", {"team": "research"}, caller=ADMIN_CALLER, body=research).status == 200
    assert call.route("PUT", "/teams/{team}", {"team": "vision"}, caller=ADMIN_CALLER, body=vision).status == 200

    # Then: GET /teams shows admins the groups, and each person their own team only
    listed = {t["name"]: t for t in call.route("GET", "/teams", caller=ADMIN_CALLER).body["teams"]}
    assert listed["research"]["members"] == {"arns": [], "cognito_groups": ["ml-research"]}
    assert [t["name"] for t in call.route("GET", "/teams", caller=ana).body["teams"]] == ["research"]
    assert [t["name"] for t in call.route("GET", "/teams", caller=ben).body["teams"]] == ["vision"]
    assert call.route("GET", "/teams/{team}", {"team": "vision"}, caller=ana).status == 404

    # And: their jobs record those teams, under those teams' rules
    ana_job = call.route("POST", "/jobs", caller=ana, body=request_body(name="ana-job"))
    ben_job = call.route("POST", "/jobs", caller=ben, body=request_body(name="ben-job"))
    assert ana_job.status == 201 and ana_job.body["team"] == "research"
    assert ben_job.status == 201 and ben_job.body["team"] == "vision"
    high = request_body(name="too-high")
    high["scheduling_config"] = {**high.get("scheduling_config", {}), "priority": 8}
    refused = call.route("POST", "/jobs", caller=ana, body=high)
    assert refused.status == 422 and refused.body["errors"][0]["field"] == "scheduling_config.priority"
    assert call.route("POST", "/jobs", caller=ben, body=high).status == 201  # vision has no such ceiling


def test_the_same_person_without_the_pools_word_is_in_no_group(call: Api, pool: Pool) -> None:
    sub = pool.user("ana", "ml-research")
    body = _team("research", members={"cognito_groups": ["ml-research"]})
    assert call.route("PUT", "/teams/{team}", {"team": "research"}, caller=ADMIN_CALLER, body=body).status == 200
    # No provider string (an unauthenticated-style context), or a sub the pool does not have: the default team
    for who in (dashboard_user("ana", ANA_ID), dashboard_user("ana", ANA_ID, pool.id, "00000000-0000-0000-0000-000000000000")):
        assert [t["name"] for t in call.route("GET", "/teams", caller=who).body["teams"]] == ["default"]
    # Another pool's user of the same sub (a pool the deployment does not own): the default team too
    stranger = dashboard_user("ana", BEN_ID, "us-east-1_NotOurs1", sub)
    assert [t["name"] for t in call.route("GET", "/teams", caller=stranger).body["teams"]] == ["default"]
    # A body naming the group or team is refused, not believed
    job = call.route("POST", "/jobs", caller=dashboard_user("ana", ANA_ID), body={**request_body(name="x"), "team": "research"})
    assert job.status == 422 and job.body["errors"][0]["field"] == "team"


def test_a_bad_group_name_is_a_422_naming_the_field(call: Api) -> None:
    body = _team("x", members={"cognito_groups": ["arn:aws:sts::123456789012:assumed-role/Research/*"]})
    reply = call.route("PUT", "/teams/{team}", {"team": "x"}, caller=ADMIN_CALLER, body=body)
    assert reply.status == 422 and reply.body["errors"][0]["field"] == "members.cognito_groups"
    assert "members.arns" in reply.body["errors"][0]["message"]
    reply = call.route("PUT", "/teams/{team}", {"team": "x"}, caller=ADMIN_CALLER, body=_team("x", members={"cognito_groups": ["a b"]}))
    assert reply.status == 422 and reply.body["errors"][0]["field"] == "members.cognito_groups.0"


def test_the_adapter_caches_briefly_and_reads_every_page(aws: AwsClients, pool: Pool) -> None:
    groups = [f"g{i:02d}" for i in range(65)]  # more than one AdminListGroupsForUser page (60)
    user = CognitoUser(pool.id, pool.user("carol", *groups))
    now = [0.0]
    adapter = CognitoUserGroups(aws, ttl_seconds=60, clock=lambda: now[0])
    assert adapter.groups_of(user) == frozenset(groups)
    # A change inside the TTL is not seen yet; after it, it is
    pool.idp.admin_remove_user_from_group(UserPoolId=pool.id, Username="carol", GroupName="g00")
    now[0] = 59.0
    assert "g00" in adapter.groups_of(user)
    now[0] = 61.0
    assert "g00" not in adapter.groups_of(user)
    # A person deleted from the pool is in no group; an odd sub is never put in a filter
    pool.idp.admin_delete_user(UserPoolId=pool.id, Username="carol")
    now[0] = 200.0
    assert adapter.groups_of(user) == frozenset()
    assert adapter.groups_of(CognitoUser(pool.id, 'x" or sub ^= "')) == frozenset()


def test_the_adapter_serves_its_last_answer_when_cognito_fails(aws: AwsClients, pool: Pool) -> None:
    user = CognitoUser(pool.id, pool.user("dave", "ml-research"))
    now = [0.0]
    adapter = CognitoUserGroups(aws, ttl_seconds=60, clock=lambda: now[0])
    assert adapter.groups_of(user) == {"ml-research"}
    pool.idp.delete_user_pool(UserPoolId=pool.id)  # every call fails from now on
    now[0] = 120.0
    assert adapter.groups_of(user) == {"ml-research"}
    with pytest.raises(GroupsUnavailable, match=r"ResourceNotFound") as refused:
        adapter.groups_of(CognitoUser(pool.id, "11111111-1111-1111-1111-111111111111"))
    assert refused.value.retry_after_seconds == RETRY_AFTER_SECONDS


class _Unreachable:
    """AwsClients whose cognito-idp client cannot connect (Cognito down, or no route to it)."""

    def __init__(self, aws: AwsClients) -> None:
        self.idp = aws.client("cognito-idp")

    def client(self, service: str) -> Any:
        assert service == "cognito-idp"
        return self

    def list_users(self, **kwargs: Any) -> Any:
        raise EndpointConnectionError(endpoint_url="https://cognito-idp.us-east-1.amazonaws.com/")


def test_cognito_down_with_nothing_kept_is_groups_unavailable_and_a_fault_of_ours_is_not(aws: AwsClients, pool: Pool) -> None:
    user = CognitoUser(pool.id, pool.user("erin", "ml-research"))
    # Unreachable: GroupsUnavailable naming what botocore said, never the raw error
    down = CognitoUserGroups(_Unreachable(aws))  # type: ignore[arg-type]
    with pytest.raises(GroupsUnavailable, match="EndpointConnectionError") as refused:
        down.groups_of(user)
    assert isinstance(refused.value.__cause__, EndpointConnectionError)
    # Throttled past botocore's own retries: the same
    throttled = CognitoUserGroups(aws)
    with Stubber(aws.client("cognito-idp")) as stub:
        stub.add_client_error("list_users", service_error_code="TooManyRequestsException", http_status_code=429)
        with pytest.raises(GroupsUnavailable, match="TooManyRequestsException") as refused:
            throttled.groups_of(user)
    assert isinstance(refused.value.__cause__, ClientError)
    # A bug of ours (an answer it cannot read) is no outage: it stays the error it is (a logged 500)
    with Stubber(aws.client("cognito-idp")) as stub:
        expected = {"UserPoolId": pool.id, "Filter": f'sub = "{user.sub}"', "Limit": 1}
        stub.add_response("list_users", {"Users": [{"Attributes": []}]}, expected)
        with pytest.raises(KeyError):
            CognitoUserGroups(aws).groups_of(user)


def test_a_dashboard_user_whose_groups_cognito_cannot_give_gets_a_503_with_retry_after(call: Api, pool: Pool) -> None:
    # Given: a team naming a group and its budget, ana answered once (her groups kept), ben never
    ana = dashboard_user("ana", ANA_ID, pool.id, pool.user("ana", "ml-research"))
    ben = dashboard_user("ben", BEN_ID, pool.id, pool.user("ben", "ml-research"))
    body = _team("research", members={"cognito_groups": ["ml-research"]})
    assert call.route("PUT", "/teams/{team}", {"team": "research"}, caller=ADMIN_CALLER, body=body).status == 200
    budget = {"name": "research", "scope": {"kind": "team", "value": "research"}, "amount_usd": 100}
    assert call.route("POST", "/budgets", caller=ADMIN_CALLER, body=budget).status == 201
    assert [t["name"] for t in call.route("GET", "/teams", caller=ana).body["teams"]] == ["research"]

    # When: the pool stops answering
    pool.idp.delete_user_pool(UserPoolId=pool.id)

    # Then: ana is served from what was kept; ben's team cannot be decided, on every route that needs it: a 503
    # in the API's error shape, with Retry-After, nothing created
    assert [t["name"] for t in call.route("GET", "/teams", caller=ana).body["teams"]] == ["research"]
    for method, path, payload in (("GET", "/teams", None), ("POST", "/jobs", request_body(name="ben-job")), ("GET", "/budgets", None)):
        reply = call.route(method, path, caller=ben, body=payload)
        assert reply.status == 503, (method, path, reply.body)
        assert set(reply.body) == {"message", "errors"} and "user pool" in reply.body["message"] and reply.body["errors"] == []
        retry_after = reply.headers.get("Retry-After")
        assert (retry_after[0] if isinstance(retry_after, list) else retry_after) == str(RETRY_AFTER_SECONDS)
    assert call.route("GET", "/jobs", caller=ADMIN_CALLER).body["jobs"] == []
