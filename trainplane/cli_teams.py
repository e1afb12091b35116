"""`trainplane teams ...`: teams, their quotas per GPU type and fair share (registered in trainplane/cli.py).

trainplane teams list
trainplane teams get research          # nominal, in use, borrowed, lent, queued, usage per GPU type
trainplane teams put research team.yaml   # admins: the whole team (members, quotas, weight, ...)
trainplane teams delete research       # admins: its members fall back to the default team
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from schemas.teams import Team, TypeQuota
from trainplane.cli_output import _opts, _print_json, _print_raw, _print_table, handles_api_errors, load_document, out

teams_app = typer.Typer(no_args_is_help=True, help="Teams: GPU quotas by type, fair-share weights, priority ceilings (issue 24).")


def _quota(q: TypeQuota) -> str:
    return f"{q.nominal} (+{q.borrow_limit} borrow, {q.lend_limit} lend)"


def _queues(team: Team) -> str:
    return "any" if team.queues is None else ", ".join(team.queues) or "none"


def _members(team: Team) -> str:
    """Who is in it, as admins see it (a member's own view has no member list: "-")."""
    m = team.members
    parts = [*m.arns, *(f"group:{g}" for g in m.cognito_groups)]
    return ", ".join(parts) or "-"


@teams_app.command("list")
@handles_api_errors
def list_teams(ctx: typer.Context) -> None:
    """Every team (admins), or your own team."""
    o = _opts(ctx)
    teams = o.client().list_teams()
    if o.json:
        _print_raw({"teams": [t.model_dump(mode="json") for t in teams]})
        return
    table = Table("TEAM", "MEMBERS (ARNs, Cognito groups)", "WEIGHT", "MAX PRIORITY", "QUEUES", "QUOTAS (nominal, borrow, lend)")
    for t in teams:
        quotas = "; ".join(f"{k}={_quota(q)}" for k, q in t.quotas.items() if q.nominal < 1_000_000) or "no limit of its own"
        table.add_row(t.name, _members(t), f"{t.weight:g}", str(t.max_priority), _queues(t), quotas)
    _print_table(table)


@teams_app.command("get")
@handles_api_errors
def get_team(ctx: typer.Context, name: str) -> None:
    """A team's live view per GPU type and its fair-share factor."""
    o = _opts(ctx)
    view = o.client().get_team(name)
    if o.json:
        _print_json(view)
        return
    t = view.team
    out.print(f"team {t.name}: weight {t.weight:g}, max priority {t.max_priority}, queues {_queues(t)}")
    out.print(f"members: {_members(t)}")
    out.print(f"fair share {view.fair_share:.3f}, decayed usage {view.usage:.2f} price-weighted unit-hours")
    table = Table("GPU TYPE", "NOMINAL", "IN USE", "BORROWED", "LENT", "QUEUED", "USAGE")
    for r in view.types:
        nominal = "no limit" if r.nominal >= 1_000_000 else str(r.nominal)
        table.add_row(r.gpu_type, nominal, str(r.in_use), str(r.borrowed), str(r.lent), str(r.queued), f"{r.usage:.2f}")
    _print_table(table)


@teams_app.command("put")
@handles_api_errors
def put_team(
    ctx: typer.Context,
    name: str,
    file: Annotated[str, typer.Argument(help="The team as JSON or YAML ('-' reads stdin); see docs/TEAMS.md.")],
) -> None:
    """Define or replace a team (admins only)."""
    o = _opts(ctx)
    team = o.client().put_team(name, load_document(file))
    if o.json:
        _print_json(team)
        return
    out.print(f"team {team.name} stored (version {team.version})")


@teams_app.command("delete")
@handles_api_errors
def delete_team(ctx: typer.Context, name: str) -> None:
    """Delete a team (admins only); its members fall back to the default team."""
    _opts(ctx).client().delete_team(name)
    out.print(f"team {name} deleted")
