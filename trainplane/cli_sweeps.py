"""`trainplane sweeps ...`: hyperparameter sweeps over the SDK (registered in trainplane/cli.py).

trainplane sweeps create sweep.yaml [--wait]   # --wait: a live table of the trials until the sweep ends
trainplane sweeps list
trainplane sweeps get swp-...                   # the trials sorted by the metric, best first; --json for all
trainplane sweeps pause|resume|cancel swp-...
trainplane sweeps delete swp-...                # a finished sweep's record (the trial jobs stay)
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from schemas.sweeps import Goal, Sweep, SweepStatus
from trainplane.cli_output import (
    Options,
    _opts,
    _print_raw,
    _print_table,
    _when,
    err,
    handles_api_errors,
    load_document,
    out,
    resolve_relative_data_paths,
)

sweeps_app = typer.Typer(no_args_is_help=True, help="Hyperparameter sweeps: trials are ordinary jobs, decided by Optuna.")

UNSUCCESSFUL = frozenset({SweepStatus.FAILED, SweepStatus.CANCELLED})


@sweeps_app.command("create")
@handles_api_errors
def create(
    ctx: typer.Context,
    file: Annotated[str, typer.Argument(help="A sweep (name, job_template, hyperParameterTuningConfig) as JSON or YAML ('-': stdin).")],
    wait: Annotated[bool, typer.Option("--wait", help="Show the trials live until the sweep ends.")] = False,
    timeout: Annotated[float | None, typer.Option(help="With --wait: give up after this many seconds.")] = None,
) -> None:
    """Create a sweep; the template is validated as POST /jobs validates it, and every parameter's target."""
    o = _opts(ctx)
    document = load_document(file)
    template = document.get("job_template")
    if file != "-" and isinstance(template, dict):
        resolve_relative_data_paths(template, Path(file).parent)
    sweep = o.client().create_sweep(document)
    if not wait:
        _print_line(o, sweep, "created")
        return
    _wait(o, sweep.sweep_id, timeout)


@sweeps_app.command("list")
@handles_api_errors
def list_sweeps(
    ctx: typer.Context,
    limit: Annotated[int, typer.Option(min=1, help="At most this many sweeps (newest first).")] = 50,
) -> None:
    """List sweeps, newest first (every principal's for admins)."""
    o = _opts(ctx)
    sweeps: list[Sweep] = []
    for sweep in o.client().list_sweeps(page_size=min(limit, 100)):
        sweeps.append(sweep)
        if len(sweeps) >= limit:
            break
    if o.json:
        _print_raw({"sweeps": [s.model_dump(mode="json", by_alias=True) for s in sweeps]})
        return
    table = Table("SWEEP ID", "NAME", "METHOD", "STATUS", "TRIALS", "METRIC", "BEST", "CREATED")
    for s in sweeps:
        tuning = s.hyperparameter_tuning_config
        best = f"{s.best_trial.value:.6g} (trial {s.best_trial.number})" if s.best_trial else "-"
        table.add_row(
            s.sweep_id,
            escape(s.name),
            tuning.method.value,
            s.status.value,
            str(tuning.effective_max_trials()),
            f"{tuning.metric.name} ({tuning.metric.goal.value})",
            best,
            _when(s.created_at),
        )
    _print_table(table)
    if not sweeps:
        err.print("no sweeps")


@sweeps_app.command("get")
@handles_api_errors
def get(
    ctx: typer.Context,
    sweep_id: str,
    as_json: Annotated[bool, typer.Option("--json", help="The whole sweep record as JSON.")] = False,
) -> None:
    """Show a sweep and its trials, sorted by the metric (best first)."""
    o = _opts(ctx)
    sweep = o.client().get_sweep(sweep_id)
    if as_json or o.json:
        _print_json_alias(sweep)
        return
    _print_table(trials_table(sweep))
    out.print(summary_line(sweep))


