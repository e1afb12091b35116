"""`trainplane dashboard`: a single-use sign-in link for a principal of local mode's endpoint.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from localmode.dashboard import claim_code
from tests.unit.test_client_endpoint import LOCAL_URL, write_endpoint_json
from trainplane import cli


@pytest.fixture(autouse=True)
def no_ambient_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TRAINPLANE_ENDPOINT", "TRAINPLANE_STATE_DIR", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)


def test_prints_a_fragment_link_whose_code_signs_in_the_chosen_principal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path / "state"
    write_endpoint_json(state)
    opened: list[str] = []
    monkeypatch.setattr(cli.webbrowser, "open", opened.append)
    result = CliRunner().invoke(
        cli.app, ["--state-dir", str(state), "--principal", "alice", "-o", "json", "dashboard"], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["principal"] == "alice" and opened == [document["url"]]
    page, _, fragment = document["url"].partition("#")
    assert page == LOCAL_URL + "/" and fragment.startswith("code=")  # the code is never in the part a server sees
    assert claim_code(state, fragment.removeprefix("code=")) == "alice"


def test_no_open_and_the_default_principal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path / "state"
    write_endpoint_json(state)
    monkeypatch.setattr(cli.webbrowser, "open", lambda url: pytest.fail("--no-open opened a browser"))
    result = CliRunner().invoke(
        cli.app, ["--state-dir", str(state), "dashboard", "--no-open"], env={"COLUMNS": "300"}, catch_exceptions=False
    )
    assert result.exit_code == 0 and "dashboard for admin: http://127.0.0.1:18080/#code=" in result.stdout


def test_a_cloud_endpoint_is_refused_with_where_to_sign_in(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli.app,
        ["--endpoint", "https://abc.execute-api.eu-west-1.amazonaws.com/prod", "--state-dir", str(tmp_path), "dashboard", "--no-open"],
        env={"AWS_ACCESS_KEY_ID": "AKIDX", "AWS_SECRET_ACCESS_KEY": "s", "COLUMNS": "300"},
    )
    assert result.exit_code == 1 and "DashboardUrl" in result.output and "#code=" not in result.output
