"""`trainplane policies ...`: retraining policies over the SDK (registered in trainplane/cli.py; helpers: cli_output.py).

trainplane policies create policy.yaml
trainplane policies list
trainplane policies get pol-...            # --json for the whole record
trainplane policies update pol-... [changes.yaml] [--enable|--disable]
trainplane policies delete pol-...
trainplane policies put-event "Drift detected" --detail '{"model": "support-bot"}'
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from schemas.retraining import CUSTOM_EVENT_SOURCE, EventPatternTrigger, RetrainingPolicy, S3Trigger, ScheduleTrigger
from trainplane.cli_output import (
    Options,
    _opts,
    _print_json,
    _print_mapping,
    _print_raw,
    _print_table,
    _when,
    err,
    handles_api_errors,
    load_document,
    out,
    resolve_relative_data_paths,
)

policies_app = typer.Typer(
    no_args_is_help=True, help="Retraining policies: start jobs when data lands in S3, on a schedule, or on an event."
)


@policies_app.command("create")
@handles_api_errors
def create(
    ctx: typer.Context,
    file: Annotated[str, typer.Argument(help="A retraining policy as JSON or YAML ('-' reads stdin).")],
) -> None:
    """Create a policy; it is validated whole now (template, mapping, schedule)."""
    o = _opts(ctx)
    document = load_document(file)
    template = document.get("job_template")
    if file != "-" and isinstance(template, dict):
        resolve_relative_data_paths(template, Path(file).parent)
    _print_policy_line(o, o.client().create_policy(document), "created")


@policies_app.command("list")
@handles_api_errors
def list_policies(
    ctx: typer.Context,
    limit: Annotated[int, typer.Option(min=1, help="At most this many policies (newest first).")] = 50,
) -> None:
    """List policies, newest first (every principal's for admins)."""
    o = _opts(ctx)
    policies: list[RetrainingPolicy] = []
    for policy in o.client().list_policies(page_size=min(limit, 100)):
        policies.append(policy)
        if len(policies) >= limit:
            break
    if o.json:
        _print_raw({"policies": [p.model_dump(mode="json") for p in policies]})
        return
    table = Table("POLICY ID", "NAME", "TRIGGER", "CONCURRENCY", "ENABLED", "LAST FIRED", "LAST JOB")
    for column in table.columns:
        column.no_wrap = column.header not in ("NAME", "TRIGGER")
    for p in policies:
        table.add_row(
            p.policy_id,
            escape(p.name),
            escape(trigger_text(p)),
            p.concurrency_policy.value,
            "yes" if p.enabled else "no",
            _when(p.last_fired_at),
            p.last_job_id or "-",
        )
    _print_table(table)
    if not policies:
        err.print("no policies")


@policies_app.command("get")
@handles_api_errors
def get(
    ctx: typer.Context,
    policy_id: str,
    as_json: Annotated[bool, typer.Option("--json", help="The whole policy record as JSON.")] = False,
) -> None:
    """Show one policy."""
    o = _opts(ctx)
    policy = o.client().get_policy(policy_id)
    if as_json or o.json:
        _print_json(policy)
        return
    limits = []
    if policy.min_interval_seconds:
        limits.append(f"min interval {policy.min_interval_seconds}s")
    if policy.daily_cap is not None:
        limits.append(f"daily cap {policy.daily_cap}")
    _print_mapping(
        o,
        {
            "policy": policy.policy_id,
            "name": policy.name,
            "owner": policy.owner,
            "enabled": "yes" if policy.enabled else "no",
            "trigger": trigger_text(policy),
            "job": f"{policy.job_template.name} ({policy.job_template.training_config.training_type.value})",
            "mapping": "; ".join(f"{m.template or m.source} -> {m.target}" for m in policy.input_mapping) or "-",
            "concurrency": policy.concurrency_policy.value,
            "limits": ", ".join(limits) or "none",
            "last fired": f"{_when(policy.last_fired_at)} (event {policy.last_event_id})" if policy.last_fired_at else "never",
            "last job": policy.last_job_id or "-",
            "fired today": f"{policy.fired_today} ({policy.fired_day})" if policy.fired_day else "0",
        },
    )


@policies_app.command("update")
@handles_api_errors
def update(
    ctx: typer.Context,
    policy_id: str,
    file: Annotated[str | None, typer.Argument(help="The fields to change, as JSON or YAML ('-' reads stdin).")] = None,
    enable: Annotated[bool | None, typer.Option("--enable/--disable", help="Turn the policy on or off.")] = None,
) -> None:
    """Change a policy (the edited policy is validated whole again)."""
    o = _opts(ctx)
    changes: dict[str, Any] = load_document(file) if file else {}
    if enable is not None:
        changes["enabled"] = enable
    if not changes:
        raise typer.BadParameter("nothing to change: give a FILE of fields, or --enable / --disable")
    _print_policy_line(o, o.client().update_policy(policy_id, changes), "updated")


@policies_app.command("delete")
@handles_api_errors
def delete(ctx: typer.Context, policy_id: str) -> None:
    """Delete a policy and its schedule; the jobs it started stay."""
    o = _opts(ctx)
    o.client().delete_policy(policy_id)
    if o.json:
        _print_raw({"deleted": policy_id})
    else:
        out.print(f"deleted {policy_id}")


@policies_app.command("put-event")
@handles_api_errors
def put_event(
    ctx: typer.Context,
    detail_type: Annotated[str, typer.Argument(help="The event's detail-type, e.g. 'Drift detected'.")],
    detail: Annotated[str, typer.Option(help="The event's detail: a JSON object, or @FILE (JSON/YAML).")] = "{}",
    source: Annotated[str, typer.Option(help="The event's source; the dispatcher's rules take this one.")] = CUSTOM_EVENT_SOURCE,
) -> None:
    """Put a custom event on the default bus (local mode's emulated one, or your account's)."""
    o = _opts(ctx)
    if detail.startswith("@"):
        body: Any = load_document(detail[1:])
    else:
        try:
            body = json.loads(detail)
        except ValueError as exc:
            raise typer.BadParameter(f"--detail is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise typer.BadParameter("--detail must be a JSON object")
    event_id = o.client().put_event(detail_type, body, source=source)
    if o.json:
        _print_raw({"event_id": event_id})
    else:
        out.print(f"put event {event_id} ({escape(source)} / {escape(detail_type)})")


def trigger_text(policy: RetrainingPolicy) -> str:
    trigger = policy.trigger
    if isinstance(trigger, S3Trigger):
        where = f"s3://{trigger.bucket or '<artifacts>'}/{trigger.prefix}*{trigger.suffix or ''}"
        return f"new objects {where}"
    if isinstance(trigger, ScheduleTrigger):
        return trigger.expression + (f" {trigger.timezone}" if trigger.timezone != "UTC" else "")
    assert isinstance(trigger, EventPatternTrigger)
    return "event " + json.dumps(trigger.pattern, separators=(",", ":"))


def _print_policy_line(o: Options, policy: RetrainingPolicy, verb: str) -> None:
    if o.json:
        _print_json(policy)
    else:
        state = "" if policy.enabled else " (disabled)"
        out.print(f"{verb} {policy.policy_id} ({escape(policy.name)}): {escape(trigger_text(policy))}{state}")
