"""Issue 27.3's screen, the job page's GPU panel, on `trainplane up` against the real route
(GET /jobs/{id}/metrics/system) with real tiny trainer jobs.

The trainer reads NVML through `import pynvml` (trainer_image/trainer/telemetry.py `load_nvml`). This test's own
plane has tests/nvml_site first on its PYTHONPATH, which the trainers it launches inherit: there `pynvml` is
tests/fake_nvml.py's FakeNvml over the two devices FAKE_NVML_DEVICES describes. Nothing outside tests/ names that
folder or variable, so no deployment can take this path by accident.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import pytest

from tests.e2e.conftest import REPO_ROOT, LocalPlane
from tests.e2e.dashboard.jobs import Api, fake_spec, real_spec, submit
from tests.e2e.dashboard.support import Dashboard

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

NVML_SITE = REPO_ROOT / "tests" / "nvml_site"
DEVICES = [
    {"name": "NVIDIA H100 80GB HBM3", "util": 97, "used_mib": 40000, "total_mib": 81559, "power_mw": 350000, "sm_mhz": 1980},
    {"name": "NVIDIA H100 80GB HBM3", "util": 15, "used_mib": 1002, "total_mib": 81559, "power_mw": 90000, "sm_mhz": 1410},
]


@pytest.fixture(scope="module")
def nvml_plane(module_plane_factory: Callable[..., LocalPlane]) -> LocalPlane:
    """`trainplane up` (the real trainer) whose trainers import the fake pynvml."""
    path = os.pathsep.join([str(NVML_SITE), str(REPO_ROOT)])
    return module_plane_factory(env={"PYTHONPATH": path, "FAKE_NVML_DEVICES": json.dumps(DEVICES)})


def _finished(plane: LocalPlane, spec: dict[str, Any]) -> str:
    job_id = str(submit(plane, spec)["job_id"])
    job = Api(plane).wait_status(job_id, "COMPLETED", "FAILED", "CANCELLED", timeout=300)
    assert job["status"] == "COMPLETED", job
    return job_id


def _tiny(name: str, **environment: str) -> dict[str, Any]:
    spec = real_spec(name, max_steps=2, save_steps=2, accumulate=1)
    spec["training_config"].setdefault("environment", {}).update(environment)
    return spec


def test_the_gpu_panel_draws_what_the_trainers_nvml_read(nvml_plane: LocalPlane, open_dashboard: Callable[..., Dashboard]) -> None:
    # Given: a real tiny job whose trainer sampled two (fake) GPUs through NVML
    job_id = _finished(nvml_plane, _tiny("two gpus"))
    served = nvml_plane.request("GET", f"/jobs/{job_id}/metrics/system").json()
    (attempt,) = served["attempts"]
    assert attempt["available"] is True and [d["index"] for d in attempt["devices"]] == [0, 1], served
    # When its page is opened
    dash = open_dashboard(nvml_plane)
    dash.go(f"#/jobs/{job_id}")
    # Then: utilization and memory are drawn per device, and the latest reading of each is in the table
    panel = dash.page.locator('[data-testid="gpu-panel"][data-devices="2"]')
    panel.wait_for()
    assert panel.locator('[data-testid="gpu-utilization"] canvas').count() == 1
    assert panel.locator('[data-testid="gpu-memory"] canvas').count() == 1
    assert "attempt 1" in panel.locator("h2").inner_text()
    for device, row_text in ((0, ("97%", "40000 / 81559 MiB", "350 W", "1980 MHz")), (1, ("15%", "1002 / 81559 MiB", "90 W", "1410 MHz"))):
        row = panel.locator(f'tr[data-device="0-{device}"]')
        assert row.locator('td[data-col="utilization"]').inner_text() == row_text[0]
        assert all(text in row.inner_text() for text in row_text) and "NVIDIA H100 80GB HBM3" in row.inner_text()
        latest = attempt["devices"][device]["samples"][-1]
        assert f"{latest['utilization_pct']:g}%" == row_text[0]  # the page shows what the route served
    dash.shot("job-gpu-panel")


def test_a_job_whose_trainer_had_no_nvml_says_so(nvml_plane: LocalPlane, open_dashboard: Callable[..., Dashboard]) -> None:
    # Given: a real tiny job whose trainer found no NVML driver (this job's own environment unloads the fake's)
    job_id = _finished(nvml_plane, _tiny("no driver", FAKE_NVML_DRIVER="unloaded"))
    (attempt,) = nvml_plane.request("GET", f"/jobs/{job_id}/metrics/system").json()["attempts"]
    assert attempt["available"] is False and "Driver Not Loaded" in attempt["reason"]
    # When its page is opened, Then the panel says why there is no telemetry, instead of an empty chart
    dash = open_dashboard(nvml_plane)
    dash.go(f"#/jobs/{job_id}")
    note = dash.page.locator('[data-testid="gpu-panel"] [data-gpu="unavailable"]')
    note.wait_for()
    assert "No GPU telemetry for attempt 1" in note.inner_text() and "Driver Not Loaded" in note.inner_text()
    assert dash.page.locator('[data-testid="gpu-panel"] canvas').count() == 0


def test_a_job_that_reported_no_sample_says_so(fake_plane: LocalPlane, open_dashboard: Callable[..., Dashboard]) -> None:
    # Given: a job whose trainer (the fake one) sent no system report
    job_id = _finished(fake_plane, fake_spec("no samples", max_steps=2, step_seconds=0.01))
    assert fake_plane.request("GET", f"/jobs/{job_id}/metrics/system").json()["attempts"] == []
    # Then its page says there is no sample yet, and nothing failed (close() finds no page error)
    dash = open_dashboard(fake_plane)
    dash.go(f"#/jobs/{job_id}")
    note = dash.page.locator('[data-testid="gpu-panel"] [data-gpu="none"]')
    note.wait_for()
    assert "No GPU sample yet" in note.inner_text()
