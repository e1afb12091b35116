"""e2e: placement in local mode (`trainplane up --compute ec2 --capacity-pools FILE`, docs/PLACEMENT.md).

H100 spot is out, A100 spot has room and is interrupted as soon as it runs, A100 on-demand has room: a
three-candidate job's first attempt is one EC2 Fleet over H100 spot and A100 spot (the same shape and
purchase), which starts it on A100 spot at once and blocks H100 spot for its capacity error (the fleet's
Errors); it resumes after the interruption on the next healthy candidate (A100 on-demand, not the pool that
interrupted), and its record shows every placement and the recovery time. Checked through the HTTP API only.

The trainer is the fast stand-in (tests/fake_trainer.py): its loss is a function of the step, so the loss
curve's equality with an uninterrupted run's shows that the resumed run continued from its checkpoint with
no step lost or repeated; that a real model's curve matches across candidates of another world size is
the trainer's cross-shape resume (issue 26 point 4), not tested here.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_cloud_compute_e2e import FAKE_TRAINER, CloudPlane, ended, fake_job, get_job, submit, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

POOLS = {
    "pools": [
        {"instance_type": "p5.48xlarge", "purchase": "spot", "free": [[0, 0]]},
        {"instance_type": "p4d.24xlarge", "purchase": "spot", "free": [[0, 2]], "interruptions": [0]},
        {"instance_type": "p4d.24xlarge", "purchase": "on_demand", "free": [[0, 4]]},
    ]
}
CANDIDATES = [
    {"gpu_type": "H100", "gpus_per_node": 8, "purchase": "spot"},
    {"gpu_type": "A100", "gpus_per_node": 8, "purchase": "spot"},
    {"gpu_type": "A100", "gpus_per_node": 8, "purchase": "on_demand"},
]


class PoolsPlane(CloudPlane):
    def __init__(self, state_dir: Path, pools: Path) -> None:
        super().__init__(state_dir, "ec2", FAKE_TRAINER)
        self.pools = pools

    def command(self) -> list[str]:
        return [*super().command(), "--capacity-pools", str(self.pools)]


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PoolsPlane]:
    root = tmp_path_factory.mktemp("placement")
    pools = root / "pools.json"
    pools.write_text(json.dumps(POOLS))
    started = PoolsPlane(root / "state", pools).start()
    yield started
    started.stop()


def losses(plane: CloudPlane, job_id: str) -> list[tuple[int, float]]:
    points = plane.request("GET", f"/jobs/{job_id}/metrics").json()["points"]
    return sorted({(p["step"], p["loss"]) for p in points if p.get("loss") is not None})


def test_h100_out_a100_interrupted_resumes_on_the_next_healthy_candidate(plane: PoolsPlane) -> None:
    # Given a job of three candidates, 30 steps with a checkpoint every 5
    body = fake_job("placed", plane.bucket, max_steps="30", resources={"gpu_count": 8, "placement": {"candidates": CANDIDATES}})
    job_id = submit(plane, body)
    # When it runs: the fleet's H100 spot pool refuses, A100 spot is interrupted, A100 on-demand finishes
    done = wait_for(lambda: ended(plane, job_id, "COMPLETED"), 240, "the placed job to complete", plane)
    # Then its record shows every placement, in order, and why each ended: the first attempt's fleet landed on
    # A100 spot (candidate 1) in the same launch
    record = done["placement"]
    assert [(t["attempt"], t["pool"], t["candidate"], t["outcome"]) for t in record["tries"]] == [
        (1, "ec2/p4d.24xlarge/any/spot", 1, "preempted"),
        (2, "ec2/p4d.24xlarge/any/on_demand", 2, "completed"),
    ]
    assert record["tries"][0]["fleet_pools"] == ["ec2/p5.48xlarge/any/spot", "ec2/p4d.24xlarge/any/spot"]
    assert set(record["pools_blocked"]) == {"ec2/p5.48xlarge/any/spot", "ec2/p4d.24xlarge/any/spot"}
    assert len(record["recoveries"]) == 1 and record["recoveries"][0]["seconds"] > 0
    assert record["time_to_first_step_seconds"] is not None
    assert done["retries_used"] == 0 and done["preemptions"] == 1
    # And no capacity requeue was needed: the first PREPARING went straight to TRAINING
    events = plane.request("GET", f"/jobs/{job_id}/events").json()["events"]
    moves = [(e["from"], e["to"]) for e in events]
    assert not any(e["to"] == "QUEUED" and "capacity" in (e["reason"] or "") for e in events)
    assert moves.index(("PREPARING", "TRAINING")) == moves.index(("SCHEDULING", "PREPARING")) + 1
    # And the instances were the candidates': the A100 spot one reclaimed, the on-demand one not spot
    assert get_job(plane, job_id)["cost"]["attempts"][-1]["spot"] is False
    # And its loss curve is an uninterrupted run's at the same global batch
    alone = fake_job("alone", plane.bucket, max_steps="30", resources={"gpu_count": 8, "gpu_type": "A100"})
    other = submit(plane, alone)
    wait_for(lambda: ended(plane, other, "COMPLETED"), 240, "the uninterrupted job", plane)
    assert losses(plane, job_id) == losses(plane, other)
    assert [step for step, _ in losses(plane, job_id)] == list(range(1, 31))
