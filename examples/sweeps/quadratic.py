"""A CUSTOM trial script whose metric is a known function of its hyperparameters (docs/SWEEPS.md).

score(x, y) = 1 - (x - 0.3)**2 - (y - 0.7)**2, best at x=0.3, y=0.7. x and y come from the environment
(X, Y: a sweep sets them with targets training_config.environment.X / .Y; hyperparameters are checked
against the trainer's own list at submit) or from --x/--y; the run lasts `--max_steps` steps (the
max_steps hyperparameter) of STEP_SECONDS each. It reports `score` once per step as a trainer `metrics`
event (the sweep's metric). On SIGTERM
(pause, preemption) it saves a checkpoint (its step) under TRAINPLANE_CHECKPOINT_DIR, reports it and
exits 75; run again with `resume_from` in its run spec, it goes on from that step.
"""

import argparse
import json
import os
import signal
import sys
import time

OPTIMUM = (0.3, 0.7)


def score(x: float, y: float) -> float:
    return 1.0 - (x - OPTIMUM[0]) ** 2 - (y - OPTIMUM[1]) ** 2


def event(kind: str, **data: object) -> None:
    # One write, newline included: print writes the two apart, and a report printed between them (by a
    # signal handler) would share the line.
    sys.stdout.write("TRAINPLANE_EVENT " + json.dumps({"kind": kind, "time": time.time(), "data": data}) + "\n")
    sys.stdout.flush()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--x", type=float, default=float(os.environ.get("X", "0")))
    parser.add_argument("--y", type=float, default=float(os.environ.get("Y", "0")))
    parser.add_argument("--max_steps", type=int, default=3)
    parser.add_argument("--step_seconds", type=float, default=float(os.environ.get("STEP_SECONDS", "0.2")))
    args, _ = parser.parse_known_args()
    with open(os.environ["TRAINPLANE_RUN_SPEC"]) as f:
        spec = json.load(f)
    checkpoints = os.environ.get("TRAINPLANE_CHECKPOINT_DIR", ".")
    step = 0
    resume = spec.get("resume_from")
    if resume and os.path.isfile(os.path.join(resume, "state.json")):
        with open(os.path.join(resume, "state.json")) as f:
            step = json.load(f)["step"]
        print(f"resumed at step {step}", flush=True)

    def stop(signum: int, _frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one checkpoint, should the stop be signalled twice
        name = f"step-{step:06d}"
        where = os.path.join(checkpoints, name)
        os.makedirs(where, exist_ok=True)
        with open(os.path.join(where, "state.json"), "w") as f:
            json.dump({"step": step}, f)
        event("checkpoint", checkpoint_id=name, step=step, uri=where, metrics={"score": score(args.x, args.y)})
        sys.exit(75)

    signal.signal(signal.SIGTERM, stop)
    while step < args.max_steps:
        time.sleep(args.step_seconds)
        step += 1
        event("metrics", step=step, score=score(args.x, args.y))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
