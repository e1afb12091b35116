"""Issue 27.2, 27.4, 27.5 in the browser on `trainplane up` (the fake trainer): comparing runs picked in the
list, a team's quota page and a waiting job's reason (in the list and on the job page), webhooks with their
deliveries and the redeliver button, and the log view that hides the machine lines behind a toggle."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.e2e.conftest import LocalPlane
from tests.e2e.dashboard.jobs import Api, cancel_all, fake_spec, submit
from tests.e2e.dashboard.support import Dashboard, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_runs_ticked_in_the_list_are_compared_curves_config_diff_metrics_and_cost(
    fake_plane: LocalPlane, open_dashboard: Callable[..., Dashboard]
) -> None:
    # Given: three finished runs that differ in max_steps and learning rate only
    api = Api(fake_plane)
    ids = [submit(fake_plane, fake_spec(f"compare-{n}", max_steps=n, step_seconds=0.01, learning_rate=lr))["job_id"]
           for n, lr in ((4, "0.001"), (6, "0.002"), (8, "0.002"))]  # fmt: skip
    for job_id in ids:
        assert api.wait_status(job_id, "COMPLETED", "FAILED", "CANCELLED")["status"] == "COMPLETED"
    dash = open_dashboard(fake_plane)
    page = dash.page

    # When: they are ticked in the list and compared
    dash.go("#/jobs?q=compare-")
    for job_id in ids:
        page.check(f'tr[data-job-id="{job_id}"] input[name="compare"]')
    assert page.inner_text('[data-testid="compare"]') == "Compare (3)"
    page.click('[data-testid="compare"]')
    page.wait_for_selector('[data-testid="compare-chart"][data-runs="3"] canvas')

    # Then: the curves are overlaid (every point of each run), the config diff lists only what differs
    total = sum(len(fake_plane.request("GET", f"/jobs/{j}/metrics").json()["points"]) for j in ids)
    assert page.get_attribute('[data-testid="compare-chart"]', "data-points") == str(total) and total >= 4 + 6 + 8
    diff = {row.get_attribute("data-key") for row in page.locator('table[aria-label="Config differences"] tbody tr').all()}
    assert "training_config.hyperparameters.max_steps" in diff and "training_config.hyperparameters.learning_rate" in diff
    assert "training_config.training_type" not in diff and "data_config.sources" not in diff
    # Final metrics and cost side by side, one column per run
    final = page.locator('table[aria-label="Final metrics and cost"]')
    steps = final.locator('tr[data-row="Steps"] td').all_inner_texts()
    assert steps == ["4 of 4", "6 of 6", "8 of 8"]
    assert final.locator('tr[data-row="Estimated cost"] td').count() == 3
    assert all(text.startswith("$") for text in final.locator('tr[data-row="Estimated cost"] td').all_inner_texts())
    dash.shot("compare-by-step")
    # Aligned by tokens instead: the chart is drawn again, its axis says how the tokens are counted
    page.select_option('select[name="align"]', "tokens")
    page.wait_for_selector('[data-testid="compare-chart"] .u-label:has-text("tokens")')
    assert "by=tokens" in page.url
    dash.shot("compare-by-tokens")


def test_the_log_view_hides_machine_lines_behind_a_toggle(fake_plane: LocalPlane, open_dashboard: Callable[..., Dashboard]) -> None:
    api = Api(fake_plane)
    job_id = submit(fake_plane, fake_spec("readable logs", max_steps=3, step_seconds=0.01))["job_id"]
    assert api.wait_status(job_id, "COMPLETED", "FAILED", "CANCELLED")["status"] == "COMPLETED"
    dash = open_dashboard(fake_plane)
    dash.go(f"#/jobs/{job_id}")
    logs = dash.page.locator('[data-testid="logs"]')
    wait_for(lambda: "fake trainer: job" in logs.inner_text(), 30, "the job's own lines")
    # By default: what the trainer and the code printed for people, no report line
    assert "TRAINPLANE_EVENT" not in logs.inner_text() and int(logs.get_attribute("data-hidden") or 0) > 0
    # The toggle shows the machine lines too
    dash.page.check('input[name="machine_lines"]')
    assert "TRAINPLANE_EVENT" in logs.inner_text() and logs.get_attribute("data-hidden") == "0"
    dash.shot("logs-machine-lines")


def test_the_create_form_offers_every_optimizer_the_api_accepts(fake_plane: LocalPlane, open_dashboard: Callable[..., Dashboard]) -> None:
    from schemas.hyperparameters import OPTIMIZER_SPELLINGS

    dash = open_dashboard(fake_plane)
    dash.go("#/create")
    offered = dash.page.locator('select[name="optimizer"] option').evaluate_all("os => os.map(o => o.value)")
    assert sorted(offered) == sorted(OPTIMIZER_SPELLINGS)


@pytest.fixture
def research_team(fake_plane: LocalPlane) -> Iterator[str]:
    """Alice in team `research` (as the admin defines it): one CPU, one running job per member."""
    spec = {
        "members": {"arns": [fake_plane.principal("alice")["arn"]], "cognito_groups": ["ml-research"]},
        "quotas": {"cpu": {"nominal": 1}},
        "member_caps": {"max_running_jobs": 1},
    }
    reply = fake_plane.request("PUT", "/teams/research", json=spec, principal="admin")
    assert reply.status_code in (200, 201), reply.text
    yield "research"
    fake_plane.request("DELETE", "/teams/research", principal="admin")


def test_a_teams_page_shows_its_quota_and_why_its_job_waits(
    fake_plane: LocalPlane, research_team: str, open_dashboard: Callable[..., Dashboard]
) -> None:
    # Given: alice's long job runs; her second waits (her team lets each member run one at a time)
    api = Api(fake_plane)
    running = submit(fake_plane, fake_spec("team runner", max_steps=2000, step_seconds=0.05))["job_id"]
    waiting = submit(fake_plane, fake_spec("team waiter", max_steps=2, step_seconds=0.01))["job_id"]
    try:
        api.wait_status(running, "TRAINING")
        reason = wait_for(lambda: api.job(waiting).get("wait_reason"), 30, "the waiting job's reason")
        dash = open_dashboard(fake_plane, principal="admin")

        # Then: the team's page: its quota per GPU type (in use / nominal / borrowed / lent / queued demand), fair share
        dash.go(f"#/teams/{research_team}")
        view = fake_plane.request("GET", f"/teams/{research_team}", principal="admin").json()
        row = dash.page.locator('tr[data-gpu-type="cpu"]')
        row.wait_for()
        cpu = next(t for t in view["types"] if t["gpu_type"] == "cpu")
        for col in ("nominal", "in_use", "borrowed", "lent", "queued"):
            assert row.locator(f'td[data-col="{col}"]').inner_text() == str(cpu[col]), col
        assert cpu["nominal"] == 1 and cpu["in_use"] >= 1
        assert dash.page.locator('[data-testid="fair-share"]').inner_text() != "—"
        # Its members as the admin sees them: ARNs, then Cognito groups
        assert dash.page.locator('[data-testid="members"]').inner_text() == f"{fake_plane.principal('alice')['arn']}, group:ml-research"
        dash.shot("team-page")
        dash.go("#/teams")
        dash.page.locator(f'tr[data-team="{research_team}"]').wait_for()

        # And: the team's page lists the job with why it waits, read from the list route
        dash.go(f"#/teams/{research_team}")
        team_badge = dash.page.locator(f'li[data-job-id="{waiting}"] [data-wait-reason]')
        team_badge.wait_for()
        assert team_badge.get_attribute("data-wait-reason") == reason

        # And: alice sees why her job waits, in the list and on its page; the list asked GET /jobs only, no job by itself
        mine = open_dashboard(fake_plane)
        asked: list[str] = []
        mine.page.on("request", lambda r: asked.append(urlsplit(r.url).path))
        mine.go("#/jobs?q=team+waiter")
        badge = mine.page.locator(f'tr[data-job-id="{waiting}"] [data-wait-reason]')
        badge.wait_for()
        assert badge.get_attribute("data-wait-reason") == reason
        assert "position " in (badge.get_attribute("title") or "") and "estimated wait" in (badge.get_attribute("title") or "")
        # (the old page asked GET /jobs/{id} for each queued row before it drew the badges)
        assert any(path.endswith("/jobs") for path in asked) and not [p for p in asked if "/jobs/" in p], asked
        mine.go(f"#/jobs/{waiting}")
        mine.page.locator(f'#main [data-wait-reason="{reason}"]').wait_for()
        mine.shot("job-waits")
    finally:
        cancel_all(fake_plane, [running, waiting])


class _Receiver(BaseHTTPRequestHandler):
    received: list[str] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        _Receiver.received.append(self.path)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: Any) -> None:
        pass


def test_webhooks_show_their_deliveries_and_redeliver_one(fake_plane: LocalPlane, open_dashboard: Callable[..., Dashboard]) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        # Given: alice's webhook for her job's events, and a job that runs to completion
        url = f"http://127.0.0.1:{server.server_address[1]}/hook"
        hook = fake_plane.request("POST", "/webhooks", json={"url": url, "event_types": ["job.*"], "labels": {"hooked": "dash"}})
        assert hook.status_code == 201, hook.text
        webhook_id = hook.json()["webhook_id"]
        spec = fake_spec("hooked job", max_steps=2, step_seconds=0.01)
        spec["labels"] = {"hooked": "dash"}
        job_id = submit(fake_plane, spec)["job_id"]
        assert Api(fake_plane).wait_status(job_id, "COMPLETED", "FAILED", "CANCELLED")["status"] == "COMPLETED"

        def deliveries() -> list[dict[str, Any]]:
            return list(fake_plane.request("GET", f"/webhooks/{webhook_id}/deliveries").json()["deliveries"])

        before = wait_for(lambda: [d for d in deliveries() if d["outcome"] == "delivered"] or None, 60, "a delivery")

        # When: the webhook's deliveries are opened on its page
        dash = open_dashboard(fake_plane)
        dash.go("#/webhooks")
        hook_el = dash.page.locator(f'details[data-webhook-id="{webhook_id}"]')
        hook_el.locator("summary").click()
        first = hook_el.locator("tbody tr").first
        first.wait_for()
        assert hook_el.locator("tbody tr").count() == len(deliveries())
        assert first.get_attribute("data-outcome") in {"delivered", "retrying", "failed"}
        event_id = before[0]["event_id"]
        dash.shot("webhook-deliveries")

        # Then: Redeliver sends that event again (a new attempt recorded)
        count = sum(1 for d in deliveries() if d["event_id"] == event_id)
        hook_el.locator(f'tr[data-event-id="{event_id}"] button[data-action="redeliver"]').first.click()
        wait_for(lambda: sum(1 for d in deliveries() if d["event_id"] == event_id) > count, 60, "the redelivery's attempt")
    finally:
        server.shutdown()
        with contextlib.suppress(Exception):
            fake_plane.request("DELETE", f"/webhooks/{webhook_id}")
