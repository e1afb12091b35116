"""Suite-wide settings. Fixtures that build tiny models and data live in tests/helpers.py."""

from __future__ import annotations

import os

import pytest

# Never reach real AWS from a test, whatever the developer's shell holds.
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.pop("AWS_PROFILE", None)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # pytest exits 5 when it collected nothing: CI must not read that as a pass.
    if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
