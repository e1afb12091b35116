"""Endpoint and credential discovery (trainplane/endpoint.py)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from botocore.credentials import Credentials

from trainplane.client import Client
from trainplane.endpoint import ENV_ENDPOINT, ENV_STATE_DIR, read_endpoint_file, region_from_url, resolve
from trainplane.errors import EndpointNotConfigured, StaleEndpoint

LOCAL_URL = "http://127.0.0.1:18080"


def write_endpoint_json(state_dir: Path, api_url: str = LOCAL_URL, region: str = "eu-west-1", **extra: Any) -> Path:
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / "endpoint.json"
    doc = {
        **extra,
        "api_url": api_url,
        "region": region,
        "aws_endpoint_url": "http://127.0.0.1:15000",
        "bucket": "trainplane-artifacts",
        "credentials": [
            {
                "name": "admin",
                "access_key_id": "AKIDADMIN",
                "secret_access_key": "admin-secret",
                "arn": "arn:aws:iam::123456789012:user/admin",
            },
            {
                "name": "alice",
                "access_key_id": "AKIDALICE",
                "secret_access_key": "alice-secret",
                "arn": "arn:aws:iam::123456789012:user/alice",
            },
        ],
    }
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # The suite's conftest sets dummy AWS keys; each test states which chain it wants.
    monkeypatch.delenv(ENV_ENDPOINT, raising=False)
    monkeypatch.delenv(ENV_STATE_DIR, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.chdir(tmp_path)


def no_chain(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)


def test_endpoint_json_supplies_url_region_and_the_first_principal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a running local mode's endpoint.json and no AWS keys in the chain
    no_chain(monkeypatch)
    write_endpoint_json(tmp_path / "state")
    # When resolving with only the state dir
    r = resolve(state_dir=tmp_path / "state")
    # Then the URL, region and admin keys come from the file
    assert (r.url, r.region, r.credentials.access_key) == (LOCAL_URL, "eu-west-1", "AKIDADMIN")
    assert r.local is not None
    assert r.local.bucket == "trainplane-artifacts"
    assert "principal admin" in r.credentials_source


def test_state_dir_comes_from_env_then_defaults_to_dot_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given endpoint files in ./.state and in a directory named by TRAINPLANE_STATE_DIR
    no_chain(monkeypatch)
    write_endpoint_json(tmp_path / ".state", api_url="http://127.0.0.1:1111")
    write_endpoint_json(tmp_path / "other", api_url="http://127.0.0.1:2222")
    # When resolving without and then with the variable
    default = resolve()
    monkeypatch.setenv(ENV_STATE_DIR, str(tmp_path / "other"))
    from_env = resolve()
    # Then ./.state is the default and the variable wins over it
    assert default.url == "http://127.0.0.1:1111"
    assert from_env.url == "http://127.0.0.1:2222"


def test_explicit_endpoint_beats_env_which_beats_endpoint_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given an endpoint.json, an environment variable and AWS keys in the chain
    write_endpoint_json(tmp_path / ".state")
    monkeypatch.setenv(ENV_ENDPOINT, "https://abc123.execute-api.ap-south-1.amazonaws.com/prod/")
    # When resolving with and without an explicit URL
    explicit = resolve("https://explicit.example.com/v1", region="us-west-2")
    from_env = resolve()
    # Then the argument wins, then the variable; a cloud endpoint signs with the chain's keys
    assert explicit.url == "https://explicit.example.com/v1"
    assert explicit.region == "us-west-2"
    assert from_env.url == "https://abc123.execute-api.ap-south-1.amazonaws.com/prod"
    assert from_env.region == "ap-south-1"
    assert from_env.credentials.access_key == "testing"
    assert from_env.local is None


def test_principal_flag_picks_that_principal(tmp_path: Path) -> None:
    # Given a local endpoint and AWS keys in the chain
    write_endpoint_json(tmp_path / ".state")
    # When resolving as alice
    r = resolve(principal="alice")
    # Then alice's keys sign, whatever the chain holds
    assert r.credentials.access_key == "AKIDALICE"
    assert r.credentials.secret_key == "alice-secret"


def test_unknown_principal_names_the_known_ones(tmp_path: Path) -> None:
    # Given a local endpoint  When an unknown principal is asked for  Then the error lists the known ones
    write_endpoint_json(tmp_path / ".state")
    with pytest.raises(EndpointNotConfigured, match="known: admin, alice"):
        resolve(principal="mallory")


def test_chain_keys_that_are_a_local_principal_are_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given alice's keys exported in the shell
    write_endpoint_json(tmp_path / ".state")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDALICE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "alice-secret")
    # When resolving the local endpoint
    r = resolve()
    # Then the chain's keys sign (as alice)
    assert r.credentials.access_key == "AKIDALICE"
    assert "chain" in r.credentials_source


def test_chain_keys_unknown_to_local_mode_fall_back_to_its_first_principal(tmp_path: Path) -> None:
    # Given the suite's dummy AWS keys in the chain, which local mode would refuse
    write_endpoint_json(tmp_path / ".state")
    # When resolving the local endpoint
    r = resolve()
    # Then local mode's first principal signs instead
    assert r.credentials.access_key == "AKIDADMIN"


def test_explicit_url_equal_to_the_local_one_still_uses_local_keys(tmp_path: Path) -> None:
    # Given a local endpoint  When its URL is also given explicitly (with a trailing slash)
    write_endpoint_json(tmp_path / ".state")
    r = resolve(LOCAL_URL + "/", principal="alice")
    # Then it is recognised as local mode
    assert r.local is not None
    assert r.credentials.access_key == "AKIDALICE"


def test_principal_needs_a_local_endpoint(tmp_path: Path) -> None:
    # Given no endpoint.json  When a principal is named for a cloud endpoint  Then a clear error
    with pytest.raises(EndpointNotConfigured, match="--principal needs a local-mode endpoint"):
        resolve("https://api.example.com", principal="alice")


def test_no_endpoint_anywhere_says_how_to_get_one() -> None:
    # Given no flag, variable or endpoint.json  When resolving  Then the error names all three ways
    with pytest.raises(EndpointNotConfigured) as caught:
        resolve()
    message = str(caught.value)
    assert "--endpoint" in message
    assert ENV_ENDPOINT in message
    assert "trainplane up" in message


def test_no_credentials_for_a_cloud_endpoint_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given an empty credential chain  When resolving a cloud endpoint  Then it says no credentials were found
    no_chain(monkeypatch)
    with pytest.raises(EndpointNotConfigured, match="no AWS credentials"):
        resolve("https://api.example.com")


def test_explicit_credentials_win(tmp_path: Path) -> None:
    # Given a local endpoint  When explicit credentials are passed  Then they are used as given
    write_endpoint_json(tmp_path / ".state")
    r = resolve(credentials=Credentials("AKIDX", "secret-x"))
    assert r.credentials.access_key == "AKIDX"


def test_broken_endpoint_json_and_bad_urls_are_clear_errors(tmp_path: Path) -> None:
    # Given an endpoint.json that is not JSON, and one missing api_url
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "endpoint.json").write_text("{not json")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "endpoint.json").write_text(json.dumps({"region": "us-east-1"}))
    # When they are read, and when an endpoint is not a URL
    # Then each error says what is wrong and where
    with pytest.raises(EndpointNotConfigured, match="cannot read"):
        read_endpoint_file(tmp_path / "a")
    with pytest.raises(EndpointNotConfigured, match="missing 'api_url'"):
        read_endpoint_file(tmp_path / "b")
    with pytest.raises(EndpointNotConfigured, match="is not a URL"):
        resolve("localhost:8080")


@pytest.mark.parametrize(
    ("url", "region"),
    [
        ("https://a1b2c3.execute-api.eu-central-1.amazonaws.com/prod", "eu-central-1"),
        ("https://a1b2c3.execute-api.cn-north-1.amazonaws.com.cn/prod", "cn-north-1"),
        ("https://api.example.com", None),
        ("http://127.0.0.1:8080", None),
    ],
)
def test_region_from_an_execute_api_url(url: str, region: str | None) -> None:
    # Given an API URL  When its region is read from the host  Then only execute-api hosts give one
    assert region_from_url(url) == region


def _dead_pid() -> int:
    # A process that has exited and been reaped: its pid names no process (until reused, which a
    # fresh pid is not within the test's few milliseconds).
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_an_endpoint_json_whose_process_is_gone_is_stale_and_says_so(tmp_path: Path) -> None:
    # Given the endpoint.json of a `trainplane up` killed with -9 (its pid is gone)
    state = tmp_path / "state"
    write_endpoint_json(state, pid=_dead_pid(), hostname=socket.gethostname())
    # When the SDK (or the CLI, through resolve) reads it
    # Then it says the file is stale and how to fix it, at once, instead of trying a dead port
    with pytest.raises(StaleEndpoint, match=r"is stale: the `trainplane up` that wrote it \(pid \d+\) is no longer running"):
        read_endpoint_file(state)
    with pytest.raises(StaleEndpoint, match="trainplane up --state-dir"):
        Client(state_dir=state)
    # And an endpoint named explicitly does not need the stale file
    assert resolve("http://127.0.0.1:9", state_dir=state, credentials=Credentials("a", "b")).local is None


def test_an_endpoint_json_of_a_live_process_or_another_host_is_used(tmp_path: Path) -> None:
    state = tmp_path / "state"
    write_endpoint_json(state, pid=os.getpid(), hostname=socket.gethostname())
    assert read_endpoint_file(state).pid == os.getpid()  # type: ignore[union-attr]
    # Another host's pid cannot be checked from here: trusted as it is
    write_endpoint_json(state, pid=_dead_pid(), hostname="another-host")
    assert read_endpoint_file(state) is not None
    # And a file without a pid (written before pids were recorded) is used as before
    write_endpoint_json(state)
    assert read_endpoint_file(state) is not None
