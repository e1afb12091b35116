"""The `trainplane` command line: local mode (`up`) and every job operation, over the SDK.

Errors print the API's message and each field error and exit 1; usage errors exit 2. `--wait` and
`jobs watch` exit 1 when the job ends FAILED, CANCELLED or PREEMPTED, so scripts can chain on them.
"""

from __future__ import annotations

import webbrowser
from collections.abc import Iterable
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from schemas.job import Job
from schemas.status import JobStatus
from trainplane.cli_job_text import (
    fmt,
    metric_columns,
    metrics_text,
    print_job_line,
    progress_text,
    resources_text,
    status_text,
)
from trainplane.cli_output import (
    Options,
    Output,
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
from trainplane.cli_policies import policies_app
from trainplane.cli_shapes import shape_text, shapes_app
from trainplane.cli_teams import teams_app
from trainplane.dashboard_signin import CODE_TTL_SECONDS, issue_code
from trainplane.endpoint import resolve, state_dir_of
from trainplane.errors import EndpointNotConfigured

app = typer.Typer(no_args_is_help=True, add_completion=False, help="trainplane: a control plane for ML training jobs.")
jobs_app = typer.Typer(no_args_is_help=True, help="Submit, inspect and control training jobs.")
app.add_typer(jobs_app, name="jobs")


@app.callback()
def _global_options(
    ctx: typer.Context,
    endpoint: Annotated[str | None, typer.Option(help="API URL (default: $TRAINPLANE_ENDPOINT, then local mode's endpoint.json).")] = None,
    state_dir: Annotated[
        Path | None, typer.Option(help="Local mode's state directory (default: $TRAINPLANE_STATE_DIR or ./.state).")
    ] = None,
    principal: Annotated[str | None, typer.Option(help="Sign as this principal of local mode's endpoint.json (e.g. alice).")] = None,
    region: Annotated[str | None, typer.Option(help="Region for SigV4 (default: endpoint.json, the URL, or the AWS config).")] = None,
    output: Annotated[Output, typer.Option("--output", "-o", help="table for people, json for scripts.")] = Output.TABLE,
) -> None:
    ctx.obj = Options(endpoint=endpoint, state_dir=state_dir, principal=principal, region=region, output=output)


# --- local mode ----------------------------------------------------------------------------------


class Compute(StrEnum):
    LOCAL = "local"
    SAGEMAKER = "sagemaker"
    EC2 = "ec2"


@app.command()
def up(
    ctx: typer.Context,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="0 picks a free port (see endpoint.json).")] = 8080,
    state_dir: Annotated[Path | None, typer.Option(help="Where jobs, history and bucket objects persist.")] = None,
    compute: Annotated[Compute, typer.Option(help="Where training runs.")] = Compute.LOCAL,
    allow_dir: Annotated[
        list[Path] | None,
        typer.Option(
            "--allow-dir",
            help="A directory whose files jobs may name (repeatable; also $TRAINPLANE_LOCAL_ALLOWED_DIRS). Never the state dir.",
        ),
    ] = None,
    gpus: Annotated[str | None, typer.Option(help="Emulated GPUs (H100=4,A100=8): a job holds its units, trains on the CPU.")] = None,
    capacity_pools: Annotated[
        Path | None,
        typer.Option(
            help="With --compute ec2: a JSON/YAML file of each pool's free units and interruptions over time (docs/PLACEMENT.md)."
        ),
    ] = None,
    principal: Annotated[
        list[str] | None,
        typer.Option(
            "--principal", help="A principal to serve besides admin and alice (repeatable), e.g. bob: its keys go to endpoint.json."
        ),
    ] = None,
    dashboard_user: Annotated[
        list[str] | None,
        typer.Option(
            "--dashboard-user",
            help="A person signed in to the dashboard, in Cognito groups of the emulated user pool (repeatable), "
            "e.g. ana:ml-research,vision (teams name groups in members.cognito_groups).",
        ),
    ] = None,
) -> None:
    """Serve the whole control plane on this machine (emulated AWS, no account needed) until Ctrl-C.

    Jobs may name local files only under the --allow-dir directories (docs/SECURITY.md)."""
    directory = state_dir or state_dir_of(_opts(ctx).state_dir)
    try:
        from localmode.up import run_up  # the heavy local-mode stack loads only for this command
    except ImportError as exc:
        install = escape("pip install 'trainplane[local]'")  # escaped: rich would read [local] as markup
        err.print(f"[red]error[/red] local mode is not available: {escape(str(exc))} (install with: {install})")
        raise typer.Exit(1) from exc
    try:
        run_up(
            host,
            port,
            directory,
            compute.value,
            allow_dirs=allow_dir or [],
            gpus=gpus or "",
            principals=principal or [],
            dashboard_users=dashboard_user or [],
            capacity_pools=capacity_pools,
        )
    except ValueError as exc:  # a bad --gpus, --principal or --dashboard-user, refused before anything starts
        err.print(f"[red]error[/red] {escape(str(exc))}")
        raise typer.Exit(2) from exc


