"""e2e (issue 24's "done when"): reclaim through the checkpointed pause path on `trainplane up --gpus H100=2
--principal bob`, the real trainer on the CPU while each job holds its emulated H100s.

Team `lender` (alice) has both H100s as its nominal quota and lends them while idle; team `borrower` (bob)
has none and may borrow two. Bob's job borrows them; alice submits; the scheduler reclaims them: bob's job
is stopped gracefully with a checkpoint (CHECKPOINTING -> QUEUED, same job id, a reclaim line in its
timeline), alice's job starts and ends, then bob's resumes from its checkpoint and its every step's loss
equals an uninterrupted run of the same job.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.e2e.conftest import LocalPlane
from tests.e2e.test_lifecycle_e2e import TERMINAL, Api, real_spec

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

STEPS = 16


class As(Api):
    """The lifecycle tests' API helper, signed as one principal."""

    def __init__(self, plane: LocalPlane, principal: str) -> None:
        super().__init__(plane)
        self.principal = principal

    def submit(self, spec: dict[str, Any]) -> str:
        response = self.plane.request("POST", "/jobs", json=spec, principal=self.principal)
        assert response.status_code == 201, response.text
        return str(response.json()["job_id"])

    def job(self, job_id: str) -> dict[str, Any]:
        response = self.plane.request("GET", f"/jobs/{job_id}", principal=self.principal)
        assert response.status_code == 200, response.text
        return dict(response.json())

    def log_lines(self, job_id: str) -> list[dict[str, Any]]:
        response = self.plane.request("GET", f"/jobs/{job_id}/logs", params={"limit": 1000}, principal=self.principal)
        return list(response.json()["lines"])

    def events(self, job_id: str) -> list[dict[str, Any]]:
        return list(self.plane.request("GET", f"/jobs/{job_id}/events", principal=self.principal).json()["events"])

    def losses(self, job_id: str) -> dict[int, float]:
        """Each step's training loss, the latest attempt's where a step ran twice (after a resume)."""
        points = self.plane.request("GET", f"/jobs/{job_id}/metrics", principal=self.principal).json()["points"]
        return {int(p["step"]): float(p["loss"]) for p in points if p.get("loss") is not None}


@pytest.fixture(scope="module")
def plane(module_plane_factory: Callable[..., LocalPlane]) -> LocalPlane:
    # A borrowed job may be reclaimed at once (the minimum run time has unit tests of its own).
    env = {"TRAINPLANE_RECLAIM_MIN_RUN_SECONDS": "0", "TRAINPLANE_RECONCILE_INTERVAL_SECONDS": "2"}
    return module_plane_factory(env=env, args=["--gpus", "H100=2", "--principal", "bob"])


def h100_spec(name: str, *, max_steps: int) -> dict[str, Any]:
    # Accumulation 128 (tenths of a second a step): the victim trains for seconds after step 2, so the reclaim (one
    # scheduler pass) lands mid-training even on a quiet machine; at 8 a quiet CI machine ran all 16 steps between
    # two polls. Still quick enough for three runs on a busy machine.
    spec = real_spec(name, max_steps=max_steps, save_steps=1000, accumulate=128)  # no periodic checkpoint: the reclaim's is the one
    spec["resource_config"] = {"gpu_count": 2, "gpu_type": "H100"}
    return spec


def put_team(plane: LocalPlane, name: str, member: str, quota: dict[str, Any]) -> None:
    body = {"members": {"arns": [plane.principal(member)["arn"]]}, "quotas": {"H100": quota}, "weight": 1}
    response = plane.request("PUT", f"/teams/{name}", json=body, principal="admin")
    assert response.status_code in {200, 201}, response.text


def test_a_lender_takes_its_h100s_back_through_a_checkpoint_and_the_borrower_resumes_exactly(plane: LocalPlane) -> None:
    alice, bob = As(plane, "alice"), As(plane, "bob")
    # Given team lender (alice) owning both emulated H100s, and team borrower (bob) owning none but allowed two
    put_team(plane, "lender", "alice", {"nominal": 2, "lend_limit": 2})
    put_team(plane, "borrower", "bob", {"nominal": 0, "borrow_limit": 2})
    # And an uninterrupted run of bob's job, on the borrowed H100s (the reference loss curve)
    reference = bob.submit(h100_spec("reclaim-reference", max_steps=STEPS))
    finished = bob.wait_status(reference, *TERMINAL, timeout=300)
    assert finished["status"] == "COMPLETED", finished.get("error_message")
    assert finished["team"] == "borrower"

    # When bob's job borrows both H100s again and trains a few steps
    job_id = bob.submit(h100_spec("reclaim-victim", max_steps=STEPS))
    bob.wait(job_id, lambda j: j["status"] == "TRAINING" and j["progress"]["step"] >= 2, 240, "a few real steps on borrowed H100s")
    view = plane.request("GET", "/teams/borrower", principal="bob").json()
    assert {(t["gpu_type"], t["in_use"], t["borrowed"]) for t in view["types"]} >= {("H100", 2, 2)}
    # And alice, within her team's nominal quota, asks for them
    lender_job = alice.submit(h100_spec("reclaim-lender", max_steps=4))

    # Then bob's job is stopped with a checkpoint and goes back to the queue, same job id
    requeued = bob.wait(job_id, lambda j: j["status"] == "QUEUED" and j["attempt"] >= 1 and bool(j["checkpoints"]), 240, "the reclaim")
    reclaimed_at = requeued["checkpoints"][-1]["step"]
    assert 2 <= reclaimed_at < STEPS and requeued["reclaims"] == 1
    timeline = bob.events(job_id)
    statuses = [e["to"] for e in timeline]
    requeued_at = len(statuses) - 1 - statuses[::-1].index("QUEUED")
    # The trainer reports CHECKPOINTING while it saves on SIGTERM, and nothing after it as it exits: the run's
    # statuses end TRAINING -> CHECKPOINTING -> QUEUED, never a stop without that save
    changes = [e["to"] for e in timeline[: requeued_at + 1] if e["from"] != e["to"]]
    assert changes[-3:] == ["TRAINING", "CHECKPOINTING", "QUEUED"], changes
    back = timeline[requeued_at]
    assert back["reason"].startswith(f"reclaimed by team lender for job {lender_job}") and "work lost" in back["reason"]
    # And alice's job starts on the H100s, and ends
    alice.wait(lender_job, lambda j: j["status"] not in {"PENDING", "QUEUED"}, 240, "the lender's job to start")
    assert alice.wait_status(lender_job, *TERMINAL, timeout=300)["status"] == "COMPLETED"

    # Then bob's job resumes under the same job id from the reclaim's checkpoint and completes
    done = bob.wait_status(job_id, *TERMINAL, timeout=300)
    assert done["status"] == "COMPLETED", done.get("error_message")
    assert done["job_id"] == job_id and done["attempt"] == 2 and done["progress"]["step"] == STEPS
    assert f"at step {reclaimed_at} " in bob.logs(job_id)
    # And its loss curve is the uninterrupted run's, step for step
    expected, got = bob.losses(reference), bob.losses(job_id)
    assert sorted(got) == sorted(expected) == list(range(1, STEPS + 1))
    assert got == expected
