"""e2e: a 2-node job on `trainplane up --compute ec2`, the real trainer on both nodes.

The EC2 launcher starts both instances in one RunInstances call and writes the rendezvous object; the
emulated compute (localmode/deploy/emulated_compute/) runs each instance's trainer as its own process,
rank from the launch index, master from the rendezvous, gloo over loopback. Checked through the public
surfaces: the job pauses (both nodes stop at the step the ranks agree on, rank 0 checkpoints), resumes
exactly (every step's loss equals an uninterrupted 2-node run's), and the loss of one node (its host
gone) preempts the whole job, which resumes by itself from the last checkpoint and completes.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import REPO_ROOT
from tests.e2e.test_cloud_compute_e2e import CloudPlane, get_job, submit, verb, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

LORA_TINY = json.loads((REPO_ROOT / "examples" / "jobs" / "lora-tiny.json").read_text())
LOSE_TAG = "trainplane-emulator:lose"
STEPS = 40


@pytest.fixture(scope="module")
def ec2_real_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CloudPlane]:
    """--compute ec2 with the real trainer (the emulated instances run `python -m trainer`)."""
    plane = CloudPlane(tmp_path_factory.mktemp("multinode") / "state", "ec2").start()
    yield plane
    plane.stop()


def two_node_spec(name: str, data_uri: str) -> dict[str, Any]:
    """The tiny LoRA job on 2 CPU nodes (DDP, gloo), slowed by gradient accumulation so that a pause or a
    node loss lands mid-training rather than racing the end."""
    spec = copy.deepcopy(LORA_TINY)
    spec["name"] = name
    spec["data_config"]["sources"][0]["path"] = data_uri
    spec["training_config"]["hyperparameters"].update(
        {"max_steps": str(STEPS), "logging_steps": "1", "eval_steps": "1000", "gradient_accumulation_steps": "24"}
    )
    # Two trainers per job on a shared 2-core machine: one thread each, not a fight over the cores.
    spec["training_config"]["environment"] = {"OMP_NUM_THREADS": "1"}
    spec["training_config"]["framework"] = {"type": "HF_TRAINER", "distributed": {"world_size": 2, "backend": "gloo"}}
    spec["resource_config"] = {"gpu_count": 0, "node_count": 2}
    spec["output_config"]["checkpoint"].update({"save_steps": 4, "metric_for_best_model": None, "greater_is_better": None})
    spec["output_config"]["merge_lora"] = False
    spec.pop("scheduling_config", None)
    return spec


def losses(plane: CloudPlane, job_id: str) -> dict[int, float]:
    """Each step's training loss, the latest attempt's where a step ran twice (after a resume)."""
    points = plane.request("GET", f"/jobs/{job_id}/metrics").json()["points"]
    return {int(p["step"]): float(p["loss"]) for p in points if p.get("loss") is not None}


def statuses(plane: CloudPlane, job_id: str) -> list[str]:
    return [e["to"] for e in plane.request("GET", f"/jobs/{job_id}/events").json()["events"]]


def training_at(plane: CloudPlane, job_id: str, step: int, attempt: int = 1) -> dict[str, Any] | None:
    job = get_job(plane, job_id)
    assert job["status"] not in {"FAILED", "CANCELLED", "COMPLETED"}, f"{job['status']}: {job.get('error_message')}"
    live = job["status"] in {"TRAINING", "CHECKPOINTING"} and job["attempt"] >= attempt
    return job if live and (job.get("progress") or {}).get("step", 0) >= step else None


def past_a_new_checkpoint(plane: CloudPlane, job_id: str, paused_step: int) -> dict[str, Any] | None:
    job = training_at(plane, job_id, paused_step + 1, attempt=2)
    saved = max((c["step"] for c in (job or {}).get("checkpoints", [])), default=0)
    return job if job and saved > paused_step and job["progress"]["step"] > saved else None


def done(plane: CloudPlane, job_id: str) -> dict[str, Any] | None:
    job = get_job(plane, job_id)
    return job if job["status"] in {"COMPLETED", "FAILED", "CANCELLED"} else None


def test_two_node_job_pauses_resumes_exactly_and_a_lost_node_preempts_the_whole_job(ec2_real_plane: CloudPlane, tmp_path: Path) -> None:
    plane = ec2_real_plane
    data_uri = f"s3://{plane.bucket}/shared/multinode/tiny-qa.jsonl"
    body = (REPO_ROOT / "examples" / "data" / "tiny-qa.jsonl").read_bytes()
    plane.client("s3").put_object(Bucket=plane.bucket, Key="shared/multinode/tiny-qa.jsonl", Body=body)
    # Given two 2-node jobs: one left alone (the reference), one that will be paused and lose a node
    reference = submit(plane, two_node_spec("mn-reference", data_uri))
    job_id = submit(plane, two_node_spec("mn-interrupted", data_uri))
    job = wait_for(lambda: training_at(plane, job_id, 2), 240, "two real steps on both nodes", plane)
    # Then its run is two instances of one RunInstances call, node 0 the master of the rendezvous
    nodes = job["run_handle"]["run_id"].split(",")
    assert len(nodes) == 2 and job["run_handle"]["instance_count"] == "2"
    rendezvous = json.loads(
        plane.client("s3").get_object(Bucket=plane.bucket, Key=f"jobs/{job_id}/runs/001/rendezvous.json")["Body"].read()
    )
    assert [n["instance_id"] for n in rendezvous["nodes"]] == nodes
    # When it is paused
    assert verb(plane, job_id, "pause", {"save_checkpoint": True}).status_code in {200, 202}
    paused = wait_for(lambda: (j := get_job(plane, job_id))["status"] in {"PAUSED", "FAILED", "COMPLETED"} and j, 120, "the pause", plane)
    # Then both nodes stopped and rank 0 saved the step they agreed on
    assert paused["status"] == "PAUSED", paused.get("error_message")
    paused_step = paused["checkpoints"][-1]["step"]
    assert 2 <= paused_step < STEPS
    ec2 = plane.client("ec2")
    states = {i["State"]["Name"] for r in ec2.describe_instances(InstanceIds=nodes)["Reservations"] for i in r["Instances"]}
    assert states <= {"shutting-down", "terminated"}
    # When it is resumed, and once it has checkpointed again, its node 1 is lost (the host dies)
    assert verb(plane, job_id, "resume", {"checkpoint_id": ""}).status_code in {200, 202}
    job = wait_for(lambda: past_a_new_checkpoint(plane, job_id, paused_step), 240, "attempt 2 past a checkpoint of its own", plane)
    second = job["run_handle"]["run_id"].split(",")
    ec2.create_tags(Resources=[second[1]], Tags=[{"Key": LOSE_TAG, "Value": "host failure"}])
    # Then the whole job is preempted (node 0 terminated with it) and resumes by itself, without spending retries
    finished = wait_for(lambda: done(plane, job_id), 300, "the job to end", plane)
    assert finished["status"] == "COMPLETED", finished.get("error_message")
    assert "PREEMPTED" in statuses(plane, job_id) and finished["attempt"] == 3 and finished["retries_used"] == 0
    node0 = ec2.describe_instances(InstanceIds=[second[0]])["Reservations"][0]["Instances"][0]
    assert node0["State"]["Name"] == "terminated"
    # And the reference completes; the interrupted job's losses equal it at every step (exact resume)
    ref = wait_for(lambda: done(plane, reference), 300, "the reference job", plane)
    assert ref["status"] == "COMPLETED", ref.get("error_message")
    expected, got = losses(plane, reference), losses(plane, job_id)
    assert sorted(expected) == sorted(got) == list(range(1, STEPS + 1))
    assert got == pytest.approx(expected, rel=1e-5, abs=1e-6)