@app.command()
@handles_api_errors
def endpoint(ctx: typer.Context) -> None:
    """Show which endpoint, region and credentials the other commands would use."""
    o = _opts(ctx)
    r = resolve(o.endpoint, region=o.region, state_dir=o.state_dir, principal=o.principal)
    info = {
        "url": r.url,
        "url_source": r.url_source,
        "region": r.region,
        "access_key_id": r.credentials.access_key,
        "credentials_source": r.credentials_source,
    }
    if r.local is not None:
        info["aws_endpoint_url"] = r.local.aws_endpoint_url or ""
        info["bucket"] = r.local.bucket or ""
    _print_mapping(o, info)


@app.command()
@handles_api_errors
def dashboard(
    ctx: typer.Context,
    open_browser: Annotated[bool, typer.Option("--open/--no-open", help="Open the page in the default browser.")] = True,
) -> None:
    """Open local mode's web dashboard signed in as a principal of endpoint.json (--principal NAME)."""
    o = _opts(ctx)
    r = resolve(o.endpoint, region=o.region, state_dir=o.state_dir, principal=o.principal)
    if r.local is None:
        raise EndpointNotConfigured(
            f"{r.url} is not a local-mode endpoint: in the cloud, open the stack's DashboardUrl output and sign in "
            "with your team account (docs/DEPLOY.md)"
        )
    principal = r.local.principal_with_key(r.credentials.access_key)
    if principal is None:
        raise EndpointNotConfigured(f"the signing keys are not a principal of {r.local.path}: pass --principal NAME")
    # A single-use code in the URL fragment (never sent to a server); schemas/dashboard_signin.py.
    code = issue_code(r.local.path.parent, principal.name)
    url = f"{r.local.api_url.rstrip('/')}/#code={code}"
    if o.json:
        _print_raw({"url": url, "principal": principal.name, "expires_in_seconds": CODE_TTL_SECONDS})
    else:
        out.print(f"dashboard for {principal.name}: {url}")
        out.print(f"(the link signs in once, within {CODE_TTL_SECONDS // 60} minutes)")
    if open_browser:
        webbrowser.open(url)


@app.command()
@handles_api_errors
def summary(ctx: typer.Context) -> None:
    """Job counts: the dashboard's cards."""
    o = _opts(ctx)
    s = o.client().summary()
    if o.json:
        _print_json(s)
        return
    table = Table("total", "running", "queued", "completed", "failed", "paused")
    table.add_row(*(str(v) for v in (s.total, s.running, s.queued, s.completed, s.failed, s.paused)))
    _print_table(table)
    counts = Table("status", "jobs")
    for status, n in sorted(s.counts.items()):
        if n:
            counts.add_row(status_text(status), str(n))
    if counts.row_count:
        _print_table(counts)


# --- jobs ----------------------------------------------------------------------------------------


