"""The forecast's error on REAL local runs (issue 25, "Measure"; docs/BENCHMARKS.md): median absolute % error of
the duration forecast after 1, 5 and 10 finished jobs of a shape, on tiny LoRA jobs of two model sizes run
through local mode (`trainplane up`, the real trainer on the CPU).

Prints figures, asserts nothing. For each model size (two config-built llamas: `<1M` and `1M-3M` parameters,
functions/catalog/model_sizes.py, so two forecast shapes) it runs --jobs-per-shape jobs of seeded random sizes
(--min-steps..--max-steps, log-uniform), one at a time (local mode's one CPU slot), the sizes alternating so a
change in the machine's load falls on both. Before each submit it asks the plane's dry run
(POST /jobs?dry_run=true) for the forecast, then waits for COMPLETED and reads the job's run seconds
(cost.attempts) and steps: the lifecycle has recorded it into the shape's record (ForecastLearner.record).

Two figures:
- live: the dry run's error on the job after k finished jobs of its shape (one job per shape and k: noisy);
- replay: the same measured runs replayed in --orders random orders through ForecastLearner (the code the plane
  runs): learn k, forecast each of the others, |forecast - actual| / actual, pooled.

    .venv/bin/python scripts/bench_forecast_local.py [--jobs-per-shape 12] [--out runs.json]
    .venv/bin/python scripts/bench_forecast_local.py --replay runs.json   # the replay of a recorded set only
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))  # its sibling bench_forecast, as mypy names it

from bench_forecast import FINISHED, print_errors  # noqa: E402

from functions.service.forecast_learning import ForecastLearner  # noqa: E402
from schemas.status import JobStatus  # noqa: E402
from tests.helpers.forecast import InMemoryShapeRecords, finished_job  # noqa: E402

# Two config-built llamas (the byte tokenizer): 107 K and 2.5 M parameters.
SIZES: dict[str, dict[str, Any]] = {
    "107K": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2},
    "2.5M": {"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4},
}
Run = dict[str, Any]  # size, steps, seconds, forecast (the dry run's, seconds), basis, shape


def job_spec(size: str, steps: int, index: int) -> dict[str, Any]:
    spec = json.loads((REPO / "examples" / "jobs" / "lora-tiny.json").read_text())
    spec = copy.deepcopy(spec)
    spec["name"] = f"bench-{size.lower().replace('.', '-')}-{index}"
    spec["training_config"]["base_model"]["model_kwargs"] = {"architecture": "llama", "max_position_embeddings": 256, **SIZES[size]}
    spec["training_config"]["hyperparameters"].update({"max_steps": str(steps), "logging_steps": "10", "eval_steps": "100000"})
    spec["data_config"]["sources"][0]["path"] = str(REPO / "examples" / "data" / "tiny-qa.jsonl")
    spec["output_config"]["checkpoint"].update({"save_steps": 100000, "metric_for_best_model": None, "greater_is_better": None})
    spec["output_config"]["merge_lora"] = False
    spec.pop("scheduling_config", None)
    return spec


def run_jobs(jobs_per_shape: int, min_steps: int, max_steps: int, seed: int, out: Path | None) -> list[Run]:
    from tests.e2e.conftest import LocalPlane

    rng = random.Random(seed)
    plan = [(size, round(math.exp(rng.uniform(math.log(min_steps), math.log(max_steps))))) for _ in range(jobs_per_shape) for size in SIZES]
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="bench-forecast-") as scratch:
        # One torch thread per trainer: tiny trainers spinning OpenMP threads on a loaded machine take >10x the CPU.
        plane = LocalPlane(Path(scratch) / "state", env={"OMP_NUM_THREADS": "1"}, allow_dirs=[REPO / "examples"]).start()
        try:
            for index, (size, steps) in enumerate(plan):
                spec = job_spec(size, steps, index)
                dry = plane.request("POST", "/jobs", params={"dry_run": "true"}, json=spec)
                dry.raise_for_status()
                submitted = plane.request("POST", "/jobs", json=spec)
                submitted.raise_for_status()
                job = wait_completed(plane, submitted.json()["job_id"])
                seconds = math.fsum(a["run_seconds"] for a in job["cost"]["attempts"])
                forecast = dry.json()
                run = {"size": size, "steps": job["progress"]["step"], "seconds": seconds, "forecast": forecast["duration_seconds"]}
                runs.append({**run, "basis": forecast["basis"], "shape": forecast["shape"]})
                said = forecast["duration_seconds"]
                print(
                    f"{index + 1:>3}/{len(plan)} {forecast['shape']:<22} {steps:>4} steps {seconds:7.1f} s (dry run said {said:7.1f} s)",
                    flush=True,
                )
                if out is not None:
                    out.write_text(json.dumps(runs, indent=1))
            accuracy = plane.request("GET", "/forecast-accuracy").json()
            for shape in accuracy["shapes"]:
                error, per_step = shape["median_abs_error_percent"], shape["seconds_per_step"]
                print(f"GET /forecast-accuracy {shape['shape']}: {shape['count']} jobs, median |err| {error}%, {per_step} s/step")
        finally:
            plane.stop()
    return runs


def wait_completed(plane: Any, job_id: str, timeout: float = 900.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job: dict[str, Any] = plane.request("GET", f"/jobs/{job_id}").json()
        if job["status"] == "COMPLETED":
            return job
        if job["status"] in {"FAILED", "CANCELLED"}:
            raise RuntimeError(f"{job_id} ended {job['status']}: {job.get('error_message')}\n{plane.log_tail()}")
        time.sleep(0.5)
    raise RuntimeError(f"{job_id} did not complete within {timeout:.0f}s")


def live_errors(runs: list[Run]) -> dict[int, list[float]]:
    """The dry run's error on each shape's (k+1)th job, asked with k finished jobs of the shape."""
    found: dict[int, list[float]] = {k: [] for k in FINISHED}
    for size in SIZES:
        mine = [r for r in runs if r["size"] == size]
        for k in FINISHED:
            if k < len(mine):
                found[k].append(abs(mine[k]["forecast"] - mine[k]["seconds"]) / mine[k]["seconds"] * 100)
    return found


def replay_errors(runs: list[Run], orders: int, seed: int) -> dict[int, list[float]]:
    """Each shape's measured runs in `orders` random orders: learn the first k, forecast the others."""
    rng = random.Random(seed)
    found: dict[int, list[float]] = {k: [] for k in FINISHED}
    for size in SIZES:
        mine = [(r["steps"], r["seconds"]) for r in runs if r["size"] == size]
        for _ in range(orders):
            order = rng.sample(mine, len(mine))
            for k in (k for k in FINISHED if k < len(order)):
                learner = ForecastLearner(InMemoryShapeRecords())
                for steps, seconds in order[:k]:
                    learner.record(finished_job(steps, seconds, gpus=0))
                for steps, seconds in order[k:]:
                    guess = learner.forecast(finished_job(steps, 0.0, gpus=0, status=JobStatus.PENDING))
                    found[k].append(abs(guess.seconds - seconds) / seconds * 100)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs-per-shape", type=int, default=12)
    parser.add_argument("--min-steps", type=int, default=10)
    parser.add_argument("--max-steps", type=int, default=120)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--orders", type=int, default=200, help="random orders of the replay")
    parser.add_argument("--out", type=Path, help="write the measured runs here (JSON), after each job")
    parser.add_argument("--replay", type=Path, help="replay a recorded set of runs instead of running jobs")
    args = parser.parse_args()
    runs = (
        json.loads(args.replay.read_text())
        if args.replay
        else run_jobs(args.jobs_per_shape, args.min_steps, args.max_steps, args.seed, args.out)
    )
    counts = {size: sum(1 for r in runs if r["size"] == size) for size in SIZES}
    sizes = ", ".join(f"{size} parameters: {n} runs" for size, n in counts.items())
    print(f"forecast error on real local runs (tiny LoRA on the CPU, {args.min_steps}..{args.max_steps} steps; {sizes})")
    print("live: the dry run's error on the job after k finished jobs of its shape (one job per shape)")
    print_errors(live_errors(runs))
    print(f"replay: the measured runs in {args.orders} random orders, learn k and forecast the others")
    print_errors(replay_errors(runs, args.orders, args.seed))


if __name__ == "__main__":
    main()
