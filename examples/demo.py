"""The main job of a fresh machine (`make demo`): a real LoRA fine-tune through the whole control plane.

1. starts local mode (`trainplane up --port 0`) in a subprocess, with its own state directory;
2. writes a small question/answer JSONL dataset;
3. submits examples/jobs/lora-tiny.yaml (a tiny llama built from config, byte tokenizer, CPU) through
   the signed HTTP API, exactly as a user would;
4. watches it to COMPLETED with a progress bar, then prints the loss curve, the checkpoints and where
   the model was exported;
5. stops the server.

    python examples/demo.py [--state-dir DIR] [--keep] [--timeout SECONDS]

Exits 0 only if the job completed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from functions.constants import job_prefix  # noqa: E402
from schemas.job import Job  # noqa: E402
from schemas.status import JobStatus  # noqa: E402
from trainplane import Client  # noqa: E402
from trainplane.endpoint import ENDPOINT_FILE  # noqa: E402

JOB_FILE = ROOT / "examples" / "jobs" / "lora-tiny.yaml"
console = Console(highlight=False)


def write_dataset(path: Path, records: int = 320, seed: int = 0) -> Path:
    """Question/answer pairs a tiny model can visibly learn: small sums and reversed words."""
    rng = random.Random(seed)
    words = ["cat", "dog", "tree", "moon", "star", "river", "stone", "cloud", "bird", "fish", "rain", "wind"]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as out:
        for i in range(records):
            if i % 2 == 0:
                a, b = rng.randint(0, 20), rng.randint(0, 20)
                record = {"prompt": f"Q: What is {a} plus {b}?\nA:", "completion": f" {a + b}"}
            else:
                word = rng.choice(words)
                record = {"prompt": f"Q: Spell {word} backwards.\nA:", "completion": f" {word[::-1]}"}
            out.write(json.dumps(record) + "\n")
    return path


@contextmanager
def local_mode(state_dir: Path, allow_dir: Path, startup_timeout: float = 180.0) -> Iterator[Path]:
    """`trainplane up --port 0` in a subprocess, until endpoint.json appears; SIGINT on the way out.

    Jobs may name local files only under `allow_dir` (docs/SECURITY.md): the demo's dataset lives there."""
    log_path = state_dir / "trainplane-up.log"
    endpoint_json = state_dir / ENDPOINT_FILE
    endpoint_json.unlink(missing_ok=True)  # a stale file from a killed run must not be mistaken for readiness
    command = [sys.executable, "-m", "trainplane", "up", "--port", "0", "--state-dir", str(state_dir), "--allow-dir", str(allow_dir)]
    with log_path.open("w") as log:
        process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + startup_timeout
        with console.status(f"starting local mode (log: {log_path})"):
            while not endpoint_json.exists():
                if process.poll() is not None:
                    raise RuntimeError(f"`trainplane up` exited with {process.returncode}:\n{_tail(log_path)}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"`trainplane up` was not ready after {startup_timeout:.0f}s:\n{_tail(log_path)}")
                time.sleep(0.2)
        console.print(f"local mode is up: {json.loads(endpoint_json.read_text())['api_url']}")
        yield log_path
    finally:
        _stop(process)


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    console.print(f"local mode stopped (exit {process.returncode})")


def _tail(path: Path, lines: int = 30) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def job_request(dataset: Path) -> dict[str, Any]:
    request: dict[str, Any] = yaml.safe_load(JOB_FILE.read_text())
    request["name"] = f"demo-{request['name']}"
    request["labels"] = {**request.get("labels", {}), "source": "demo"}
    request["data_config"]["sources"] = [{"path": str(dataset)}]
    return request


def watch(client: Client, job: Job, timeout: float) -> Job:
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[detail]}"), TimeElapsedColumn())
    with Progress(*columns, console=console) as bar:
        task = bar.add_task(job.status.value, total=100.0, detail="")

        def show(current: Job) -> None:
            p = current.progress
            detail = f"step {p.step}/{p.total_steps or '?'}" + (f"  loss {p.loss:.3f}" if p.loss is not None else "")
            bar.update(task, completed=p.percent, description=f"{current.status.value:<13}", detail=detail)

        return client.wait(job.job_id, timeout=timeout, poll=1.0, on_update=show)


