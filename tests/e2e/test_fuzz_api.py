"""Schemathesis over every operation of schemas/openapi.json against a real `trainplane up`, signed with SigV4.

What it proves (docs/TESTING.md, "Fuzzing the API"): for generated requests, valid (positive) and invalid
(negative: schemathesis' coverage phase and negative generation), the plane
- never answers 5xx (`not_a_server_error`);
- answers only the codes, content types, headers and bodies its OpenAPI document declares
  (`status_code_conformance`, `content_type_conformance`, `response_headers_conformance`,
  `response_schema_conformance`);
- refuses what the document says is invalid (`negative_data_rejection`, `missing_required_header`,
  `unsupported_method`: 405 with `Allow`);
- accepts what the document says is valid (`accepted_when_valid` below, instead of schemathesis'
  `positive_data_acceptance`, whose default list tolerates 401/403/5xx): a schema-valid request may be
  refused only for the reasons in LEGITIMATE_REFUSALS, each one a fact about the plane's state or its
  deployment, or a rule across fields, that no JSON Schema states (the id names no job of the caller's,
  the job's status does not allow the verb, ...);
- keeps principals apart: an id of admin's job or policy, sent by alice, is never a success nor a 409
  (which would tell her it exists) (`others_objects_are_not_found`).

Path ids are real part of the time: `use_real_ids` swaps a generated (valid) job_id / policy_id for one of
alice's seeded or fuzz-created objects, or one of admin's, so GET/PATCH/DELETE/cancel/... reach existing
objects in every status the run produces, not only 404s. The plane runs tests/fuzz_trainer.py: jobs the
fuzzer submits finish in two quick steps whatever their hyperparameters say.

Nothing is set aside: every failure fails the test. docs/TESTING.md has the whole story.

Where: the run's budget (TRAINPLANE_FUZZ_EXAMPLES, TRAINPLANE_FUZZ_SEED, TRAINPLANE_FUZZ_REQUEST_TIMEOUT),
the loaded document and the seeded objects are tests/e2e/fuzz_setup.py, the legitimate refusals
tests/e2e/fuzz_refusals.py; the checks of the fuzzer's own setup (no plane needed) tests/e2e/test_fuzz_rules.py.
`make fuzz` runs it long with a random seed.
"""

from __future__ import annotations

import json
import re
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from schemathesis.generation.meta import TestPhase

from tests.e2e.conftest import LocalPlane, PlaneFactory
from tests.e2e.fuzz_refusals import ADMIN_ONLY, LEGITIMATE_REFUSALS
from tests.e2e.fuzz_setup import DATA, EXAMPLES, EXCLUDED_CHECKS, FUZZ_ENV, REQUEST_TIMEOUT_S, RUN_SEED, Ids, schema, seed

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.fuzz]

PATH_IDS = ("job_id", "policy_id", "sweep_id", "webhook_id", "run_id", "name", "team", "budget_id")


# --- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fuzz_plane(module_plane_factory: PlaneFactory) -> LocalPlane:
    return module_plane_factory(env=FUZZ_ENV)


@pytest.fixture(scope="module")
def real_ids(fuzz_plane: LocalPlane) -> Ids:
    return seed(fuzz_plane)


@dataclass
class Run:
    """What the run shares across cases: the real ids, the responses, the legitimate refusals."""

    plane: LocalPlane
    ids: Ids
    statuses: Counter[tuple[str, int]] = field(default_factory=Counter)  # (operation, status) -> responses
    refusals: Counter[tuple[str, str, str]] = field(default_factory=Counter)  # valid requests' legitimate 422s

    def table(self) -> str:
        by_operation: dict[str, list[str]] = {}
        for (operation, status), count in sorted(self.statuses.items()):
            by_operation.setdefault(operation, []).append(f"{status}x{count}")
        return "\n".join(f"  {operation:45s} {' '.join(codes)}" for operation, codes in by_operation.items())


