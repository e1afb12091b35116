"""`trainplane placement JOB_ID`: what happened to a job's placement (docs/PLACEMENT.md), registered in trainplane/cli.py.

Every placement tried (pool, purchase, how it ended and why), the pools blocked, time to first step, each
recovery (PREEMPTED -> TRAINING) and its time, work lost per preemption, dollars saved against the first
on-demand candidate, and the per-candidate batch adaptation that keeps the global batch.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from trainplane.cli_output import _opts, _print_mapping, _print_raw, _print_table, _when, err, handles_api_errors


@handles_api_errors
def placement(
    ctx: typer.Context,
    job_id: str,
    as_json: Annotated[bool, typer.Option("--json", help="The placement record as JSON.")] = False,
) -> None:
    """Show a job's placements: each try, pools blocked, recoveries and their times, dollars saved."""
    o = _opts(ctx)
    record = o.client().placement(job_id)
    if as_json or o.json:
        _print_raw(record.model_dump(mode="json") if record is not None else None)
        return
    if record is None:
        err.print("this job has no placement record (no resource_config.placement, or not placed yet)")
        return
    recoveries = ", ".join(f"{r.seconds:.0f} s" if r.seconds is not None else "in progress" for r in record.recoveries)
    rows = {
        "time to first step": f"{record.time_to_first_step_seconds:.0f} s" if record.time_to_first_step_seconds is not None else "-",
        "recoveries": f"{len(record.recoveries)}" + (f" ({recoveries})" if recoveries else ""),
        "pools blocked": ", ".join(record.pools_blocked) or "-",
        "dollars saved": f"${record.dollars_saved_usd:,.2f} against the first on-demand candidate",
        "moved to on-demand": "yes (deadline)" if record.moved_to_on_demand else "no",
    }
    if record.at_risk:
        rows["at risk"] = record.at_risk
    _print_mapping(o, rows)
    table = Table("ATTEMPT", "CANDIDATE", "POOL", "STARTED", "OUTCOME", "WORK LOST", "WHY")
    for t in record.tries:
        lost = str(t.work_lost_steps) if t.work_lost_steps is not None else "-"
        table.add_row(str(t.attempt), str(t.candidate), t.pool, _when(t.started_at), t.outcome or "-", lost, escape(t.reason or ""))
    _print_table(table)
    if record.adaptations:
        batches = Table("CANDIDATE", "DEVICES", "PER-DEVICE BATCH", "ACCUMULATION", "GLOBAL BATCH")
        for a in record.adaptations:
            row = (a.candidate, a.world_size, a.per_device_train_batch_size, a.gradient_accumulation_steps, a.global_batch_size)
            batches.add_row(*map(str, row))
        _print_table(batches)
