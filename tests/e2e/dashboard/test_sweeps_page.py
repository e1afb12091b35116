"""Issue 27.1, sweeps in the browser on `trainplane up` with real trials (the real trainer running the
CUSTOM script examples/sweeps/quadratic.py, whose `score` is a known function of x and y): "Sweep from this
job" with the parameter form and the OME config's JSON editor, the sweep's page (trials table with the best
highlighted, optimization history, parallel coordinates, intermediate values), the list, and pause /
resume / cancel."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.e2e.conftest import LocalPlane
from tests.e2e.dashboard.jobs import submit
from tests.e2e.dashboard.support import Dashboard, wait_for
from tests.e2e.test_sweeps_e2e import _template, _xy

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _sweep(plane: LocalPlane, sweep_id: str) -> dict[str, Any]:
    reply = plane.request("GET", f"/sweeps/{sweep_id}")
    assert reply.status_code == 200, reply.text
    return dict(reply.json())


def _confirm(dash: Dashboard, action: str) -> None:
    dash.page.click(f'button[data-action="{action}"]')
    dash.page.fill('#dialog input[name="reason"]', f"dashboard e2e: {action}")
    dash.page.click("#dialog button[type=submit]")
    dash.page.wait_for_selector("#dialog", state="hidden")


def test_a_sweep_made_from_a_job_runs_and_its_page_shows_trials_best_and_charts(
    local_plane: LocalPlane, open_dashboard: Callable[..., Dashboard]
) -> None:
    # Given: a job of the quadratic script, the sweep's template
    job = submit(local_plane, _template(steps=3, step_seconds=0.05))
    dash = open_dashboard(local_plane)
    page = dash.page

    # When: "Sweep from this job", a parameter added in the form, then the OME config edited as JSON
    dash.go(f"#/jobs/{job['job_id']}")
    page.click('[data-testid="sweep-from-job"]')
    page.wait_for_selector("form.create")
    page.fill('input[name="name"]', "dashboard quadratic")
    page.select_option('select[name="method"]', "grid")
    page.fill('input[name="metric"]', "score")
    page.select_option('select[name="goal"]', "maximize")
    page.fill('input[name="max_trials"]', "4")
    page.click("text=Add parameter")
    rows = page.locator(".param-row")
    rows.nth(1).locator('input[name="param_name"]').fill("warmup_steps")
    rows.nth(1).locator('select[name="param_type"]').select_option("int")
    rows.nth(1).locator('input[name="param_values"]').fill("0, 2")
    page.click('button[role="tab"]:has-text("JSON")')
    built = json.loads(page.input_value("textarea.editor"))
    assert built["method"] == "grid" and built["maxTrials"] == 4 and built["metric"] == {"name": "score", "goal": "maximize"}
    assert built["parameters"]["warmup_steps"] == {"type": "int", "values": [0, 2]}
    assert built["parameters"]["learning_rate"]["scale"] == "log"  # the form's starting row, kept
    grid = _xy(x={"type": "double", "values": [0.0, 0.3]}, y={"type": "double", "values": [0.2, 0.7]})
    page.fill("textarea.editor", json.dumps({**built, "parameters": grid, "seed": 3}))
    dash.shot("sweep-create-json")
    page.click('button[type="submit"]:has-text("Create sweep")')
    page.wait_for_selector("#h-trials")
    sweep_id = page.url.split("#/sweeps/")[1]

    # Then: the sweep runs its four trials from the job's template, and the page follows it to COMPLETED
    page.wait_for_selector('h1 .badge[data-status="COMPLETED"]', timeout=300_000)
    sweep = _sweep(local_plane, sweep_id)
    assert sweep["status"] == "COMPLETED" and sweep["job_template"]["training_config"]["framework"]["type"] == "CUSTOM"
    best = sweep["best_trial"]
    assert best["params"] == {"x": 0.3, "y": 0.7}
    # The trials table: one row per trial, its params, value and job link; the best highlighted
    page.wait_for_selector('table.trials[data-rows="4"]')
    assert page.locator("table.trials tbody tr").count() == 4
    best_row = page.locator("table.trials tr.best")
    assert best_row.count() == 1 and best_row.get_attribute("data-trial") == str(best["number"])
    assert float(best_row.locator('[data-testid="trial-value"]').inner_text()) == pytest.approx(best["value"], rel=1e-3)
    assert best_row.locator(f'a[href="#/jobs/{best["job_id"]}"]').count() == 1
    # The charts: each finished trial in the history and the parallel coordinates; their per-step values
    assert page.get_attribute('[data-testid="history-chart"]', "data-points") == "4"
    assert page.get_attribute('[data-testid="parallel-chart"]', "data-lines") == "4"
    with_steps = sum(1 for t in sweep["trials"] if t["intermediate_values"])
    assert with_steps == 4 and page.get_attribute('[data-testid="intermediate-chart"]', "data-lines") == "4"
    for chart in ("history-chart", "parallel-chart", "intermediate-chart"):
        assert page.locator(f'[data-testid="{chart}"] canvas').count() == 1
    dash.shot("sweep-page")

    # And: the list shows it with method, trials done and the best value
    dash.go("#/sweeps")
    row = page.locator(f'tr[data-sweep-id="{sweep_id}"]')
    row.wait_for()
    assert row.locator('[data-testid="trials-done"]').inner_text() == "4 / 4"
    assert float(row.locator('[data-testid="best-value"]').inner_text()) == pytest.approx(best["value"], rel=1e-3)
    assert "grid" in row.inner_text()
    dash.shot("sweeps-list")


def test_pause_resume_and_cancel_from_the_sweep_page(local_plane: LocalPlane, open_dashboard: Callable[..., Dashboard]) -> None:
    # Given: a long random sweep (slow trials, one at a time)
    space = _xy(x={"type": "double", "min": 0.0, "max": 1.0}, y={"type": "double", "min": 0.0, "max": 1.0})
    body = {
        "name": "dashboard verbs",
        "job_template": _template(steps=200, step_seconds=0.2),
        "hyperParameterTuningConfig": {
            "method": "random",
            "maxTrials": 20,
            "maxParallelTrials": 1,
            "metric": {"name": "score", "goal": "maximize"},
            "parameters": space,
        },
    }
    reply = local_plane.request("POST", "/sweeps", json=body)
    assert reply.status_code == 201, reply.text
    sweep_id = reply.json()["sweep_id"]
    dash = open_dashboard(local_plane)
    page = dash.page
    dash.go(f"#/sweeps/{sweep_id}")
    page.wait_for_selector('h1 .badge[data-status="RUNNING"]')

    # When/Then: Pause -> PAUSED (the page and the API), Resume -> RUNNING, Cancel -> CANCELLED
    _confirm(dash, "pause")
    page.wait_for_selector('h1 .badge[data-status="PAUSED"]')
    assert _sweep(local_plane, sweep_id)["status"] == "PAUSED"
    assert page.locator('button[data-action="pause"]').count() == 0
    _confirm(dash, "resume")
    page.wait_for_selector('h1 .badge[data-status="RUNNING"]')
    assert _sweep(local_plane, sweep_id)["status"] == "RUNNING"
    _confirm(dash, "cancel")
    page.wait_for_selector('h1 .badge[data-status="CANCELLED"]')
    assert _sweep(local_plane, sweep_id)["status"] == "CANCELLED"
    assert page.locator("button[data-action]").count() == 0  # an ended sweep offers no verb
    dash.shot("sweep-cancelled")
    # The trials' jobs stop with it: the plane's slot is free for the next test
    wait_for(
        lambda: all(
            j["status"] in {"COMPLETED", "FAILED", "CANCELLED"}
            for j in local_plane.request("GET", "/jobs", params={"labels.sweep_id": sweep_id}).json()["jobs"]
        ),
        120,
        "the cancelled sweep's trials to end",
    )
