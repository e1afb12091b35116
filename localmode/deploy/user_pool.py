"""Local deployer: the dashboard's Cognito user pool, its people and their groups (team membership by group).

The cloud stack's pool (infra/constructs/dashboard.py) holds the people who sign in to the dashboard; a
team names their groups (members.cognito_groups) and the API looks a caller's groups up there
(functions/adapters/cognito_groups.py). Here the pool is moto's: each dashboard user of the state dir
(localmode/credentials.py new_dashboard_user; `trainplane up --dashboard-user NAME:GROUP,...` adds them) is a
user of it, in the groups the flag names, and the front door reports them as API Gateway does
(cognitoAuthenticationProvider: the pool and the user's sub). Groups can also be changed while local mode
runs, with the cognito-idp API at the emulated AWS endpoint (AdminAddUserToGroup ...): the API sees it
within the groups cache's minute. The pool is not journaled: each start builds it again from the flags.

Moto gives each user a new sub per start; a dashboard identity's user as the teams table remembers it
(for a sweep's trials, a policy's jobs) is set again from here once the journal is back.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from localmode.deploy import LocalContext

logger = logging.getLogger(__name__)

POOL_NAME = "trainplane-local-dashboard-users"


@dataclass(frozen=True)
class DashboardUser:
    name: str
    identity_id: str
    groups: tuple[str, ...] = ()


@dataclass
class UserPool:
    """What the deployer made: the pool, and each person's provider string for the front door."""

    pool_id: str = ""
    providers: dict[str, str] = field(default_factory=dict)  # principal name -> cognitoAuthenticationProvider
    subs: dict[str, str] = field(default_factory=dict)  # principal name -> the user's sub


def deploy(ctx: LocalContext) -> None:
    idp = ctx.client("cognito-idp")
    pool_id = idp.create_user_pool(PoolName=POOL_NAME)["UserPool"]["Id"]
    ctx.set_setting("dashboard_user_pool_id", pool_id)
    ctx.user_pool.pool_id = pool_id
    issuer = f"cognito-idp.{ctx.region}.amazonaws.com/{pool_id}"
    made: set[str] = set()
    for user in ctx.dashboard_users:
        created = idp.admin_create_user(UserPoolId=pool_id, Username=user.name, MessageAction="SUPPRESS")["User"]
        sub = next(a["Value"] for a in created["Attributes"] if a["Name"] == "sub")
        ctx.user_pool.subs[user.name] = sub
        ctx.user_pool.providers[user.name] = f"{issuer},{issuer}:CognitoSignIn:{sub}"
        for group in user.groups:
            if group not in made:
                idp.create_group(UserPoolId=pool_id, GroupName=group)
                made.add(group)
            idp.admin_add_user_to_group(UserPoolId=pool_id, Username=user.name, GroupName=group)
    if ctx.dashboard_users:
        ctx.add_background("dashboard-identities", lambda stop: _link_identities(ctx))


def _link_identities(ctx: LocalContext) -> None:
    """Each dashboard identity is this start's user (after the journal brought back the last start's links)."""
    from functions.adapters.teams import DynamoTeamRepository
    from functions.service.feature_ports import CognitoUser

    repository = DynamoTeamRepository(cast(Any, ctx), ctx.settings().jobs_table)  # ctx.client: the deployer's own, unrecorded
    for user in ctx.dashboard_users:
        repository.link_identity(user.identity_id, CognitoUser(ctx.user_pool.pool_id, ctx.user_pool.subs[user.name]))
    logger.info("local mode: %d dashboard users in user pool %s", len(ctx.dashboard_users), ctx.user_pool.pool_id)
