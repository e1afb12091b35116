"""`trainplane budgets ...` and the dry run's output (issue 25; docs/BUDGETS.md; registered in trainplane/cli.py).

trainplane budgets create budget.yaml      # name, scope, amount_usd, period, thresholds
trainplane budgets list
trainplane budgets get BUDGET_ID
trainplane budgets raise BUDGET_ID 800     # resumes the jobs it paused
trainplane budgets delete BUDGET_ID
trainplane budgets override BUDGET_ID JOB_ID --reason "..."   # admins: one job over budget
trainplane budgets forecast-accuracy       # the forecast's median absolute % error per shape
trainplane jobs submit job.yaml --dry-run  # the forecast; nothing is created
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from schemas.budgets import BudgetView, Forecast
from trainplane.cli_output import Options, _opts, _print_json, _print_raw, _print_table, handles_api_errors, load_document, out

budgets_app = typer.Typer(no_args_is_help=True, help="Budgets: USD caps that notify, hold and pause with a checkpoint (issue 25).")


def _scope(view: BudgetView) -> str:
    return view.scope.kind.value + (f" {view.scope.value}" if view.scope.value else "")


def _print_budget(o: Options, view: BudgetView, verb: str = "") -> None:
    if o.json:
        _print_json(view)
        return
    prefix = f"{verb} " if verb else ""
    out.print(
        f"{prefix}budget {view.budget_id} ({view.name}, {_scope(view)}, {view.period.value}): "
        f"spent {view.spent_usd:.4f} of {view.amount_usd:.2f} USD ({view.percent_used:.1f}%), "
        f"reserved {view.reserved_usd:.4f}, left {view.left_usd:.4f}"
    )


@budgets_app.command("create")
@handles_api_errors
def create_budget(
    ctx: typer.Context, file: Annotated[str, typer.Argument(help="The budget as JSON or YAML ('-' reads stdin); see docs/BUDGETS.md.")]
) -> None:
    """Create a budget (admins: any scope; anyone else: itself or its own team)."""
    o = _opts(ctx)
    _print_budget(o, o.client().create_budget(load_document(file)), "created")


@budgets_app.command("list")
@handles_api_errors
def list_budgets(ctx: typer.Context) -> None:
    """The budgets you may see."""
    o = _opts(ctx)
    budgets = o.client().list_budgets()
    if o.json:
        _print_raw({"budgets": [b.model_dump(mode="json") for b in budgets]})
        return
    table = Table("ID", "NAME", "SCOPE", "PERIOD", "SPENT", "AMOUNT", "USED", "LEFT", "PAUSED JOBS")
    for b in budgets:
        table.add_row(
            b.budget_id,
            b.name,
            _scope(b),
            b.period.value,
            f"{b.spent_usd:.4f}",
            f"{b.amount_usd:.2f}",
            f"{b.percent_used:.1f}%",
            f"{b.left_usd:.4f}",
            str(len(b.paused_jobs)),
        )
    _print_table(table)


@budgets_app.command("get")
@handles_api_errors
def get_budget(ctx: typer.Context, budget_id: str) -> None:
    """One budget: its spend this period, reservations, what is left and the thresholds crossed."""
    o = _opts(ctx)
    view = o.client().get_budget(budget_id)
    _print_budget(o, view)
    if not o.json:
        ladder = ", ".join(f"{t.percent:g}% {t.action.value}" for t in view.thresholds)
        out.print(f"thresholds: {ladder}; crossed: {', '.join(f'{p:g}%' for p in view.crossed) or 'none'}")


@budgets_app.command("raise")
@handles_api_errors
def raise_budget(ctx: typer.Context, budget_id: str, amount_usd: Annotated[float, typer.Argument(min=0.000001)]) -> None:
    """Set a new amount; raising it above the spend resumes the jobs it paused (highest priority first)."""
    o = _opts(ctx)
    _print_budget(o, o.client().raise_budget(budget_id, amount_usd), "updated")


@budgets_app.command("delete")
@handles_api_errors
def delete_budget(ctx: typer.Context, budget_id: str) -> None:
    """Delete a budget (its paused jobs resume)."""
    _opts(ctx).client().delete_budget(budget_id)
    out.print(f"budget {budget_id} deleted")


@budgets_app.command("override")
@handles_api_errors
def override_budget(
    ctx: typer.Context,
    budget_id: str,
    job_id: str,
    reason: Annotated[str, typer.Option(help="Why the job may run over the budget (recorded in the event).")],
) -> None:
    """Let one job run over the budget (admins): it resumes; a budget.override event records who and why."""
    o = _opts(ctx)
    _print_budget(o, o.client().override_budget(budget_id, job_id, reason), f"job {job_id} may run over")


@budgets_app.command("forecast-accuracy")
@handles_api_errors
def forecast_accuracy(ctx: typer.Context) -> None:
    """How far the duration forecast was from what finished jobs took, per shape (it learns from each)."""
    o = _opts(ctx)
    accuracy = o.client().forecast_accuracy()
    if o.json:
        _print_json(accuracy)
        return
    table = Table("SHAPE", "JOBS", "MEDIAN |ERROR|", "S/STEP", "TOKENS/S")
    for s in accuracy.shapes:
        error = "-" if s.median_abs_error_percent is None else f"{s.median_abs_error_percent:.1f}%"
        per_step = "-" if s.seconds_per_step is None else f"{s.seconds_per_step:.3f}"
        tokens = "-" if s.tokens_per_second is None else f"{s.tokens_per_second:.0f}"
        table.add_row(s.shape, str(s.count), error, per_step, tokens)
    _print_table(table)


def print_forecast(o: Options, forecast: Forecast) -> None:
    """`jobs submit --dry-run`'s answer."""
    if o.json:
        _print_json(forecast)
        return
    hours = (forecast.duration_low_seconds / 3600, forecast.duration_seconds / 3600, forecast.duration_high_seconds / 3600)
    out.print(f"dry run: nothing was created. {forecast.units} x {forecast.gpu_type} at {forecast.hourly_usd:.4f} USD/h")
    out.print(f"duration {hours[0]:.2f}-{hours[2]:.2f} h (expected {hours[1]:.2f} h, basis {forecast.basis})")
    out.print(f"cost {forecast.total_low_usd:.4f}-{forecast.total_high_usd:.4f} USD (expected {forecast.total_usd:.4f})")
    out.print(f"queue position {forecast.queue_position}, estimated wait {forecast.estimated_wait_seconds:.0f} s")
    for b in forecast.budgets:
        held = " -> would wait (BUDGET)" if b.would_hold else ""
        out.print(f"budget {b.name} ({b.budget_id}): {b.left_usd:.4f} USD left, {b.left_after_usd:.4f} after this job{held}")
