"""The dashboard's knowledge of the API is the API's: its status sets, training types and the job fields it
reads are checked against schemas/openapi.json (and the status sets the control plane acts on), so an enum
or a field that changes on the server side fails here instead of drifting in the browser."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from schemas import status

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "dashboard" / "src"
OPENAPI = json.loads((REPO / "schemas" / "openapi.json").read_text())["components"]["schemas"]


def _ts_strings(name: str) -> list[str]:
    """The string literals of `export const NAME = [...]` or `new Set([...])` in dashboard/src/format.ts."""
    text = (SOURCE / "format.ts").read_text()
    match = re.search(rf"export const {name}\b[^=]*=\s*(?:new Set\()?\[(?P<body>[^\]]*)\]", text)
    assert match is not None, f"dashboard/src/format.ts has no `export const {name}` list"
    return re.findall(r'"([^"]+)"', match.group("body"))


def test_the_dashboards_statuses_are_the_apis_in_its_order() -> None:
    # Given the API's JobStatus enum / Then the dashboard lists every status, no other, in the same order
    assert _ts_strings("STATUSES") == OPENAPI["JobStatus"]["enum"]


@pytest.mark.parametrize(
    ("name", "server_side"), [("TERMINAL", status.TERMINAL), ("RUNNING", status.RUNNING), ("EDITABLE", status.EDITABLE)]
)
def test_the_dashboards_status_sets_are_the_control_planes(name: str, server_side: frozenset[status.JobStatus]) -> None:
    # Given a status set the dashboard decides with (which buttons, which badges) / Then it is the service's own
    dashboard = _ts_strings(name)
    assert set(dashboard) <= set(OPENAPI["JobStatus"]["enum"])
    assert set(dashboard) == {s.value for s in server_side}


def test_the_dashboards_training_types_are_the_apis() -> None:
    assert _ts_strings("TRAINING_TYPES") == OPENAPI["TrainingType"]["enum"]


def test_every_job_field_the_dashboard_reads_is_in_the_api() -> None:
    # Given every `job.<field>` / `j.<field>` the dashboard's code reads
    read: set[str] = set()
    for path in [*SOURCE.glob("*.ts"), *SOURCE.glob("views/*.ts")]:
        read |= set(re.findall(r"\b(?:job|j)\.([a-z_]+)\b", path.read_text()))
    # Then each is a property of the API's Job (a renamed or removed field fails here)
    assert read, "no job field found: the pattern no longer matches the dashboard's code"
    assert read <= set(OPENAPI["Job"]["properties"]), sorted(read - set(OPENAPI["Job"]["properties"]))
