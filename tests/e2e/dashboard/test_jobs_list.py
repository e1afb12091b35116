"""Issue 14 section 3, the jobs screen: summary cards, the job list (columns, actions menu, search, filters in
the URL, paging, live refresh keeping scroll and selection), and a person's habits (keyboard, dark mode,
1280x800 and phone width, empty states)."""

from __future__ import annotations

import time
from collections.abc import Callable
from urllib.parse import parse_qs

import pytest

from tests.e2e.conftest import LocalPlane
from tests.e2e.dashboard.jobs import Api, cancel_all, fake_spec, submit
from tests.e2e.dashboard.support import PHONE, Dashboard, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def card(dash: Dashboard, key: str) -> int:
    return int(dash.page.locator(f'[data-card="{key}"] .card-value').inner_text())


def row_ids(dash: Dashboard) -> list[str]:
    """The listed job ids, read in one go (the rows are redrawn every few seconds)."""
    return list(dash.page.evaluate("[...document.querySelectorAll('tbody tr')].map(r => r.dataset.jobId)"))


def hash_query(dash: Dashboard) -> dict[str, list[str]]:
    fragment = dash.page.evaluate("location.hash")
    return parse_qs(fragment.split("?", 1)[1]) if "?" in fragment else {}


def test_summary_cards_match_the_api_and_update_live(fake_plane: LocalPlane, open_dashboard: Callable[..., Dashboard]) -> None:
    dash = open_dashboard(fake_plane)
    dash.page.wait_for_selector('[data-card="total"]')
    summary = fake_plane.request("GET", "/summary").json()
    for key in ("total", "running", "completed", "failed", "queued", "paused"):
        assert card(dash, key) == summary[key], key
    dash.shot("jobs-summary-cards")
    dash.page.evaluate("window.__noReload = true")
    job = submit(fake_plane, fake_spec("cards-live", max_steps=2))
    try:
        # Live: the total moves without a reload
        wait_for(lambda: card(dash, "total") == summary["total"] + 1, 15, "the total card to count the new job")
        assert dash.page.evaluate("window.__noReload") is True
        Api(fake_plane).wait_status(job["job_id"], "COMPLETED", timeout=60)
        wait_for(lambda: card(dash, "completed") >= summary["completed"] + 1, 15, "the completed card")
    finally:
        cancel_all(fake_plane, [job["job_id"]])


