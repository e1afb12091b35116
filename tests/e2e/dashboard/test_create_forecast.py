"""Issue 27.6 (second half): the create form's "Forecast" shows issue 25's dry run (POST /jobs?dry_run=true)
before submit: the server's 422s exactly where a submit shows them, then the forecast (resources, price,
duration and total with their ranges, basis, queue position and wait, each covering budget); nothing is
created until "Create job"."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.e2e.conftest import LocalPlane
from tests.e2e.dashboard.jobs import Api, cancel_all
from tests.e2e.dashboard.support import Dashboard
from tests.e2e.dashboard.test_create import TINY_DATA

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

LABEL = "forecast-e2e"


def job_ids(plane: LocalPlane) -> list[str]:
    reply = plane.request("GET", "/jobs", params={"labels.experiment": LABEL})
    assert reply.status_code == 200, reply.text
    return [j["job_id"] for j in reply.json()["jobs"]]


def money(usd: float) -> str:  # dashboard/src/format.ts money()
    return f"${usd:.4f}" if usd < 1 else f"${usd:.2f}"


def test_the_forecast_shows_before_submit_and_creates_nothing(fake_plane: LocalPlane, open_dashboard: Callable[..., Dashboard]) -> None:
    # Given: a budget of the deployment, which alice may see (the forecast lists what it would leave); large
    # enough to hold no other test's job while it exists
    spec = {"name": "forecast-e2e budget", "scope": {"kind": "deployment"}, "amount_usd": 10000}
    made = fake_plane.request("POST", "/budgets", json=spec, principal="admin")
    assert made.status_code == 201, made.text
    budget_id = made.json()["budget_id"]
    try:
        dash = open_dashboard(fake_plane)
        dash.go("#/create")
        page = dash.page
        page.wait_for_selector("form.create")
        page.fill('input[name="name"]', "forecast first")
        page.fill('input[name="experiment"]', LABEL)
        page.fill('input[name="max_steps"]', "5")
        page.fill('input[name="data_path"]', TINY_DATA)
        page.fill('input[name="memory_gb"]', "2")
        page.fill('input[name="cpu_cores"]', "0")
        before = job_ids(fake_plane)

        # The dry run refuses what a submit refuses, shown the same way: under the field, marked and focused
        page.click('button[name="forecast"]')
        error = page.wait_for_selector('.field-error[data-error-for="resource_config.cpu_cores"]')
        assert "greater than or equal to 1" in error.inner_text()
        assert page.evaluate("document.activeElement.name") == "cpu_cores"
        assert page.get_attribute('input[name="cpu_cores"]', "aria-invalid") == "true"
        assert page.locator('[data-testid="forecast"]').count() == 0
        dash.shot("create-forecast-422")

        # Fixed: the forecast shows, and the 422's note is gone
        page.fill('input[name="cpu_cores"]', "1")
        page.click('button[name="forecast"]')
        panel = page.wait_for_selector('[data-testid="forecast"]')
        assert page.locator(".field-error").count() == 0
        assert page.get_attribute('input[name="cpu_cores"]', "aria-invalid") is None
        # What it shows is the API's own dry run of the request the form built
        page.click("text=JSON (whole request)")
        request = json.loads(page.input_value("textarea.editor"))
        page.click('button[role="tab"]:has-text("Form")')
        reply = fake_plane.request("POST", "/jobs", params={"dry_run": "true"}, json=request)
        assert reply.status_code == 200, reply.text
        forecast: dict[str, Any] = reply.json()

        def shown(key: str) -> str:
            return page.inner_text(f'[data-testid="forecast"] dd[data-key="{key}"]')

        assert shown("resources") == f"{forecast['units']} x {forecast['gpu_type']}"
        assert shown("hourly") == f"{money(forecast['hourly_usd'])} / hour"
        assert shown("total").startswith(money(forecast["total_usd"]))
        assert f"{money(forecast['total_low_usd'])} \u2013 {money(forecast['total_high_usd'])}" in shown("total")
        assert shown("queue_position") == str(forecast["queue_position"])
        assert ("prior" in shown("basis")) == (forecast["basis"] == "prior")
        [budget] = [b for b in forecast["budgets"] if b["budget_id"] == budget_id]
        row = page.locator(f'[data-testid="forecast-budgets"] tr[data-budget="{budget_id}"]')
        assert money(budget["left_after_usd"]) in row.inner_text()
        assert ("would hold" in row.inner_text()) == budget["would_hold"]
        assert "nothing was created" in panel.inner_text()
        dash.shot("create-forecast")

        # Nothing was created by either dry run
        assert job_ids(fake_plane) == before
        # An edit marks the forecast out of date
        page.fill('input[name="max_steps"]', "6")
        page.wait_for_selector('[data-testid="forecast"].stale')

        # Then "Create job" creates it, once
        page.click('button[type="submit"]:has-text("Create job")')
        page.wait_for_selector("#h-overview")
        job_id = page.url.split("#/jobs/")[1]
        assert [j for j in job_ids(fake_plane) if j not in before] == [job_id]
        job = Api(fake_plane).job(job_id)
        assert job["name"] == "forecast first" and job["training_config"]["hyperparameters"]["max_steps"] == "6"
    finally:
        cancel_all(fake_plane, job_ids(fake_plane))
        fake_plane.request("DELETE", f"/budgets/{budget_id}", principal="admin")


def test_the_forecast_says_which_budget_would_hold_the_job_and_lists_the_json_editors_422(
    fake_plane: LocalPlane, open_dashboard: Callable[..., Dashboard]
) -> None:
    # Given: a deployment budget of one cent, less than any CPU job's forecast (nothing is submitted meanwhile)
    spec = {"name": "one cent", "scope": {"kind": "deployment"}, "amount_usd": 0.01}
    made = fake_plane.request("POST", "/budgets", json=spec, principal="admin")
    assert made.status_code == 201, made.text
    budget_id = made.json()["budget_id"]
    try:
        dash = open_dashboard(fake_plane)
        dash.go("#/create")
        page = dash.page
        page.wait_for_selector("form.create")
        page.fill('input[name="name"]', "would be held")
        page.fill('input[name="experiment"]', LABEL)
        page.fill('input[name="data_path"]', TINY_DATA)
        page.fill('input[name="cpu_cores"]', "1")
        page.fill('input[name="memory_gb"]', "2")
        before = job_ids(fake_plane)
        # A 422 on a field the form does not show (JSON editor): listed above the buttons, no forecast drawn
        page.click("text=JSON (whole request)")
        request = json.loads(page.input_value("textarea.editor"))
        request["data_config"]["batch_size"] = 0
        page.fill("textarea.editor", json.dumps(request))
        page.click('button[name="forecast"]')
        assert "data_config.batch_size" in page.wait_for_selector(".form-errors .error").inner_text()
        assert page.locator('[data-testid="forecast"]').count() == 0
        # Fixed: the forecast says the budget would hold it
        request["data_config"]["batch_size"] = 2
        page.fill("textarea.editor", json.dumps(request))
        page.click('button[name="forecast"]')
        page.wait_for_selector('[data-testid="forecast"]')
        assert page.locator(".form-errors .error").count() == 0
        row = page.locator(f'[data-testid="forecast-budgets"] tr[data-budget="{budget_id}"]')
        assert "would hold: BUDGET" in row.inner_text()
        assert "one cent would not cover it" in page.inner_text('[data-testid="forecast"] [role="alert"]')
        dash.shot("create-forecast-would-hold")
        assert job_ids(fake_plane) == before
    finally:
        fake_plane.request("DELETE", f"/budgets/{budget_id}", principal="admin")
