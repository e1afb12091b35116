"""Issue 14 section 3, Create job: Kaisar's form sections and the whole-request editor; a real tiny trainer
job created in the form runs to COMPLETED with its loss curve drawn; the server's 422s at their fields."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from tests.e2e.conftest import REPO_ROOT, LocalPlane
from tests.e2e.dashboard.jobs import Api
from tests.e2e.dashboard.support import Dashboard

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TINY_DATA = str(REPO_ROOT / "examples" / "data" / "tiny-qa.jsonl")


def test_a_job_created_in_the_form_completes_with_its_loss_curve_drawn(
    local_plane: LocalPlane, open_dashboard: Callable[..., Dashboard]
) -> None:
    dash = open_dashboard(local_plane)
    dash.go("#/create")
    page = dash.page
    page.wait_for_selector("form.create")
    # Basic
    page.fill('input[name="name"]', "form-made tiny lora")
    page.fill('textarea[name="description"]', "created in the dashboard's form")
    page.select_option('select[name="training_type"]', "LORA")
    page.select_option('select[name="priority_band"]', "High")
    assert page.input_value('input[name="priority"]') == "8"
    page.fill('input[name="experiment"]', "dashboard-e2e")
    # Configuration: only what the trainer accepts
    # Every optimizer the API accepts (test_compare_teams_webhooks checks the list against the API's)
    assert {"adamw", "adam", "sgd"} <= set(page.locator('select[name="optimizer"] option').all_inner_texts())
    page.select_option('select[name="optimizer"]', "adam")
    page.fill('input[name="max_steps"]', "12")
    page.fill('input[name="batch_size"]', "8")
    page.fill('input[name="learning_rate"]', "0.003")
    # Model & data, Resources
    page.fill('input[name="data_path"]', TINY_DATA)
    page.fill('input[name="cpu_cores"]', "1")
    page.fill('input[name="memory_gb"]', "2")
    page.fill('input[name="gpu_count"]', "0")
    dash.shot("create-form")
    # The editor shows the whole request the form builds
    page.click("text=JSON (whole request)")
    request = json.loads(page.input_value("textarea.editor"))
    assert set(request) >= {"training_config", "data_config", "resource_config", "output_config", "scheduling_config"}
    assert request["resource_config"] == {"gpu_count": 0, "cpu_cores": 1, "ram_min_mb": 2048}
    dash.shot("create-json-editor")
    page.click('button[role="tab"]:has-text("Form")')
    page.click('button[type="submit"]:has-text("Create job")')
    page.wait_for_selector("#h-overview")
    job_id = page.url.split("#/jobs/")[1]
    job = Api(local_plane).job(job_id)
    assert job["name"] == "form-made tiny lora" and job["labels"] == {"experiment": "dashboard-e2e"}
    assert job["scheduling_config"]["priority"] == 8 and job["training_config"]["training_type"] == "LORA"
    hp = job["training_config"]["hyperparameters"]
    assert hp["max_steps"] == "12" and hp["learning_rate"] == "0.003" and hp["optimizer"] == "adam"
    assert job["data_config"]["batch_size"] == 8
    # It trains for real and the page follows it to COMPLETED without a reload
    page.evaluate("window.__noReload = true")
    page.wait_for_selector('h1 .badge[data-status="COMPLETED"]', timeout=300_000)
    assert page.evaluate("window.__noReload") is True
    chart = page.wait_for_selector('[data-testid="loss-chart"] canvas', timeout=15_000)
    assert chart.bounding_box()["width"] > 200
    points = int(page.get_attribute('[data-testid="loss-chart"]', "data-points") or 0)
    metrics = local_plane.request("GET", f"/jobs/{job_id}/metrics").json()["points"]
    assert points == len([p for p in metrics if p.get("loss") is not None or p.get("eval_loss") is not None]) >= 10
    # Something is drawn: the canvas is not blank
    drawn = page.evaluate(
        """() => { const c = document.querySelector('[data-testid="loss-chart"] canvas');
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++; return n; }"""
    )
    assert drawn > 500
    assert page.locator(".progress-text").first.inner_text() == "100%"
    dash.shot("job-details-completed-with-loss-curve")


def test_the_servers_422_is_shown_at_the_field_it_names(fake_plane: LocalPlane, open_dashboard: Callable[..., Dashboard]) -> None:
    dash = open_dashboard(fake_plane)
    dash.go("#/create")
    page = dash.page
    page.wait_for_selector("form.create")
    page.fill('input[name="name"]', "will-be-refused")
    page.fill('input[name="data_path"]', TINY_DATA)
    page.fill('input[name="cpu_cores"]', "0")
    before = fake_plane.request("GET", "/jobs", params={"name": "will-be-refused"}).json()["jobs"]
    page.click('button[type="submit"]:has-text("Create job")')
    error = page.wait_for_selector('.field-error[data-error-for="resource_config.cpu_cores"]')
    assert "greater than or equal to 1" in error.inner_text()
    # Right under the CPU cores input, which is marked invalid and focused
    assert page.evaluate("document.activeElement.name") == "cpu_cores"
    assert page.get_attribute('input[name="cpu_cores"]', "aria-invalid") == "true"
    assert page.evaluate(
        "document.querySelector('.field-error').previousElementSibling.contains(document.querySelector('input[name=cpu_cores]'))"
    )
    dash.shot("create-422-at-field")
    # Nothing was created; fixing the field clears it and the job is created
    assert fake_plane.request("GET", "/jobs", params={"name": "will-be-refused"}).json()["jobs"] == before
    # In the JSON editor: the error names a field the form does not show, and is listed above the buttons
    page.click("text=JSON (whole request)")
    request = json.loads(page.input_value("textarea.editor"))
    request["resource_config"]["cpu_cores"] = 1
    request["data_config"]["batch_size"] = 0
    page.fill("textarea.editor", json.dumps(request))
    page.click('button[type="submit"]:has-text("Create job")')
    listed = page.wait_for_selector(".form-errors .error")
    assert "data_config.batch_size" in listed.inner_text()
    page.fill("textarea.editor", "{ not json")
    page.click('button[type="submit"]:has-text("Create job")')
    page.wait_for_selector(".form-errors:has-text('does not parse')")
    assert fake_plane.request("GET", "/jobs", params={"name": "will-be-refused"}).json()["jobs"] == before
    # Both fields fixed, the same request is created: the page moves to the new job, which has the fixed values
    request["data_config"]["batch_size"] = 2
    page.fill("textarea.editor", json.dumps(request))
    page.click('button[type="submit"]:has-text("Create job")')
    page.wait_for_selector("#h-overview")
    job_id = page.url.split("#/jobs/")[1]
    created = fake_plane.request("GET", "/jobs", params={"name": "will-be-refused"}).json()["jobs"]
    assert [j["job_id"] for j in created if j not in before] == [job_id]
    job = Api(fake_plane).job(job_id)
    assert job["resource_config"]["cpu_cores"] == 1 and job["data_config"]["batch_size"] == 2
