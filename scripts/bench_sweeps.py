"""The figures of issue 15's "Measure" section, printed (never asserted).

(a) The sweep controller's decision time with 1,000 finished trials in the study (TPE, method bayes):
    - the Optuna part alone: rebuild the in-memory study from 1,000 stored trials + ask one trial;
    - a whole decide() on moto: Query the sweep's partition (the sweep and its 1,000 ended trials, stored
      as the controller stores them: folded into blocks of 50), rebuild, ask, claim trial 1,000
      (transaction), submit its job. moto is in-process here and is slower per item than DynamoDB; the
      Query's share and the number of items it reads are printed on their own.
    Median and max of --runs. Goal: <= 1 s on this machine.
(b) Local mode, from a trial's end to the next trial's submit: `trainplane up` in a subprocess, a sweep of
    --trials quick CUSTOM trials (examples/sweeps/quadratic.py, --steps steps of --step-seconds) one at a
    time; for each next trial, (its job's created_at) - (the previous job's COMPLETED entry in its history).
    Goal: <= 1 s.
(c) The same trials' whole turnaround, from their job's created_at to COMPLETED, and its two parts: created
    -> TRAINING (the state machine: queue, schedule, prepare, launch) and TRAINING -> COMPLETED (the trainer
    process: start, imports, run spec, the script, exit, the run's end back in the table). No goal: what a
    sweep of N trials one at a time costs in local mode is about N x (c) + (N - 1) x (b).

    python scripts/bench_sweeps.py [--runs 5] [--trials 6] [--steps 1] [--step-seconds 0] [--skip-local]
        [--trainer-command CMD]   (local mode's trainer command line, e.g. to compare another entry point)
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "trainer_image"))


SPACE: dict[str, dict[str, Any]] = {
    "x": {"type": "double", "min": -2.0, "max": 2.0},
    "y": {"type": "double", "min": 0.0001, "max": 1.0, "scale": "log"},
    "layers": {"type": "int", "min": 1, "max": 8},
    "optimizer": {"type": "categorical", "values": ["adamw", "sgd", "lion"]},
}


def _stored_trials(n: int) -> tuple[Any, list[Any]]:
    from schemas.sweeps import Trial, TrialState, TuningConfig

    tuning = TuningConfig.model_validate(
        {
            "method": "bayes",
            "maxTrials": n + 1,
            "metric": {"name": "score", "goal": "maximize"},
            # In the trial's environment (a CUSTOM script's knobs; hyperparameters are the trainer's own list)
            "parameters": {name: {**spec, "target": f"training_config.environment.{name.upper()}"} for name, spec in SPACE.items()},
            "seed": 1,
        }
    )
    rng = random.Random(0)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    trials = []
    for i in range(n):
        x, y = rng.uniform(-2, 2), 10 ** rng.uniform(-4, 0)
        params: dict[str, Any] = {
            "x": x,
            "y": y,
            "layers": rng.randint(1, 8),
            "optimizer": rng.choice(["adamw", "sgd", "lion"]),
        }
        value = 1.0 - (x - 0.3) ** 2 - (y - 0.7) ** 2
        trials.append(
            Trial(
                number=i,
                state=TrialState.COMPLETE,
                params=params,
                value=value,
                intermediate_values={1: value / 2, 2: value},
                created_at=start + timedelta(seconds=i),
                ended_at=start + timedelta(seconds=i + 1),
                job_id=f"job-bench-{i}",
                job_status="COMPLETED",
            )
        )
    return tuning, trials


def bench_decision(runs: int, n: int) -> dict[str, list[float]]:
    from functions.service.sweeps.controller import distributions, rebuild_study

    tuning, trials = _stored_trials(n)
    figures: dict[str, list[float]] = {"optuna": [], "decide": [], "query": []}
    for _ in range(runs):
        t0 = time.perf_counter()
        rebuild_study(tuning, trials, n).ask(distributions(tuning))
        figures["optuna"].append(time.perf_counter() - t0)
    figures.update(_bench_decide_on_moto(runs, tuning, trials))
    return figures


def _bench_decide_on_moto(runs: int, tuning: Any, trials: list[Any]) -> dict[str, list[float]]:
    from moto import mock_aws

    from functions import constants
    from functions.adapters.aws import AwsClients
    from functions.adapters.dynamodb import DynamoJobRepository
    from functions.adapters.dynamodb_items import create_tables
    from functions.adapters.sweeps import DynamoSweepRepository
    from functions.service.jobs import JobService
    from functions.service.sweeps.controller import SweepController
    from functions.settings import Settings
    from schemas.sweeps import Sweep, SweepStatus, TrialState
    from tests.fakes import InMemoryArtifactStore, RecordingWorkflow
    from tests.helpers.jobs import request_body

    decide: list[float] = []
    query: list[float] = []
    items: list[float] = []
    with mock_aws():
        clients = AwsClients(region=constants.LOCAL_REGION)
        for run in range(runs):
            settings = Settings(jobs_table=f"bench-{run}", idempotency_table=f"bench-idem-{run}", artifacts_bucket=f"bench-{run}")
            create_tables(clients.dynamodb(), settings.jobs_table, settings.idempotency_table)
            clients.s3().create_bucket(Bucket=settings.artifacts_bucket)
            repo = DynamoSweepRepository(clients, settings.jobs_table)
            jobs = JobService(DynamoJobRepository(clients, settings.jobs_table), InMemoryArtifactStore(), RecordingWorkflow(), settings)
            bucket = settings.artifacts_bucket
            template = request_body(data_config={"sources": [{"path": f"s3://{bucket}/shared/train.jsonl"}], "batch_size": 2})
            template["training_config"]["framework"] = {"type": "CUSTOM", "custom_script_path": f"s3://{bucket}/shared/quadratic.py"}
            now = datetime.now(UTC)
            sweep = Sweep.model_validate(
                {
                    "sweep_id": "swp-bench",
                    "owner": "arn:aws:iam::123456789012:user/alice",
                    "name": "bench",
                    "job_template": template,
                    "hyperparameter_tuning_config": tuning,
                    "status": SweepStatus.RUNNING,
                    "created_at": now,
                    "updated_at": now,
                }
            )
            repo.create(sweep)
            for trial in trials:
                # As the controller stores them: claimed in flight, then ended (moved into its block)
                unsubmitted: dict[str, object] = {"state": TrialState.SUBMITTING, "value": None, "intermediate_values": {}, "job_id": None}
                claimed = trial.model_copy(update=unsubmitted)
                repo.claim_trial("swp-bench", claimed)
                running = claimed.model_copy(update={"state": TrialState.RUNNING, "job_id": trial.job_id})
                repo.update_trial("swp-bench", running, claimed.version)
                for step, value in trial.intermediate_values.items():
                    repo.record_value("swp-bench", trial.number, trial.job_id or "", step, value)
                repo.update_trial("swp-bench", trial, claimed.version + 1)
            controller = SweepController(repo, jobs)
            t0 = time.perf_counter()
            repo.load("swp-bench")
            query.append(time.perf_counter() - t0)
            items.append(_partition_items(clients, settings.jobs_table, "SWEEP#swp-bench"))
            t0 = time.perf_counter()
            decision = controller.decide("swp-bench")
            decide.append(time.perf_counter() - t0)
            started = repo.load("swp-bench")[1][-1]
            assert decision.started == [len(trials)] and started.job_id, (decision, started.reason)
    return {"decide": decide, "query": query, "items": items}


def _partition_items(clients: Any, table: str, pk: str) -> int:
    reply = clients.dynamodb().query(
        TableName=table, KeyConditionExpression="pk = :pk", ExpressionAttributeValues={":pk": {"S": pk}}, Select="COUNT"
    )
    return int(reply["Count"])


def bench_local(trials: int, steps: int, step_seconds: float, trainer_command: str | None) -> dict[str, list[float]]:
    from tests.e2e.conftest import LocalPlane
    from tests.helpers.jobs import request_body

    script = ROOT / "examples" / "sweeps" / "quadratic.py"
    state = Path(tempfile.mkdtemp(prefix="bench-sweeps-")) / "state"
    env = {"TRAINPLANE_TRAINER_COMMAND": trainer_command} if trainer_command else None
    plane = LocalPlane(state, allow_dirs=[ROOT / "examples"], env=env).start()  # the script is a local file (docs/SECURITY.md)
    try:
        template = request_body(name="bench")
        template["training_config"]["framework"] = {"type": "CUSTOM", "custom_script_path": str(script)}
        template["training_config"]["hyperparameters"] = {"max_steps": str(steps)}
        template["training_config"]["environment"] = {"STEP_SECONDS": str(step_seconds)}
        config = {
            "method": "random",
            "maxTrials": trials,
            "maxParallelTrials": 1,
            "metric": {"name": "score", "goal": "maximize"},
            "parameters": {
                name: {"type": "double", "min": 0.0, "max": 1.0, "target": f"training_config.environment.{name.upper()}"}
                for name in ("x", "y")
            },
        }
        reply = plane.request("POST", "/sweeps", json={"name": "bench", "job_template": template, "hyperParameterTuningConfig": config})
        if reply.status_code != 201:
            raise SystemExit(f"POST /sweeps: {reply.status_code} {reply.text}")
        sweep_id = reply.json()["sweep_id"]
        deadline = time.monotonic() + 60 + 30 * trials
        while True:
            sweep = plane.request("GET", f"/sweeps/{sweep_id}").json()
            if sweep["status"] in {"COMPLETED", "FAILED", "CANCELLED"}:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"the sweep did not end: {sweep['status']} {sweep['counts']}")
            time.sleep(0.5)
        figures: dict[str, list[float]] = {"delay": [], "turnaround": [], "to_training": [], "training": []}
        ended: datetime | None = None
        for trial in sorted(sweep["trials"], key=lambda t: t["number"]):
            created = datetime.fromisoformat(plane.request("GET", f"/jobs/{trial['job_id']}").json()["created_at"])
            if ended is not None:
                figures["delay"].append((created - ended).total_seconds())
            events = plane.request("GET", f"/jobs/{trial['job_id']}/events").json()["events"]
            at = {e["to"]: datetime.fromisoformat(e["at"]) for e in events}
            ended = next(datetime.fromisoformat(e["at"]) for e in events if e["to"] in {"COMPLETED", "FAILED", "CANCELLED"})
            if "COMPLETED" in at and "TRAINING" in at:
                figures["turnaround"].append((at["COMPLETED"] - created).total_seconds())
                figures["to_training"].append((at["TRAINING"] - created).total_seconds())
                figures["training"].append((at["COMPLETED"] - at["TRAINING"]).total_seconds())
        return figures
    finally:
        plane.stop()


def _line(name: str, values: list[float]) -> str:
    return f"{name:<58} median {statistics.median(values) * 1000:8.1f} ms   max {max(values) * 1000:8.1f} ms   (n={len(values)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--finished", type=int, default=1000)
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--step-seconds", type=float, default=0.0)
    parser.add_argument("--trainer-command", default=None)
    parser.add_argument("--skip-local", action="store_true")
    parser.add_argument("--skip-decision", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    cpu = platform.processor() or platform.machine()
    python, load = platform.python_version(), os.getloadavg()[0]
    print(f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC; {os.cpu_count()} cores ({cpu}); Python {python}; load average {load:.1f}")
    if not args.skip_decision:
        figures = bench_decision(args.runs, args.finished)
        print(f"(a) decision with {args.finished} finished trials (TPE, 4 parameters)")
        print("   " + _line("Optuna: rebuild the study + ask", figures["optuna"]))
        print("   " + _line("whole decide() on moto (query, rebuild, ask, claim, submit)", figures["decide"]))
        print("   " + _line("  of which reading the sweep (its partition's Query) on moto", figures["query"]))
        items = int(statistics.median(figures["items"]))
        print(f"   items in the sweep's partition: {items} (sweep, blocks of ended trials, trials in flight)")
    if not args.skip_local:
        local = bench_local(args.trials, args.steps, args.step_seconds, args.trainer_command)
        shape = f"{args.trials} trials one at a time, {args.steps} step(s) of {args.step_seconds:g} s"
        print(f"(b) local mode, trial end -> next trial submitted ({shape})")
        print("   " + _line("delay", local["delay"]))
        print(f"(c) local mode, a trial's job created -> COMPLETED ({shape})")
        print("   " + _line("turnaround", local["turnaround"]))
        print("   " + _line("  created -> TRAINING (state machine, launch)", local["to_training"]))
        print("   " + _line("  TRAINING -> COMPLETED (trainer process, run's end)", local["training"]))


if __name__ == "__main__":
    main()
