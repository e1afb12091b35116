"""moto_hooks.install() and uninstall() (localmode/moto_hooks.py): every patch comes off, newest first.

A later patch may wrap an earlier one (a speed-up over a hooked method, two speed-ups on one attribute):
each keeps what it found to put back, so only removing them in reverse order leaves moto as it was.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.table import Table
from moto.dynamodb.responses import DynamoHandler
from moto.s3.models import S3Backend
from moto.s3.responses import S3Response

from localmode import moto_hooks

HOOKED = (Table, DynamoDBBackend, DynamoHandler, S3Backend, S3Response)


class _Target:
    attr = "moto's own"


class _SpeedUp:
    """A speed-up module's install()/uninstall() that patches _Target.attr, keeping what it found there."""

    def __init__(self, name: str, calls: list[tuple[str, str]]) -> None:
        self.name = name
        self.calls = calls
        self.found: str | None = None

    def install(self) -> None:
        self.found = _Target.attr
        _Target.attr = self.name
        self.calls.append(("install", self.name))

    def uninstall(self) -> None:
        assert self.found is not None
        _Target.attr = self.found
        self.calls.append(("uninstall", self.name))


@pytest.fixture
def uninstalled() -> Iterator[None]:
    """moto without the hooks for the test; installed again after if another test had installed them."""
    was_installed = moto_hooks.installed()
    if was_installed:
        moto_hooks.uninstall()
    yield
    if moto_hooks.installed():
        moto_hooks.uninstall()
    if was_installed:
        moto_hooks.install()


@pytest.mark.usefixtures("uninstalled")
def test_uninstall_removes_the_speed_ups_newest_first(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given two speed-ups that patch the same attribute, installed after the real ones
    calls: list[tuple[str, str]] = []
    first, second = _SpeedUp("first", calls), _SpeedUp("second", calls)
    monkeypatch.setattr(moto_hooks, "_SPEEDUPS", (*moto_hooks._SPEEDUPS, first, second))
    monkeypatch.setattr(_Target, "attr", "moto's own")
    moto_hooks.install()
    assert _Target.attr == "second"

    # When the hooks are removed
    moto_hooks.uninstall()

    # Then the second comes off before the first, and the attribute is moto's own again
    assert calls == [("install", "first"), ("install", "second"), ("uninstall", "second"), ("uninstall", "first")]
    assert _Target.attr == "moto's own"
    assert not moto_hooks.installed()


@pytest.mark.usefixtures("uninstalled")
def test_uninstall_leaves_every_hooked_moto_class_as_it_was() -> None:
    # Given moto's classes before the hooks
    before: dict[type, dict[str, Any]] = {owner: dict(vars(owner)) for owner in HOOKED}

    # When the hooks (and their speed-ups) are installed, then removed
    moto_hooks.install()
    assert hasattr(Table.put_item, "__wrapped__")
    moto_hooks.uninstall()

    # Then each class holds exactly what it held before: the same functions, nothing added or left behind
    for owner in HOOKED:
        assert dict(vars(owner)) == before[owner], owner.__name__
