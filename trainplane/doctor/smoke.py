"""`trainplane doctor --smoke`: one tiny CPU job through the whole deployment, then nothing left behind.

The job is a 2-layer llama built from its config (no download) with the byte tokenizer, trained for a
few steps on a dozen lines the doctor puts in the caller's own data area, on a CPU (`gpu_count 0`: the
deployment's cheapest compute, as the instance table resolves it). It must reach COMPLETED; its cost
is what the control plane recorded. The data object and the job (with its artifacts) are deleted
afterwards, whether it passed or not.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

from schemas.deployment import DeploymentInfo
from schemas.status import TERMINAL, JobStatus
from trainplane.client import Client
from trainplane.doctor.ports import Buckets
from trainplane.doctor.report import CheckResult

NAME = "smoke job"
SMOKE_STEPS = 4
_LINES = [
    {"prompt": f"Q: What is {a} plus {b}?\nA:", "completion": f" {a + b}"} for a, b in zip(range(1, 13), range(12, 0, -1), strict=True)
]


def smoke_request(data_uri: str) -> dict[str, Any]:
    return {
        "name": "trainplane-doctor-smoke",
        "labels": {"trainplane-doctor": "smoke"},
        "training_config": {
            "training_type": "LORA",
            "base_model": {
                "model_id": "tiny-llama",
                "source": "config",
                "tokenizer_id": "byte",
                "model_kwargs": {
                    "architecture": "llama",
                    "hidden_size": 32,
                    "intermediate_size": 64,
                    "num_hidden_layers": 1,
                    "num_attention_heads": 2,
                    "num_key_value_heads": 1,
                    "max_position_embeddings": 128,
                },
            },
            "hyperparameters": {"max_steps": str(SMOKE_STEPS), "learning_rate": "1e-3", "lora_rank": "4", "logging_steps": "1"},
        },
        "data_config": {"sources": [{"path": data_uri}], "max_seq_length": 64, "batch_size": 4},
        "resource_config": {"gpu_count": 0},
        "output_config": {"checkpoint": {"save_steps": SMOKE_STEPS, "save_total_limit": 1}},
    }


def run_smoke(
    client: Client, buckets: Buckets, info: DeploymentInfo, *, timeout: float, echo: Callable[[str], None]
) -> tuple[CheckResult, dict[str, Any]]:
    data_uri = f"{info.caller_data_uri.rstrip('/')}/trainplane-doctor/smoke-{uuid.uuid4().hex[:12]}.jsonl"
    summary: dict[str, Any] = {"data_uri": data_uri}
    try:
        buckets.put(data_uri, "".join(json.dumps(line) + "\n" for line in _LINES).encode())
    except Exception as exc:
        return CheckResult.failed(
            NAME,
            f"could not write {data_uri}: {exc}",
            "allow the caller s3:PutObject on its data area (and kms:GenerateDataKey on the stack's key: the bucket is SSE-KMS)",
        ), summary
    job_id: str | None = None
    try:
        job = client.submit(smoke_request(data_uri))
        job_id = summary["job_id"] = job.job_id
        echo(f"smoke job {job_id} submitted (CPU, {SMOKE_STEPS} steps); following it to COMPLETED ...")
        last: list[JobStatus] = []

        def show(update: Any) -> None:
            if not last or last[-1] != update.status:
                last.append(update.status)
                echo(f"  {update.status.value}")

        job = client.wait(job_id, until=TERMINAL, timeout=timeout, poll=2.0, on_update=show)
        summary.update(status=job.status.value, cost_usd=job.cost.estimated_cost_usd, instance_type=job.cost.instance_type)
        if job.status is not JobStatus.COMPLETED:
            why = f"{job.error_type.value if job.error_type else ''} {job.error_message or ''}".strip()
            return CheckResult.failed(
                NAME,
                f"job {job_id} ended {job.status.value}: {why}",
                f"read its logs: `trainplane jobs logs {job_id}` (kept until cleanup)",
            ), summary
        where = job.cost.instance_type or info.compute
        return CheckResult.ok(NAME, f"job {job_id} COMPLETED on {where}; cost ${job.cost.estimated_cost_usd:.4f}"), summary
    except Exception as exc:
        return CheckResult.failed(
            NAME, f"the smoke job did not complete: {exc}", "see the lines above; the job's logs: `trainplane jobs logs <id>`"
        ), summary
    finally:
        summary["cleaned_up"] = _clean_up(client, buckets, job_id, data_uri, timeout=timeout)


def _clean_up(client: Client, buckets: Buckets, job_id: str | None, data_uri: str, *, timeout: float) -> bool:
    cleaned = True
    if job_id is not None:
        try:
            if client.get(job_id).status not in TERMINAL:
                client.cancel(job_id, reason="trainplane doctor: smoke test over")
                client.wait(job_id, until=TERMINAL, timeout=timeout)
            client.delete(job_id)  # the job's items and its objects under jobs/<id>/
        except Exception:
            cleaned = False
    try:
        buckets.delete(data_uri)
    except Exception:
        cleaned = False
    return cleaned
