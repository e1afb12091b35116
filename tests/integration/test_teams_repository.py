"""Teams in the jobs table (functions/adapters/teams.py): versioned puts and decayed usage, both conditional."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from functions.adapters.teams import DynamoTeamRepository
from functions.errors import TeamChanged, TeamNotFound
from tests.helpers.aws import fresh_resources
from tests.helpers.teams import team

T0 = datetime(2026, 1, 1, tzinfo=UTC)
WEEK = 7 * 24 * 3600.0


def test_a_team_is_put_on_its_version_listed_and_deleted(aws: Any) -> None:
    repo = DynamoTeamRepository(aws, fresh_resources(aws).jobs_table)
    first = repo.put(team("b", H100=4), None)
    assert first.version == 1 and repo.put(team("a"), None).version == 1
    with pytest.raises(TeamChanged):
        repo.put(team("b", H100=8), None)  # it exists: a create that lost a race
    assert repo.put(team("b", H100=8), 1).quotas["H100"].nominal == 8
    with pytest.raises(TeamChanged):
        repo.put(team("b", H100=2), 1)  # a stale version
    assert [t.name for t in repo.list()] == ["a", "b"]
    assert repo.delete("b") and not repo.delete("b")
    with pytest.raises(TeamNotFound):
        repo.get("b")


def test_usage_decays_to_each_write_and_adds(aws: Any) -> None:
    repo = DynamoTeamRepository(aws, fresh_resources(aws).jobs_table)
    repo.add_usage("a", 8.0, T0, WEEK)
    repo.add_usage("a", 1.0, T0 + timedelta(days=7), WEEK)
    assert repo.usage() == {"a": (5.0, T0 + timedelta(days=7))}
