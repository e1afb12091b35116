"""Local mode's dashboard site (localmode/dashboard.py) in front of a stand-in API on real HTTP, and
the single-use sign-in codes of `trainplane dashboard` (schemas/dashboard_signin.py)."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from requests_aws4auth import AWS4Auth

from localmode.credentials import new_principal
from localmode.dashboard import DashboardSite, SignInRefused, _is_loopback, claim_code
from localmode.frontdoor import FrontDoor
from localmode.sigv4 import ArrivedRequest
from schemas.dashboard_signin import CODE_TTL_SECONDS, CODES_DIR
from trainplane.dashboard_signin import issue_code

REGION = "us-east-1"
ALICE = new_principal("alice")
ADMIN = new_principal("admin")


def api(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return {"statusCode": 200, "body": json.dumps({"api": event["path"]})}


@pytest.fixture
def static(tmp_path: Path) -> Path:
    root = tmp_path / "static"
    (root / "assets").mkdir(parents=True)
    (root / "index.html").write_text("<!doctype html><title>t</title>")
    (root / "assets" / "index-abc.js").write_text("console.log(1)")
    (root / "assets" / "index-abc.css").write_text("body{}")
    (tmp_path / "secret.txt").write_text("not for the web")
    return root


@pytest.fixture
def door(tmp_path: Path, static: Path) -> Iterator[FrontDoor]:
    site = DashboardSite(state_dir=tmp_path / "state", principals=[ADMIN, ALICE], region=REGION, static_dir=static)
    (tmp_path / "state").mkdir()
    front = FrontDoor("127.0.0.1", 0, principals=[ADMIN, ALICE], handler=api, region=REGION, account_id="123456789012", site=site)
    front.start()
    yield front
    front.stop()


def url(front: FrontDoor, path: str) -> str:
    return f"http://127.0.0.1:{front.port}{path}"


def test_page_assets_and_config_are_served_unsigned_with_security_headers(door: FrontDoor) -> None:
    for path in ("/", "/index.html"):
        page = requests.get(url(door, path), timeout=5)
        assert page.status_code == 200 and page.text.startswith("<!doctype html>")
        assert page.headers["Content-Type"] == "text/html; charset=utf-8" and page.headers["Cache-Control"] == "no-cache"
        assert "connect-src 'self'" in page.headers["Content-Security-Policy"] and page.headers["Referrer-Policy"] == "no-referrer"
    script = requests.get(url(door, "/assets/index-abc.js"), timeout=5)
    assert script.status_code == 200 and "javascript" in script.headers["Content-Type"] and "immutable" in script.headers["Cache-Control"]
    assert requests.get(url(door, "/assets/index-abc.css"), timeout=5).headers["Content-Type"].startswith("text/css")
    assert requests.head(url(door, "/"), timeout=5).status_code == 200
    assert requests.get(url(door, "/dashboard-config.json"), timeout=5).json() == {"mode": "local", "region": REGION, "api_url": ""}
    assert requests.get(url(door, "/assets/missing.js"), timeout=5).status_code == 404


def test_only_the_dashboard_paths_skip_the_signature(door: FrontDoor) -> None:
    # Anything else goes to the API, which wants SigV4, including tricks on the assets path
    for path in ("/jobs", "/assets/", "/assets/%2e%2e/secret.txt", "/assets/sub/x.js", "/index.htm", "/favicon.ico"):
        response = requests.get(url(door, path), timeout=5)
        assert response.status_code == 403 and response.json()["message"] == "Missing Authentication Token", path
    assert requests.post(url(door, "/"), timeout=5).status_code == 403
    signed = requests.get(url(door, "/jobs"), auth=AWS4Auth(ALICE.access_key_id, ALICE.secret_access_key, REGION, "execute-api"), timeout=5)
    assert signed.status_code == 200 and signed.json() == {"api": "/jobs"}


def test_site_never_reads_outside_its_assets_folder(static: Path, tmp_path: Path) -> None:
    site = DashboardSite(state_dir=tmp_path, principals=[ALICE], region=REGION, static_dir=static)
    for raw in ("/assets/../secret.txt", "/assets/..%2Fsecret.txt", "/assets/.", "/assets/..", "/../secret.txt"):
        answer = site.answer(ArrivedRequest("GET", raw, "", [], b""), "127.0.0.1")
        assert answer is None or answer[0] == 404, raw
        assert answer is None or b"not for the web" not in answer[2]


def test_a_code_signs_in_once_as_its_principal(door: FrontDoor, tmp_path: Path) -> None:
    code = issue_code(tmp_path / "state", "alice")
    session = url(door, "/_dashboard/session")
    first = requests.post(session, json={"code": code}, timeout=5)
    assert first.status_code == 200 and first.headers["Cache-Control"] == "no-store"
    assert first.json() == {
        "principal": "alice",
        "arn": ALICE.arn,
        "access_key_id": ALICE.access_key_id,
        "secret_access_key": ALICE.secret_access_key,
        "region": REGION,
    }
    again = requests.post(session, json={"code": code}, timeout=5)
    assert again.status_code == 403 and "already used" in again.json()["message"]


@pytest.mark.parametrize(
    ("headers", "body", "why"),
    [
        ({"Host": "attacker.example"}, None, "loopback host name"),
        ({"Host": "attacker.example:8080"}, None, "loopback host name"),
        ({"Origin": "http://attacker.example"}, None, "own origin"),
        ({}, b"not json", "JSON"),
        ({}, b'{"code": "short"}', "not a sign-in code"),
        ({}, b'{"code": "' + b"A" * 43 + b'"}', "unknown"),
        ({}, b'["list"]', "not a sign-in code"),
    ],
)
def test_the_exchange_refuses_foreign_hosts_origins_and_bad_codes(
    door: FrontDoor, tmp_path: Path, headers: dict[str, str], body: bytes | None, why: str
) -> None:
    code = issue_code(tmp_path / "state", "alice")
    payload = body if body is not None else json.dumps({"code": code}).encode()
    response = requests.post(
        url(door, "/_dashboard/session"), data=payload, headers={"Content-Type": "application/json", **headers}, timeout=5
    )
    assert response.status_code == 403 and why in response.json()["message"]
    if body is None:
        # A refused request did not spend the code
        assert claim_code(tmp_path / "state", code) == "alice"


def test_the_exchange_is_answered_to_loopback_peers_only(static: Path, tmp_path: Path) -> None:
    site = DashboardSite(state_dir=tmp_path, principals=[ALICE], region=REGION, static_dir=static)
    code = issue_code(tmp_path, "alice")
    request = ArrivedRequest("POST", "/_dashboard/session", "", [("Host", "127.0.0.1:8080")], json.dumps({"code": code}).encode())
    refused = site.answer(request, "192.168.1.20")
    assert refused is not None and refused[0] == 403 and b"this machine only" in refused[2]
    answered = site.answer(request, "::ffff:127.0.0.1")
    assert answered is not None and answered[0] == 200
    assert _is_loopback("::1") and _is_loopback("127.0.0.5") and not _is_loopback("10.0.0.1") and not _is_loopback("")


def test_codes_expire_are_private_and_name_a_served_principal(tmp_path: Path, static: Path) -> None:
    code = issue_code(tmp_path, "alice", now=1000.0)
    (path,) = (tmp_path / CODES_DIR).iterdir()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE((tmp_path / CODES_DIR).stat().st_mode) == 0o700
    assert code not in path.name and code not in path.read_text()  # stored under its hash: a listing gives nothing
    with pytest.raises(SignInRefused, match="expired"):
        claim_code(tmp_path, code, now=1000.0 + CODE_TTL_SECONDS + 1)
    assert not path.exists()
    # Issuing sweeps codes nobody claimed in time
    issue_code(tmp_path, "alice", now=1000.0)
    issue_code(tmp_path, "alice", now=5000.0)
    assert len(os.listdir(tmp_path / CODES_DIR)) == 1
    # A code for a principal this plane does not serve signs nobody in
    site = DashboardSite(state_dir=tmp_path, principals=[ALICE], region=REGION, static_dir=static)
    ghost = issue_code(tmp_path, "mallory")
    request = ArrivedRequest("POST", "/_dashboard/session", "", [("Host", "localhost:1")], json.dumps({"code": ghost}).encode())
    answer = site.answer(request, "127.0.0.1")
    assert answer is not None and answer[0] == 403


def test_an_unbuilt_dashboard_says_how_to_build_it(tmp_path: Path) -> None:
    site = DashboardSite(state_dir=tmp_path, principals=[ALICE], region=REGION, static_dir=tmp_path / "nothing")
    answer = site.answer(ArrivedRequest("GET", "/", "", [], b""), "127.0.0.1")
    assert answer is not None and answer[0] == 404 and b"make dashboard" in answer[2]
