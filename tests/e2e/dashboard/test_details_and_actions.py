"""Issue 14 section 3: job details (configs, timeline, progress/ETA, checkpoints, cost, parent and child
jobs, queue position), logs (level filter, follow, download), the verbs with their confirmations (stop,
pause, resume from a chosen checkpoint, retry with new resources, edit or why not, delete listing what it
removes), the queue view and the retraining policies."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.conftest import LocalPlane
from tests.e2e.dashboard.jobs import TERMINAL, Api, cancel_all, fake_spec, real_spec, submit
from tests.e2e.dashboard.support import Dashboard, wait_for
from tests.helpers.retraining import policy_body
from trainplane import Client

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def confirm(dash: Dashboard, button: str) -> None:
    dash.page.click(f'dialog[open] button[type="submit"]:has-text("{button}")')
    dash.page.wait_for_selector("dialog[open]", state="detached")


def test_details_show_configs_timeline_checkpoints_cost_and_a_retry_with_new_resources(
    fake_plane: LocalPlane, open_dashboard: Callable[..., Dashboard]
) -> None:
    api = Api(fake_plane)
    job = submit(fake_plane, fake_spec("details-job", max_steps=6, step_seconds=0.05), description="for the details screen")
    job_id = job["job_id"]
    api.wait_status(job_id, "COMPLETED", timeout=90)
    dash = open_dashboard(fake_plane)
    dash.go(f"#/jobs/{job_id}")
    page = dash.page
    page.wait_for_selector("#h-overview")
    # The curve is what /metrics has (the fake trainer reports progress, not metrics: then it says so)
    if fake_plane.request("GET", f"/jobs/{job_id}/metrics").json()["points"]:
        page.wait_for_selector('[data-testid="loss-chart"] canvas')
    else:
        page.wait_for_selector('[data-testid="loss-chart"]:has-text("No metrics yet")')
    # Every config
    for name in ("training_config", "data_config", "resource_config", "output_config", "scheduling_config"):
        assert page.locator("details summary", has_text=name).count() == 1
    assert '"fake_step_seconds": "0.05"' in page.locator("details", has_text="training_config").inner_text()
    # The status timeline from /events, with reasons and actors
    events = fake_plane.request("GET", f"/jobs/{job_id}/events").json()["events"]
    items = page.locator(".timeline li")
    assert items.count() == len(events)
    assert "COMPLETED" in items.last.inner_text() and f"by {events[-1]['actor']}" in items.last.inner_text()
    # Checkpoints: step, metrics, best/latest marker
    detail = api.job(job_id)
    rows = page.locator("tr[data-checkpoint-id]")
    assert rows.count() == len(detail["checkpoints"]) >= 2
    latest = page.locator(f'tr[data-checkpoint-id="{detail["latest_checkpoint_id"]}"]')
    assert "latest" in latest.inner_text() or "best" in latest.inner_text()
    assert "loss" in latest.inner_text()
    # Size: the bytes of the checkpoint's files, as its manifest lists them
    latest_ref = next(c for c in detail["checkpoints"] if c["checkpoint_id"] == detail["latest_checkpoint_id"])
    assert latest_ref["size_bytes"] > 0 and latest.locator("td[data-size]").get_attribute("data-size") == str(latest_ref["size_bytes"])
    # Progress and cost
    assert page.locator("#h-progress + .progress .progress-text").inner_text() == "100%"
    assert "$" in page.locator("section", has=page.locator("#h-cost")).inner_text()
    assert page.locator("section", has=page.locator("#h-cost")).locator("tbody tr").count() == len(detail["cost"]["attempts"]) >= 1
    dash.shot("job-details")
    # Retry with new resources, from a chosen checkpoint: a child job, linked both ways
    page.click('button[data-action="retry"]')
    page.select_option('dialog[open] select[name="checkpoint_id"]', detail["checkpoints"][0]["checkpoint_id"])
    page.check('dialog[open] input[name="modify_resources"]')
    page.fill('dialog[open] input[name="cpu_cores"]', "2")
    dash.shot("retry-dialog")
    confirm(dash, "Retry")
    page.wait_for_url(lambda url: "#/jobs/" in url and job_id not in url)
    child_id = page.url.split("#/jobs/")[1]
    child = api.job(child_id)
    assert child["parent_job_id"] == job_id and child["resource_config"]["cpu_cores"] == 2
    related = page.wait_for_selector(f'section:has(#h-related) a[href="#/jobs/{job_id}"]')
    assert related
    api.wait_status(child_id, *TERMINAL, timeout=90)
    dash.go(f"#/jobs/{job_id}")
    page.wait_for_selector(f'section:has(#h-related) a[href="#/jobs/{child_id}"]')


def test_logs_filter_by_level_follow_and_download(fake_plane: LocalPlane, open_dashboard: Callable[..., Dashboard]) -> None:
    api = Api(fake_plane)
    job = submit(fake_plane, fake_spec("logs-job", max_steps=400, step_seconds=0.05))
    job_id = job["job_id"]
    try:
        api.wait(job_id, lambda j: j["status"] == "TRAINING" and j["progress"]["step"] >= 2, 60, "a few steps")
        dash = open_dashboard(fake_plane)
        dash.go(f"#/jobs/{job_id}")
        page = dash.page
        logs = page.wait_for_selector('[data-testid="logs"]')
        wait_for(lambda: "starting at step 0" in logs.inner_text(), 15, "the trainer's first lines")
        # Every line, the machine lines too (hidden by default: test_compare_teams_webhooks), as the download has
        page.check('input[name="machine_lines"]')
        # Follow: new lines arrive by themselves
        count = int(logs.get_attribute("data-lines") or 0)
        wait_for(lambda: int(logs.get_attribute("data-lines") or 0) > count, 20, "followed lines")
        # Cancel it: the launcher's ERROR-free lines vs a level filter
        api.verb(job_id, "cancel", expect=200)
        api.wait_status(job_id, *TERMINAL, timeout=60)
        page.select_option('select[name="level"]', "ERROR")
        filtered = int(logs.get_attribute("data-lines") or 0)
        page.select_option('select[name="level"]', "ALL")
        everything = int(logs.get_attribute("data-lines") or 0)
        assert filtered < everything
        all_lines = api.logs(job_id).splitlines()
        expected_errors = [line for line in all_lines if any(w in line for w in ("ERROR", "CRITICAL", "FATAL", "Traceback"))]
        assert filtered == len(expected_errors)
        # Streams: the trainer's stderr lines are marked, and a stream filter shows them alone
        stderr_lines = [line["message"] for line in api.log_lines(job_id) if line["stream"] == "stderr"]
        assert "fake trainer: attempt 1 says hello on stderr" in stderr_lines
        marked = page.locator('[data-testid="logs"] .log-stderr[data-stream="stderr"]')
        assert "says hello on stderr" in marked.first.inner_text() and marked.count() == len(stderr_lines)
        page.select_option('select[name="stream"]', "stderr")
        assert int(logs.get_attribute("data-lines") or 0) == len(stderr_lines)
        page.select_option('select[name="stream"]', "ALL")
        # Download: the whole log as a file
        with page.expect_download() as info:
            page.click('button:has-text("Download")')
        path = Path(info.value.path())
        text = path.read_text()
        assert info.value.suggested_filename == f"{job_id}.log" and "starting at step 0" in text
        assert "[attempt 1 stderr] fake trainer: attempt 1 says hello on stderr" in text
        assert len(text.splitlines()) == everything
        dash.shot("job-logs")
    finally:
        cancel_all(fake_plane, [job_id])


def test_queue_view_and_queue_position_on_the_details(fake_plane: LocalPlane, open_dashboard: Callable[..., Dashboard]) -> None:
    api = Api(fake_plane)
    blocker = submit(fake_plane, fake_spec("q-blocker", max_steps=100_000, step_seconds=0.05))
    ids = [blocker["job_id"]]
    try:
        api.wait_status(blocker["job_id"], "TRAINING", timeout=60)
        first = submit(fake_plane, fake_spec("q-first"), scheduling_config={"priority": 3})
        second = submit(fake_plane, fake_spec("q-second"), scheduling_config={"priority": 3})
        ids += [first["job_id"], second["job_id"]]
        api.wait(second["job_id"], lambda j: j["status"] == "QUEUED" and j.get("queue_position") is not None, 30, "a queue position")
        dash = open_dashboard(fake_plane)
        dash.go("#/queues")
        queue = dash.page.locator('section[data-queue="default"]')  # locators: the view is redrawn live
        row = queue.locator(f'tr[data-job-id="{second["job_id"]}"]')
        row.wait_for()
        position = api.job(second["job_id"])["queue_position"]
        assert row.locator("td").first.inner_text() == str(position + 1)  # people count from 1
        assert "Low · 3" in row.inner_text()
        assert "Estimated wait" in queue.inner_text()
        dash.shot("queues")
        # The job's details say where it waits
        dash.go(f"#/jobs/{second['job_id']}")
        overview = dash.page.wait_for_selector("section:has(#h-overview)")
        assert (
            f"Queue position\t{position + 1} (1 = next)" in overview.inner_text() or f"{position + 1} (1 = next)" in overview.inner_text()
        )
        assert "Estimated wait" in overview.inner_text()
        # Edit is allowed while QUEUED: the dialog PATCHes the job
        dash.page.click('button[data-action="edit"]')
        dash.page.fill('dialog[open] input[name="name"]', "q-second-renamed")
        dash.page.fill('dialog[open] input[name="priority"]', "11")
        dash.page.click('dialog[open] button[type="submit"]')
        assert (
            "less than or equal to 10" in dash.page.wait_for_selector('dialog[open] .field-error[data-error-for="priority"]').inner_text()
        )
        dash.page.fill('dialog[open] input[name="priority"]', "6")
        confirm(dash, "Save")
        wait_for(lambda: api.job(second["job_id"])["name"] == "q-second-renamed", 10, "the edit")
        assert api.job(second["job_id"])["scheduling_config"]["priority"] == 6
    finally:
        cancel_all(fake_plane, ids)


def test_stop_with_confirmation_edit_disabled_while_training_and_delete_of_a_finished_job(
    fake_plane: LocalPlane, open_dashboard: Callable[..., Dashboard]
) -> None:
    api = Api(fake_plane)
    spec = fake_spec("verbs-job", max_steps=100_000, step_seconds=0.05)
    # No checkpoint every 2 steps: the status would flip TRAINING <-> CHECKPOINTING, and the page's 3 s
    # refresh could sample CHECKPOINTING each time on a loaded machine (this test is about the verbs).
    spec["output_config"]["checkpoint"]["save_steps"] = 100_000
    job = submit(fake_plane, spec)
    job_id = job["job_id"]
    try:
        api.wait_status(job_id, "TRAINING", timeout=60)
        dash = open_dashboard(fake_plane)
        dash.go(f"#/jobs/{job_id}")
        page = dash.page
        page.wait_for_selector('h1 .badge[data-status="TRAINING"]')
        # Edit is disabled for a training job, with the reason shown
        edit = page.locator('button[data-action="edit"]')
        assert edit.is_disabled()
        reason = page.locator('[data-reason-for="edit"]').inner_text()
        assert "Only PENDING, QUEUED or FAILED jobs can be edited" in reason and "TRAINING" in reason
        assert page.locator('button[data-action="delete"]').is_disabled()
        dash.shot("edit-disabled-while-training")
        # Stop asks first; Cancel in the dialog changes nothing
        page.click('button[data-action="cancel"]')
        assert "CANCELLED" in page.locator("dialog[open]").inner_text()
        page.click('dialog[open] button:has-text("Cancel")')
        assert api.job(job_id)["status"] in {"TRAINING", "CHECKPOINTING"}
        page.click('button[data-action="cancel"]')
        page.fill('dialog[open] input[name="reason"]', "stopped in the e2e test")
        confirm(dash, "Stop job")
        page.wait_for_selector('h1 .badge[data-status="CANCELLED"]', timeout=60_000)
        assert "stopped in the e2e test" in page.locator(".timeline").inner_text()
        # Delete lists what it removes, then removes it
        detail = api.job(job_id)
        page.click('button[data-action="delete"]')
        dialog = page.locator("dialog[open]")
        text = dialog.inner_text()
        assert f"jobs/{job_id}/" in text and f"{len(detail['checkpoints'])} checkpoint" in text and "history" in text
        dash.shot("delete-confirmation")
        confirm(dash, "Delete job")
        page.wait_for_url(lambda url: url.endswith("#/jobs") or "#/jobs?" in url)
        assert fake_plane.request("GET", f"/jobs/{job_id}").status_code == 404
        s3 = fake_plane.client("s3")
        assert s3.list_objects_v2(Bucket=fake_plane.bucket, Prefix=f"jobs/{job_id}/").get("KeyCount", 0) == 0
    finally:
        cancel_all(fake_plane, [job_id])


def test_pause_then_resume_from_a_chosen_checkpoint(local_plane: LocalPlane, open_dashboard: Callable[..., Dashboard]) -> None:
    api = Api(local_plane)
    # A real tiny trainer job checkpointing every 2 steps
    job_id = api.submit(real_spec("dashboard-pause-resume", max_steps=400, save_steps=2))
    try:
        api.wait(job_id, lambda j: j["status"] in {"TRAINING", "CHECKPOINTING"} and len(j["checkpoints"]) >= 2, 240, "two checkpoints")
        dash = open_dashboard(local_plane)
        dash.go(f"#/jobs/{job_id}")
        page = dash.page
        page.wait_for_selector('button[data-action="pause"]:not([disabled])')
        page.click('button[data-action="pause"]')
        confirm(dash, "Pause")
        page.wait_for_selector('h1 .badge[data-status="PAUSED"]', timeout=120_000)
        paused = api.job(job_id)
        earliest = min(paused["checkpoints"], key=lambda c: c["step"])
        assert earliest["checkpoint_id"] != paused["latest_checkpoint_id"]
        # Resume, choosing the earliest checkpoint rather than the latest
        page.click('button[data-action="resume"]')
        options = page.locator('dialog[open] select[name="checkpoint_id"] option').all_inner_texts()
        assert options[0] == "Latest checkpoint" and len(options) == len(paused["checkpoints"]) + 1
        page.select_option('dialog[open] select[name="checkpoint_id"]', earliest["checkpoint_id"])
        dash.shot("resume-choose-checkpoint")
        confirm(dash, "Resume")
        resumed = api.wait(
            job_id, lambda j: j["attempt"] > paused["attempt"] and j["status"] in {"TRAINING", "CHECKPOINTING"}, 240, "the resumed run"
        )
        assert resumed["resume_checkpoint_id"] == earliest["checkpoint_id"]
        wait_for(
            lambda: "resumed from" in api.logs(job_id) and f"step {earliest['step']}" in api.logs(job_id), 120, "the trainer's resume line"
        )
        page.wait_for_selector('h1 .badge[data-status="TRAINING"], h1 .badge[data-status="CHECKPOINTING"]', timeout=30_000)
    finally:
        cancel_all(local_plane, [job_id])
        Api(local_plane).wait_status(job_id, *TERMINAL, timeout=120)


def test_retraining_policies_list_enable_disable_and_recent_fires(fake_plane: LocalPlane, open_dashboard: Callable[..., Dashboard]) -> None:
    pattern = {"source": ["trainplane.retraining"], "detail-type": ["Dashboard drift"]}
    template = fake_spec("policy-fired", max_steps=2)
    body = policy_body(name="dashboard-drift", trigger={"type": "event", "pattern": pattern}, input_mapping=[], job_template=template)
    reply = fake_plane.request("POST", "/retraining-policies", json=body)
    assert reply.status_code == 201, reply.text
    policy_id = reply.json()["policy_id"]
    try:
        with Client(state_dir=fake_plane.state_dir, principal="alice") as client:
            client.put_event("Dashboard drift", {"model": "m"})
        wait_for(lambda: fake_plane.request("GET", f"/retraining-policies/{policy_id}").json().get("last_job_id"), 30, "the policy to fire")
        dash = open_dashboard(fake_plane)
        dash.go("#/policies")
        row = dash.page.wait_for_selector(f'tr[data-policy-id="{policy_id}"]')
        fired = fake_plane.request("GET", f"/retraining-policies/{policy_id}").json()
        assert "Dashboard drift" in row.inner_text() and fired["last_job_id"] in row.inner_text() and "never" not in row.inner_text()
        dash.shot("retraining-policies")
        toggle = dash.page.locator(f'input[data-policy-id="{policy_id}"]')
        assert toggle.is_checked()
        toggle.uncheck()
        wait_for(lambda: fake_plane.request("GET", f"/retraining-policies/{policy_id}").json()["enabled"] is False, 10, "disabled")
        dash.page.wait_for_selector(f'input[data-policy-id="{policy_id}"]:not([disabled])')
        dash.page.locator(f'input[data-policy-id="{policy_id}"]').check()
        wait_for(lambda: fake_plane.request("GET", f"/retraining-policies/{policy_id}").json()["enabled"] is True, 10, "enabled again")
    finally:
        fake_plane.request("DELETE", f"/retraining-policies/{policy_id}")
