"""Builders of valid requests and jobs for tests: the smallest CPU job the seed's schema accepts."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

from schemas.job import Job, SubmitJobRequest
from schemas.status import JobStatus

ALICE = "arn:aws:iam::123456789012:user/alice"
BOB = "arn:aws:iam::123456789012:user/bob"
ADMIN = "arn:aws:iam::123456789012:user/admin"

_ids = itertools.count(1)
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def request_body(**overrides: Any) -> dict[str, Any]:
    """A SubmitJobRequest as JSON: a tiny LoRA on a config-built llama, CPU only."""
    body: dict[str, Any] = {
        "name": "tiny-lora",
        "labels": {"team": "support"},
        "training_config": {
            "training_type": "LORA",
            "base_model": {
                "model_id": "tiny-llama",
                "source": "config",
                "tokenizer_id": "byte",
                "model_kwargs": {"architecture": "llama", "hidden_size": 16, "num_hidden_layers": 1, "vocab_size": 260},
            },
            "hyperparameters": {"max_steps": "4", "learning_rate": "0.001"},
        },
        "data_config": {"sources": [{"path": "s3://trainplane-artifacts/shared/train.jsonl"}], "batch_size": 2},
        "resource_config": {"gpu_count": 0},
    }
    body.update(overrides)
    return body


def submit_request(**overrides: Any) -> SubmitJobRequest:
    return SubmitJobRequest.model_validate(request_body(**overrides))


def make_job(
    *,
    owner: str = ALICE,
    status: JobStatus = JobStatus.PENDING,
    job_id: str | None = None,
    created_at: datetime | None = None,
    priority: int = 5,
    queue: str = "default",
    **overrides: Any,
) -> Job:
    """A stored-job record as the service would create it (version 1)."""
    n = next(_ids)
    request = submit_request(**overrides.pop("request", {}))
    created = created_at or T0 + timedelta(seconds=n)
    data = request.model_dump()
    data["scheduling_config"].update(priority=priority, queue=queue)
    data.update(
        job_id=job_id or f"job-{n:06d}",
        owner=owner,
        status=status,
        created_at=created,
        updated_at=created,
    )
    data.update(overrides)
    return Job.model_validate(data)
