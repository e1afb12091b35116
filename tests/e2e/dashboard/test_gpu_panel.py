"""Issue 27.3's screen, the job page's GPU panel, on `trainplane up` (the fake trainer). The API's route
(GET /jobs/{id}/metrics/system, the trainer's NVML samples) is built in parallel on the `shapes` branch and
is not on main yet: against this plane the panel stays hidden without an error, and the drawn panel is
checked on answers of that route's documented shape (schemas/telemetry.py there: per attempt and device,
samples oldest first, `available: false` with a reason without NVML) given to the page by Playwright.
When the route lands, the local CPU-only plane answers `available: false` and the last case runs for real.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.e2e.conftest import LocalPlane
from tests.e2e.dashboard.jobs import Api, fake_spec, submit
from tests.e2e.dashboard.support import Dashboard

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _finished_job(plane: LocalPlane, name: str) -> str:
    job_id = str(submit(plane, fake_spec(name, max_steps=2, step_seconds=0.01))["job_id"])
    assert Api(plane).wait_status(job_id, "COMPLETED", "FAILED", "CANCELLED")["status"] == "COMPLETED"
    return job_id


def _answer_with(dash: Dashboard, body: dict[str, Any]) -> None:
    dash.page.route("**/metrics/system*", lambda route: route.fulfill(status=200, content_type="application/json", body=json.dumps(body)))


def _route_served(plane: LocalPlane) -> bool:
    return plane.request("GET", "/openapi.json").json()["paths"].get("/jobs/{job_id}/metrics/system") is not None


def test_a_cpu_jobs_page_has_no_gpu_panel_or_says_there_was_no_nvml(
    fake_plane: LocalPlane, open_dashboard: Callable[..., Dashboard]
) -> None:
    # Given: this plane's API, with or without the route (main has none yet), and a CPU-only job
    dash = open_dashboard(fake_plane)
    dash.go(f"#/jobs/{_finished_job(fake_plane, 'cpu job, no gpu')}")
    dash.page.wait_for_selector("#h-progress")
    panel = dash.page.locator('[data-testid="gpu-panel"]')
    if _route_served(fake_plane):
        # Then (with the route): the trainer had no NVML here, and the page says so
        panel.locator("[data-gpu]").wait_for()
    else:
        # Then (without it): no panel, and no error (close() finds no page error)
        dash.page.wait_for_selector('[data-testid="logs"][data-lines]')
        assert panel.is_hidden() and dash.page.locator(".error-state").count() == 0


def test_the_gpu_panel_draws_each_devices_utilization_and_memory(fake_plane: LocalPlane, open_dashboard: Callable[..., Dashboard]) -> None:
    job_id = _finished_job(fake_plane, "two gpus")
    steady = {"memory_total_mib": 81559.0, "power_w": 300.0, "sm_clock_mhz": 1980.0}
    samples = [
        [{"time": 1000.0 + 10 * i, "utilization_pct": u, "memory_used_mib": 1000.0 + i, **steady} for i, u in enumerate(levels)]
        for levels in ([90.0, 95.0, 97.0], [10.0, 12.0, 15.0])
    ]
    devices = [{"node": 0, "index": i, "name": "NVIDIA H100 80GB HBM3", "samples": s} for i, s in enumerate(samples)]
    dash = open_dashboard(fake_plane)
    _answer_with(dash, {"sample_seconds": 10, "attempts": [{"attempt": 1, "available": True, "devices": devices}]})
    dash.go(f"#/jobs/{job_id}")
    panel = dash.page.locator('[data-testid="gpu-panel"][data-devices="2"]')
    panel.wait_for()
    assert panel.locator('[data-testid="gpu-utilization"] canvas').count() == 1
    assert panel.locator('[data-testid="gpu-memory"] canvas').count() == 1
    assert panel.locator('tr[data-device="0-0"] td[data-col="utilization"]').inner_text() == "97%"
    assert panel.locator('tr[data-device="0-1"] td[data-col="utilization"]').inner_text() == "15%"
    assert "1002 / 81559 MiB" in panel.locator('tr[data-device="0-1"]').inner_text()
    dash.shot("job-gpu-panel")


def test_a_job_without_nvml_says_so(fake_plane: LocalPlane, open_dashboard: Callable[..., Dashboard]) -> None:
    job_id = _finished_job(fake_plane, "cpu only")
    dash = open_dashboard(fake_plane)
    if not _route_served(fake_plane):  # until the route is on main: its documented answer for a trainer without NVML
        _answer_with(
            dash,
            {"sample_seconds": 10, "attempts": [{"attempt": 1, "available": False, "reason": "NVML: driver not loaded", "devices": []}]},
        )
    dash.go(f"#/jobs/{job_id}")
    note = dash.page.locator('[data-testid="gpu-panel"] [data-gpu]')
    note.wait_for()
    assert note.get_attribute("data-gpu") in {"unavailable", "none"} and "GPU" in note.inner_text()
