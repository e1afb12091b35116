"""The SDK's team methods (issue 24), mixed into trainplane.Client and trainplane.AsyncClient: each call is
written once as steps in trainplane/operations.py, made a method (synced) or a coroutine (asynced).

    client.put_team("research", {"members": {"arns": ["arn:aws:iam::123456789012:role/Research"],
                                             "cognito_groups": ["ml-research"]},   # dashboard users by user-pool group
                                 "quotas": {"H100": {"nominal": 8, "borrow_limit": "50%"}}, "weight": 2})
    client.list_teams()[0].members.cognito_groups
    client.get_team("research").types   # nominal, in use, borrowed, lent, queued per GPU type
"""

from __future__ import annotations

from trainplane import operations as ops
from trainplane.transport import asynced, synced


class TeamMethods:
    """The team calls as Client's methods (put and delete: admins only)."""

    list_teams = synced(ops.list_teams)
    get_team = synced(ops.get_team)
    put_team = synced(ops.put_team)
    delete_team = synced(ops.delete_team)


class AsyncTeamMethods:
    """The same calls as AsyncClient's coroutines."""

    list_teams = asynced(ops.list_teams)
    get_team = asynced(ops.get_team)
    put_team = asynced(ops.put_team)
    delete_team = asynced(ops.delete_team)
