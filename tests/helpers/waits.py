"""Waiting on a condition, never on the clock: poll `predicate` until it holds (its value is returned).

The timeout only bounds a test that would otherwise hang; it is no assertion about speed (a timing is a
benchmark's figure, docs/TESTING.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_until(predicate: Callable[[], Any], timeout: float = 30.0, interval: float = 0.05, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
