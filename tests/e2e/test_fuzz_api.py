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

Budget: TRAINPLANE_FUZZ_EXAMPLES generated cases per operation in the fuzzing phase (default 25, about
what a 2-core machine runs in a few minutes together with the examples and coverage phases),
TRAINPLANE_FUZZ_SEED to replay a run (default: fixed, so `make test` is repeatable), and
TRAINPLANE_FUZZ_REQUEST_TIMEOUT seconds per request. `make fuzz` runs it long with a random seed.
"""

from __future__ import annotations

import json
import os
import random
import re
import sys
import threading
import time
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import schemathesis
from schemathesis.core.result import Ok
from schemathesis.generation.meta import TestPhase
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
    """Ids of real objects: alice's (seeded, then every one the fuzzer creates) and admin's (local mode's
    other principal, whose objects alice must never see)."""

    jobs: list[str] = field(default_factory=list)
    policies: list[str] = field(default_factory=list)
    others_jobs: list[str] = field(default_factory=list)
    others_policies: list[str] = field(default_factory=list)
    sweeps: list[str] = field(default_factory=list)
    others_sweeps: list[str] = field(default_factory=list)
    webhooks: list[str] = field(default_factory=list)
    others_webhooks: list[str] = field(default_factory=list)
    budgets: list[str] = field(default_factory=list)
    others_budgets: list[str] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)  # /train run ids (a job labelled train_run_id)
    others_runs: list[str] = field(default_factory=list)
    shapes: list[str] = field(default_factory=list)  # training shape names: the deployment's, for everyone
    teams: list[str] = field(default_factory=lambda: ["default"])  # alice is in no team: the default one is hers
    seeded: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def _pools(self, kind: str) -> tuple[list[str], list[str]]:
        if kind == "job_id":
            return self.jobs, self.others_jobs
        if kind == "sweep_id":
            return self.sweeps, self.others_sweeps
        if kind == "webhook_id":
            return self.webhooks, self.others_webhooks
        if kind == "budget_id":
            return self.budgets, self.others_budgets
        if kind == "run_id":
            return self.runs, self.others_runs
        if kind == "name":
            return self.shapes, []
        if kind == "team":
            return self.teams, []
        return self.policies, self.others_policies

    def add(self, kind: str, value: str) -> None:
        with self.lock:
            pool = self._pools(kind)[0]
            if value not in pool:
                pool.append(value)

    def pick(self, kind: str, generated: str, *, deleting: bool = False, example: bool = False) -> tuple[str, bool] | None:
        """A real id for this generated one (the choice derived from it, so a replay picks the same), or None.
        A DELETE gets only objects the fuzzer created: the seeded ones stay for the operations after it. The
        document's examples (a valid body each) always get one of alice's: every run reaches a real object."""
        rng = random.Random(zlib.crc32(generated.encode("utf-8", "surrogatepass")))
        roll = 1.0 if example else rng.random()
        if roll < 0.3:
            return None  # keep the generated id: an unknown one
        with self.lock:
            mine, theirs = self._pools(kind)
            if deleting:
                mine = [i for i in mine if i not in self.seeded]
            pool, is_others = (theirs, True) if roll < 0.4 else (mine, False)
            return (rng.choice(pool), is_others) if pool else None


def wait_for_status(plane: LocalPlane, job_id: str, status: str, *, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    job: dict[str, Any] = {}
    while time.monotonic() < deadline:
        reply = plane.request("GET", f"/jobs/{job_id}")
        assert reply.status_code == 200, reply.text
        job = reply.json()
        if job["status"] == status:
            return
        if job["status"] in ("COMPLETED", "FAILED", "CANCELLED"):
            break
        time.sleep(0.3)
    raise AssertionError(f"{job_id} is {job.get('status')} ({job.get('error_message')}), not {status}:\n{plane.log_tail()}")


def seed(plane: LocalPlane) -> Ids:
    """Real objects in several states: a COMPLETED job (retry, delete, metrics, logs), one QUEUED for a GPU
    (cancel, patch), CANCELLED ones; policies of alice's; admin's job and policy."""
    ids = Ids()

    def submit(body: dict[str, Any], principal: str = "alice") -> str:
        reply = plane.request("POST", "/jobs", json=body, principal=principal)
        assert reply.status_code == 201, reply.text
        return str(reply.json()["job_id"])

    def cancel(job_id: str) -> None:
        """Make the job terminal: cancel it (asked again on a 409 while the engine moves it on)."""
        for _ in range(50):
            reply = plane.request("POST", f"/jobs/{job_id}/cancel", json={"reason": "fuzz seed"})
            if reply.status_code != 409:
                break
            if plane.request("GET", f"/jobs/{job_id}").json()["status"] in ("COMPLETED", "FAILED", "CANCELLED"):
                return  # ended on its own: terminal is all a seed needs
            time.sleep(0.2)
        assert reply.status_code == 200, reply.text

    def create_policy(principal: str) -> str:
        body = policy_body(job_template=job_body("fuzz-template"))
        del body["input_mapping"]  # the template's data source stays the allowed local file
        reply = plane.request("POST", "/retraining-policies", json=body, principal=principal)
        assert reply.status_code == 201, reply.text
        return str(reply.json()["policy_id"])

    def create_sweep(principal: str, *, cancelled: bool = False) -> str:
        tuning = {
            "method": "random",
            "maxTrials": 1,
            "metric": {"name": "loss", "goal": "minimize"},
            "parameters": {"learning_rate": {"type": "double", "min": 0.0001, "max": 0.01, "scale": "log"}},
        }
        body = {"name": "fuzz-sweep", "job_template": job_body("fuzz-sweep-template"), "hyperParameterTuningConfig": tuning}
        reply = plane.request("POST", "/sweeps", json=body, principal=principal)
        assert reply.status_code == 201, reply.text
        sweep_id = str(reply.json()["sweep_id"])
        if cancelled:  # a finished sweep: one a DELETE can take
            assert plane.request("POST", f"/sweeps/{sweep_id}/cancel", principal=principal).status_code == 200
        return sweep_id

    def create_budget(principal: str, scope: dict[str, str]) -> str:
        # alice budgets her own team (default); admin a label, a budget alice may not see (404 to her)
        body = {"name": f"fuzz-{principal}", "scope": scope, "amount_usd": 1000}
        reply = plane.request("POST", "/budgets", json=body, principal=principal)
        assert reply.status_code == 201, reply.text
        return str(reply.json()["budget_id"])

    def create_webhook(principal: str) -> str:
        # a loopback receiver (local mode allows one) where nothing listens: deliveries fail, the routes work
        reply = plane.request("POST", "/webhooks", json={"url": "http://127.0.0.1:9/fuzz"}, principal=principal)
        assert reply.status_code == 201, reply.text
        return str(reply.json()["webhook_id"])

    completed = submit(job_body("fuzz-seed-completed"))
    queued = submit(job_body("fuzz-seed-queued", gpu_count=1))
    cancelled, expendable = submit(job_body("fuzz-seed-cancelled", gpu_count=1)), submit(job_body("fuzz-seed-expendable", gpu_count=1))
    for job_id in (cancelled, expendable):
        cancel(job_id)
    ids.jobs += [completed, queued, cancelled]
    ids.others_jobs.append(submit(job_body("fuzz-seed-admins"), principal="admin"))
    ids.policies.append(create_policy("alice"))
    ids.others_policies.append(create_policy("admin"))
    ids.sweeps.append(create_sweep("alice"))
    ids.others_sweeps.append(create_sweep("admin"))
    ids.webhooks.append(create_webhook("alice"))
    ids.others_webhooks.append(create_webhook("admin"))
    ids.budgets.append(create_budget("alice", {"kind": "team", "value": "default"}))
    ids.others_budgets.append(create_budget("admin", {"kind": "label", "value": "project=fuzz"}))
    ids.seeded.update(ids.jobs + ids.policies + ids.sweeps + ids.webhooks + ids.budgets)
    # One job, one policy and one (finished) sweep a DELETE may take even when the fuzzer created none of its own
    ids.jobs.append(expendable)
    ids.policies.append(create_policy("alice"))
    ids.sweeps.append(create_sweep("alice", cancelled=True))
    ids.webhooks.append(create_webhook("alice"))
    ids.budgets.append(create_budget("alice", {"kind": "team", "value": "default"}))
    # A /train run of each principal's (GET /train/{run_id} finds the newest job labelled with it), and the shapes
    for principal, pool in (("alice", ids.runs), ("admin", ids.others_runs)):
        body = job_body(f"fuzz-run-{principal}", gpu_count=1)
        body["labels"] = {"train_run_id": f"fuzz-run-{principal}"}
        submit(body, principal)
        pool.append(f"fuzz-run-{principal}")
    shapes = plane.request("GET", "/training-shapes")
    assert shapes.status_code == 200, shapes.text
    ids.shapes += [s["name"] for s in shapes.json()["shapes"]]
    assert ids.shapes
    wait_for_status(plane, completed, "COMPLETED")
    return ids


# --- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fuzz_plane(module_plane_factory: PlaneFactory) -> LocalPlane:
    return module_plane_factory(env=FUZZ_ENV)


@pytest.fixture(scope="module")
def real_ids(fuzz_plane: LocalPlane) -> Ids:
    return seed(fuzz_plane)


RUN_SEED = int(SEED) if SEED.isdigit() else random.SystemRandom().randrange(2**32)


def fuzz_config() -> schemathesis.Config:
    return schemathesis.Config.from_dict(
        {
            "seed": RUN_SEED,
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


# --- what a schema-valid request may be refused for ----------------------------------------------

PATH_IDS = ("job_id", "policy_id", "sweep_id", "webhook_id", "run_id", "name", "team", "budget_id")


@dataclass(frozen=True)
class Refusal:
    """One legitimate reason to refuse a schema-valid request: a fact about the plane's state or its
    deployment, or a rule across fields, that openapi.json cannot state as a JSON Schema constraint."""

    why: str
    status: int
    operations: tuple[str, ...] = ()  # "METHOD /path" prefixes; () = any
    field: str | None = None  # regex the error's field must match (422 only)
    message: str | None = None  # regex the error's message must match (422 only)
    kind: str | None = None  # the error's type, exactly (422 only)

    def explains(self, operation: str, status: int, error: dict[str, Any] | None) -> bool:
        if status != self.status or (self.operations and not operation.startswith(self.operations)):
            return False
        if error is None:
            return self.field is None and self.message is None and self.kind is None
        return bool(
            (self.kind is None or error.get("type") == self.kind)
            and (self.field is None or re.fullmatch(self.field, str(error.get("field", "")), re.S))
            and (self.message is None or re.search(self.message, str(error.get("message", "")), re.S))
        )


_BY_ID = tuple(
    f"{m} {p}"
    for p, ms in (
        ("/jobs/{job_id}", ("GET", "PATCH", "DELETE", "POST")),
        ("/retraining-policies/{policy_id}", ("GET", "PATCH", "DELETE")),
        ("/sweeps/{sweep_id}", ("GET", "DELETE", "POST")),
        ("/webhooks/{webhook_id}", ("GET", "DELETE", "POST")),
        ("/teams/{team}", ("GET",)),
        ("/budgets/{budget_id}", ("GET", "PATCH", "DELETE", "POST")),
    )
    for m in ms
)
# Operations only admins may perform: alice (the fuzzer) is refused each with a 403, so no real object is reached.
ADMIN_ONLY = ("PUT /teams/{team}", "DELETE /teams/{team}", "POST /budgets/{budget_id}/resume")
_TUNING = r"(hyperParameterTuningConfig|hyperparameter_tuning_config)(\..*)?"
_ISSUE16_OPS = ("POST /jobs", "PATCH /jobs", "POST /retraining-policies", "PATCH /retraining-policies", "POST /train", "POST /sweeps")
LEGITIMATE_REFUSALS = (
    Refusal(
        "a Cognito group name has no whitespace (pattern ^\\S+$): the server's regex reads Unicode whitespace (NEL,"
        " NBSP ...) as whitespace, the fuzzer's pattern engine reads only ASCII's",
        422,
        ("PUT /teams/{team}",),
        r"members\.cognito_groups\.\d+",
        kind="string_pattern_mismatch",
    ),
    Refusal(
        "placement's rules across fields and against the deployment (issue 26, docs/PLACEMENT.md): deadline or"
        " max_wait_seconds, not both, and a deadline in the future that some candidate can meet with an on-demand"
        " fallback; each candidate a GPU type of the instance table, on a platform this deployment launches, able"
        " to keep the global batch and resume the checkpoint on its world size; the top-level GPU fields agree with"
        " candidate 0; zones, affinity labels and capabilities that name known pools, and leave one",
        422,
        _ISSUE16_OPS,
        r"(.*\.)?(new_)?resource_config\.(placement.*|gpu_type|gpu_count|node_count|training_shape|node_affinity.*|node_anti_affinity.*)"
        r"|(.*\.)?scheduling_config\.required_capabilities.*",
    ),
    Refusal(
        "a /train run_id that made no job of the caller's, or a training shape (version) the deployment lacks",
        404,
        ("GET /train/", "GET /training-shapes/"),
    ),
    Refusal(
        "training shapes are the deployment's catalog (issue 16): the name@version must exist, a field the shape owns"
        " may not be set otherwise, the context is bounded by the shape's",
        422,
        _ISSUE16_OPS,
        message=r"training shape",
    ),
    Refusal(
        "rules across fields of issue 16: CUSTOM's command/args, OME's trainer block mapped onto the request,"
        " dataset compression vs format, procs_per_node vs world_size, a deepfinery layout's output_path",
        422,
        _ISSUE16_OPS,
        message=r"command and args are for framework\.type CUSTOM|custom_script_path or command|give custom_script_path or command"
        r"|contradicts compression|procs_per_node|runs as framework CUSTOM|needs trainer\.command|give it once"
        r"|not supported yet|output_path \(the run's root\)|not a (memory|CPU) quantity|not a whole number|not a resource trainplane",
    ),
    Refusal(
        "a job's own container image runs only on compute that runs containers, from the repositories the deployment"
        " allows (docs/SECURITY.md): local mode has no container runtime and refuses every one",
        422,
        _ISSUE16_OPS,
        r"(job_template\.)?(training_config\.image|trainer\.image)|image",
        message=r"no container runtime",
    ),
    Refusal(
        "scheduling_config.on_exceed and its deprecated former name max_cost_on_exceed (still accepted), not both at"
        " once (docs/BUDGETS.md)",
        422,
        _ISSUE16_OPS,
        r"(.*\.)?scheduling_config\.max_cost_on_exceed",
        message=r"send on_exceed only",
    ),
    Refusal(
        "a CUSTOM command's path-like parts are confined like custom_script_path (docs/SECURITY.md)",
        422,
        _ISSUE16_OPS,
        r"(job_template\.)?training_config\.framework\.command\[\d+\]",
    ),
    Refusal(
        "POST /train's payload becomes a job (functions/service/compat/deepfinery.py): what the job's validation refuses is"
        " named by the /train field it came from (paths, GPUs, extra_args, the frameworks not supported yet)",
        422,
        ("POST /train",),
        r"framework|config_path|extra_args\..+|dataset_uri|checkpoint_base_uri|model_id|gpus_per_node|num_nodes|cpus_per_node"
        r"|memory_per_node_gb|run_id|annotations|env(\..+)?|labels(\..+)?|body|training_config.*|data_config.*|resource_config.*"
        r"|output_config.*",
    ),
    Refusal("the id names no object of the caller's: unknown, deleted, or another principal's", 404, _BY_ID),
    Refusal(
        "only the deployment's admins define and delete teams (docs/TEAMS.md) and let a job run over a budget"
        " (docs/BUDGETS.md); the fuzzer is alice",
        403,
        ADMIN_ONLY,
    ),
    Refusal(
        "a non-admin budgets only itself or its own team (docs/BUDGETS.md): a label, the deployment, another principal"
        " or another team is the admins'",
        403,
        ("POST /budgets",),
    ),
    Refusal(
        "a budget's rules across fields (docs/BUDGETS.md): a scope's value by its kind (a team name, an IAM ARN, key=value,"
        " none for the deployment), a custom period's range, each (percent, action) once, a PATCH changes something",
        422,
        ("POST /budgets", "PATCH /budgets"),
        r"body|scope|thresholds",
        r"budget|team name|IAM ARN|label selector|custom period|starts_at|ends_at|\(percent, action\)|amount_usd, thresholds",
    ),
    Refusal(
        "the object's status does not allow the action (cancel a COMPLETED job, ...), a concurrent change, or the first"
        " request with the same Idempotency-Key still running",
        409,
        ("POST ", "PATCH ", "DELETE "),
    ),
    Refusal("the Idempotency-Key was used before with another body", 422, ("POST /jobs",), r"Idempotency-Key"),
    Refusal("next_token is opaque: only a token the API returned is one", 422, ("GET ",), r"next_token", r"not a token this API returned"),
    Refusal(
        "a priority band's bounds across fields: priority_min <= priority_max", 422, ("GET /jobs",), r"priority_min", r"above priority_max"
    ),
    Refusal(
        "a webhook URL must be HTTPS and resolve to public addresses (docs/SECURITY.md): what a host resolves to is"
        " DNS's answer, not its spelling",
        422,
        ("POST /webhooks",),
        r"url",
    ),
    Refusal("a webhook's event_types glob must match an event type the deployment has", 422, ("POST /webhooks",), r"event_types"),
    Refusal(
        "redeliver names an event sent to this webhook in the last 30 days, and until after since",
        422,
        ("POST /webhooks/{webhook_id}/redeliver",),
        r"event_id|until",
    ),
    Refusal(
        "redeliver takes one event or a time range: event_id or since (with an optional until), a rule across fields",
        422,
        ("POST /webhooks/{webhook_id}/redeliver",),
        r"body",
        r"give either event_id or since|until needs since",
    ),
    Refusal(
        "checkpoint_id names no checkpoint of this job", 422, ("POST /jobs/{job_id}/resume", "POST /jobs/{job_id}/retry"), r"checkpoint_id"
    ),
    Refusal(
        "a time zone must exist in the IANA database",
        422,
        ("POST /retraining-policies", "PATCH /retraining-policies"),
        r".*timezone",
        r"time ?zone|IANA",
    ),
    Refusal(
        "the artifacts bucket starts jobs only from objects under datasets/ (the deployment's layout)",
        422,
        ("POST /retraining-policies", "PATCH /retraining-policies"),
        r"trigger\.prefix",
        r"only objects under",
    ),
    Refusal(
        "a schedule expression or an input mapping's target must parse (EventBridge Scheduler's cron()/rate() grammar,"
        " a dotted path into the job request): a grammar, not a JSON Schema pattern",
        422,
        ("POST /retraining-policies", "PATCH /retraining-policies"),
        r"trigger\.schedule\.expression|input_mapping\.\d+",
        r"a schedule is cron|not a valid (cron|rate)|is not a dotted path",
    ),
    Refusal(
        "an EventBridge event pattern must follow EventBridge's grammar (values in non-empty lists, known operators,"
        " numeric in pairs): openapi.json states its outer shape (a non-empty object), not the grammar",
        422,
        ("POST /retraining-policies", "PATCH /retraining-policies"),
        r"trigger\.event\.pattern|trigger\.pattern",
        r"^event pattern .*(must be a non-empty object|an empty list matches nothing|values must be in a list|"
        r"is not a value or an operator|"
        r"unsupported operator|numeric takes pairs|exists takes|(prefix|suffix|wildcard|equals-ignore-case) takes a string|"
        r"anything-but takes values)|^at most \d+ keys and list items in all",
    ),
    Refusal(
        "a path its owner may not use (path confinement, issue 11 point 1, docs/SECURITY.md): whose files a path"
        " names depends on the deployment, the allowed directories and who owns which job, not on its spelling",
        422,
        ("POST /jobs", "PATCH /jobs", "POST /retraining-policies", "PATCH /retraining-policies", "POST /sweeps"),
        r"(job_template\.)?(data_config\.sources\[\d+\]\.path|data_config\.preprocess\.tokenizer|"
        r"training_config\.(base_model\.(model_id|tokenizer_id)|resume_from_checkpoint|framework\.custom_script_path)|"
        r"output_config\.output_path)",
    ),
    Refusal(
        "the options a framework takes depend on framework.type (DEEPSPEED: zero_stage 1-3 only, no ZeRO-Offload, no"
        " float16 across processes), as framework.config's description in openapi.json says",
        422,
        ("POST /jobs", "PATCH /jobs", "POST /retraining-policies", "PATCH /retraining-policies", "POST /sweeps"),
        r"(job_template\.)?training_config(\.framework)?",
        r"DEEPSPEED|ZeRO-Offload|framework\.config\.zero_stage",
    ),
    Refusal(
        "an input mapping's target must name a field of the policy's job template, and labels the policy does not"
        " set itself (a rule across input_mapping and job_template)",
        422,
        ("POST /retraining-policies", "PATCH /retraining-policies"),
        r"input_mapping(\.\d+)?|job_template",
        r"input_mapping\[\d+\]\.target|are set by the policy on every job it starts|jobs would carry \d+ labels",
    ),
    Refusal(
        "a rule of the trainer's checked at submit (issue 11 point 3: error type invalid_config), across fields or"
        " list items (e.g. no data source with split 'train', world_size over the GPUs)",
        422,
        ("POST /jobs", "PATCH /jobs", "POST /retraining-policies", "PATCH /retraining-policies", "POST /sweeps"),
        kind="invalid_config",
    ),
    Refusal(
        "a sweep's parameters obey rules across their fields (min <= max, a log scale from min > 0, a step that divides"
        " the range, whole bounds for an int, distinct values, values or a range, one parameter per target, a grid no"
        " larger than maxTrials and enumerable), docs/SWEEPS.md",
        422,
        ("POST /sweeps",),
        _TUNING,
        r"greater than max|scale log|does not divide|whole number|distinct|values|min and max|takes no step|finite|"
        r"steps|same target|the grid has|a grid needs|not a dotted path|parameter name|rounds the range|round together",
    ),
    Refusal(
        "a sweep's early stopping takes only its own rule's settings, each away from its default only under its rule"
        " (type asha: minResource, reductionFactor; hyperband: maxResource >= minResource, bootstrapCount with"
        " maxResource), docs/SWEEPS.md: a rule across earlyStopping's fields",
        422,
        ("POST /sweeps",),
        _TUNING,
        r"not a setting of early stopping|smaller than minResource|bootstrapCount needs maxResource",
    ),
    Refusal(
        "a sweep's metric must be one its trials can report: our trainer reports eval_* only from validation data"
        " (a rule across the metric and the template's data_config, docs/SWEEPS.md)",
        422,
        ("POST /sweeps",),
        _TUNING,
        r"never report",
    ),
    Refusal(
        "a sweep parameter's target must name a field of the template (or a hyperparameter the trainer knows)",
        422,
        ("POST /sweeps",),
        _TUNING,
        r"no field|index \[\d+\]|whole object|not a hyperparameter|hyperparameter",
    ),
    Refusal(
        "every trial's job (the template with each value a parameter can take, each grid point) must pass POST /jobs's checks,"
        " and the template may not set the labels the sweep sets",
        422,
        ("POST /sweeps",),
        r"job_template(\..*)?",
        r"a trial's job|set by the sweep on every trial|trials carry",
    ),
    Refusal(
        "a hyperparameter's value is a string (seeds/000): openapi.json states each known key's spelling (an integer,"
        " a number, true/false, one of a list), not the number's range (learning_rate > 0, lora_dropout < 1)",
        422,
        ("POST /jobs", "PATCH /jobs", "POST /retraining-policies", "PATCH /retraining-policies", "POST /sweeps"),
        r"(job_template\.)?training_config\.hyperparameters\.[a-z0-9_]+",
        r"^Input should be (greater|less) than",
    ),
    Refusal(
        "a hyperparameter key our trainer does not know: the document allows any key, since a CUSTOM script takes its"
        " own (as --key value); for the other frameworks it is refused, a rule across fields (framework.type) that"
        " hyperparameters' description states (issue 21)",
        422,
        ("POST /jobs", "PATCH /jobs", "POST /retraining-policies", "PATCH /retraining-policies", "POST /sweeps"),
        r"(job_template\.)?training_config\.hyperparameters\..*",  # the empty key too
        message=r"^unknown hyperparameter",  # by its words: PATCH re-validates the merged job, whose error type differs
    ),
    Refusal(
        "two hyperparameters that name one setting must agree (eval_strategy / evaluation_strategy, optim /"
        " optimizer, an alias and its data_config field, warmup_ratio with warmup_steps): a rule across keys",
        422,
        ("POST /jobs", "PATCH /jobs", "POST /retraining-policies", "PATCH /retraining-policies", "POST /sweeps"),
        r"(job_template\.)?training_config\.hyperparameters\.[a-z0-9_]+",
        kind="invalid_hyperparameter",
    ),
    Refusal(
        "local mode's default compute 'local' runs one node: node_count > 1 needs compute ec2 or sagemaker (issue 16)",
        422,
        _ISSUE16_OPS,
        r"(job_template\.)?resource_config\.node_count|num_nodes",
        r"compute 'local' runs one node",
    ),
    Refusal(
        "experiment tracking (docs/TRACKING.md): an MLflow tracking URI is an http(s) server without credentials, query"
        " or fragment, a SageMaker MLflow ARN or a file:/// store; W&B online needs api_key_secret_arn, a secret the"
        " caller may use (trainplane/<principal key>/, this deployment's region), and local mode logs W&B offline only;"
        " a CUSTOM script logs its own runs. openapi.json states a string, not the URI grammar nor who owns a secret",
        422,
        ("POST /jobs", "PATCH /jobs", "POST /retraining-policies", "PATCH /retraining-policies", "POST /sweeps"),
        r"(job_template\.)?output_config\.tracking(\.[a-z_]+)*",
        r"(online mode needs api_key_secret_arn|log W&B offline only|is not one you may use|the trainers read secrets of|"
        r"SageMaker MLflow ARN|file store|scheme|names no host|credentials in the URI|no query or fragment|"
        r"bad port|CUSTOM script logs its own runs)",
    ),
    Refusal(
        "RLHF's rules across fields (docs/TRAINER.md, RLHF): the rlhf block goes with training_type RLHF and needs a"
        " reward; GRPO runs on HF_TRAINER in one process, has no evaluation pass, and a step's completions are whole"
        " groups of num_generations; the hyperparameters GRPO cannot honour are refused by name",
        422,
        ("POST /jobs", "PATCH /jobs", "POST /retraining-policies", "PATCH /retraining-policies", "POST /sweeps", "POST /train"),
        r"(job_template\.)?(training_config\.(rlhf(\.[a-z_]+)?|framework\.type|framework\.distributed\.world_size|"
        r"hyperparameters\.[a-z0-9_]+)|data_config\.(validation_split|sources\[\d+\]\.split)|"
        r"output_config\.checkpoint\.metric_for_best_model)",
        r"(RLHF|rlhf block|reward_|num_generations)",
    ),
    Refusal(
        "a rule across fields: a field required when another has a given value, a training type that needs a GPU,"
        " processes (world_size) the nodes and GPUs asked for cannot hold",
        422,
        (),
        r".*",
        r"(is required when|give exactly one of|needs a GPU|needs \d+ GPUs per node|is not a multiple of resource_config)",
    ),
)


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

# Every check schemathesis has runs (response_schema_conformance among them) but this one, replaced by
# accepted_when_valid above.
EXCLUDED_CHECKS = [positive_data_acceptance]


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


def test_the_fuzzer_covers_every_operation_of_the_document() -> None:
    """The run above is over the whole document: no operation left out by a filter or lost by the loader."""
    document = json.loads(OPENAPI.read_text(encoding="utf-8"))
    loaded = list(schema.get_all_operations())
    assert all(isinstance(op, Ok) for op in loaded), [op for op in loaded if not isinstance(op, Ok)]  # none the loader refused
    operations = {op.ok().label for op in loaded if isinstance(op, Ok)}
    declared = {f"{method.upper()} {path}" for path, item in document["paths"].items() for method in item}
    assert operations == declared and len(declared) >= 20


def test_the_fuzz_run_reached_real_objects(fuzz_run: Run) -> None:
    """Runs after the fuzzing above (same module, in order): with real ids swapped in, every operation on
    one job or policy answered at least once with a success or a status conflict, not only 404s and 422s."""
    if not fuzz_run.statuses:
        pytest.fail("no fuzzing happened in this session: run this test with test_every_operation_holds_its_contract")
    by_id = [op for op in {operation for operation, _ in fuzz_run.statuses} if "{" in op and op not in ADMIN_ONLY]
    unreached = [op for op in by_id if not any(status < 300 or status == 409 for (o, status) in fuzz_run.statuses if o == op)]
    assert len(by_id) >= 13 and not unreached, f"never reached a real object: {unreached}\n{fuzz_run.table()}"


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
