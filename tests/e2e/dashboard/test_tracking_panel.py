"""The job detail's "Experiment tracking" panel (docs/TRACKING.md): the MLflow run the trainer reported, as a
link to the tracking server, and where the TensorBoard event files are (the fake trainer makes the report)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.e2e.conftest import LocalPlane
from tests.e2e.dashboard.jobs import Api, fake_spec, submit
from tests.e2e.dashboard.support import Dashboard

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_the_detail_shows_the_tracker_run_as_a_link(fake_plane: LocalPlane, open_dashboard: Callable[..., Dashboard]) -> None:
    # Given a job tracked on an MLflow server and TensorBoard, whose trainer reported its run
    spec = fake_spec("tracked-job", max_steps=3)
    spec["output_config"]["tracking"] = {"mlflow": {"tracking_uri": "http://127.0.0.1:5000", "experiment_name": "ui"}, "tensorboard": {}}
    spec["output_config"]["tracking"]["wandb"] = {"project": "ui", "mode": "offline"}
    job_id = submit(fake_plane, spec)["job_id"]
    done = Api(fake_plane).wait_status(job_id, "COMPLETED", timeout=90)
    record = done["tracking"]
    # When its detail is opened
    dash = open_dashboard(fake_plane)
    dash.go(f"#/jobs/{job_id}")
    page = dash.page
    page.wait_for_selector('[data-testid="tracking"]')
    # Then the panel links the run on the tracking server, and names the event files' place
    link = page.locator('[data-testid="mlflow-run-link"]')
    assert link.inner_text() == record["mlflow_run_id"]
    assert link.get_attribute("href") == record["mlflow_run_url"] and link.get_attribute("rel") == "noopener noreferrer"
    panel = page.locator('[data-testid="tracking"]').inner_text()
    assert record["tensorboard_uri"] in panel
    # and the offline W&B run by its id (no link: there is no server), with where its files are for `wandb sync`
    assert page.locator('[data-testid="wandb-run"]').inner_text() == job_id and record["wandb_offline_uri"] in panel
    # and an untracked job has no such panel
    plain = submit(fake_plane, fake_spec("untracked-job", max_steps=2))["job_id"]
    Api(fake_plane).wait_status(plain, "COMPLETED", timeout=90)
    dash.go(f"#/jobs/{plain}")
    page.wait_for_selector("#h-overview")
    assert page.locator('section[aria-labelledby="h-tracking"]').is_hidden()
