"""How the CLI shows a wait (`jobs submit --wait [--follow]`, `jobs watch`, `jobs reconnect`).

The waiting itself is the SDK's (trainplane/waits.py); here: the progress bar on the CLI's console, log
lines above it (or one JSON line each with -o json), the final status line, and the exit codes: 0 when
the job COMPLETED, trains (reconnect) or PAUSED; 1 when it FAILED, was CANCELLED or PREEMPTED for
good (with the job's error and the last log lines on stderr) or the wait timed out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

from schemas.api import LogLine
from schemas.job import Job
from schemas.status import JobStatus
from trainplane.client import Client
from trainplane.errors import JobFailed, WaitTimeout
from trainplane.waits import ProgressView

STATUS_STYLE = {JobStatus.COMPLETED: "green", JobStatus.FAILED: "red", JobStatus.CANCELLED: "yellow", JobStatus.PREEMPTED: "yellow"}


def run_wait(
    client: Client,
    job_id: str,
    *,
    json_output: bool,
    console: Console,
    errors: Console,
    follow: bool,
    wait: Callable[..., Job],
) -> None:
    def json_line(line: LogLine) -> None:
        typer.echo(line.model_dump_json())

    options: dict[str, Any] = {"follow_logs": follow}
    if json_output:
        options["on_log"] = json_line
    else:
        options["progress"] = ProgressView(job_id, console=console)
    try:
        job = wait(client, **options)
    except WaitTimeout as exc:
        errors.print(f"[yellow]{escape(exc.message)}[/yellow]")
        raise typer.Exit(1) from exc
    except JobFailed as exc:
        job = exc.job
        if job.status != JobStatus.PAUSED:
            _report(job, json_output, console)
            errors.print(f"[red]{escape(exc.message)}[/red]")
            for line in exc.last_log_lines:
                errors.print(f"  | {line}", markup=False, highlight=False)
            raise typer.Exit(1) from exc
    _report(job, json_output, console)


def _report(job: Job, json_output: bool, console: Console) -> None:
    if json_output:
        typer.echo(job.model_dump_json(indent=2))
        return
    style = STATUS_STYLE.get(job.status)
    status = f"[{style}]{job.status.value}[/{style}]" if style else job.status.value
    console.print(f"{job.job_id} {status}" + (f": {escape(job.error_message)}" if job.error_message else ""))