def test_job_list_columns_search_filters_in_the_url_paging_and_live_refresh(
    fake_plane: LocalPlane, open_dashboard: Callable[..., Dashboard]
) -> None:
    api = Api(fake_plane)
    # Given a running job (holding the plane's one slot), and two waiting behind it, in two experiments
    running = submit(
        fake_plane,
        fake_spec("list-runner", max_steps=3000, step_seconds=0.05),
        labels={"experiment": "exp-a", "team": "nlp"},
        scheduling_config={"priority": 8},
        output_config={"checkpoint": {"save_steps": 100_000}},  # stays TRAINING (no CHECKPOINTING blips)
    )
    api.wait_status(running["job_id"], "TRAINING", timeout=60)
    medium = submit(fake_plane, fake_spec("list-medium"), labels={"experiment": "exp-b"}, scheduling_config={"priority": 5})
    low = submit(fake_plane, fake_spec("list-low"), labels={"experiment": "exp-b"}, scheduling_config={"priority": 1, "queue": "batch"})
    high = submit(fake_plane, fake_spec("list-high"), labels={"experiment": "exp-a"}, scheduling_config={"priority": 9})
    ids = [running["job_id"], medium["job_id"], low["job_id"], high["job_id"]]
    try:
        dash = open_dashboard(fake_plane)
        dash.go("#/jobs?q=list-")
        row = dash.page.locator(f'tr[data-job-id="{running["job_id"]}"]')  # a locator: rows are redrawn live
        row.wait_for()
        wait_for(lambda: int(row.locator('[role="progressbar"]').get_attribute("aria-valuenow") or 0) > 0, 30, "progress to move")
        # Columns: name + type, colour-coded badge, priority band with number, experiment, progress %, created, actions
        assert "list-runner" in row.inner_text() and "SFT" in row.inner_text()
        badge = row.locator(".badge")
        assert badge.get_attribute("data-status") == "TRAINING" and "badge-run" in badge.get_attribute("class")
        assert row.locator(".label").inner_text() == "exp-a"
        assert "%" in row.locator(".progress-text").inner_text()
        created = row.locator("time")
        assert ("ago" in created.inner_text() or created.inner_text() == "just now") and "2026" in created.get_attribute("title")
        high_row = dash.page.locator(f'tr[data-job-id="{high["job_id"]}"]')
        assert high_row.locator(".prio").inner_text() == "High · 9"
        assert high_row.locator(".badge").get_attribute("data-status") in {"PENDING", "QUEUED"}
        assert "badge-wait" in high_row.locator(".badge").get_attribute("class")
        assert dash.page.locator(f'tr[data-job-id="{medium["job_id"]}"] .prio').inner_text() == "Medium · 5"
        assert dash.page.locator(f'tr[data-job-id="{low["job_id"]}"] .prio').inner_text() == "Low · 1"
        # The actions menu: the verbs this status allows, the others disabled with why
        row.locator(".menu-button").click()
        menu = dash.page.locator(".menu")
        assert menu.locator('[data-action="pause"]').is_enabled() and menu.locator('[data-action="cancel"]').is_enabled()
        assert menu.locator('[data-action="delete"]').is_disabled()
        assert "stop it first" in menu.locator('[data-action="delete"]').get_attribute("title")
        dash.shot("jobs-list-actions-menu")
        dash.page.keyboard.press("Escape")

        def visible_ids() -> set[str]:
            return set(row_ids(dash))

        # Filters, each written into the URL
        dash.page.select_option('select[name="status"]', "TRAINING")
        wait_for(lambda: visible_ids() == {running["job_id"]}, 10, "the status filter")
        assert hash_query(dash)["status"] == ["TRAINING"]
        dash.page.select_option('select[name="status"]', "")
        dash.page.select_option('select[name="band"]', "High")
        wait_for(lambda: visible_ids() == {running["job_id"], high["job_id"]}, 10, "the priority filter")
        assert hash_query(dash)["band"] == ["High"]
        dash.page.select_option('select[name="band"]', "")
        dash.page.fill('input[name="experiment"]', "exp-b")
        wait_for(lambda: visible_ids() == {medium["job_id"], low["job_id"]}, 10, "the experiment filter")
        dash.page.fill('input[name="queue"]', "batch")
        wait_for(lambda: visible_ids() == {low["job_id"]}, 10, "the queue filter")
        dash.page.fill('input[name="experiment"]', "")
        dash.page.fill('input[name="queue"]', "")
        dash.page.fill('input[name="label"]', "team=nlp")
        wait_for(lambda: visible_ids() == {running["job_id"]}, 10, "the label filter")
        dash.page.fill('input[name="label"]', "")
        dash.page.fill('input[name="q"]', "list-me")
        wait_for(lambda: visible_ids() == {medium["job_id"]}, 10, "the search")
        assert hash_query(dash)["q"] == ["list-me"]
        # A link reproduces the view
        link = dash.page.url.replace("q=list-me", "q=list-&experiment=exp-b")
        other = open_dashboard(fake_plane)
        other.page.goto(link)
        other.page.wait_for_selector(f'tr[data-job-id="{medium["job_id"]}"]')
        assert set(row_ids(other)) == {medium["job_id"], low["job_id"]}
        assert other.page.input_value('input[name="experiment"]') == "exp-b"
        # Paging, one job a page
        dash.go("#/jobs?q=list-&size=1")
        dash.page.wait_for_selector("tbody tr")
        seen = row_ids(dash)
        for _ in range(3):
            dash.page.click('[data-testid="next-page"]')
            (shown,) = wait_for(lambda: (ids := row_ids(dash)) and ids[0] not in seen and ids, 10, "the next page")
            seen.append(shown)
        assert set(seen) == set(ids) and dash.page.locator('[data-testid="next-page"]').is_disabled()
        dash.page.click('[data-testid="prev-page"]')
        wait_for(lambda: row_ids(dash) == [seen[2]], 10, "the previous page")
        # The priority filter is the API's (priority_min/max), so it pages like the others: one High job a page
        dash.go("#/jobs?q=list-&band=High&size=1")
        dash.page.wait_for_selector("tbody tr")
        first_high = row_ids(dash)
        dash.page.click('[data-testid="next-page"]')
        wait_for(lambda: (shown := row_ids(dash)) and shown != first_high, 10, "the next High page")
        assert set(first_high + row_ids(dash)) == {running["job_id"], high["job_id"]}
        wait_for(lambda: dash.page.locator('[data-testid="next-page"]').is_disabled(), 10, "the last High page")

        # Live refresh keeps the selection, the focused row and the scroll position
        small = open_dashboard(fake_plane, viewport={"width": 1280, "height": 300})
        small.go("#/jobs?q=list-")
        small.page.wait_for_selector(f'tr[data-job-id="{low["job_id"]}"]')
        small.page.locator(f'tr[data-job-id="{medium["job_id"]}"]').click()
        small.page.locator(f'tr[data-job-id="{medium["job_id"]}"]').focus()
        small.page.evaluate("window.scrollTo(0, 200)")
        scroll = small.page.evaluate("window.scrollY")
        assert scroll > 0
        before = small.page.locator(f'tr[data-job-id="{running["job_id"]}"] [role="progressbar"]').get_attribute("aria-valuenow")
        wait_for(
            lambda: (
                small.page.locator(f'tr[data-job-id="{running["job_id"]}"] [role="progressbar"]').get_attribute("aria-valuenow") != before
            ),
            20,
            "a live refresh to move the progress bar",
        )
        assert small.page.locator("tr.selected").get_attribute("data-job-id") == medium["job_id"]
        assert small.page.evaluate("document.activeElement.dataset.jobId") == medium["job_id"]
        assert small.page.evaluate("window.scrollY") == scroll
        assert hash_query(small)["selected"] == [medium["job_id"]]
    finally:
        cancel_all(fake_plane, ids)