def _action(verb: str, help_text: str) -> None:
    @sweeps_app.command(verb, help=help_text)
    @handles_api_errors
    def command(ctx: typer.Context, sweep_id: str, reason: Annotated[str, typer.Option(help="Recorded on the sweep.")] = "") -> None:
        o = _opts(ctx)
        method = getattr(o.client(), f"{verb}_sweep")
        _print_line(o, method(sweep_id, reason or None), {"pause": "paused", "resume": "resumed", "cancel": "cancelled"}[verb])


_action("pause", "Pause a sweep: no new trials; running trials pause with a checkpoint.")
_action("resume", "Resume a paused sweep: its trials resume from their checkpoints, new trials start.")
_action("cancel", "Cancel a sweep and every trial still running.")


@sweeps_app.command("delete")
@handles_api_errors
def delete(ctx: typer.Context, sweep_id: str) -> None:
    """Delete a finished sweep's record; its trial jobs stay."""
    o = _opts(ctx)
    o.client().delete_sweep(sweep_id)
    if o.json:
        _print_raw({"deleted": sweep_id})
    else:
        out.print(f"deleted {sweep_id}")


def trials_table(sweep: Sweep) -> Table:
    """The trials, best first by the metric (trials without a value after, by number)."""
    tuning = sweep.hyperparameter_tuning_config
    sign = -1.0 if tuning.metric.goal == Goal.MAXIMIZE else 1.0
    names = list(tuning.parameters)
    table = Table("TRIAL", *(n.upper() for n in names), tuning.metric.name.upper(), "STEP", "STATE", "JOB", "JOB STATUS", "REASON")
    ordered = sorted(sweep.trials, key=lambda t: (t.value is None, sign * (t.value or 0.0), t.number))
    for t in ordered:
        last_step = max(t.intermediate_values) if t.intermediate_values else None
        shown = t.value if t.value is not None else (t.intermediate_values[last_step] if last_step is not None else None)
        table.add_row(
            str(t.number),
            *(_value(t.params.get(n)) for n in names),
            "-" if shown is None else f"{shown:.6g}",
            "-" if last_step is None else str(last_step),
            t.state.value,
            t.job_id or "-",
            t.job_status or "-",
            escape((t.reason or "")[:80]),
        )
    return table


def summary_line(sweep: Sweep) -> str:
    c = sweep.counts
    best = f"; best trial {sweep.best_trial.number}: {sweep.best_trial.value:.6g}" if sweep.best_trial else ""
    reason = f" ({escape(sweep.status_reason)})" if sweep.status_reason else ""
    limit = sweep.hyperparameter_tuning_config.effective_max_trials()
    return (
        f"{sweep.sweep_id} [bold]{sweep.status.value}[/bold]{reason}: {c.total}/{limit} "
        f"trials, {c.running} running, {c.completed} completed, {c.pruned} pruned, {c.failed} failed{best}"
    )


def _wait(o: Options, sweep_id: str, timeout: float | None) -> None:
    client = o.client()
    if o.json:
        sweep = client.wait_sweep(sweep_id, timeout=timeout)
        _print_json_alias(sweep)
    else:
        with Live(console=out, refresh_per_second=2) as live:

            def show(current: Sweep) -> None:
                live.update(Group(trials_table(current), Text.from_markup(summary_line(current))))

            sweep = client.wait_sweep(sweep_id, timeout=timeout, on_update=show)
    if sweep.status in UNSUCCESSFUL:
        raise typer.Exit(1)


def _print_line(o: Options, sweep: Sweep, verb: str) -> None:
    if o.json:
        _print_json_alias(sweep)
    else:
        tuning = sweep.hyperparameter_tuning_config
        out.print(f"{verb} {sweep.sweep_id} ({escape(sweep.name)}): {tuning.method.value}, {sweep.status.value}")


def _print_json_alias(sweep: Sweep) -> None:
    typer.echo(sweep.model_dump_json(indent=2, by_alias=True))


def _value(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return "-" if value is None else str(value)
