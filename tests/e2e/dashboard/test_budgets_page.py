"""Issue 27.4's budgets screen (#/budgets) on `trainplane up --gpus H100=2` against issue 25's real GET /budgets:
a budget an admin creates through the API, metered by the plane's own tick while a 1 x H100 job (the fake
trainer) runs, so its spent and reserved figures are the meter's, not a test's."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.e2e.conftest import LocalPlane
from tests.e2e.dashboard.conftest import FAKE_TRAINER_ENV
from tests.e2e.dashboard.jobs import Api, cancel_all, fake_spec, submit
from tests.e2e.dashboard.support import Dashboard, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

MONEY = ("amount", "spent", "reserved", "left")


@pytest.fixture(scope="module")
def gpu_plane(module_plane_factory: Callable[..., LocalPlane]) -> LocalPlane:
    """Emulated H100s priced by the price table, the budget meter ticking every 2 s (FAKE_TRAINER_ENV)."""
    return module_plane_factory(env=FAKE_TRAINER_ENV, args=["--gpus", "H100=2"])


@pytest.fixture
def running_under_budget(gpu_plane: LocalPlane) -> Iterator[tuple[str, str]]:
    # A deployment budget of 1 USD (1% notifies: crossed after a few seconds of one H100), then a job whose
    # forecast (its 300 s cap x the H100 rate, well under 1 USD) admission reserves against it.
    spec = {
        "name": "dash-e2e", "scope": {"kind": "deployment"}, "period": "lifetime", "amount_usd": 1,
        "thresholds": [{"percent": 1, "action": "notify"}, {"percent": 100, "action": "pause_running"}],
    }  # fmt: skip
    reply = gpu_plane.request("POST", "/budgets", json=spec, principal="admin")
    assert reply.status_code == 201, reply.text
    budget_id = reply.json()["budget_id"]
    job = fake_spec("on the budget", max_steps=5000, step_seconds=0.05)
    job["resource_config"] = {"gpu_count": 1, "gpu_type": "H100"}
    job_id = submit(gpu_plane, job, scheduling_config={"max_runtime_seconds": 300})["job_id"]
    try:
        yield budget_id, job_id
    finally:
        cancel_all(gpu_plane, [job_id])
        gpu_plane.request("DELETE", f"/budgets/{budget_id}", principal="admin")


def _usd(text: str) -> float:
    assert re.fullmatch(r"\$\d+\.\d{2,4}", text), text
    return float(text[1:])


def test_the_budgets_page_shows_a_running_jobs_spent_reserved_left_and_crossed_thresholds(
    gpu_plane: LocalPlane, running_under_budget: tuple[str, str], open_dashboard: Callable[..., Dashboard]
) -> None:
    budget_id, job_id = running_under_budget
    # Given: the job trains and the meter has charged it, with the rest of its forecast still reserved
    Api(gpu_plane).wait_status(job_id, "TRAINING")

    def metered() -> dict[str, Any] | None:
        budget = gpu_plane.request("GET", f"/budgets/{budget_id}", principal="admin").json()
        return budget if budget["spent_usd"] > 0 and budget["reserved_usd"] > 0 and 1 in budget["crossed"] else None

    wait_for(metered, 120, "the meter to charge the running job past 1%")
    # When: the admin opens the budgets page (every answer of GET /budgets the page gets is kept)
    dash = open_dashboard(gpu_plane, principal="admin")
    answers: list[Any] = []  # Playwright responses, read after the page drew (not inside its event handler)
    dash.page.on("response", lambda r: answers.append(r) if r.url.split("?")[0].endswith("/budgets") and r.ok else None)
    dash.go("#/budgets")
    row = dash.page.locator(f'tr[data-budget-id="{budget_id}"]')
    row.wait_for()
    # Then: the row shows one of the route's answers: amount, spent, reserved and left (read at once: the page refreshes)
    shown: dict[str, str] = row.evaluate(
        "(tr) => Object.fromEntries([...tr.querySelectorAll('td[data-col]')].map((td) => [td.dataset.col, td.innerText]))"
    )
    served = [next(b for b in a.json()["budgets"] if b["budget_id"] == budget_id) for a in answers]
    assert served, "the page asked GET /budgets"

    def same(budget: dict[str, Any]) -> bool:  # money() shows 4 decimals under $1, else 2
        return all(abs(_usd(shown[col]) - budget[f"{col}_usd"]) <= (0.00005 if budget[f"{col}_usd"] < 1 else 0.005) for col in MONEY)

    match = next((b for b in served if same(b)), None)
    assert match is not None, (shown, served)
    assert match["spent_usd"] > 0 and match["reserved_usd"] > 0 and _usd(shown["amount"]) == 1.0
    assert "the whole deployment" in row.inner_text() and "lifetime" in row.inner_text()
    # And: the 1% threshold is marked crossed, the 100% pause not
    assert row.locator('[data-threshold="1"]').get_attribute("data-crossed") == "true"
    assert row.locator('[data-threshold="100"]').get_attribute("data-crossed") == "false"
    dash.shot("budgets")
