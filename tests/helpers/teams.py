"""Teams in memory (the TeamRepository port) and a team builder for the scheduler's tests."""

from __future__ import annotations

import threading
from datetime import datetime
from typing import Any

from functions.catalog.gpu_types import decayed
from functions.errors import TeamChanged, TeamNotFound
from functions.service.feature_ports import CognitoUser
from schemas.teams import Team


class InMemoryTeamRepository:
    def __init__(self) -> None:
        self.teams: dict[str, Team] = {}
        self.recorded: dict[str, tuple[float, datetime]] = {}
        self.identities: dict[str, CognitoUser] = {}
        self._lock = threading.Lock()

    def get(self, name: str) -> Team:
        if name not in self.teams:
            raise TeamNotFound(name)
        return self.teams[name]

    def list(self) -> list[Team]:
        return [self.teams[n] for n in sorted(self.teams)]

    def put(self, team: Team, expected_version: int | None) -> Team:
        with self._lock:
            current = self.teams.get(team.name)
            if (current.version if current else None) != expected_version:
                raise TeamChanged(team.name)
            stored = team.model_copy(update={"version": (expected_version or 0) + 1})
            self.teams[team.name] = stored
            return stored

    def delete(self, name: str) -> bool:
        return self.teams.pop(name, None) is not None

    def usage(self) -> dict[str, tuple[float, datetime]]:
        return dict(self.recorded)

    def add_usage(self, name: str, amount: float, now: datetime, half_life_seconds: float) -> None:
        with self._lock:
            old, at = self.recorded.get(name, (0.0, now))
            self.recorded[name] = (decayed(old, at, now, half_life_seconds) + amount, max(at, now))

    def link_identity(self, identity_id: str, user: CognitoUser) -> None:
        self.identities[identity_id] = user

    def linked_user(self, identity_id: str) -> CognitoUser | None:
        return self.identities.get(identity_id)


class FakeUserGroups:
    """The UserGroups port: each user's groups as a test sets them, and every lookup made."""

    def __init__(self, groups: dict[CognitoUser, set[str]] | None = None) -> None:
        self.groups = groups or {}
        self.lookups: list[CognitoUser] = []

    def groups_of(self, user: CognitoUser) -> frozenset[str]:
        self.lookups.append(user)
        return frozenset(self.groups.get(user, ()))


def team(name: str, *members: str, weight: float = 1.0, **quotas: Any) -> Team:
    """team("a", "arn:...:user/alice", H100=4) or H100={"nominal": 4, "borrow_limit": 2}."""
    spec = {t: (q if isinstance(q, dict) else {"nominal": q}) for t, q in quotas.items()}
    return Team.model_validate({"name": name, "members": {"arns": list(members)}, "quotas": spec, "weight": weight})