@jobs_app.command("submit")
@handles_api_errors
def submit(
    ctx: typer.Context,
    file: Annotated[str, typer.Argument(help="A SubmitJobRequest as JSON or YAML ('-' reads stdin).")],
    wait: Annotated[bool, typer.Option("--wait", help="Watch the job until it completes, fails or pauses.")] = False,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="With --wait: print the trainer's log lines as they come.")] = False,
    idempotency_key: Annotated[str | None, typer.Option(help="A repeat with the same key returns the same job.")] = None,
    timeout: Annotated[float | None, typer.Option(help="With --wait: give up after this many seconds.")] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Validate and print the forecast (price, duration, budgets); create nothing.")
    ] = False,
) -> None:
    """Submit a job."""
    o = _opts(ctx)
    document = load_document(file)
    if file != "-":
        resolve_relative_data_paths(document, Path(file).parent)
    if dry_run:
        from trainplane.cli_budgets import print_forecast

        print_forecast(o, o.client().forecast(document))
        return
    job = o.client().submit(document, idempotency_key=idempotency_key)
    if not wait:
        if follow:
            raise typer.BadParameter("--follow needs --wait")
        print_job_line(o, job, "submitted")
        return
    if not o.json:
        out.print(f"submitted {job.job_id} ({escape(job.name)})")
    _watch(o, job.job_id, timeout, follow=follow)


@jobs_app.command("list")
@handles_api_errors
def list_jobs(
    ctx: typer.Context,
    status: Annotated[JobStatus | None, typer.Option(case_sensitive=False, help="Only jobs in this status.")] = None,
    queue: Annotated[str | None, typer.Option(help="Only jobs of this queue.")] = None,
    label: Annotated[list[str] | None, typer.Option(help="KEY=VALUE; repeat to AND several.")] = None,
    name: Annotated[str | None, typer.Option(help="Name contains this text.")] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many jobs (newest first).")] = 50,
) -> None:
    """List jobs, newest first."""
    o = _opts(ctx)
    labels = parse_pairs(label or [], "--label")
    jobs: list[Job] = []
    for job in o.client().list(status=status, queue=queue, labels=labels, name=name, page_size=min(limit, 100)):
        jobs.append(job)
        if len(jobs) >= limit:
            break
    if o.json:
        _print_raw({"jobs": [j.model_dump(mode="json") for j in jobs]})
        return
    table = Table("JOB ID", "NAME", "STATUS", "TYPE", "QUEUE", "PRIO", "PROGRESS", "CREATED")
    for column in table.columns:
        column.no_wrap = column.header != "NAME"  # ids, statuses and times stay whole; long names fold
    for j in jobs:
        table.add_row(
            j.job_id,
            escape(j.name),
            status_text(j.status),
            j.training_config.training_type.value,
            j.queue,
            str(j.priority),
            f"{j.progress.percent:.0f}%",
            _when(j.created_at),
        )
    _print_table(table)
    if not jobs:
        err.print("no jobs match")


def _tracking_rows(job: Job) -> dict[str, str]:
    """The tracker run the trainer reported (docs/TRACKING.md), or what is configured before it has."""
    config, record = job.output_config.tracking, job.tracking
    rows: dict[str, str] = {}
    if config is not None and config.mlflow is not None:
        where = f"{config.mlflow.tracking_uri} (experiment {config.mlflow.experiment_name})"
        if record is not None and record.mlflow_run_id:
            rows["mlflow run"] = record.mlflow_run_url or f"{record.mlflow_run_id} on {where}"
            if record.mlflow_parent_run_id:
                rows["mlflow parent run"] = record.mlflow_parent_run_id
        else:
            rows["mlflow run"] = f"not started yet, on {where}"
    if config is not None and config.wandb is not None:
        wandb = config.wandb
        where = f"{wandb.entity + '/' if wandb.entity else ''}{wandb.project} ({wandb.mode})"
        if record is not None and record.wandb_run_id:
            rows["wandb run"] = record.wandb_run_url or f"{record.wandb_run_id} in {where}"
            if record.wandb_offline_uri:
                rows["wandb files"] = f"{record.wandb_offline_uri}/ (offline: `wandb sync` them)"
            if record.wandb_parent_run_id:
                rows["wandb parent run"] = f"{record.wandb_parent_run_id} (group {record.wandb_group})"
        else:
            rows["wandb run"] = f"not started yet, in {where}"
    if record is not None and record.tensorboard_uri:
        rows["tensorboard"] = record.tensorboard_uri
    elif config is not None and config.tensorboard is not None and config.tensorboard.enabled:
        rows["tensorboard"] = "event files under the job's tensorboard/ prefix (once it runs)"
    return rows