@pytest.fixture(scope="module")
def fuzz_run(fuzz_plane: LocalPlane, real_ids: Ids) -> Iterator[Run]:
    run = Run(fuzz_plane, real_ids)
    print(f"\nfuzzing with seed {RUN_SEED} (TRAINPLANE_FUZZ_SEED={RUN_SEED} replays it), {EXAMPLES} examples per operation")
    yield run
    print("\nresponses by operation (status x count):\n" + run.table())
    common = "\n".join(f"  {n:5d} x {op}: {where}: {message}" for (op, where, message), n in run.refusals.most_common(12))
    print("\nthe commonest legitimate refusals of valid requests (first error):\n" + common)


# --- the checks of our own -----------------------------------------------------------------------

_current: dict[str, Any] = {}  # the case being checked: its run and whether an id of admin's was put in it


def _errors(response: Any) -> list[dict[str, Any]]:
    try:
        body = json.loads(response.content or b"{}")
    except ValueError:
        return []
    errors = body.get("errors", []) if isinstance(body, dict) else []
    return [e for e in errors if isinstance(e, dict)]


def _explained(run: Run | None, operation: str, status: int, error: dict[str, Any] | None) -> bool:
    return any(r.explains(operation, status, error) for r in LEGITIMATE_REFUSALS)


def accepted_when_valid(ctx: Any, response: Any, case: Any) -> bool | None:
    """A request openapi.json says is valid is accepted, or refused for a reason in LEGITIMATE_REFUSALS (every
    error it names must have one)."""
    meta = case.meta
    status = response.status_code
    if meta is None or not meta.generation.mode.is_positive or status < 400 or status >= 500:
        return None  # 5xx: not_a_server_error reports it
    run, operation = _current.get("run"), case.operation.label
    errors = _errors(response) if status == 422 else []
    unexplained = [e for e in errors if not _explained(run, operation, status, e)] if errors else []
    if (errors and unexplained) or (not errors and not _explained(run, operation, status, None)):
        detail = json.dumps(unexplained) if unexplained else response.content[:600].decode(errors="replace")
        raise AssertionError(f"Schema-valid request refused with {status}, for no reason LEGITIMATE_REFUSALS lists: {detail}")
    if run is not None and errors:
        run.refusals[(operation, re.sub(r"\d+", "N", str(errors[0].get("field")))[:60], str(errors[0].get("message"))[:70])] += 1
    return None


def others_objects_are_not_found(ctx: Any, response: Any, case: Any) -> bool | None:
    """An id of admin's job or policy, sent by alice: never a success, never a status conflict (which would
    tell her it exists); input refused before the lookup (400/422) tells her nothing."""
    if _current.get("others") and (response.status_code < 400 or response.status_code == 409):
        raise AssertionError(f"alice reached admin's object: {response.status_code} {response.content[:300]!r}")
    return None


def use_real_ids(case: Any, ids: Ids) -> bool:
    """Swap generated valid path ids for real ones (part of the time); True when one of admin's was put in."""
    others = False
    params = dict(case.path_parameters or {})
    for name in PATH_IDS:
        generated = params.get(name)
        if not isinstance(generated, str) or not 1 <= len(generated) <= 128:
            continue  # an invalid id is what makes a negative case negative: keep it
        example = case.meta is not None and case.meta.phase.name == TestPhase.EXAMPLES
        picked = ids.pick(name, generated, deleting=case.method.upper() == "DELETE", example=example)
        if picked is not None:
            params[name], theirs = picked
            others = others or theirs
    if params != (case.path_parameters or {}):
        case.path_parameters = params
    body = case.body
    checkpoint = body.get("checkpoint_id") if isinstance(body, dict) and case.path.endswith(("/resume", "/retry")) else None
    if isinstance(checkpoint, str) and checkpoint and zlib.crc32(checkpoint.encode("utf-8", "surrogatepass")) % 2 == 0:
        body["checkpoint_id"] = ""  # the latest checkpoint: a resume or retry that can succeed
    return others


