"""Two principals of local mode (issue 11): bob's jobs cannot read, resume from or overwrite alice's
exported model or her job's files, and every object of hers is byte-identical afterwards.

alice's job runs the real trainer (tiny LoRA, CPU) and exports into her data area; its run spec carries
the AccessSet the trainer enforces (docs/SECURITY.md).
"""

from __future__ import annotations

import copy
import hashlib
import json
import time
from pathlib import Path
from typing import Any

import pytest

from functions.service.paths import principal_key
from localmode.credentials import load_or_create
from tests.e2e.conftest import REPO_ROOT, LocalPlane, PlaneFactory

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

WRITE = "output_config.output_path"
LORA_TINY = json.loads((REPO_ROOT / "examples" / "jobs" / "lora-tiny.json").read_text())


@pytest.fixture(scope="module")
def plane(module_plane_factory: PlaneFactory, tmp_path_factory: pytest.TempPathFactory) -> LocalPlane:
    state = tmp_path_factory.mktemp("isolation") / "state"
    state.mkdir()
    load_or_create(state, ("admin", "alice", "bob"))  # a second non-admin principal, persisted before `up`
    return module_plane_factory(state_dir=state)


def spec(name: str, **changes: Any) -> dict[str, Any]:
    body = copy.deepcopy(LORA_TINY)
    body["name"] = name
    body["data_config"]["sources"][0]["path"] = str(REPO_ROOT / "examples" / "data" / "tiny-qa.jsonl")
    body["training_config"]["hyperparameters"].update({"max_steps": "4", "logging_steps": "1", "eval_steps": "1000"})
    body["output_config"]["checkpoint"].update({"save_steps": 2, "metric_for_best_model": None, "greater_is_better": None})
    body["output_config"]["merge_lora"] = False
    body.pop("scheduling_config", None)
    for dotted, value in changes.items():
        target = body
        *parents, last = dotted.split(".")
        for part in parents:
            target = target.setdefault(part, {})
        target[last] = value
    return body


def wait_terminal(plane: LocalPlane, job_id: str, timeout: float = 300) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        job = plane.request("GET", f"/jobs/{job_id}").json()
        if job["status"] in {"COMPLETED", "FAILED", "CANCELLED"} or time.monotonic() > deadline:
            return dict(job)
        time.sleep(0.5)


def snapshot(plane: LocalPlane, *prefixes: str) -> dict[str, tuple[str, str]]:
    """key -> (ETag, sha256 of the bytes) of every object under the prefixes."""
    s3 = plane.client("s3")
    found: dict[str, tuple[str, str]] = {}
    for prefix in prefixes:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=plane.bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                body = s3.get_object(Bucket=plane.bucket, Key=obj["Key"])["Body"].read()
                found[obj["Key"]] = (obj["ETag"], hashlib.sha256(body).hexdigest())
    return found


def refused(plane: LocalPlane, body: dict[str, Any], field: str) -> None:
    response = plane.request("POST", "/jobs", json=body, principal="bob")
    assert response.status_code == 422, response.text
    assert response.json()["errors"][0]["field"] == field, response.text


def test_another_principal_cannot_read_resume_from_or_overwrite_alices_model(plane: LocalPlane, tmp_path: Path) -> None:
    alice_area = f"data/{principal_key(plane.principal('alice')['arn'])}/"
    export = f"s3://{plane.bucket}/{alice_area}models/first"
    # Given alice's job, run by the real trainer, exporting into her data area
    submitted = plane.request("POST", "/jobs", json=spec("alice-model", **{WRITE: export}))
    assert submitted.status_code == 201, submitted.text
    job_id = submitted.json()["job_id"]
    job = wait_terminal(plane, job_id)
    assert job["status"] == "COMPLETED", (job["status"], job.get("error_message"), plane.log_tail())
    checkpoint = job["checkpoints"][-1]["uri"]
    own = f"jobs/{job_id}/"
    # Its run spec carried the AccessSet, and its export is marked as hers
    run_spec = json.loads(plane.client("s3").get_object(Bucket=plane.bucket, Key=f"{own}config/run-001.json")["Body"].read())
    assert run_spec["access"]["owner"] == plane.principal("alice")["arn"] and f"s3://{plane.bucket}/{own}" in run_spec["access"]["write"]
    marker = plane.client("s3").get_object(Bucket=plane.bucket, Key=f"{alice_area}models/first/.trainplane-export.json")
    assert json.loads(marker["Body"].read())["owner"] == plane.principal("alice")["arn"]
    before = snapshot(plane, own, alice_area)
    assert any(key.endswith("adapter_model.safetensors") for key in before), sorted(before)

    # When bob names her model, her job's files, her checkpoint, or her places as his output
    model_field, data_field, output_field = "training_config.base_model.model_id", "data_config.sources[0].path", WRITE
    refused(plane, spec("bob-1", **{"training_config.base_model": {"model_id": export, "source": "s3"}}), model_field)
    refused(plane, spec("bob-2", **{"data_config.sources": [{"path": f"s3://{plane.bucket}/{own}metrics.jsonl"}]}), data_field)
    refused(plane, spec("bob-3", **{"training_config.resume_from_checkpoint": checkpoint}), "training_config.resume_from_checkpoint")
    refused(plane, spec("bob-4", **{WRITE: export}), output_field)
    refused(plane, spec("bob-5", **{WRITE: f"s3://{plane.bucket}/{own}model"}), output_field)
    # ... or local mode's state directory (where the emulated S3 and the journal live)
    refused(plane, spec("bob-6", **{"data_config.sources": [{"path": str(plane.state_dir / "credentials.json")}]}), data_field)
    # ... and her job itself is not his to retry or resume
    assert plane.request("POST", f"/jobs/{job_id}/retry", json={}, principal="bob").status_code == 404
    assert plane.request("POST", f"/jobs/{job_id}/resume", json={}, principal="bob").status_code == 404

    # Then every object of hers is byte-identical
    assert snapshot(plane, own, alice_area) == before

    # And alice herself may build on her export (the rule refuses others, not her)
    mine = plane.request("POST", "/jobs", json=spec("alice-next", **{"training_config.base_model": {"model_id": export, "source": "s3"}}))
    assert mine.status_code == 201, mine.text
    assert plane.request("POST", f"/jobs/{mine.json()['job_id']}/cancel", json={"reason": "not needed"}).status_code == 200