@jobs_app.command("get")
@handles_api_errors
def get(
    ctx: typer.Context,
    job_id: str,
    as_json: Annotated[bool, typer.Option("--json", help="The whole job record as JSON.")] = False,
) -> None:
    """Show one job."""
    o = _opts(ctx)
    job = o.client().get(job_id)
    if as_json or o.json:
        _print_json(job)
        return
    rows: dict[str, str] = {
        "job_id": job.job_id,
        "name": job.name,
        "status": job.status.value,
        "owner": job.owner,
        "training_type": job.training_config.training_type.value,
        "base_model": job.training_config.base_model.model_id,
        "queue / priority": f"{job.queue} / {job.priority}",
        "resources": resources_text(job),
        "progress": progress_text(job),
        "created / updated": f"{_when(job.created_at)} / {_when(job.updated_at)}",
    }
    if job.labels:
        rows["labels"] = ", ".join(f"{k}={v}" for k, v in sorted(job.labels.items()))
    if job.parent_job_id:
        rows["parent_job_id"] = job.parent_job_id
    if job.training_shape is not None:
        rows["training_shape"] = shape_text(job.training_shape)
    if job.error_type or job.error_message:
        rows["error"] = f"{job.error_type or ''} {job.error_message or ''}".strip()
    if job.latest_checkpoint_id:
        rows["latest / best checkpoint"] = f"{job.latest_checkpoint_id} / {job.best_checkpoint_id or '-'}"
    rows.update(_tracking_rows(job))
    _print_mapping(o, rows)
    if job.checkpoints:
        table = Table("CHECKPOINT", "STEP", "METRICS", "URI")
        for c in job.checkpoints:
            table.add_row(c.checkpoint_id, str(c.step), metrics_text(c.metrics), escape(c.uri))
        _print_table(table)


@jobs_app.command("cancel")
@handles_api_errors
def cancel(ctx: typer.Context, job_id: str, reason: Annotated[str, typer.Option(help="Recorded in the job's history.")] = "") -> None:
    """Stop the job and release its GPUs (from any non-final status)."""
    o = _opts(ctx)
    print_job_line(o, o.client().cancel(job_id, reason=reason), "cancel requested")


@jobs_app.command("pause")
@handles_api_errors
def pause(
    ctx: typer.Context,
    job_id: str,
    save_checkpoint: Annotated[bool, typer.Option("--save-checkpoint/--no-save-checkpoint", help="Checkpoint before stopping.")] = True,
) -> None:
    """Checkpoint, release the GPUs and hold the job in PAUSED."""
    o = _opts(ctx)
    print_job_line(o, o.client().pause(job_id, save_checkpoint=save_checkpoint), "pause requested")


@jobs_app.command("resume")
@handles_api_errors
def resume(
    ctx: typer.Context,
    job_id: str,
    checkpoint: Annotated[str, typer.Option(help="Checkpoint id to resume from (default: the latest).")] = "",
) -> None:
    """Queue a paused job again, from its latest or a named checkpoint."""
    o = _opts(ctx)
    print_job_line(o, o.client().resume(job_id, checkpoint_id=checkpoint), "resumed")


