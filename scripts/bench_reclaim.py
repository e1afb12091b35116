"""Teams benchmark (issue 24, Measure): reclaim latency in local mode.

`trainplane up --gpus H100=2 --principal bob` (as tests/e2e/test_teams_reclaim_e2e.py): team `lender` (alice)
owns both emulated H100s and lends them, team `borrower` (bob) owns none and may borrow two. Bob's tiny LoRA job
(the real trainer on the CPU) borrows both; once it trains, alice submits. From the control plane's own
timestamps (the jobs' created_at and their timelines, not this script's polling), per run: the lender's submit
to the victim's CHECKPOINTING, to its QUEUED, and to the lender's job TRAINING; compared with "SIGTERM grace +
one scheduler tick" (stop_grace_seconds + reconcile_interval_seconds, the bound the issue states).

    .venv/bin/python scripts/bench_reclaim.py [--runs 3] [--tick 30]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from functions.settings import Settings  # noqa: E402
from localmode.deploy.lifecycle import LOCAL_STOP_GRACE_SECONDS  # noqa: E402
from tests.e2e.conftest import LocalPlane  # noqa: E402
from tests.e2e.test_lifecycle_e2e import real_spec  # noqa: E402


def h100_spec(name: str, max_steps: int) -> dict[str, Any]:
    spec = real_spec(name, max_steps=max_steps, save_steps=1000, accumulate=128)  # seconds a step: reclaimed mid-training
    spec["resource_config"] = {"gpu_count": 2, "gpu_type": "H100"}
    return spec


class Plane:
    def __init__(self, plane: LocalPlane) -> None:
        self.plane = plane

    def call(self, method: str, path: str, principal: str, **kwargs: Any) -> Any:
        response = self.plane.request(method, path, principal=principal, **kwargs)
        if response.status_code >= 300:
            raise RuntimeError(f"{method} {path}: {response.status_code} {response.text}")
        return response.json()

    def wait(self, job_id: str, principal: str, until: Callable[[dict[str, Any]], bool], what: str, timeout: float = 600) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            job = self.call("GET", f"/jobs/{job_id}", principal)
            if until(job):
                return dict(job)
            time.sleep(0.2)  # polling only finds when to read the timestamps: the figures are the plane's own
        raise RuntimeError(f"{job_id}: timed out waiting for {what}\n{self.plane.log_tail()}")

    def entered(self, job_id: str, principal: str, status: str, after: datetime) -> datetime | None:
        """When the job's timeline first entered `status` after `after` (None: it did not)."""
        for event in self.call("GET", f"/jobs/{job_id}/events", principal)["events"]:
            at = datetime.fromisoformat(event["at"])
            if event["to"] == status and at >= after:
                return at
        return None


STAGES = ("victim CHECKPOINTING", "victim's checkpoint saved", "victim QUEUED", "lender's job TRAINING")


def one_run(p: Plane, n: int) -> list[float | None]:
    victim = p.call("POST", "/jobs", "bob", json=h100_spec(f"reclaim-victim-{n}", 16))["job_id"]
    p.wait(victim, "bob", lambda j: j["status"] == "TRAINING" and j["progress"]["step"] >= 2, "the borrower's job to train")
    lender = p.call("POST", "/jobs", "alice", json=h100_spec(f"reclaim-lender-{n}", 2))
    submitted = datetime.fromisoformat(lender["created_at"])
    requeued = p.wait(victim, "bob", lambda j: j["status"] == "QUEUED" and j["reclaims"] >= 1, "the reclaim")
    p.wait(lender["job_id"], "alice", lambda j: j["status"] not in {"PENDING", "QUEUED", "SCHEDULING", "PREPARING"}, "the lender's job")
    saved = [datetime.fromisoformat(c["created_at"]) for c in requeued["checkpoints"] if c.get("created_at")]
    times = [
        p.entered(victim, "bob", "CHECKPOINTING", submitted),
        max(saved) if saved and max(saved) >= submitted else None,
        p.entered(victim, "bob", "QUEUED", submitted),
        p.entered(lender["job_id"], "alice", "TRAINING", submitted),
    ]
    for job_id, who in ((lender["job_id"], "alice"), (victim, "bob")):  # leave the H100s free for the next run
        p.wait(job_id, who, lambda j: j["status"] in {"COMPLETED", "FAILED", "CANCELLED"}, "the end")
    return [None if t is None else (t - submitted).total_seconds() for t in times]


def _seconds(value: float | None) -> str:
    return "not in the timeline" if value is None else f"{value:.2f} s"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tick", type=int, default=Settings().reconcile_interval_seconds, help="the reconciler's timer (s)")
    args = parser.parse_args()
    grace = int(LOCAL_STOP_GRACE_SECONDS)  # local mode's SIGTERM -> SIGKILL (the cloud's default is 120 s)
    state = Path(tempfile.mkdtemp(prefix="bench-reclaim-")) / "state"
    env = {
        "TRAINPLANE_RECLAIM_MIN_RUN_SECONDS": "0",
        "TRAINPLANE_RECONCILE_INTERVAL_SECONDS": str(args.tick),
        "TRAINPLANE_STOP_GRACE_SECONDS": str(grace),
    }
    plane = LocalPlane(state, env=env, allow_dirs=[REPO / "examples"], args=["--gpus", "H100=2", "--principal", "bob"]).start()
    try:
        p = Plane(plane)
        for name, member, quota in (
            ("lender", "alice", {"nominal": 2, "lend_limit": 2}),
            ("borrower", "bob", {"nominal": 0, "borrow_limit": 2}),
        ):
            body = {"members": {"arns": [plane.principal(member)["arn"]]}, "quotas": {"H100": quota}, "weight": 1}
            p.call("PUT", f"/teams/{name}", "admin", json=body)
        figures = []
        for n in range(args.runs):
            figures.append(one_run(p, n))
            print(f"run {n + 1}: " + ", ".join(f"-> {what} {_seconds(v)}" for what, v in zip(STAGES, figures[-1], strict=True)), flush=True)
    finally:
        plane.stop()
    bound = grace + args.tick
    for i, what in enumerate(STAGES):
        values = sorted(v for f in figures if (v := f[i]) is not None)
        if values:
            median = statistics.median(values)
            print(f"lender's submit -> {what}: median {median:.2f} s, max {values[-1]:.2f} s ({len(values)} of {len(figures)} runs)")
        else:
            print(f"lender's submit -> {what}: in none of {len(figures)} runs' timelines")
    within = all(f[2] is not None and f[2] <= bound for f in figures)
    print(f"bound: SIGTERM grace {grace} s + one scheduler tick {args.tick} s = {bound} s (every victim QUEUED within it: {within})")


if __name__ == "__main__":
    main()
