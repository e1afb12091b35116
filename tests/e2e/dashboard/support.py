"""Browser support for the dashboard's e2e tests: Debian's chromium (`make browser`) driven by Playwright.

No browser build is ever downloaded: Playwright launches /usr/bin/chromium (CHROMIUM overrides). Each test
gets a fresh context (its own profile: cookies, sessionStorage) signed in the way a person is:
`trainplane dashboard --no-open` prints the one-time sign-in link, the page opens it.
Screenshots go to one folder per run, printed at the end of the run (DASHBOARD_SCREENSHOTS to choose it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.e2e.conftest import REPO_ROOT, LocalPlane

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}


def sign_in_url(plane: LocalPlane, principal: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINPLANE_", "AWS_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainplane",
            "--state-dir",
            str(plane.state_dir),
            "--principal",
            principal,
            "-o",
            "json",
            "dashboard",
            "--no-open",
        ],
        check=True,
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO_ROOT,
        timeout=60,
    )
    document = json.loads(out.stdout)
    assert document["principal"] == principal
    return str(document["url"])


class Dashboard:
    """One signed-in browser tab on a plane's dashboard."""

    def __init__(
        self, browser: Any, plane: LocalPlane, shots: Path, *, principal: str = "alice", viewport: dict[str, int] | None = None
    ) -> None:
        self.plane = plane
        self.shots = shots
        self.context = browser.new_context(viewport=viewport or DESKTOP, accept_downloads=True)
        self.page = self.context.new_page()
        self.page.set_default_timeout(20_000)
        self.errors: list[str] = []
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        if principal:
            self.page.goto(sign_in_url(plane, principal))
            self.page.wait_for_selector(f'[data-testid="principal"]:has-text("{principal}")')

    @property
    def base(self) -> str:
        return self.plane.api_url + "/"

    def go(self, hash_route: str) -> None:
        self.page.goto(self.base + hash_route)

    def shot(self, name: str) -> Path:
        path = self.shots / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path

    def close(self) -> None:
        assert not self.errors, f"uncaught errors in the page: {self.errors}"
        self.context.close()


def wait_for(condition: Callable[[], Any], timeout: float, what: str, interval: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
