"""The job scripts/bench_events.py runs: a tiny CUSTOM script (docs/EVENTS.md's contract) that stays running
and keeps emitting transitions until the benchmark lets it end.

Once the file START_FILE exists (the benchmark creates it when every job is running) it saves a checkpoint
(a state.json under TRAINPLANE_CHECKPOINT_DIR, reported as a `checkpoint` event: a `Trainplane Checkpoint
Saved` event in the outbox) every SAVE_SECONDS, the first at a random point of the first interval so that
the jobs do not save in step; it exits 0 after one last checkpoint once the file RELEASE_FILE exists. It
costs one sleeping interpreter: the benchmark can hold a hundred of them RUNNING on two cores. On SIGTERM
it exits 75 after a checkpoint, as the contract asks.
"""

import json
import os
import random
import signal
import sys
import time


def checkpoint(step: int) -> None:
    name = f"step-{step:06d}"
    where = os.path.join(os.environ.get("TRAINPLANE_CHECKPOINT_DIR", "."), name)
    os.makedirs(where, exist_ok=True)
    with open(os.path.join(where, "state.json"), "w") as f:
        json.dump({"step": step}, f)
    event = {"kind": "checkpoint", "time": time.time(), "data": {"checkpoint_id": name, "step": step, "uri": where}}
    print("TRAINPLANE_EVENT " + json.dumps(event), flush=True)


def main() -> int:
    start, release = os.environ["START_FILE"], os.environ["RELEASE_FILE"]
    every = float(os.environ.get("SAVE_SECONDS", "10"))
    step = 0

    def stop(signum: int, _frame: object) -> None:
        checkpoint(step)
        sys.exit(75)

    signal.signal(signal.SIGTERM, stop)
    while not os.path.exists(start) and not os.path.exists(release):
        time.sleep(0.5)
    next_save = time.monotonic() + random.uniform(0, every)
    while not os.path.exists(release):
        time.sleep(min(every, 0.5))
        if time.monotonic() >= next_save:
            step += 1
            checkpoint(step)
            next_save += every
    checkpoint(step + 1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
