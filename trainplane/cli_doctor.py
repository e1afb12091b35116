"""`trainplane doctor`: is a deployment ready to train? (registered in trainplane/cli.py)

trainplane doctor --stack Trainplane-prod --region eu-west-1 [--smoke] [--json]
trainplane doctor --state-dir .state                             # local mode

One line per check (✓ pass, ✗ fail with the fix under it, - does not apply, with why); exit 0 only
when nothing failed (and, with --smoke, the smoke job COMPLETED). The checks: trainplane/doctor/.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from trainplane.cli_output import _opts, err, out
from trainplane.endpoint import state_dir_of
from trainplane.errors import TrainplaneError

MARKS = {"pass": "[green]✓[/green]", "fail": "[red]✗[/red]", "skip": "[dim]-[/dim]"}


def doctor(
    ctx: typer.Context,
    stack: Annotated[str | None, typer.Option(help="The cloud stack, e.g. Trainplane-prod (with --region).")] = None,
    region: Annotated[str | None, typer.Option(help="The stack's region (default: the global --region, then the AWS config).")] = None,
    state_dir: Annotated[Path | None, typer.Option(help="Local mode's state directory: check local mode instead of a stack.")] = None,
    smoke: Annotated[bool, typer.Option(help="Then submit a tiny CPU job, follow it to COMPLETED, print its cost, clean up.")] = False,
    smoke_timeout: Annotated[float, typer.Option(min=10, help="Seconds the smoke job may take.")] = 1800.0,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document instead of the checklist.")] = False,
    unused_instance_type: Annotated[
        list[str] | None,
        typer.Option(
            "--unused-instance-type", help="An instance type the team will not use (e.g. ml.p5.48xlarge): its quota is not required."
        ),
    ] = None,
) -> None:
    """Check a deployment: credentials, resources, code version, image, log group, quotas (exit 0 only when all pass)."""
    from trainplane import doctor as checks  # boto3 and the checks load for this command only

    o = _opts(ctx)
    as_json = as_json or o.json
    echo = (lambda _line: None) if as_json else (lambda line: out.print(escape(line)))
    try:
        if stack is not None:
            where = region or o.region or _configured_region()
            if not where:
                err.print("[red]error[/red] --stack needs --region (or a region in the AWS config)")
                raise typer.Exit(2)
            unused = frozenset(unused_instance_type or ())
            report = checks.diagnose_stack(stack, where, smoke=smoke, smoke_timeout=smoke_timeout, echo=echo, unused_instance_types=unused)
        else:
            directory = state_dir_of(state_dir or o.state_dir)  # then $TRAINPLANE_STATE_DIR, then ./.state
            report = checks.diagnose_local(directory, smoke=smoke, smoke_timeout=smoke_timeout, echo=echo)
    except TrainplaneError as exc:
        err.print(f"[red]error[/red] {escape(str(exc))}")
        raise typer.Exit(1) from exc
    if as_json:
        out.print_json(json.dumps(report.to_dict()))
    else:
        out.print(f"trainplane doctor: {escape(report.target)}")
        for check in report.checks:
            out.print(f"{MARKS[check.mark.value]} {escape(check.name)}: {escape(check.detail)}", soft_wrap=True)
            if check.fix:
                out.print(f"    [bold]fix:[/bold] {escape(check.fix)}", soft_wrap=True)
        failed = len(report.failures())
        out.print("[green]all checks passed[/green]" if report.ok else f"[red]{failed} check(s) failed[/red]")
    raise typer.Exit(0 if report.ok else 1)


def _configured_region() -> str | None:
    import botocore.session

    return botocore.session.Session().get_config_variable("region")
