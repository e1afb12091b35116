"""Team membership by Cognito group (issue 24): a dashboard user's user-pool groups, looked up on the server
from the identity API Gateway names (never from a body), decide which team names them."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from functions.errors import InvalidRequest
from functions.service.feature_ports import CognitoUser
from functions.service.principal import Principal, cognito_identity_of, cognito_user_of
from functions.service.teams import TeamDirectory, TeamService
from functions.settings import Settings
from schemas.job import SubmitJobRequest
from schemas.teams import Team, TeamSpec
from tests.helpers.teams import FakeUserGroups, InMemoryTeamRepository
from tests.lifecycle_support import make_request

POOL = "us-east-1_Dashb0ard"
ROLE_SESSION = "arn:aws:sts::123456789012:assumed-role/trainplane-dev-dashboard-users"
ANA_ID, BEN_ID = "us-east-1:11111111-2222-3333-4444-555555555555", "us-east-1:99999999-8888-7777-6666-555555555555"
ANA_USER, BEN_USER = CognitoUser(POOL, "aaaaaaaa-0000-0000-0000-000000000001"), CognitoUser(POOL, "bbbbbbbb-0000-0000-0000-000000000002")
ANA = Principal(arn=f"{ROLE_SESSION}/{ANA_ID}", cognito=ANA_USER)
BEN = Principal(arn=f"{ROLE_SESSION}/{BEN_ID}", cognito=BEN_USER)
ALICE = Principal(arn="arn:aws:iam::123456789012:user/alice")


def _directory(**groups: set[str]) -> tuple[TeamDirectory, FakeUserGroups, InMemoryTeamRepository]:
    repository = InMemoryTeamRepository()
    repository.put(Team(name="research", members={"cognito_groups": ["ml-research"]}, max_priority=6), None)
    repository.put(Team(name="vision", members={"cognito_groups": ["cv"], "arns": [ALICE.arn]}), None)
    users = {"ana": ANA_USER, "ben": BEN_USER}
    fake = FakeUserGroups({users[name]: g for name, g in groups.items()})
    return TeamDirectory(repository, Settings(dashboard_user_pool_id=POOL), groups=fake), fake, repository


def test_a_cognito_caller_in_group_g_belongs_to_the_team_naming_g() -> None:
    directory, fake, _ = _directory(ana={"ml-research", "readers"}, ben={"cv"})
    assert directory.team_of(ANA).name == "research"
    assert directory.team_of(BEN).name == "vision"
    assert set(fake.lookups) == {ANA_USER, BEN_USER}


def test_a_cognito_caller_in_no_named_group_is_in_the_default_team() -> None:
    directory, _, _ = _directory(ana={"readers"})
    assert directory.team_of(ANA).name == "default"


def test_an_iam_caller_never_matches_a_group_and_the_pool_is_not_asked() -> None:
    # Given: the fake pool even holds a user whose sub is alice's name, in the group research names
    directory, fake, _ = _directory()
    fake.groups[CognitoUser(POOL, "alice")] = {"ml-research"}
    # An IAM user, and an IAM user carrying a Cognito identity (only a dashboard session may have one)
    assert directory.team_of(ALICE).name == "vision"
    assert directory.team_of(Principal(arn="arn:aws:iam::123456789012:user/bob", cognito=CognitoUser(POOL, "alice"))).name == "default"
    # An ordinary role session is no dashboard identity either
    assert directory.team_of("arn:aws:sts::123456789012:assumed-role/Research/ml-research").name == "default"
    assert fake.lookups == []


def test_a_user_of_another_user_pool_has_no_groups() -> None:
    directory, fake, _ = _directory()
    stranger = CognitoUser("eu-west-1_Other", ANA_USER.sub)
    fake.groups[stranger] = {"ml-research"}
    assert directory.team_of(Principal(arn=ANA.arn, cognito=stranger)).name == "default"
    assert fake.lookups == []


def test_without_a_user_pool_groups_match_nobody() -> None:
    repository = InMemoryTeamRepository()
    repository.put(Team(name="research", members={"cognito_groups": ["ml-research"]}), None)
    assert TeamDirectory(repository, Settings()).team_of(ANA).name == "default"


def test_the_pool_is_asked_only_when_a_team_names_a_group() -> None:
    repository = InMemoryTeamRepository()
    repository.put(Team(name="research", members={"arns": [ALICE.arn]}), None)
    fake = FakeUserGroups({ANA_USER: {"ml-research"}})
    directory = TeamDirectory(repository, Settings(dashboard_user_pool_id=POOL), groups=fake)
    assert directory.team_of(ANA).name == "default" and fake.lookups == []


def test_a_stored_owner_arn_is_the_person_a_signed_request_showed() -> None:
    # Given: ana's requests made her identity known (a sweep of hers submits trials later, with only her ARN)
    directory, _, repository = _directory(ana={"ml-research"})
    assert directory.team_of(ANA).name == "research"
    assert repository.identities == {ANA_ID: ANA_USER}
    # Then: another process (a fresh directory on the same store) finds her team from her ARN alone
    later = TeamDirectory(repository, Settings(dashboard_user_pool_id=POOL), groups=FakeUserGroups({ANA_USER: {"ml-research"}}))
    assert later.team_of(ANA.arn).name == "research"
    # A person seen while no team named groups yet is remembered all the same (their sweep may submit later)
    quiet = InMemoryTeamRepository()
    quiet.put(Team(name="vision", members={"arns": [ALICE.arn]}), None)
    TeamDirectory(quiet, Settings(dashboard_user_pool_id=POOL), groups=FakeUserGroups()).team_of(BEN)
    assert quiet.identities == {BEN_ID: BEN_USER}
    # A dashboard identity never seen has no groups
    assert later.team_of(f"{ROLE_SESSION}/us-east-1:00000000-0000-0000-0000-00000000dead").name == "default"


def test_a_body_naming_a_team_or_group_has_no_effect() -> None:
    directory, _, _ = _directory(ben={"cv"})
    body = make_request("ben-job").model_dump(mode="json")
    # A team or groups in the body are not fields of a submit: 422 naming them
    for field, value in (("team", "research"), ("cognito_groups", ["ml-research"]), ("members", {"cognito_groups": ["ml-research"]})):
        with pytest.raises(ValidationError) as err:
            SubmitJobRequest.model_validate({**body, field: value})
        assert err.value.errors()[0]["loc"] == (field,)
    # Labels saying so change nothing either: ben is in cv, so his job is vision's (the team submit records)
    request = SubmitJobRequest.model_validate({**body, "labels": {"team": "research", "cognito-groups": "ml-research"}})
    assert directory.check_submit(request, BEN) == "vision"
    # ana is in no group a team names: the default team, whatever her labels say
    assert directory.check_submit(request, ANA) == "default"


def test_the_ceiling_applied_is_the_groups_team_s() -> None:
    directory, _, _ = _directory(ana={"ml-research"})
    request = make_request("ana-job").model_copy(
        update={"scheduling_config": make_request().scheduling_config.model_copy(update={"priority": 8})}
    )
    with pytest.raises(InvalidRequest) as err:
        directory.check_submit(request, ANA)  # research's max_priority is 6
    assert err.value.field == "scheduling_config.priority" and "research" in str(err.value)
    assert directory.check_submit(request, BEN) == "default"  # ben is in no group: the default team's ceiling


def test_members_cognito_groups_are_group_names_422_naming_the_field() -> None:
    spec = TeamSpec.model_validate({"members": {"cognito_groups": ["ml-research", "Vision_Team"]}})
    assert spec.members.cognito_groups == ["ml-research", "Vision_Team"]
    for bad, why in (
        (["arn:aws:sts::123:assumed-role/R/*"], "role ARNs go in members.arns"),
        (["ml research"], "pattern"),
        ([""], "at least 1"),
        (["bell\x07"], "control characters"),
        (["x" * 129], "at most 128"),
        (["a", "a"], "more than once"),
    ):
        with pytest.raises(ValidationError) as err:
            TeamSpec.model_validate({"members": {"cognito_groups": bad}})
        error = err.value.errors()[0]
        assert error["loc"][:2] == ("members", "cognito_groups") and why in error["msg"], error


def test_a_team_stored_with_role_patterns_as_groups_still_loads() -> None:
    # Before groups were looked up, cognito_groups held the group's role ARN pattern: read as members.arns
    stored = Team.model_validate_json(
        '{"name": "old", "members": {"arns": [], "cognito_groups": ["arn:aws:sts::1:assumed-role/R/*", "ml-research"]}}'
    )
    assert stored.members.arns == ["arn:aws:sts::1:assumed-role/R/*"] and stored.members.cognito_groups == ["ml-research"]


def test_a_member_sees_its_team_by_group_and_not_the_others() -> None:
    directory, _, _ = _directory(ana={"ml-research"})
    service = TeamService(directory, ledger=None, jobs=None)  # type: ignore[arg-type]  # list() reads neither
    assert [t.name for t in service.list(ANA).teams] == ["research"]
    assert service.list(ANA).teams[0].members.cognito_groups == []  # a member does not see who else is in it


def test_api_gateways_provider_string_names_the_pool_and_the_sub() -> None:
    provider = f"cognito-idp.us-east-1.amazonaws.com/{POOL},cognito-idp.us-east-1.amazonaws.com/{POOL}:CognitoSignIn:{ANA_USER.sub}"
    assert cognito_user_of(provider) == ANA_USER
    assert cognito_user_of(None) is None
    assert cognito_user_of("graph.facebook.com,graph.facebook.com:12345") is None
    assert cognito_user_of(f"cognito-idp.us-east-1.amazonaws.com/{POOL}") is None
    assert cognito_identity_of(ANA.arn) == ANA_ID
    assert cognito_identity_of("arn:aws:sts::1:assumed-role/R/session") is None
    assert cognito_identity_of("arn:aws:iam::1:user/x:y") is None