def test_keyboard_dark_mode_phone_width_and_empty_states(fake_plane: LocalPlane, open_dashboard: Callable[..., Dashboard]) -> None:
    a = submit(fake_plane, fake_spec("keys-one", max_steps=2))
    b = submit(fake_plane, fake_spec("keys-two", max_steps=2))
    try:
        dash = open_dashboard(fake_plane)
        dash.go("#/jobs?q=keys-")
        dash.page.wait_for_selector(f'tr[data-job-id="{b["job_id"]}"]')
        # "/" focuses the search; arrows move the selection; Enter opens; "g j" goes back to the list
        dash.page.locator("body").press("/")
        assert dash.page.evaluate("document.activeElement.name") == "q"
        dash.page.keyboard.press("Escape")
        dash.page.evaluate("document.activeElement.blur()")
        dash.page.keyboard.press("ArrowDown")
        first = dash.page.evaluate("document.activeElement.dataset.jobId")
        dash.page.keyboard.press("ArrowDown")
        second = dash.page.evaluate("document.activeElement.dataset.jobId")
        assert {first, second} == {a["job_id"], b["job_id"]}
        dash.page.keyboard.press("ArrowUp")
        assert dash.page.evaluate("document.activeElement.dataset.jobId") == first
        dash.page.keyboard.press("Enter")
        dash.page.wait_for_selector("#h-overview")
        assert first in dash.page.url
        dash.page.keyboard.press("g")
        dash.page.keyboard.press("j")
        dash.page.wait_for_selector('[data-card="total"]')
        # The row's actions menu opens from the keyboard and its items take the arrow keys
        dash.page.locator(f'tr[data-job-id="{a["job_id"]}"] .menu-button').focus()
        dash.page.keyboard.press("Enter")
        assert dash.page.evaluate("document.activeElement.getAttribute('role')") == "menuitem"
        dash.page.keyboard.press("Escape")
        assert dash.page.locator(".menu").count() == 0
        # Dark mode: toggled with "t", kept across reloads, really dark
        dash.page.keyboard.press("t")
        assert dash.page.evaluate("document.documentElement.dataset.theme") == "dark"
        dash.page.reload()
        dash.page.wait_for_selector(f'tr[data-job-id="{a["job_id"]}"]')
        assert dash.page.evaluate("document.documentElement.dataset.theme") == "dark"
        assert dash.page.evaluate("getComputedStyle(document.body).backgroundColor") == "rgb(13, 17, 23)"
        dash.shot("jobs-dark-1280x800")
        # Empty state that says what to do
        dash.page.fill('input[name="q"]', "no-such-job-anywhere")
        dash.page.wait_for_selector("text=No job matches these filters.")
        assert dash.page.locator(".empty button", has_text="Clear filters").is_visible()
        dash.shot("jobs-empty-filtered")
        # Phone width: nothing wider than the screen, on the list and on a job
        phone = open_dashboard(fake_plane, viewport=PHONE)
        phone.go("#/jobs?q=keys-")
        phone.page.wait_for_selector(f'tr[data-job-id="{a["job_id"]}"]')
        assert phone.page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
        phone.shot("jobs-phone")
        phone.go(f"#/jobs/{a['job_id']}")
        phone.page.wait_for_selector("#h-overview")
        assert phone.page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
        phone.shot("job-details-phone")
        # 1280x800: the list's columns fit without a horizontal scrollbar
        dash.page.fill('input[name="q"]', "keys-")
        dash.page.wait_for_selector(f'tr[data-job-id="{a["job_id"]}"]')
        assert dash.page.evaluate("document.querySelector('.table-wrap').scrollWidth <= document.querySelector('.table-wrap').clientWidth")
        time.sleep(0.1)
    finally:
        cancel_all(fake_plane, [a["job_id"], b["job_id"]])
