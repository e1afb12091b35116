"""DeepFinery's POST /train (seeds/004) through `trainplane up` with the real trainer: the seed's own
sample payload, with what only this machine can offer changed (its paths, a tiny model saved where
model_id points, no GPUs, a few steps), trains to `succeeded`; the run's layout is on S3; a second run
of the same run_id with resume_from_checkpoint resumes from the highest step there.
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Any

import pytest

from functions.service.paths import data_prefix
from tests.e2e.conftest import LocalPlane
from tests.unit.test_train_api import SEED_PAYLOAD

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def tiny_model_dir(where: Path) -> Path:
    """A 1-layer llama and the byte tokenizer, saved as a Hugging Face model directory (no download)."""
    from trainer.tokenizer import ByteTokenizer
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = ByteTokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2
    )
    where.mkdir(parents=True, exist_ok=True)
    LlamaForCausalLM(config).save_pretrained(where)
    tokenizer.save_pretrained(where)
    return where


def wait_for(plane: LocalPlane, run_id: str, *words: str, timeout: float = 300) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    body: dict[str, Any] = {}
    while time.monotonic() < deadline:
        reply = plane.request("GET", f"/train/{run_id}")
        assert reply.status_code == 200, reply.text
        body = reply.json()
        if body["status"] in words:
            return body
        time.sleep(0.5)
    raise AssertionError(f"run {run_id} did not reach {words}: {body}\n{plane.log_tail()}")


def test_the_seeds_payload_trains_keeps_the_layout_and_a_second_run_resumes(local_plane: LocalPlane, tmp_path: Path) -> None:
    # Given the seed's sample payload with this machine's paths: the model saved at model_id's path,
    # the dataset ({"text": ...} lines) in a local file, the runs under alice's area of the bucket
    model = tiny_model_dir(tmp_path / "meta-llama" / "Llama-3-8B")
    data = tmp_path / "fraud" / "aml_ruleset.jsonl"
    data.parent.mkdir(parents=True)
    data.write_text("".join(json.dumps({"text": f"rule {i}: flag transfers over {i * 100} within a day"}) + "\n" for i in range(40)))
    base = f"s3://{local_plane.bucket}/{data_prefix(local_plane.principal('alice')['arn'])}runs-{tmp_path.name}"
    body = copy.deepcopy(SEED_PAYLOAD)
    body.update(model_id=str(model), dataset_uri=str(data), checkpoint_base_uri=base, gpus_per_node=0)
    body["extra_args"] = {"max_steps": 4, "lr": 3e-5, "batch_size": 2, "save_steps": 2, "max_seq_len": 64}
    # (the seed's image is DeepFinery's stock trainer, which our trainer serves; another image would be a custom
    # one, which local mode refuses, naming it: it has no container runtime)
    other = {**body, "image": "ghcr.io/someone/trainer:1", "run_id": "not-stock"}
    refused = local_plane.request("POST", "/train", json=other)
    assert refused.status_code == 422 and refused.json()["errors"][0]["field"] == "image", refused.text
    # When it is posted (signed with IAM: no X-TRAINER-TOKEN)
    reply = local_plane.request("POST", "/train", json=body)
    assert reply.status_code == 201, reply.text
    first = reply.json()
    assert first["status"] == "submitted" and first["run_id"] == "aml_ruleset_v4"
    # Then the run succeeds
    assert wait_for(local_plane, "aml_ruleset_v4", "succeeded", "failed")["status"] == "succeeded"
    # And the seed's layout is on S3 under <base>/<run_id>/framework=hf/
    s3 = local_plane.client("s3")
    prefix = base.split(local_plane.bucket + "/", 1)[1] + "/aml_ruleset_v4/framework=hf/"
    keys = {o["Key"][len(prefix) :] for o in s3.list_objects_v2(Bucket=local_plane.bucket, Prefix=prefix).get("Contents", [])}
    assert {"config/run.json", "logs/.keep", "checkpoints/step-000004.json", "checkpoints/step-000004/manifest.json"} <= keys
    assert ".trainplane-export.json" in keys  # the run's root is claimed for alice (docs/SECURITY.md)
    assert "checkpoints/step-000002.json" in keys and any(k.startswith("model/") for k in keys)
    entry = json.loads(s3.get_object(Bucket=local_plane.bucket, Key=prefix + "checkpoints/step-000004.json")["Body"].read())
    assert entry["step"] == 4 and entry["job_id"] == first["job_id"]
    run = json.loads(s3.get_object(Bucket=local_plane.bucket, Key=prefix + "config/run.json")["Body"].read())
    assert run["job_id"] == first["job_id"] and run["training_config"]["framework"]["type"] == "HF_TRAINER"
    # and the trainer's GPU telemetry (issue 27.3) is served: this CPU host's attempt says it had no NVML
    system = local_plane.request("GET", f"/jobs/{first['job_id']}/metrics/system").json()
    (attempt,) = system["attempts"]
    assert attempt["attempt"] == 1 and (attempt["devices"] if attempt["available"] else attempt["reason"]), system

    # When a second run of the same run_id resumes, to step 6
    body["extra_args"]["max_steps"] = 6
    second = local_plane.request("POST", "/train", json=body).json()
    assert second["job_id"] != first["job_id"]
    assert wait_for(local_plane, "aml_ruleset_v4", "succeeded", "failed")["status"] == "succeeded"
    # Then it started from step 4, the highest step there, and wrote step 6 beside the others
    points = local_plane.request("GET", f"/jobs/{second['job_id']}/metrics").json()["points"]
    assert min(p["step"] for p in points) == 5 and max(p["step"] for p in points) == 6
    logs = "\n".join(line["message"] for line in local_plane.request("GET", f"/jobs/{second['job_id']}/logs").json()["lines"])
    assert "checkpoints/step-000004 at step 4" in logs
    assert s3.get_object(Bucket=local_plane.bucket, Key=prefix + "checkpoints/step-000006.json")["Body"].read()

    # And a third run that does not ask to resume is refused by the trainer, not run over the others
    body["resume_from_checkpoint"] = False
    local_plane.request("POST", "/train", json=body)
    failed = wait_for(local_plane, "aml_ruleset_v4", "failed", "succeeded")
    assert failed["status"] == "failed" and "already holds checkpoints up to step 6" in failed["detail"]
    # A run outside alice's areas is refused by the same path check as POST /jobs, naming the /train field
    elsewhere = f"s3://{local_plane.bucket}/data/someone-else/runs"
    refused = local_plane.request("POST", "/train", json={**body, "run_id": "elsewhere", "checkpoint_base_uri": elsewhere})
    assert refused.status_code == 422 and refused.json()["errors"][0]["field"] == "checkpoint_base_uri", refused.text
    # GET of a run nobody submitted is a 404; nemo is a clear 422
    assert local_plane.request("GET", "/train/never-submitted").status_code == 404
    nemo = local_plane.request("POST", "/train", json={**body, "framework": "nemo", "run_id": "n1"})
    assert nemo.status_code == 422 and nemo.json()["errors"][0]["field"] == "framework"
