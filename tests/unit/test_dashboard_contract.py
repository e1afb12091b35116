"""The dashboard's knowledge of the API is the API's: its status sets, training types and the job fields it
reads are checked against schemas/openapi.json (and the status sets the control plane acts on), so an enum
or a field that changes on the server side fails here instead of drifting in the browser."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from schemas import status
from schemas.hyperparameters import OPTIMIZER_SPELLINGS
from schemas.sweeps import SWEEP_TERMINAL
from schemas.trainer import EVENT_PREFIX, METRIC_LINE_PREFIX

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


def _api_optimizers() -> list[str]:
    """The optimizer names openapi.json's hyperparameter pattern accepts (`^(adam|...)$`, any case)."""
    pattern = OPENAPI["TrainingConfig"]["properties"]["hyperparameters"]["properties"]["optimizer"]["pattern"]
    body = re.fullmatch(r"\^\((?P<words>.*)\)\$", pattern)
    assert body is not None, pattern
    return [re.sub(r"\[(.)(.)\]", lambda m: m.group(2), word) for word in body.group("words").split("|")]


def test_the_committed_build_offers_every_optimizer_the_api_accepts() -> None:
    # Given the names the API accepts (the same set the server reads, schemas/hyperparameters.py)
    accepted = _api_optimizers()
    assert sorted(accepted) == sorted(OPTIMIZER_SPELLINGS)
    # Then the built page's create form lists exactly those (read from openapi.json at build time)
    bundle = "".join(p.read_text() for p in (REPO / "dashboard_assets" / "static" / "assets").glob("*.js"))
    listed = re.search(r"\[(\"adafactor\"[^\]]*)\]", bundle)
    assert listed is not None, "the build holds no optimizer list"
    assert re.findall(r'"([^"]+)"', listed.group(1)) == accepted


def test_the_machine_lines_the_log_view_hides_are_the_trainers() -> None:
    assert _ts_strings("MACHINE_LINE_PREFIXES") == [EVENT_PREFIX, METRIC_LINE_PREFIX + " "]


@pytest.mark.parametrize(("name", "enum"), [("TRIAL_STATES", "TrialState"), ("WAIT_REASONS", "WaitReason")])
def test_the_dashboards_sweep_and_wait_enums_are_the_apis(name: str, enum: str) -> None:
    assert _ts_strings(name) == OPENAPI[enum]["enum"]


def test_the_dashboards_ended_sweeps_are_the_services() -> None:
    assert set(_ts_strings("SWEEP_TERMINAL")) == {s.value for s in SWEEP_TERMINAL}
