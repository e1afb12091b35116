"""The forecast's error as it learns (issue 25, "Measure"; docs/BENCHMARKS.md): median absolute % error of the
duration forecast on runs of different sizes after 0 (the prior), 1, 5 and 10 finished jobs of a shape.

Prints figures, asserts nothing. The runs are SIMULATED: a seeded synthetic trainer whose run takes
startup + steps x seconds/step, each run drawing its own startup (lognormal, sigma 0.25) and throughput
(lognormal, sigma 0.08) around the shape's true values; sizes are 50..5,000 steps, log-uniform. Each finished
run goes through the real service (functions/service/forecast_learning.py ForecastLearner.record, what the
lifecycle calls on a completion) into an in-memory ShapeRecords; each held-out run is forecast with
ForecastLearner.forecast (what POST /jobs?dry_run=true answers) and compared with its simulated duration.

    .venv/bin/python scripts/bench_forecast.py [--seeds 20] [--held-out 50]

scripts/bench_forecast_local.py measures the same on real local runs (`trainplane up`, the real trainer).
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from functions.service.forecast_learning import ForecastLearner
from schemas.status import JobStatus
from tests.helpers.forecast import InMemoryShapeRecords, finished_job

# (GPUs, true startup seconds, true seconds per step) of the simulated shapes (H100 x GPUs / LORA).
SHAPES = [(1, 45.0, 0.35), (2, 70.0, 0.2), (4, 110.0, 0.12)]
FINISHED = (0, 1, 5, 10)


def simulated_run(rng: random.Random, gpus: int, startup: float, per_step: float) -> tuple[int, float]:
    steps = round(math.exp(rng.uniform(math.log(50), math.log(5000))))
    seconds = startup * rng.lognormvariate(0, 0.25) + steps * per_step * rng.lognormvariate(0, 0.08)
    return steps, seconds


def errors_after(seed: int, held_out: int) -> dict[int, list[float]]:
    """For each count of finished jobs: the absolute % errors of the forecast on the held-out runs (all shapes)."""
    rng = random.Random(seed)
    found: dict[int, list[float]] = {k: [] for k in FINISHED}
    for gpus, startup, per_step in SHAPES:
        learner = ForecastLearner(InMemoryShapeRecords())
        tests = [simulated_run(rng, gpus, startup, per_step) for _ in range(held_out)]
        learned = 0
        for k in FINISHED:
            while learned < k:
                steps, seconds = simulated_run(rng, gpus, startup, per_step)
                learner.record(finished_job(steps, seconds, gpus=gpus))
                learned += 1
            for steps, seconds in tests:
                guess = learner.forecast(finished_job(steps, 0.0, gpus=gpus, status=JobStatus.PENDING))
                found[k].append(abs(guess.seconds - seconds) / seconds * 100)
    return found


def print_errors(found: dict[int, list[float]], worst: dict[int, float] | None = None) -> None:
    """One line per count of finished jobs: how many forecasts were scored, their median and p90 absolute % error."""
    extra = f" {'worst seed median %':>20}" if worst else ""
    print(f"{'finished jobs':>14} {'forecasts':>10} {'median |err| %':>15} {'p90 |err| %':>12}{extra}")
    for k, errors in found.items():
        label = f"{k} (prior)" if k == 0 else str(k)
        if not errors:
            print(f"{label:>14} {0:>10} {'-':>15} {'-':>12}")
            continue
        q90 = statistics.quantiles(errors, n=10)[-1] if len(errors) > 1 else errors[0]
        tail = f" {worst[k]:>20.1f}" if worst else ""
        print(f"{label:>14} {len(errors):>10} {statistics.median(errors):>15.1f} {q90:>12.1f}{tail}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--held-out", type=int, default=50)
    args = parser.parse_args()
    per_seed: dict[int, list[float]] = {k: [] for k in FINISHED}
    pooled: dict[int, list[float]] = {k: [] for k in FINISHED}
    for seed in range(args.seeds):
        for k, errors in errors_after(seed, args.held_out).items():
            per_seed[k].append(statistics.median(errors))
            pooled[k].extend(errors)
    print(f"forecast error, {len(SHAPES)} shapes x {args.held_out} held-out runs (50..5,000 steps) x {args.seeds} seeds (simulated)")
    print_errors(pooled, {k: max(medians) for k, medians in per_seed.items()})


if __name__ == "__main__":
    main()
