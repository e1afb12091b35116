"""`trainplane up --dashboard-user NAME:GROUP,...` (localmode/credentials.py): people signed in to the
dashboard, in groups of local mode's emulated user pool; bad names refused before anything starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from localmode.credentials import CREDENTIALS_FILE, dashboard_user_specs, load_or_create


def test_specs_give_each_person_their_groups() -> None:
    specs = dashboard_user_specs(["ana:ml-research,vision", "ben", "ana:vision,readers"])
    assert specs == {"ana": ("ml-research", "vision", "readers"), "ben": ()}


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ("alice:g", "not a new user name"),
        ("a b:g", "not a new user name"),
        (":g", "not a new user name"),
        ("ana:arn:aws:x", "not a Cognito"),
    ],
)
def test_a_bad_spec_is_refused_naming_it(spec: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        dashboard_user_specs([spec])


def test_dashboard_users_are_created_once_and_kept(tmp_path: Path) -> None:
    first = load_or_create(tmp_path, ("admin", "alice"), ("ana",))
    ana = next(p for p in first if p.name == "ana")
    assert ana.cognito_identity_id and ana.arn.endswith("/CognitoIdentityCredentials")
    again = load_or_create(tmp_path, ("admin", "alice"), ("ana",))
    assert [p.cognito_identity_id for p in again if p.name == "ana"] == [ana.cognito_identity_id]
    assert len(json.loads((tmp_path / CREDENTIALS_FILE).read_text())["principals"]) == 3


def test_a_name_cannot_be_both_kinds(tmp_path: Path) -> None:
    load_or_create(tmp_path, ("admin", "alice", "bob"), ("ana",))
    with pytest.raises(ValueError, match="'bob' cannot be both"):
        load_or_create(tmp_path, ("admin", "alice", "bob"), ("bob",))
    with pytest.raises(ValueError, match="'ana' cannot be both"):
        load_or_create(tmp_path, ("admin", "alice", "ana"))
