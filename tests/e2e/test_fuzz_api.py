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
  refused only for the reasons in LEGITIMATE_REFUSALS, each one a fact about the plane's state that no
  schema can state (the id names no job of the caller's, the job's status does not allow the verb);
- keeps principals apart: an id of admin's job or policy, sent by alice, is a 404 whatever else the
  request holds (`others_objects_are_not_found`).

Path ids are real part of the time: `real_ids` swaps a generated (valid) job_id / policy_id for one of
alice's seeded or fuzz-created objects, or one of admin's (alice's to know nothing of), so GET/PATCH/DELETE/cancel/... reach existing
objects in every status the run produces, not only 404s. The plane runs tests/fuzz_trainer.py: jobs the
fuzzer submits finish in two quick steps whatever their hyperparameters say.

Budget: TRAINPLANE_FUZZ_EXAMPLES generated cases per operation in the fuzzing phase (default 25, about
what a 2-core machine runs in a few minutes together with the examples and coverage phases),
TRAINPLANE_FUZZ_SEED to replay a run (default: fixed, so `make test` is repeatable), and
TRAINPLANE_FUZZ_REQUEST_TIMEOUT seconds per request. `make fuzz` runs it long with a random seed.
"""

from __future__ import annotations

import json
import os
import random
import sys
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from schemathesis.specs.openapi.checks import positive_data_acceptance

from tests.e2e.conftest import REPO_ROOT, LocalPlane, PlaneFactory
from tests.helpers.retraining import policy_body

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.fuzz]

OPENAPI = REPO_ROOT / "schemas" / "openapi.json"
EXAMPLES = int(os.environ.get("TRAINPLANE_FUZZ_EXAMPLES", "25"))
SEED = os.environ.get("TRAINPLANE_FUZZ_SEED", "20261125")
REQUEST_TIMEOUT_S = float(os.environ.get("TRAINPLANE_FUZZ_REQUEST_TIMEOUT", "30"))
FUZZ_ENV = {
    "TRAINPLANE_TRAINER_COMMAND": f"{sys.executable} -m tests.fuzz_trainer",
    "TRAINPLANE_RECONCILE_INTERVAL_SECONDS": "2",
}
DATA = REPO_ROOT / "examples" / "data" / "tiny-qa.jsonl"  # under examples/: a directory local mode allows


def job_body(name: str, *, gpu_count: int = 0) -> dict[str, Any]:
    """A job the plane accepts and the fuzz trainer finishes in two steps (gpu_count=1: waits QUEUED for a GPU)."""
    return {
        "name": name,
        "training_config": {
            "training_type": "SFT",
            "base_model": {"model_id": "tiny", "source": "config", "tokenizer_id": "byte", "model_kwargs": {"architecture": "llama"}},
            "hyperparameters": {"max_steps": "2"},
        },
        "data_config": {"sources": [{"path": str(DATA)}]},
        "resource_config": {"gpu_count": gpu_count},
        "output_config": {"checkpoint": {"save_steps": 1}},
    }


# --- the real objects path ids are drawn from ----------------------------------------------------


@dataclass
class Ids:
    """Ids of real objects: alice's (seeded, then every one the fuzzer creates) and admin's (local mode's other principal; never alice's to see)."""

    jobs: list[str] = field(default_factory=list)
    policies: list[str] = field(default_factory=list)
    others_jobs: list[str] = field(default_factory=list)
    others_policies: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, kind: str, value: str) -> None:
        with self.lock:
            pool = self.jobs if kind == "job_id" else self.policies
            if value not in pool:
                pool.append(value)

    def pick(self, kind: str, generated: str) -> tuple[str, bool] | None:
        """A real id for this generated one (the choice derived from it, so a replay picks the same), or None."""
        rng = random.Random(zlib.crc32(generated.encode("utf-8", "surrogatepass")))
        roll = rng.random()
        if roll < 0.3:
            return None  # keep the generated id: an unknown one
        with self.lock:
            mine, theirs = (self.jobs, self.others_jobs) if kind == "job_id" else (self.policies, self.others_policies)
            pool, is_others = (theirs, True) if roll < 0.4 else (mine, False)
            return (rng.choice(pool), is_others) if pool else None


def wait_for_status(plane: LocalPlane, job_id: str, *statuses: str, principal: str = "alice", timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reply = plane.request("GET", f"/jobs/{job_id}", principal=principal)
        assert reply.status_code == 200, reply.text
        if reply.json()["status"] in statuses:
            return
        time.sleep(0.3)
    raise AssertionError(f"{job_id} not in {statuses} within {timeout:.0f}s:\n{plane.log_tail()}")


def seed(plane: LocalPlane) -> Ids:
    """Real objects in several states: a COMPLETED job (retry, delete, metrics, logs), one QUEUED for a GPU
    (cancel, patch), one CANCELLED; a policy of alice's; admin's job and policy."""
    ids = Ids()

    def submit(body: dict[str, Any], principal: str = "alice") -> str:
        reply = plane.request("POST", "/jobs", json=body, principal=principal)
        assert reply.status_code == 201, reply.text
        return str(reply.json()["job_id"])

    def create_policy(principal: str) -> str:
        body = policy_body(job_template=job_body("fuzz-template"))
        del body["input_mapping"]  # the template's data source stays the allowed local file
        reply = plane.request("POST", "/retraining-policies", json=body, principal=principal)
        assert reply.status_code == 201, reply.text
        return str(reply.json()["policy_id"])

    completed = submit(job_body("fuzz-seed-completed"))
    queued = submit(job_body("fuzz-seed-queued", gpu_count=1))
    cancelled = submit(job_body("fuzz-seed-cancelled", gpu_count=1))
    assert plane.request("POST", f"/jobs/{cancelled}/cancel", json={"reason": "fuzz seed"}).status_code == 200
    ids.jobs += [completed, queued, cancelled]
    ids.others_jobs.append(submit(job_body("fuzz-seed-admins"), principal="admin"))
    ids.policies.append(create_policy("alice"))
    ids.others_policies.append(create_policy("admin"))
    wait_for_status(plane, completed, "COMPLETED")
    return ids


# --- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fuzz_plane(local_plane_factory: PlaneFactory) -> LocalPlane:
    return local_plane_factory(env=FUZZ_ENV)


@pytest.fixture(scope="module")
def real_ids(fuzz_plane: LocalPlane) -> Ids:
    return seed(fuzz_plane)


def fuzz_config() -> schemathesis.Config:
    return schemathesis.Config.from_dict(
        {
            "seed": int(SEED) if SEED.isdigit() else random.SystemRandom().randrange(2**32),
            "request-timeout": REQUEST_TIMEOUT_S,
            "generation": {"mode": "all", "max-examples": EXAMPLES, "database": "none", "no-shrink": True},
            "phases": {
                "examples": {"enabled": True},
                "coverage": {"enabled": True, "unexpected-methods": ["PUT", "PATCH", "DELETE", "POST"]},
                "fuzzing": {"enabled": True},
                "stateful": {"enabled": False},  # the document has no links; real_ids seeds the ids instead
            },
        }
    )


# The committed document (a test keeps it equal to what the code generates); the plane's URL is given per
# call, since the plane starts after collection.
schema = schemathesis.openapi.from_dict(json.loads(OPENAPI.read_text(encoding="utf-8")), config=fuzz_config())


# --- the checks of our own -----------------------------------------------------------------------

PATH_IDS = ("job_id", "policy_id")


def _error_types(response: Any) -> set[str]:
    try:
        body = json.loads(response.content or b"{}")
    except ValueError:
        return set()
    return {str(e.get("type")) for e in body.get("errors", []) if isinstance(e, dict)} if isinstance(body, dict) else set()


def _legitimate_refusal(case: Any, response: Any) -> str | None:
    """Why a schema-valid request may be refused, or None. Each entry depends on the plane's state, which no
    schema can state; anything else refused (a 400, a 413, a 415, a 422 for a value the document allows)
    means the document and the server disagree, and fails."""
    status = response.status_code
    has_id = any(p in (case.path_parameters or {}) for p in PATH_IDS)
    if status == 404 and has_id:
        return "the id names no object of the caller's (unknown, deleted, or another principal's)"
    if status == 409 and (case.method.upper() != "GET"):
        return "the object's status does not allow this (e.g. cancel a COMPLETED job), or a concurrent change"
    if status == 422 and case.path.endswith(("/resume", "/retry")) and "not_found" in _error_types(response):
        return "the checkpoint_id names no checkpoint of this job"
    return None


def accepted_when_valid(ctx: Any, response: Any, case: Any) -> bool | None:
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive or response.status_code < 400:
        return None
    if response.status_code >= 500:
        return None  # not_a_server_error reports it
    if _legitimate_refusal(case, response) is None:
        raise AssertionError(f"Schema-valid request refused: {response.status_code} {response.content[:600]!r}")
    return None


@dataclass
class CaseIds:
    others: bool = False


_case_ids: dict[int, CaseIds] = {}


def others_objects_are_not_found(ctx: Any, response: Any, case: Any) -> bool | None:
    marker = _case_ids.get(id(case))
    if marker is not None and marker.others and response.status_code != 404 and response.status_code < 500:
        # 400/415/422 before the lookup are fine (the input is refused whoever owns the id); anything else is not
        if response.status_code < 400 or response.status_code in (409,):
            raise AssertionError(f"Another principal's object reached: {response.status_code} {response.content[:300]!r}")
    return None


def use_real_ids(case: Any, ids: Ids) -> CaseIds:
    marker = CaseIds()
    params = case.path_parameters or {}
    for name in PATH_IDS:
        generated = params.get(name)
        if not isinstance(generated, str) or not 1 <= len(generated) <= 128:
            continue  # an invalid id is part of a negative case: keep it
        picked = ids.pick(name, generated)
        if picked is not None:
            params = {**params, name: picked[0]}
            marker.others = marker.others or picked[1]
    if params != (case.path_parameters or {}):
        case.path_parameters = params
    return marker


def remember_created(case: Any, response: Any, ids: Ids) -> None:
    if response.status_code != 201:
        return
    try:
        body = response.json()
    except ValueError:
        return
    if case.path == "/retraining-policies" and "policy_id" in body:
        ids.add("policy_id", body["policy_id"])
    elif "job_id" in body:
        ids.add("job_id", body["job_id"])


# --- the test: one sub-test per operation of openapi.json ----------------------------------------


@schema.parametrize()
def test_every_operation_holds_its_contract(case: Any, fuzz_plane: LocalPlane, real_ids: Ids) -> None:
    marker = use_real_ids(case, real_ids)
    _case_ids[id(case)] = marker
    try:
        response = case.call(base_url=fuzz_plane.api_url, auth=fuzz_plane.auth("alice"), timeout=REQUEST_TIMEOUT_S)
        remember_created(case, response, real_ids)
        try:
            case.validate_response(
                response,
                additional_checks=[accepted_when_valid, others_objects_are_not_found],
                excluded_checks=[positive_data_acceptance],
            )
        except BaseException as exc:
            if os.environ.get("FUZZ_EXPLORE"):
                with open("/tmp/fuzz_explore.jsonl", "a") as out:
                    for f in getattr(exc, "exceptions", [exc]):
                        out.write(json.dumps({"op": case.operation.label, "cls": type(f).__name__, "title": getattr(f, "title", ""), "status": response.status_code, "msg": str(getattr(f, "message", f))[:300], "req_ct": case.media_type, "path": case.formatted_path, "body": repr(case.body)[:300], "resp": response.content[:300].decode(errors="replace")}) + "\n")
            else:
                raise
    finally:
        _case_ids.pop(id(case), None)


def test_the_fuzzer_covers_every_operation_of_the_document() -> None:
    """The run above is over the whole document: no operation left out by a filter or lost by the loader."""
    document = json.loads(OPENAPI.read_text(encoding="utf-8"))
    loaded = schemathesis.openapi.from_dict(document, config=fuzz_config())
    operations = {op.ok().label for op in loaded.get_all_operations()}
    declared = {f"{method.upper()} {path}" for path, item in document["paths"].items() for method in item}
    assert operations == declared and len(declared) >= 20



