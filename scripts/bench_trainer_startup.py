"""Trainer start-up: seconds from `python -m trainer` to the first training step, and to exit, of tiny CPU jobs.

    python scripts/bench_trainer_startup.py                              # this checkout's trainer, 3 repeats
    python scripts/bench_trainer_startup.py --compare /tmp/old/trainer_image --repeats 3
    python scripts/bench_trainer_startup.py --cold-extensions           # a fresh torch_extensions cache per run
    python scripts/bench_trainer_startup.py --jobs ddp-2,zero2-2          # some of the jobs: single, ddp-2, zero2-2

Each row runs the real entry point in a fresh process on a 2-layer llama (the tests' TINY_LLAMA, the
byte tokenizer, 40 records, 4 steps, no checkpoints but the final one): what is timed is start-up
(imports, the supervisor and its workers, process group, DeepSpeed's engine), not training.
  first step  seconds from the process start to the first PROGRESS event (rank 0)
  exit        seconds from the process start to its exit (export included)
--compare PATH runs the same jobs with the trainer package under PATH (e.g. `git archive` of an older
commit's trainer_image) interleaved with this checkout's, so both see the same machine load.
--cold-extensions points TORCH_EXTENSIONS_DIR at an empty folder for every run: what a fresh host (a CI
runner, a new container) pays for any op DeepSpeed JIT-compiles at start-up.
Figures vary with the load on the machine; compare rows of one run only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "trainer_image")]

from schemas.trainer import TrainerEvent, TrainerEventKind  # noqa: E402
from tests.trainer.runs import make_spec, trainer_env  # noqa: E402

JOBS: dict[str, dict[str, Any]] = {
    "single": {"type": "HF_TRAINER"},  # one process
    "ddp-2": {"type": "HF_TRAINER", "distributed": {"world_size": 2}},  # a supervisor and 2 DDP workers
    "zero2-2": {"type": "DEEPSPEED", "config": {"zero_stage": "2"}, "distributed": {"world_size": 2}},
}


def run_once(trainer_path: Path, framework: dict[str, Any], cold_extensions: bool) -> tuple[float, float]:
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        root = Path(tmp)
        spec = make_spec(root, "SFT", hyperparameters={"max_steps": "4", "learning_rate": "3e-3"}, records=40, framework=framework)
        env = {**os.environ, **trainer_env(root, spec)}
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(trainer_path)])
        if cold_extensions:
            env["TORCH_EXTENSIONS_DIR"] = str(root / "torch_extensions")
        started = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "trainer"], env=env, cwd=str(root), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        first_step = float("nan")
        assert proc.stdout is not None
        for line in proc.stdout:
            event = TrainerEvent.from_line(line.rstrip("\n"))
            if event is not None and event.kind == TrainerEventKind.PROGRESS and first_step != first_step:
                first_step = time.monotonic() - started
        code = proc.wait()
        ended = time.monotonic() - started
        if code != 0:
            raise SystemExit(f"the trainer under {trainer_path} exited {code} on {framework}")
        return first_step, ended


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--compare", type=Path, help="another trainer_image folder to time alongside this checkout's")
    parser.add_argument("--cold-extensions", action="store_true", help="a fresh TORCH_EXTENSIONS_DIR for every run")
    parser.add_argument("--jobs", default=",".join(JOBS), help=f"comma-separated, of {', '.join(JOBS)} (default: all)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    trainers = {"this checkout": REPO / "trainer_image"}
    if args.compare is not None:
        trainers = {"compared": args.compare, **trainers}
    names = [name for name in args.jobs.split(",") if name]
    figures: dict[str, dict[str, list[tuple[float, float]]]] = {name: {label: [] for label in trainers} for name in names}
    for _ in range(args.repeats):
        for name in names:
            for label, path in trainers.items():  # interleaved: both trainers see the same load
                figures[name][label].append(run_once(path, JOBS[name], args.cold_extensions))
    load = os.getloadavg()[0]
    print(f"load average {load:.1f}; {args.repeats} repeats; median (min-max) seconds; cold extensions: {args.cold_extensions}")
    print(f"{'job':10} {'trainer':14} {'first step':>22} {'exit':>22}")
    for name in names:
        for label in trainers:
            rows = figures[name][label]
            cells = []
            for index in (0, 1):
                values = [row[index] for row in rows]
                cells.append(f"{statistics.median(values):6.1f} ({min(values):.1f}-{max(values):.1f})")
            print(f"{name:10} {label:14} {cells[0]:>22} {cells[1]:>22}")
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