def sparkline(values: list[float], width: int = 48) -> str:
    if not values:
        return ""
    blocks = " ▁▂▃▄▅▆▇█"
    step = max(1, len(values) // width)
    sampled = values[::step]
    lo, hi = min(sampled), max(sampled)
    span = (hi - lo) or 1.0
    return "".join(blocks[1 + int((v - lo) / span * (len(blocks) - 2))] for v in sampled)


def report(client: Client, job: Job) -> None:
    points = client.metrics(job.job_id)
    losses = [(p.step, p.loss) for p in points if p.loss is not None]
    if losses:
        first, last = losses[0], losses[-1]
        best = min(losses, key=lambda sl: sl[1])
        console.print(f"\n[bold]loss[/bold] {first[1]:.3f} (step {first[0]}) -> {last[1]:.3f} (step {last[0]}), ", end="")
        console.print(f"best {best[1]:.3f} (step {best[0]})")
        console.print(f"     {sparkline([loss for _, loss in losses])}")
    evals = [(p.step, p.eval_loss) for p in points if p.eval_loss is not None]
    if evals:
        console.print("[bold]eval_loss[/bold] " + ", ".join(f"{v:.3f}@{s}" for s, v in evals))
    if job.checkpoints:
        table = Table("checkpoint", "step", "metrics", "uri", title="checkpoints")
        table.columns[3].overflow = "fold"  # a URI cut short is useless
        for c in job.checkpoints:
            marks = " (best)" if c.checkpoint_id == job.best_checkpoint_id else ""
            table.add_row(c.checkpoint_id + marks, str(c.step), ", ".join(f"{k}={v:.3f}" for k, v in c.metrics.items()), c.uri)
        console.print(table)
    else:
        console.print("[yellow]no checkpoints were recorded[/yellow]")
    console.print(f"[bold]exported model[/bold] {export_location(client, job)}")


def lifecycle_text(statuses: list[JobStatus]) -> str:
    """The status path, with each TRAINING -> CHECKPOINTING -> TRAINING round trip counted, not repeated."""
    parts: list[str] = []
    checkpoints = 0
    for status in statuses:
        in_training = bool(parts) and parts[-1].startswith(JobStatus.TRAINING.value)
        if status == JobStatus.CHECKPOINTING and in_training:
            checkpoints += 1
            parts[-1] = f"{JobStatus.TRAINING.value} ({checkpoints} checkpoint{'s' if checkpoints > 1 else ''})"
        elif not (status == JobStatus.TRAINING and in_training):
            checkpoints = 0
            parts.append(status.value)
    return " -> ".join(parts)


def export_location(client: Client, job: Job) -> str:
    """Where EXPORTING put the model: what the trainer said it did, else the lifecycle's rule for it."""
    for line in client.logs(job.job_id):
        if "exported the model to " in line.message:
            return line.message.split("exported the model to ", 1)[1].strip()
    if job.output_config.output_path:
        return job.output_config.output_path
    bucket = client.resolved.local.bucket if client.resolved.local else None
    return f"s3://{bucket}/{job_prefix(job.job_id)}model" if bucket else f"{job_prefix(job.job_id)}model"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--state-dir", type=Path, help="Local mode's state directory (default: a fresh temporary one).")
    parser.add_argument("--keep", action="store_true", help="Keep the temporary state directory afterwards.")
    parser.add_argument("--timeout", type=float, default=900.0, help="Give up on the job after this many seconds.")
    args = parser.parse_args(argv)

    scratch = None if args.state_dir else Path(tempfile.mkdtemp(prefix="trainplane-demo-"))
    state_dir = args.state_dir or scratch / "state"  # type: ignore[operator]
    # Beside the state dir, never inside it: no job may name a file of local mode's state directory.
    data_dir = state_dir.parent / f"{state_dir.name}-data"
    state_dir.mkdir(parents=True, exist_ok=True)
    console.rule("trainplane demo")
    console.print(f"state directory: {state_dir}")
    try:
        with local_mode(state_dir, data_dir):
            dataset = write_dataset(data_dir / "tiny-qa.jsonl")
            console.print(f"dataset: {dataset} ({sum(1 for _ in dataset.open())} records)")
            client = Client(state_dir=state_dir)
            job = client.submit(job_request(dataset), idempotency_key=f"demo-{state_dir.name}")
            console.print(f"submitted {job.job_id} ({job.name}) as {client.resolved.credentials_source}")
            job = watch(client, job, args.timeout)
            console.print(f"{job.job_id} finished {job.status.value}" + (f": {job.error_message}" if job.error_message else ""))
            report(client, job)
            events = client.events(job.job_id)
            console.print("[bold]lifecycle[/bold] " + lifecycle_text([e.to_status for e in events]))
            return 0 if job.status == JobStatus.COMPLETED else 1
    except Exception as exc:  # the demo's last word must say what went wrong, not a bare traceback
        console.print(f"[red]demo failed:[/red] {exc}")
        return 1
    finally:
        if scratch is not None and not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
