"""How the CLI writes a job for people: its status in colour, progress, resources, metrics (trainplane/cli.py's
job commands and the waits' progress line read them from here)."""

from __future__ import annotations

from typing import Any

from rich.markup import escape

from schemas.api import MetricsPoint
from schemas.job import Job
from schemas.status import JobStatus
from trainplane.cli_output import Options, _print_json, out

UNSUCCESSFUL = frozenset({JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.PREEMPTED})
STATUS_STYLE = {
    JobStatus.COMPLETED: "green",
    JobStatus.FAILED: "red",
    JobStatus.CANCELLED: "yellow",
    JobStatus.PREEMPTED: "yellow",
    JobStatus.PAUSED: "cyan",
}


def print_job_line(o: Options, job: Job, verb: str) -> None:
    if o.json:
        _print_json(job)
    else:
        out.print(f"{verb} {job.job_id} ({escape(job.name)}): {status_text(job.status)}")


def status_text(status: JobStatus) -> str:
    style = STATUS_STYLE.get(status)
    return f"[{style}]{status.value}[/{style}]" if style else status.value


def progress_text(job: Job) -> str:
    p = job.progress
    parts = [f"step {p.step}/{p.total_steps}" if p.total_steps else f"step {p.step}"]
    if p.loss is not None:
        parts.append(f"loss {p.loss:.4f}")
    if p.eta_seconds:
        parts.append(f"eta {p.eta_seconds:.0f}s")
    return f"{p.percent:.0f}% " + ", ".join(parts)


def resources_text(job: Job) -> str:
    r = job.resource_config
    gpus = "cpu only" if r.gpu_count == 0 else f"{r.gpu_count}x {r.gpu_type or 'GPU'}"
    return gpus + (f" x {r.node_count} nodes" if r.node_count > 1 else "")


def metrics_text(values: dict[str, float]) -> str:
    return ", ".join(f"{k}={v:.4g}" for k, v in sorted(values.items()))


def metric_columns(points: list[MetricsPoint]) -> list[str]:
    preferred = ["epoch", "loss", "eval_loss", "learning_rate", "grad_norm", "tokens_per_second"]
    present = {k for p in points for k in p.model_dump(exclude_none=True) if k not in {"step", "attempt"}}
    return [n for n in preferred if n in present] + sorted(present - set(preferred))


def fmt(value: Any) -> str:
    if value is None:
        return ""
    return f"{value:.4g}" if isinstance(value, float) else str(value)