@jobs_app.command("retry")
@handles_api_errors
def retry(
    ctx: typer.Context,
    job_id: str,
    checkpoint: Annotated[str, typer.Option(help="Checkpoint id to start from (default: the latest).")] = "",
    resources: Annotated[str | None, typer.Option(help="A ResourceConfig as JSON or YAML for the child job.")] = None,
    gpu_count: Annotated[int | None, typer.Option(min=0, help="Override the parent's gpu_count.")] = None,
    gpu_type: Annotated[str | None, typer.Option(help="Override the parent's gpu_type.")] = None,
    node_count: Annotated[int | None, typer.Option(min=1, help="Override the parent's node_count.")] = None,
) -> None:
    """Start a child job from a checkpoint of this one, on the same or new resources."""
    o = _opts(ctx)
    client = o.client()
    new_resources: dict[str, Any] | None = load_document(resources) if resources else None
    overrides = {k: v for k, v in {"gpu_count": gpu_count, "gpu_type": gpu_type, "node_count": node_count}.items() if v is not None}
    if overrides:
        base = new_resources if new_resources is not None else client.get(job_id).resource_config.model_dump(mode="json")
        new_resources = {**base, **overrides}
    child = client.retry(job_id, checkpoint_id=checkpoint, new_resource_config=new_resources)
    print_job_line(o, child, f"retry of {job_id} submitted as")


@jobs_app.command("patch")
@handles_api_errors
def patch(
    ctx: typer.Context,
    job_id: str,
    name: Annotated[str | None, typer.Option(help="New name.")] = None,
    description: Annotated[str | None, typer.Option(help="New description.")] = None,
    priority: Annotated[int | None, typer.Option(min=0, max=10, help="New priority, 0-10.")] = None,
    hp: Annotated[list[str] | None, typer.Option("--hp", help="KEY=VALUE hyperparameter, merged; repeatable.")] = None,
    resources: Annotated[str | None, typer.Option(help="A ResourceConfig as JSON or YAML.")] = None,
) -> None:
    """Edit a PENDING, QUEUED or FAILED job."""
    o = _opts(ctx)
    changes: dict[str, Any] = {"name": name, "description": description, "priority": priority}
    changes = {k: v for k, v in changes.items() if v is not None}
    if hp:
        changes["hyperparameters"] = parse_pairs(hp, "--hp")
    if resources:
        changes["resource_config"] = load_document(resources)
    if not changes:
        raise typer.BadParameter("give at least one of --name, --description, --priority, --hp, --resources")
    print_job_line(o, o.client().patch(job_id, changes), "updated")


@jobs_app.command("delete")
@handles_api_errors
def delete(ctx: typer.Context, job_id: str) -> None:
    """Delete a finished job, its history and its stored artifacts."""
    o = _opts(ctx)
    o.client().delete(job_id)
    if o.json:
        _print_raw({"job_id": job_id, "deleted": True})
    else:
        out.print(f"deleted {job_id}")


@jobs_app.command("watch")
@handles_api_errors
def watch(
    ctx: typer.Context,
    job_id: str,
    timeout: Annotated[float | None, typer.Option(help="Give up after this many seconds.")] = None,
    poll: Annotated[float, typer.Option(min=0.1, help="Seconds between polls.")] = 2.0,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Print the trainer's log lines as they come.")] = False,
) -> None:
    """Live status and progress until the job completes, fails or pauses."""
    _watch(_opts(ctx), job_id, timeout, poll, follow=follow)


@jobs_app.command("reconnect")
@handles_api_errors
def reconnect(
    ctx: typer.Context,
    job_id: str,
    timeout: Annotated[float, typer.Option(help="Give up if it does not train again within this many seconds.")] = 600,
    max_wait_for_resumable: Annotated[float, typer.Option(help="Seconds to wait for a pause or preemption to settle.")] = 120,
    poll: Annotated[float, typer.Option(min=0.1, help="Seconds between polls.")] = 5.0,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Print the trainer's log lines as they come.")] = False,
) -> None:
    """After a preemption or pause: resume the job (a PREEMPTED one as a retry) and wait until it trains again."""
    o = _opts(ctx)
    from trainplane.cli_waits import run_wait

    run_wait(
        o.client(),
        job_id,
        json_output=o.json,
        console=out,
        errors=err,
        follow=follow,
        wait=lambda client, **kw: client.reconnect_and_wait(
            job_id, poll_interval_s=poll, timeout_s=timeout, max_wait_for_resumable_s=max_wait_for_resumable, **kw
        ),
    )


