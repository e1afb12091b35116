"""The API fuzzing's own setup, checked without a plane: the fuzzer is over the whole document, the answers
are checked against it, and the legitimate refusals (tests/e2e/fuzz_refusals.py) are narrow. The fuzzing
itself is tests/e2e/test_fuzz_api.py.
"""

from __future__ import annotations

import json

import pytest
from schemathesis.core.result import Ok

from tests.e2e.fuzz_refusals import LEGITIMATE_REFUSALS
from tests.e2e.fuzz_setup import EXCLUDED_CHECKS, OPENAPI, schema

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.fuzz]


def test_the_fuzzer_covers_every_operation_of_the_document() -> None:
    """The fuzzing (test_fuzz_api.py) is over the whole document: no operation left out by a filter or lost by the loader."""
    document = json.loads(OPENAPI.read_text(encoding="utf-8"))
    loaded = list(schema.get_all_operations())
    assert all(isinstance(op, Ok) for op in loaded), [op for op in loaded if not isinstance(op, Ok)]  # none the loader refused
    operations = {op.ok().label for op in loaded if isinstance(op, Ok)}
    declared = {f"{method.upper()} {path}" for path, item in document["paths"].items() for method in item}
    assert operations == declared and len(declared) >= 20


def test_response_conformance_is_checked() -> None:
    """Issue 21: the answers are checked against the document (a CUSTOM job's `max_steps: ""` once broke them)."""
    from schemathesis.specs.openapi.checks import response_schema_conformance, status_code_conformance

    assert not {response_schema_conformance, status_code_conformance} & set(EXCLUDED_CHECKS)


def test_legitimate_refusals_are_narrow() -> None:
    """A refusal rule explains only what it names: a 422 for an unknown field or a bad type is never legitimate."""
    unknown = {"field": "training_config.hyperparameters", "message": "unknown field (not part of the schema)", "type": "extra_forbidden"}
    assert not any(r.explains("POST /jobs", 422, unknown) for r in LEGITIMATE_REFUSALS)
    assert not any(r.explains("POST /jobs", 400, None) for r in LEGITIMATE_REFUSALS)
    assert not any(r.explains("GET /summary", 404, None) for r in LEGITIMATE_REFUSALS)
    assert any(r.explains("GET /jobs/{job_id}", 404, None) for r in LEGITIMATE_REFUSALS)
