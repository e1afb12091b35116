"""POST /jobs?dry_run=true's answer (issue 25; docs/BUDGETS.md): what a job would get and cost, and what each
covering budget would have left. Its own module: the job routes (functions/handlers/api.py) name it at import,
while the budgets' records load on the budgets routes' first request (functions/handlers/models.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class BudgetLeft(BaseModel):
    """What one covering budget would have left if the job ran as forecast."""

    model_config = ConfigDict(defer_build=True)  # built on first use: cold start

    budget_id: str
    name: str
    left_usd: float = Field(description="Now: amount - spent - reserved.")
    left_after_usd: float = Field(description="After the job's forecast total (upper end of the range).")
    would_hold: bool = Field(description="True when the job would wait with reason BUDGET.")


class Forecast(BaseModel):
    """POST /jobs?dry_run=true: what the job would get and cost; nothing is created."""

    model_config = ConfigDict(defer_build=True)  # built on first use: cold start

    dry_run: Literal[True] = True
    gpu_type: str
    units: int = Field(description="GPUs over all nodes (CPU slots for a CPU job).")
    hourly_usd: float
    duration_seconds: float = Field(description="The expected duration.")
    duration_low_seconds: float
    duration_high_seconds: float
    total_usd: float
    total_low_usd: float
    total_high_usd: float
    basis: str = Field(
        description=(
            "What the duration comes from: the shape's finished jobs (steps x measured seconds/step, or their durations),"
            " else `max_runtime_seconds` (the job's own cap) or `prior` (docs/BUDGETS.md)."
        )
    )
    shape: str = Field(
        description="The forecast's shape key: GPU type x units / training type / model size bucket (e.g. H100x1/LORA/3B-10B)."
    )
    queue_position: int
    estimated_wait_seconds: float
    budgets: list[BudgetLeft]
