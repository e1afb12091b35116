"""The event contract (docs/EVENTS.md): committed schemas follow the models, names have one home."""

from __future__ import annotations

import json

import pytest

from functions.catalog import own_events as et
from schemas import events
from schemas.events import MODELS, SCHEMAS_DIR, JobStateChange, event_id
from scripts.gen_event_schemas import expected


def test_the_committed_schemas_and_docs_are_what_the_models_generate() -> None:
    # Given the files scripts/gen_event_schemas.py would write now
    # Then each committed file is exactly that (regenerate and commit after changing a model)
    stale = [str(path) for path, content in expected().items() if not path.exists() or path.read_text(encoding="utf-8") != content]
    assert stale == [], f"run `python scripts/gen_event_schemas.py` and commit: {stale}"


def test_a_model_changed_without_regenerating_fails_the_check(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a model that gained a field, its committed schema untouched
    changed = type("JobStateChange", (JobStateChange,), {"__annotations__": {"extra_field": int}, "extra_field": 0})
    monkeypatch.setitem(events.MODELS, "JobStateChange", changed)
    # Then the check names its schema (and the docs that embed it) as stale
    stale = {path.name for path, content in expected().items() if path.read_text(encoding="utf-8") != content}
    assert stale == {"JobStateChange.json", "EVENTS.md"}


def test_every_event_type_has_a_model_and_a_committed_schema_and_names_are_unique() -> None:
    assert {t.model for t in et.ALL} == set(MODELS) == {p.stem for p in SCHEMAS_DIR.glob("*.json")}
    assert len({t.detail_type for t in et.ALL}) == len({t.type for t in et.ALL}) == len(et.ALL)
    assert all(t.detail_type.startswith("Trainplane ") for t in et.ALL)
    for name in MODELS:
        schema = json.loads((SCHEMAS_DIR / f"{name}.json").read_text())
        assert schema["$schema"] == "http://json-schema.org/draft-04/schema#"
        assert {"event_id", "sequence", "schema_version", "owner", "labels"} <= set(schema["properties"])
        assert "$defs" not in json.dumps(schema)  # draft 4 knows only "definitions"


def test_event_ids_are_stable_and_distinct_per_subject_and_sequence() -> None:
    assert event_id("job", "j1", 1) == event_id("job", "j1", 1)
    assert len({event_id("job", "j1", 1), event_id("job", "j1", 2), event_id("job", "j2", 1), event_id("sweep", "j1", 1)}) == 4
