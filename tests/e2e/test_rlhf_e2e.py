"""An RLHF job end to end through `trainplane up`: submitted over signed HTTP, its reward script confined
and read by the real trainer (GRPO on trl) in a child process, reward metrics reported, COMPLETED."""

from __future__ import annotations

import json

import pytest

from tests.e2e.conftest import REPO_ROOT, LocalPlane
from tests.e2e.test_lifecycle_e2e import TERMINAL, Api

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_the_rlhf_example_trains_through_local_mode(local_plane: LocalPlane) -> None:
    # Given the shipped RLHF example (paths made absolute, as the CLI does), shortened to a few steps
    spec = json.loads((REPO_ROOT / "examples" / "jobs" / "rlhf-tiny.json").read_text())
    spec["data_config"]["sources"][0]["path"] = str(REPO_ROOT / "examples" / "data" / "tiny-qa.jsonl")
    spec["training_config"]["rlhf"]["reward_script_path"] = str(REPO_ROOT / "examples" / "rlhf" / "rewards.py")
    spec["training_config"]["hyperparameters"]["max_steps"] = "4"
    api = Api(local_plane)

    # When it is submitted
    job_id = api.submit(spec)
    done = api.wait_status(job_id, *TERMINAL, timeout=300)

    # Then it completed with its final checkpoint, and its metrics carry the reward and the KL
    assert done["status"] == "COMPLETED", (done.get("error_message"), api.logs(job_id)[-3000:])
    assert done["progress"]["step"] == 4 and done["latest_checkpoint_id"] == "step-000004"
    points = local_plane.request("GET", f"/jobs/{job_id}/metrics").json()["points"]
    assert [p["step"] for p in points] == [1, 2, 3, 4]
    assert all("reward" in p and "kl" in p and p["tokens_per_second"] for p in points)
