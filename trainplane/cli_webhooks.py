"""`trainplane webhooks ...`: signed webhooks over the SDK (registered in trainplane/cli.py; docs/EVENTS.md).

trainplane webhooks create https://ci.example.com/hook --event-type 'job.*' [--label team=nlp] [--job JOB] [--sweep SWP] [--ordered]
trainplane webhooks list
trainplane webhooks get wh-...
trainplane webhooks test wh-...                 # a signed `webhook.test` delivery
trainplane webhooks deliveries wh-...           # each attempt: time, outcome, status, latency, response excerpt
trainplane webhooks redeliver wh-... --event evt_... | --since 2026-11-26T10:00:00Z [--until ...]
trainplane webhooks delete wh-...
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from schemas.webhooks import Webhook
from trainplane.cli_output import _opts, _print_raw, _print_table, _when, err, handles_api_errors, out

webhooks_app = typer.Typer(no_args_is_help=True, help="Signed webhooks (Standard Webhooks 1.0) for the events you may see.")


def _labels(pairs: list[str]) -> dict[str, str]:
    labels = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"{pair!r}: expected KEY=VALUE", param_hint="--label")
        labels[key] = value
    return labels


@webhooks_app.command("create")
@handles_api_errors
def create(
    ctx: typer.Context,
    url: Annotated[str, typer.Argument(help="HTTPS, resolving to a public address (local mode: a loopback receiver too).")],
    event_type: Annotated[
        list[str] | None, typer.Option("--event-type", "-e", help="A glob over event types (`job.*`); repeatable.")
    ] = None,
    label: Annotated[list[str] | None, typer.Option("--label", "-l", help="KEY=VALUE the subject must carry; repeatable.")] = None,
    job: Annotated[list[str] | None, typer.Option("--job", help="Only this job's events; repeatable.")] = None,
    sweep: Annotated[list[str] | None, typer.Option("--sweep", help="Only this sweep's (and its trials') events; repeatable.")] = None,
    fmt: Annotated[str, typer.Option("--format", help="standard or slack.")] = "standard",
    description: Annotated[str, typer.Option(help="A note for people.")] = "",
    ordered: Annotated[bool, typer.Option("--ordered", help="A job's later events wait until its earlier ones are delivered.")] = False,
) -> None:
    """Create a webhook; prints its signing secret (whsec_...), which is shown this once."""
    o = _opts(ctx)
    body: dict[str, object] = {"url": url, "labels": _labels(label or []), "job_ids": job or [], "sweep_ids": sweep or []}
    body.update(format=fmt, description=description, ordered=ordered, **({"event_types": event_type} if event_type else {}))
    hook = o.client().create_webhook(body)
    if o.json:
        typer.echo(hook.model_dump_json(indent=2))
        return
    out.print(f"created {hook.webhook_id} -> {escape(hook.url)} ({', '.join(hook.event_types)})")
    out.print(f"secret (shown this once): {hook.secret}")


@webhooks_app.command("list")
@handles_api_errors
def list_webhooks(ctx: typer.Context) -> None:
    """List your webhooks (every principal's for admins)."""
    o = _opts(ctx)
    hooks = o.client().list_webhooks()
    if o.json:
        _print_raw({"webhooks": [h.model_dump(mode="json") for h in hooks]})
        return
    table = Table("WEBHOOK ID", "URL", "EVENT TYPES", "FORMAT", "ENABLED", "CREATED")
    for h in hooks:
        table.add_row(h.webhook_id, escape(h.url), ", ".join(h.event_types), h.format, _enabled(h), _when(h.created_at))
    _print_table(table)
    if not hooks:
        err.print("no webhooks")


@webhooks_app.command("get")
@handles_api_errors
def get(ctx: typer.Context, webhook_id: str) -> None:
    """Show a webhook (never its secret)."""
    hook = _opts(ctx).client().get_webhook(webhook_id)
    typer.echo(hook.model_dump_json(indent=2))


@webhooks_app.command("test")
@handles_api_errors
def test(ctx: typer.Context, webhook_id: str) -> None:
    """Queue a signed `webhook.test` delivery; `deliveries` shows how it went."""
    o = _opts(ctx)
    sent = o.client().test_webhook(webhook_id)
    if o.json:
        typer.echo(sent.model_dump_json(indent=2))
    else:
        out.print(f"queued test event {sent.event_id} for {webhook_id}")


@webhooks_app.command("deliveries")
@handles_api_errors
def deliveries(ctx: typer.Context, webhook_id: str, limit: Annotated[int, typer.Option(min=1, max=500)] = 50) -> None:
    """The webhook's delivery attempts of the last 30 days, newest first."""
    o = _opts(ctx)
    attempts = o.client().webhook_deliveries(webhook_id, limit=limit).deliveries
    if o.json:
        _print_raw({"deliveries": [a.model_dump(mode="json") for a in attempts]})
        return
    table = Table("AT", "EVENT", "TYPE", "ATTEMPT", "OUTCOME", "STATUS", "LATENCY", "NEXT", "RESPONSE")
    for a in attempts:
        table.add_row(
            _when(a.at),
            a.event_id,
            a.event_type,
            str(a.attempt),
            a.outcome,
            str(a.status_code or "-"),
            f"{a.latency_ms} ms" if a.latency_ms is not None else "-",
            _when(a.next_attempt_at) if a.next_attempt_at else "-",
            escape(a.response[:60]),
        )
    _print_table(table)
    if not attempts:
        err.print("no deliveries yet")


@webhooks_app.command("redeliver")
@handles_api_errors
def redeliver(
    ctx: typer.Context,
    webhook_id: str,
    event: Annotated[str | None, typer.Option("--event", help="The event id to send again.")] = None,
    since: Annotated[datetime | None, typer.Option(help="Every event sent since (ISO time).")] = None,
    until: Annotated[datetime | None, typer.Option(help="... and until (ISO time; default now).")] = None,
) -> None:
    """Send again one event or a time range, re-signed with a new timestamp and the same webhook-id."""
    o = _opts(ctx)
    done = o.client().redeliver_webhook(webhook_id, event_id=event, since=since, until=until)
    if o.json:
        typer.echo(done.model_dump_json(indent=2))
    else:
        out.print(f"queued {len(done.event_ids)} event(s) again for {webhook_id}")


@webhooks_app.command("delete")
@handles_api_errors
def delete(ctx: typer.Context, webhook_id: str) -> None:
    """Delete a webhook (its queued deliveries are dropped)."""
    o = _opts(ctx)
    o.client().delete_webhook(webhook_id)
    if o.json:
        _print_raw({"deleted": webhook_id})
    else:
        out.print(f"deleted {webhook_id}")


def _enabled(hook: Webhook) -> str:
    return "yes" if hook.enabled else f"no ({escape(hook.disabled_reason or '')})"
