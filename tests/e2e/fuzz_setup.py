"""What the API fuzzing (tests/e2e/test_fuzz_api.py) runs with: its budget, the document loaded with
schemathesis' configuration, the checks it leaves out, and the real objects it seeds for path ids.

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
from typing import Any

import schemathesis
from schemathesis.specs.openapi.checks import positive_data_acceptance

from tests.e2e.conftest import REPO_ROOT, LocalPlane
from tests.helpers.retraining import policy_body

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


# --- the document and how schemathesis runs over it ----------------------------------------------

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

# Every check schemathesis has runs (response_schema_conformance among them) but this one, replaced by
# test_fuzz_api.py's accepted_when_valid.
EXCLUDED_CHECKS = [positive_data_acceptance]
