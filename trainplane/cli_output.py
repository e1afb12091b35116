"""The CLI's shared pieces: global options, the SDK-error wrapper, document loading and output helpers.

Both command modules build on these (trainplane/cli.py: jobs and local mode; trainplane/cli_policies.py:
retraining policies), so neither imports the other's commands.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import typer
import yaml
from pydantic import BaseModel
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from trainplane.client import Client
from trainplane.errors import TrainplaneError

P = ParamSpec("P")

R = TypeVar("R")

out = Console(highlight=False, soft_wrap=False)

err = Console(stderr=True, highlight=False)

PIPED_WIDTH = 200


class Output(StrEnum):
    TABLE = "table"
    JSON = "json"


@dataclass
class Options:
    endpoint: str | None = None
    state_dir: Path | None = None
    principal: str | None = None
    region: str | None = None
    output: Output = Output.TABLE
    _client: Client | None = field(default=None, repr=False)

    def client(self) -> Client:
        # Built on first use, so `trainplane up` and `--help` never need an endpoint.
        if self._client is None:
            self._client = Client(self.endpoint, region=self.region, state_dir=self.state_dir, principal=self.principal)
        return self._client

    @property
    def json(self) -> bool:
        return self.output == Output.JSON


def _opts(ctx: typer.Context) -> Options:
    if not isinstance(ctx.obj, Options):
        ctx.obj = Options()
    return ctx.obj


def handles_api_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn SDK errors into the API's message + field errors on stderr and exit status 1."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except TrainplaneError as exc:
            status = f" {exc.status}" if exc.status is not None else ""
            err.print(f"[red]error{status}:[/red] {escape(exc.message)}")
            for fe in exc.errors:
                err.print(f"  - {fe.field or '(request)'}: {fe.message}", markup=False)
            raise typer.Exit(1) from exc

    return wrapper


def load_document(path: str) -> dict[str, Any]:
    """A JSON or YAML mapping from a file (or stdin for '-'); a clear usage error otherwise."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
    except OSError as exc:
        raise typer.BadParameter(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        # YAML is a superset of JSON, so one parser covers .yaml, .yml and stdin.
        data = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise typer.BadParameter(f"{path} is not valid {'JSON' if path.endswith('.json') else 'YAML/JSON'}: {exc}") from exc
    if not isinstance(data, dict):
        raise typer.BadParameter(f"{path} must hold a mapping (an object), not {type(data).__name__}")
    return data


def resolve_relative_data_paths(document: dict[str, Any], base: Path) -> None:
    """Data paths written relative to the job file are made absolute, as compose files do.

    The trainer runs elsewhere (its own working directory, or another machine), so a relative path
    means nothing there; only paths that exist next to the job file are rewritten.
    """
    data_config = document.get("data_config")
    sources = data_config.get("sources") if isinstance(data_config, dict) else None
    for source in sources if isinstance(sources, list) else []:
        path = source.get("path") if isinstance(source, dict) else None
        if not isinstance(path, str) or "://" in path or Path(path).is_absolute():
            continue
        candidate = (base / path).resolve()
        if candidate.exists():
            source["path"] = str(candidate)
    # An RLHF job's reward script (and a reward model directory) written next to the job file, likewise.
    training = document.get("training_config")
    rlhf = training.get("rlhf") if isinstance(training, dict) else None
    if isinstance(rlhf, dict):
        for key in ("reward_script_path", "reward_model"):
            path = rlhf.get(key)
            if isinstance(path, str) and "://" not in path and path.startswith(("./", "../")) and (base / path).exists():
                rlhf[key] = str((base / path).resolve())


def _print_mapping(o: Options, rows: dict[str, str]) -> None:
    if o.json:
        _print_raw(rows)
        return
    table = Table(show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    for key, value in rows.items():
        table.add_row(key, escape(value))
    _print_table(table)


def _print_table(table: Table) -> None:
    # Piped into a file or grep there is no terminal width to respect; 80 columns would cut job ids.
    if out.is_terminal or "COLUMNS" in os.environ:
        out.print(table)
    else:
        Console(highlight=False, width=PIPED_WIDTH).print(table)


def _print_json(model: BaseModel) -> None:
    typer.echo(model.model_dump_json(indent=2))


def _print_raw(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, default=str))


def _when(value: datetime | None) -> str:
    return value.astimezone().strftime("%Y-%m-%d %H:%M:%S") if value else "-"
