"""Job helpers for the dashboard tests: submit over the API (as the test's principal) and wait."""

from __future__ import annotations

import contextlib
from typing import Any

from tests.e2e.conftest import LocalPlane
from tests.e2e.test_lifecycle_e2e import TERMINAL, Api, fake_spec, real_spec

__all__ = ["TERMINAL", "Api", "cancel_all", "fake_spec", "real_spec", "submit"]


def submit(plane: LocalPlane, spec: dict[str, Any], *, principal: str = "alice", **extra: Any) -> dict[str, Any]:
    for key, value in extra.items():
        spec[key] = value
    response = plane.request("POST", "/jobs", json=spec, principal=principal)
    assert response.status_code == 201, response.text
    return dict(response.json())


def cancel_all(plane: LocalPlane, job_ids: list[str], principal: str = "alice") -> None:
    """Free the plane's one CPU slot for the next test."""
    for job_id in job_ids:
        with contextlib.suppress(Exception):
            plane.request("POST", f"/jobs/{job_id}/cancel", json={"reason": "test cleanup"}, principal=principal)
