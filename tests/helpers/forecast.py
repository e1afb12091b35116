"""An in-memory ShapeRecords (functions/service/ports.py) and completed-job builders for the forecast's tests."""

from __future__ import annotations

import threading
from typing import Any

from functions.errors import ConcurrentModification
from schemas.budgets import ShapeRecord
from schemas.job import Job
from schemas.status import JobStatus
from tests.helpers.jobs import make_job


class InMemoryShapeRecords:
    def __init__(self) -> None:
        self.records: dict[str, ShapeRecord] = {}
        self._lock = threading.Lock()

    def get(self, shape: str) -> ShapeRecord | None:
        return self.records.get(shape)

    def put(self, record: ShapeRecord, expected_version: int) -> None:
        with self._lock:
            stored = self.records.get(record.shape)
            if (stored.version if stored else 0) != expected_version:
                raise ConcurrentModification(f"forecast shape {record.shape}")
            self.records[record.shape] = record.model_copy(update={"version": expected_version + 1})

    def list(self) -> list[ShapeRecord]:
        return list(self.records.values())


def finished_job(
    steps: int,
    seconds: float,
    *,
    gpus: int = 1,
    tokens_per_second: float | None = None,
    status: JobStatus = JobStatus.COMPLETED,
    scheduling: dict[str, Any] | None = None,
    model_id: str = "meta-llama/Llama-3.2-1B",
) -> Job:
    """A COMPLETED H100 LoRA job of `steps` max_steps whose runs took `seconds` in all."""
    training = {
        "training_type": "LORA",
        "base_model": {"model_id": model_id},
        "hyperparameters": {"max_steps": str(steps)},
    }
    return make_job(
        status=status,
        request={
            "training_config": training,
            "resource_config": {"gpu_count": gpus, "gpu_type": "H100"},
            "scheduling_config": scheduling or {},
        },
        progress={"percent": 100.0, "step": steps, "total_steps": steps, "tokens_per_second": tokens_per_second, "attempt": 1},
        cost={"attempts": [{"attempt": 1, "run_seconds": seconds}]},
    )
