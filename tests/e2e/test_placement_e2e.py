"""e2e: placement in local mode (`trainplane up --compute ec2 --capacity-pools FILE`, docs/PLACEMENT.md).

H100 spot is out, A100 spot has room and is interrupted as soon as it runs, A100 on-demand has room: a
three-candidate job's first attempt is one EC2 Fleet over H100 spot and A100 spot (the same shape and
purchase), which starts it on A100 spot at once and blocks H100 spot for its capacity error (the fleet's
Errors); it resumes after the interruption on the next healthy candidate (A100 on-demand, not the pool that
interrupted), and its record shows every placement and the recovery time. Checked through the HTTP API only.

The trainer is the real one on the tiny LoRA job (tests/e2e/test_lifecycle_e2e.py real_spec, on the CPU):
the resumed run's loss curve equals an uninterrupted run's at the same global batch, step for step, so the
checkpointed resume on the next candidate lost and repeated nothing. (Its candidates have the same world
size; a resume across world sizes is the trainer's, tests/trainer, "Resume across shapes".)
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import REPO_ROOT
from tests.e2e.test_cloud_compute_e2e import CloudPlane, ended, get_job, submit, wait_for
from tests.e2e.test_lifecycle_e2e import real_spec

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
    def __init__(self, state_dir: Path, pools: Path, trainer_command: str | None = None) -> None:
        super().__init__(state_dir, "ec2", trainer_command)  # None: the real trainer
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


def placed_job(plane: CloudPlane, name: str, resources: dict[str, Any]) -> dict[str, Any]:
    """The tiny LoRA job on the real trainer: 12 steps, a checkpoint every 3; its data in the plane's bucket
    (EC2 reads S3 only)."""
    key = "shared/placement/tiny-qa.jsonl"
    plane.client("s3").put_object(Bucket=plane.bucket, Key=key, Body=(REPO_ROOT / "examples" / "data" / "tiny-qa.jsonl").read_bytes())
    spec = real_spec(name, max_steps=12, save_steps=3, accumulate=2)
    spec["data_config"]["sources"][0]["path"] = f"s3://{plane.bucket}/{key}"
    spec["resource_config"] = resources
    return spec


def losses(plane: CloudPlane, job_id: str) -> list[tuple[int, float]]:
    points = plane.request("GET", f"/jobs/{job_id}/metrics").json()["points"]
    return sorted({(p["step"], p["loss"]) for p in points if p.get("loss") is not None})


def test_h100_out_a100_interrupted_resumes_on_the_next_healthy_candidate(plane: PoolsPlane) -> None:
    # Given a job of three candidates, 12 steps of the real trainer with a checkpoint every 3
    job_id = submit(plane, placed_job(plane, "placed", {"gpu_count": 8, "placement": {"candidates": CANDIDATES}}))
    # When it runs: the fleet's H100 spot pool refuses, A100 spot is interrupted, A100 on-demand finishes
    done = wait_for(lambda: ended(plane, job_id, "COMPLETED"), 600, "the placed job to complete", plane)
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
    other = submit(plane, placed_job(plane, "alone", {"gpu_count": 8, "gpu_type": "A100"}))
    wait_for(lambda: ended(plane, other, "COMPLETED"), 600, "the uninterrupted job", plane)
    assert losses(plane, job_id) == losses(plane, other)
    assert [step for step, _ in losses(plane, job_id)] == list(range(1, 13))