@jobs_app.command("events")
@handles_api_errors
def events(ctx: typer.Context, job_id: str) -> None:
    """The job's status history."""
    o = _opts(ctx)
    history = o.client().events(job_id)
    if o.json:
        _print_raw({"events": [e.model_dump(mode="json", by_alias=True) for e in history]})
        return
    table = Table("AT", "FROM", "TO", "ACTOR", "REASON")
    for column in table.columns[:4]:
        column.no_wrap = True
    for e in history:
        table.add_row(_when(e.at), e.from_status.value if e.from_status else "-", status_text(e.to_status), e.actor, escape(e.reason))
    _print_table(table)


@jobs_app.command("metrics")
@handles_api_errors
def metrics(
    ctx: typer.Context,
    job_id: str,
    tail: Annotated[int, typer.Option(min=0, help="Table: show the last N points (0: all).")] = 20,
) -> None:
    """Training metrics (loss, learning rate, throughput...) by step."""
    o = _opts(ctx)
    points = o.client().metrics(job_id)
    if o.json:
        _print_raw({"points": [p.model_dump(mode="json", exclude_none=True) for p in points]})
        return
    shown = points[-tail:] if tail else points
    names = metric_columns(shown)
    table = Table("STEP", *(n.upper() for n in names))
    for p in shown:
        values = p.model_dump(exclude_none=True)
        table.add_row(str(p.step), *(fmt(values.get(n)) for n in names))
    _print_table(table)
    losses = [p.loss for p in points if p.loss is not None]
    if losses:
        out.print(f"{len(points)} points; loss {losses[0]:.4f} -> {losses[-1]:.4f} (min {min(losses):.4f})")


@jobs_app.command("logs")
@handles_api_errors
def logs(
    ctx: typer.Context,
    job_id: str,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new lines until the job stops.")] = False,
    since: Annotated[float | None, typer.Option(help="Only lines after this time (epoch seconds).")] = None,
) -> None:
    """The trainer's log lines."""
    o = _opts(ctx)
    for line in o.client().logs(job_id, since=since, follow=follow):
        if o.json:
            typer.echo(line.model_dump_json())
        else:
            typer.echo(f"{datetime.fromtimestamp(line.timestamp).isoformat(timespec='seconds')} [{line.attempt}] {line.message}")


# --- helpers -------------------------------------------------------------------------------------


def parse_pairs(items: Iterable[str], option: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"{option} expects KEY=VALUE, got {item!r}")
        pairs[key] = value
    return pairs


def _watch(o: Options, job_id: str, timeout: float | None, poll: float = 2.0, *, follow: bool = False) -> None:
    from trainplane.cli_waits import run_wait  # the waits and their progress bar: trainplane/waits.py

    run_wait(
        o.client(),
        job_id,
        json_output=o.json,
        console=out,
        errors=err,
        follow=follow,
        wait=lambda client, **kw: client.wait_for_existing(job_id, timeout_s=timeout, poll_interval_s=poll, **kw),
    )


app.add_typer(policies_app, name="policies")
app.add_typer(shapes_app, name="shapes")
app.add_typer(teams_app, name="teams")
from trainplane.cli_sweeps import sweeps_app  # noqa: E402 (it builds on the helpers above)

app.add_typer(sweeps_app, name="sweeps")
from trainplane.cli_doctor import doctor  # noqa: E402 (it builds on the helpers above)

app.command()(doctor)

from trainplane.cli_budgets import budgets_app  # noqa: E402 (it builds on the helpers above)
from trainplane.cli_placement import placement  # noqa: E402
from trainplane.cli_webhooks import webhooks_app  # noqa: E402 (it builds on the helpers above)

app.command("placement")(placement)

app.add_typer(webhooks_app, name="webhooks")
app.add_typer(budgets_app, name="budgets")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
