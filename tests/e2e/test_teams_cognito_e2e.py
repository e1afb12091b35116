"""e2e (issue 24, teams by Cognito group): `trainplane up --dashboard-user ana:ml-research --dashboard-user
ben:vision` serves two people signed in to the dashboard (one role, one session name, an identity each), users
of local mode's emulated Cognito user pool in different groups. Teams name the groups; each person's requests
land in their group's team, decided from the pool, and still do after a restart (a new pool, new subs)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.e2e.conftest import LocalPlane
from tests.e2e.test_lifecycle_e2e import FAKE_TRAINER_ENV, fake_spec

pytestmark = [pytest.mark.e2e]

POOL_NAME = "trainplane-local-dashboard-users"  # localmode/deploy/user_pool.py


@pytest.fixture(scope="module")
def plane(module_plane_factory: Callable[..., LocalPlane]) -> LocalPlane:
    return module_plane_factory(env=FAKE_TRAINER_ENV, args=["--dashboard-user", "ana:ml-research", "--dashboard-user", "ben:vision"])


def _put(plane: LocalPlane, name: str, body: dict[str, Any]) -> None:
    response = plane.request("PUT", f"/teams/{name}", json=body, principal="admin")
    assert response.status_code == 200, response.text


def _my_team(plane: LocalPlane, who: str) -> str:
    response = plane.request("GET", "/teams", principal=who)
    assert response.status_code == 200, response.text
    (team,) = response.json()["teams"]
    return str(team["name"])


def _submit(plane: LocalPlane, who: str, name: str, **scheduling: Any) -> Any:
    spec = fake_spec(name)
    if scheduling:
        spec["scheduling_config"] = scheduling
    return plane.request("POST", "/jobs", json=spec, principal=who)


def test_two_dashboard_users_in_different_groups_are_in_their_groups_teams(plane: LocalPlane) -> None:
    # Given: the emulated user pool holds ana in ml-research and ben in vision
    idp = plane.client("cognito-idp")
    (pool,) = [p for p in idp.list_user_pools(MaxResults=10)["UserPools"] if p["Name"] == POOL_NAME]
    for who, group in (("ana", "ml-research"), ("ben", "vision")):
        assert [g["GroupName"] for g in idp.admin_list_groups_for_user(UserPoolId=pool["Id"], Username=who)["Groups"]] == [group]
    # And: teams that name those groups (research with a priority ceiling)
    _put(plane, "research", {"members": {"cognito_groups": ["ml-research"]}, "max_priority": 6})
    _put(plane, "vision", {"members": {"cognito_groups": ["vision"]}})
    listed = {t["name"]: t["members"] for t in plane.request("GET", "/teams", principal="admin").json()["teams"]}
    assert listed["research"]["cognito_groups"] == ["ml-research"] and listed["vision"]["cognito_groups"] == ["vision"]

    # Then: each is in their group's team (alice, an IAM user, in neither)
    assert (_my_team(plane, "ana"), _my_team(plane, "ben"), _my_team(plane, "alice")) == ("research", "vision", "default")
    assert plane.request("GET", "/teams/vision", principal="ana").status_code == 404

    # And: their jobs record it and run; research's ceiling binds ana, not ben
    jobs = {who: _submit(plane, who, f"{who}-job") for who in ("ana", "ben")}
    assert {who: (r.status_code, r.json().get("team")) for who, r in jobs.items()} == {"ana": (201, "research"), "ben": (201, "vision")}
    refused = _submit(plane, "ana", "ana-high", priority=8)
    assert refused.status_code == 422 and refused.json()["errors"][0]["field"] == "scheduling_config.priority"
    assert _submit(plane, "ben", "ben-high", priority=8).status_code == 201
    # A body naming a team is refused, not believed
    claimed = plane.request("POST", "/jobs", json={**fake_spec("claim"), "team": "research"}, principal="ben")
    assert claimed.status_code == 422 and claimed.json()["errors"][0]["field"] == "team"


def test_after_a_restart_the_new_pool_decides_the_same_teams(plane: LocalPlane) -> None:
    # Given: the teams of the test above; local mode restarts (its user pool is built again: new subs)
    _put(plane, "research", {"members": {"cognito_groups": ["ml-research"]}})
    _put(plane, "vision", {"members": {"cognito_groups": ["vision"]}})
    idp = plane.client("cognito-idp")
    before = {p["Id"] for p in idp.list_user_pools(MaxResults=10)["UserPools"]}
    plane.restart()
    idp = plane.client("cognito-idp")
    assert {p["Id"] for p in idp.list_user_pools(MaxResults=10)["UserPools"]} != before
    # Then: the same people are in the same teams
    assert (_my_team(plane, "ana"), _my_team(plane, "ben")) == ("research", "vision")