def use_allowed_data(case: Any) -> None:
    """Point part of the generated jobs' data sources at a file local mode allows, so that submissions get
    past path confinement (docs/SECURITY.md) to the rest of the lifecycle. Only where the source's path is
    a valid string already: a negative case stays negative. (Schemathesis re-derives a case's positive or
    negative label from what is finally sent.)"""
    body = case.body
    if not isinstance(body, dict):
        return
    for request in (body, body.get("job_template")):
        sources = (
            request.get("data_config", {}).get("sources")
            if isinstance(request, dict) and isinstance(request.get("data_config"), dict)
            else None
        )
        if not isinstance(sources, list):
            continue
        for source in sources:
            path = source.get("path") if isinstance(source, dict) else None
            if isinstance(path, str) and path and zlib.crc32(path.encode("utf-8", "surrogatepass")) % 4 != 0:
                source["path"] = str(DATA)  # three in four: the fourth keeps exercising the confinement
    # A generated policy PATCH nearly always carries a whole trigger and job template, one of which is
    # refused: half the valid ones lose them (when other fields remain), to reach the edit itself.
    meta = case.meta
    if case.method.upper() == "PATCH" and case.path.startswith("/retraining-policies/") and meta and meta.generation.mode.is_positive:
        rest = {k: v for k, v in body.items() if k not in ("trigger", "job_template")}
        if rest and len(rest) < len(body) and zlib.crc32(json.dumps(body, sort_keys=True, default=str).encode()) % 2 == 0:
            case.body = rest


def remember_created(case: Any, response: Any, ids: Ids) -> None:
    if response.status_code != 201:
        return
    try:
        body = response.json()
    except ValueError:
        return
    if case.path == "/retraining-policies" and "policy_id" in body:
        ids.add("policy_id", body["policy_id"])
    elif case.path == "/sweeps" and "sweep_id" in body:
        ids.add("sweep_id", body["sweep_id"])
    elif case.path == "/webhooks" and "webhook_id" in body:
        ids.add("webhook_id", body["webhook_id"])
    elif case.path == "/budgets" and "budget_id" in body:
        ids.add("budget_id", body["budget_id"])
    elif "job_id" in body:
        ids.add("job_id", body["job_id"])


# --- the test: one sub-test per operation of openapi.json ----------------------------------------


@schema.parametrize()
def test_every_operation_holds_its_contract(case: Any, fuzz_run: Run) -> None:
    _current.update(run=fuzz_run, others=use_real_ids(case, fuzz_run.ids))
    use_allowed_data(case)
    try:
        response = case.call(base_url=fuzz_run.plane.api_url, auth=fuzz_run.plane.auth("alice"), timeout=REQUEST_TIMEOUT_S)
        fuzz_run.statuses[(case.operation.label, response.status_code)] += 1
        remember_created(case, response, fuzz_run.ids)
        case.validate_response(
            response,
            additional_checks=[accepted_when_valid, others_objects_are_not_found],
            excluded_checks=EXCLUDED_CHECKS,
        )
    finally:
        _current.clear()


def test_the_fuzz_run_reached_real_objects(fuzz_run: Run) -> None:
    """Runs after the fuzzing above (same module, in order): with real ids swapped in, every operation on
    one job or policy answered at least once with a success or a status conflict, not only 404s and 422s."""
    if not fuzz_run.statuses:
        pytest.fail("no fuzzing happened in this session: run this test with test_every_operation_holds_its_contract")
    by_id = [op for op in {operation for operation, _ in fuzz_run.statuses} if "{" in op and op not in ADMIN_ONLY]
    unreached = [op for op in by_id if not any(status < 300 or status == 409 for (o, status) in fuzz_run.statuses if o == op)]
    assert len(by_id) >= 13 and not unreached, f"never reached a real object: {unreached}\n{fuzz_run.table()}"
