"""Fixtures for the dashboard's browser tests (support.py says how the browser is found and driven)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import LocalPlane
from tests.e2e.dashboard.support import CHROMIUM, CHROMIUM_ARGS, Dashboard

# The fake trainer (tests/fake_trainer.py): fast jobs that honour the trainer's contract, for the screens
# that need many jobs or jobs held in a state; real tiny trainer jobs run on the shared `local_plane`.
FAKE_TRAINER_ENV = {"TRAINPLANE_TRAINER_COMMAND": f"{sys.executable} -m tests.fake_trainer", "TRAINPLANE_RECONCILE_INTERVAL_SECONDS": "2"}

_shots_dir: list[Path] = []


@pytest.fixture(scope="session")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    chosen = os.environ.get("DASHBOARD_SCREENSHOTS")
    path = Path(chosen) if chosen else tmp_path_factory.mktemp("dashboard-screenshots")
    path.mkdir(parents=True, exist_ok=True)
    _shots_dir.append(path)
    return path


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _shots_dir:
        shots = sorted(p.name for p in _shots_dir[0].glob("*.png"))
        terminalreporter.write_line(f"dashboard screenshots ({len(shots)}): {_shots_dir[0]}")


@pytest.fixture(scope="package")  # closed after the dashboard tests, not left idle for the rest of the suite
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: `make browser` installs Debian's chromium and chromium-driver (as root)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        # A fresh temporary profile (--user-data-dir) per launch is Playwright's default.
        instance = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield instance
        instance.close()


@pytest.fixture(scope="package")
def fake_plane(local_plane_factory: Callable[..., LocalPlane]) -> Iterator[LocalPlane]:
    """The dashboard tests' plane, stopped after them (an idle plane still ticks)."""
    plane = local_plane_factory(env=FAKE_TRAINER_ENV)
    yield plane
    plane.stop()


@pytest.fixture
def open_dashboard(browser: Any, screenshots: Path) -> Iterator[Callable[..., Dashboard]]:
    opened: list[Dashboard] = []

    def make(plane: LocalPlane, principal: str = "alice", viewport: dict[str, int] | None = None) -> Dashboard:
        dash = Dashboard(browser, plane, screenshots, principal=principal, viewport=viewport)
        opened.append(dash)
        return dash

    yield make
    for dash in opened:
        dash.close()
