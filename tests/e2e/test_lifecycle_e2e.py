"""The lifecycle end to end through `trainplane up`: signed HTTP requests, moto's Step Functions running
THE state machine, the lifecycle Lambda in-process, trainers as child processes.

The flagship scenarios run the real trainer on a tiny LoRA model (2-layer llama, byte tokenizer, CPU):
pause -> resume continuing from the paused step, and a trainer killed with -9 plus a restart of local
mode mid-training. The verbs' plumbing (cancel while queued / training / paused, retry of a cancelled
job) runs on a plane whose trainer is tests/fake_trainer.py, to keep the suite fast.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.e2e.conftest import REPO_ROOT, LocalPlane
from tests.fake_trainer import knobs_apart

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "PREEMPTED"}
LORA_TINY = json.loads((REPO_ROOT / "examples" / "jobs" / "lora-tiny.json").read_text())


def real_spec(name: str, *, max_steps: int, save_steps: int, accumulate: int = 32) -> dict[str, Any]:
    """The tiny LoRA job, slowed to tens of milliseconds a step by gradient accumulation: unslowed, its 40
    steps take a third of a second, and a pause or a kill "mid-training" races the end of training."""
    spec = copy.deepcopy(LORA_TINY)
    spec["name"] = name
    spec["data_config"]["sources"][0]["path"] = str(REPO_ROOT / "examples" / "data" / "tiny-qa.jsonl")
    spec["training_config"]["hyperparameters"].update(
        {"max_steps": str(max_steps), "logging_steps": "1", "eval_steps": "1000", "gradient_accumulation_steps": str(accumulate)}
    )
    spec["output_config"]["checkpoint"].update({"save_steps": save_steps, "metric_for_best_model": None, "greater_is_better": None})
    spec["output_config"]["merge_lora"] = False
    spec.pop("scheduling_config", None)
    return spec


def fake_spec(name: str, *, max_steps: int = 6, step_seconds: float = 0.05, **hp: str) -> dict[str, Any]:
    return {
        "name": name,
        "training_config": {
            "training_type": "SFT",
            "base_model": {"model_id": "tiny", "source": "config", "tokenizer_id": "byte", "model_kwargs": {"architecture": "llama"}},
            "hyperparameters": knobs_apart({"max_steps": str(max_steps), **hp})[0],
            # The fake trainer's knobs: submit refuses hyperparameters the real trainer does not know.
            "environment": knobs_apart({"fake_step_seconds": str(step_seconds), **hp})[1],
        },
        # Not read by the fake trainer; named where local mode allows local files (docs/SECURITY.md).
        "data_config": {"sources": [{"path": str(REPO_ROOT / "examples" / "data" / "tiny-qa.jsonl")}]},
        "resource_config": {"gpu_count": 0},
        "output_config": {"checkpoint": {"save_steps": 2}},
    }


class Api:
    def __init__(self, plane: LocalPlane) -> None:
        self.plane = plane

    def submit(self, spec: dict[str, Any]) -> str:
        response = self.plane.request("POST", "/jobs", json=spec)
        assert response.status_code == 201, response.text
        return str(response.json()["job_id"])

    def job(self, job_id: str) -> dict[str, Any]:
        response = self.plane.request("GET", f"/jobs/{job_id}")
        assert response.status_code == 200, response.text
        return dict(response.json())

    def verb(self, job_id: str, verb: str, body: dict[str, Any] | None = None, expect: int = 202) -> dict[str, Any]:
        for _ in range(10):
            response = self.plane.request("POST", f"/jobs/{job_id}/{verb}", json=body or {})
            # A 409 "changed by another request" (the trainer moved TRAINING <-> CHECKPOINTING meanwhile)
            # asks the client to reload and retry, as any client of this API does.
            if response.status_code != 409 or "changed by another request" not in response.text:
                break
            time.sleep(0.1)
        assert response.status_code in {expect, 200, 201, 202}, f"{verb}: {response.status_code} {response.text}"
        return dict(response.json())

    def statuses(self, job_id: str) -> list[str]:
        return [e["to"] for e in self.plane.request("GET", f"/jobs/{job_id}/events").json()["events"]]

    def logs(self, job_id: str) -> str:
        return "\n".join(line["message"] for line in self.log_lines(job_id))

    def log_lines(self, job_id: str) -> list[dict[str, Any]]:
        return list(self.plane.request("GET", f"/jobs/{job_id}/logs", params={"limit": 1000}).json()["lines"])

    def wait(self, job_id: str, until: Callable[[dict[str, Any]], bool], timeout: float, what: str) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        job: dict[str, Any] = {}
        while time.monotonic() < deadline:
            job = self.job(job_id)
            if until(job):
                return job
            time.sleep(0.2)
        now = f"now {job.get('status')} step {job.get('progress', {}).get('step')}"
        raise AssertionError(f"{job_id}: timed out waiting for {what}; {now}\n{self.plane.log_tail()}")

    def wait_status(self, job_id: str, *statuses: str, timeout: float = 240) -> dict[str, Any]:
        return self.wait(job_id, lambda j: j["status"] in statuses, timeout, f"status in {statuses}")


FAKE_TRAINER_ENV = {"TRAINPLANE_TRAINER_COMMAND": f"{sys.executable} -m tests.fake_trainer", "TRAINPLANE_RECONCILE_INTERVAL_SECONDS": "2"}


@pytest.fixture(scope="module")
def fake_plane(module_plane_factory: Callable[..., LocalPlane]) -> LocalPlane:
    """`trainplane up` whose LocalLauncher runs tests/fake_trainer.py."""
    return module_plane_factory(env=FAKE_TRAINER_ENV)


def test_real_trainer_pause_then_resume_continues_from_the_paused_step(local_plane: LocalPlane) -> None:
    api = Api(local_plane)
    # Given a real (tiny) training job, with no periodic checkpoint before the pause
    job_id = api.submit(real_spec("e2e-pause", max_steps=40, save_steps=1000))
    api.wait(job_id, lambda j: j["status"] in {"TRAINING", "CHECKPOINTING"} and j["progress"]["step"] >= 2, 240, "a few real steps")
    # When it is paused while TRAINING
    api.verb(job_id, "pause", {"save_checkpoint": True})
    paused = api.wait_status(job_id, "PAUSED", *TERMINAL, timeout=120)
    # Then it is PAUSED with a checkpoint of the step it had reached
    assert paused["status"] == "PAUSED", paused.get("error_message")
    step = paused["checkpoints"][-1]["step"]
    assert step >= 2 and paused["latest_checkpoint_id"] == f"step-{step:06d}"
    assert paused["checkpoints"][-1]["uri"].startswith("s3://")
    # When it is resumed (same job id)
    api.verb(job_id, "resume", {"checkpoint_id": ""})
    done = api.wait_status(job_id, *TERMINAL, timeout=300)
    # Then it completes, its second attempt having resumed at that step, not at 0
    assert done["status"] == "COMPLETED", done.get("error_message")
    assert done["progress"]["step"] == 40 and done["job_id"] == job_id
    assert f"at step {step} " in api.logs(job_id)
    statuses = api.statuses(job_id)
    assert statuses.index("PAUSED") < statuses.index("COMPLETED") and statuses.count("QUEUED") == 2
    # and the first attempt's timeline is exactly the checkpointed pause's: the trainer reports CHECKPOINTING for
    # the stop's checkpoint and nothing after it (no TRAINING as it exits), then the run's end lands PAUSED
    events = local_plane.request("GET", f"/jobs/{job_id}/events").json()["events"]
    changes = [e["to"] for e in events if e["from"] != e["to"]]
    first = ["PENDING", "QUEUED", "SCHEDULING", "PREPARING", "TRAINING", "CHECKPOINTING", "PAUSED", "QUEUED"]
    assert changes[: len(first)] == first, changes


def test_real_trainer_killed_then_local_mode_restarted_mid_training_still_completes(plane_factory: Callable[..., LocalPlane]) -> None:
    plane = plane_factory()
    api = Api(plane)
    # Given a real training job that has written a checkpoint
    job_id = api.submit(real_spec("e2e-kill-restart", max_steps=60, save_steps=5))
    api.wait(job_id, lambda j: j["status"] in {"TRAINING", "CHECKPOINTING"} and j["latest_checkpoint_id"], 240, "a checkpoint")
    # When its trainer process is killed with -9 (not by the control plane)
    before = api.job(job_id)
    pid, killed_at = int(before["run_handle"]["run_id"]), before["latest_checkpoint_id"]
    os.killpg(pid, signal.SIGKILL)
    # Then it is PREEMPTED and resumed automatically (a second attempt), without spending max_retries
    resumed = api.wait(
        job_id, lambda j: j["attempt"] >= 2 and j["status"] in {"TRAINING", "CHECKPOINTING", *TERMINAL}, 240, "the automatic resume"
    )
    assert "PREEMPTED" in api.statuses(job_id) and resumed["retries_used"] == 0
    api.wait(job_id, lambda j: j["latest_checkpoint_id"] != killed_at or j["status"] in TERMINAL, 240, "a checkpoint of attempt 2")
    # When local mode itself restarts mid-training (SIGTERM, then `trainplane up` again on the same state dir)
    assert api.job(job_id)["status"] not in TERMINAL, "the job finished before the restart could interrupt it"
    plane.restart()
    api = Api(plane)
    # Then the job, restored from the journal, resumes from its latest checkpoint and completes
    # (PREEMPTED on the way is not an end here: it is resumed automatically)
    done = api.wait_status(job_id, "COMPLETED", "FAILED", "CANCELLED", timeout=300)
    assert done["status"] == "COMPLETED", done.get("error_message")
    assert done["attempt"] >= 3 and done["progress"]["step"] == 60
    logs = api.logs(job_id)
    assert logs.count("resumed from") >= 2


def test_cancel_while_queued_training_and_paused_then_retry_the_cancelled_job(fake_plane: LocalPlane) -> None:
    api = Api(fake_plane)
    # Given one job holding the only CPU slot and another waiting for it
    running = api.submit(fake_spec("long", max_steps=400, step_seconds=0.05))
    api.wait_status(running, "TRAINING", timeout=60)
    queued = api.submit(fake_spec("waiting"))
    api.wait_status(queued, "QUEUED", timeout=30)
    # When the queued one is cancelled, Then it is CANCELLED without ever being scheduled
    api.verb(queued, "cancel", {"reason": "not needed"}, expect=200)
    assert api.wait_status(queued, *TERMINAL, timeout=30)["status"] == "CANCELLED"
    assert "SCHEDULING" not in api.statuses(queued)
    # When the training one is paused and then cancelled while PAUSED
    api.wait(running, lambda j: j["progress"]["step"] >= 2, 60, "progress")
    api.verb(running, "pause")
    assert api.wait_status(running, "PAUSED", *TERMINAL, timeout=60)["status"] == "PAUSED"
    # (this trainer still reports TRAINING after its stop checkpoint: the lifecycle does not apply it while the
    # pause is pending, so the timeline reads TRAINING -> CHECKPOINTING -> PAUSED)
    events = fake_plane.request("GET", f"/jobs/{running}/events").json()["events"]
    changes = [e["to"] for e in events if e["from"] != e["to"]]
    assert changes[-3:] == ["TRAINING", "CHECKPOINTING", "PAUSED"], changes
    api.verb(running, "cancel", expect=200)
    assert api.wait_status(running, *TERMINAL, timeout=30)["status"] == "CANCELLED"
    # When a third job is cancelled while TRAINING
    third = api.submit(fake_spec("third", max_steps=60, step_seconds=0.1))
    api.wait(third, lambda j: j["status"] == "TRAINING" and j["latest_checkpoint_id"], 60, "a checkpoint")
    api.verb(third, "cancel", expect=200)
    cancelled = api.wait_status(third, *TERMINAL, timeout=30)
    assert cancelled["status"] == "CANCELLED"
    # When the cancelled job is retried with new resources, Then a child job runs from its checkpoint to completion
    response = fake_plane.request("POST", f"/jobs/{third}/retry", json={"checkpoint_id": "", "modify_resources": False})
    assert response.status_code == 201, response.text
    child = response.json()
    assert child["parent_job_id"] == third and child["job_id"] != third
    assert child["training_config"]["resume_from_checkpoint"].startswith("s3://")
    done = api.wait_status(child["job_id"], *TERMINAL, timeout=120)
    assert done["status"] == "COMPLETED", done.get("error_message")
    assert "starting at step 0" not in api.logs(child["job_id"])


def test_queues_route_and_queue_position(fake_plane: LocalPlane) -> None:
    api = Api(fake_plane)
    blocker = api.submit(fake_spec("blocker", max_steps=100_000, step_seconds=0.05))
    api.wait_status(blocker, "TRAINING", timeout=60)
    first, second = api.submit(fake_spec("q1")), api.submit(fake_spec("q2"))
    api.wait(second, lambda j: j["status"] == "QUEUED" and j.get("queue_position") == 1, 30, "a queue position")
    assert api.job(first)["queue_position"] == 0
    response = fake_plane.request("GET", "/queues")
    if response.status_code == 404:
        pytest.fail("GET /queues is not routed: functions/handlers/queues.py's router must be included in functions/handlers/api.py")
    default = next(q for q in response.json()["queues"] if q["queue"] == "default")
    assert default["queued"] >= 2 and default["head"][:2] == [first, second]
    for job_id in (blocker, first, second):
        api.verb(job_id, "cancel", expect=200)


def test_local_mode_killed_with_9_mid_training_resumes_the_job_after_restart(fake_plane: LocalPlane) -> None:
    api = Api(fake_plane)
    # Given a job that has written checkpoints
    job_id = api.submit(fake_spec("survivor", max_steps=120, step_seconds=0.1))
    before = api.wait(job_id, lambda j: j["status"] in {"TRAINING", "CHECKPOINTING"} and j["latest_checkpoint_id"], 60, "a checkpoint")
    trainer = int(before["run_handle"]["run_id"])
    # When `trainplane up` is killed with -9 (no shutdown code runs) and started again on its state dir
    fake_plane.kill()
    fake_plane.start()
    api = Api(fake_plane)
    # Then the job, restored from the journal, is preempted and resumed from a checkpoint, and completes
    done = api.wait_status(job_id, "COMPLETED", "FAILED", "CANCELLED", timeout=120)
    assert done["status"] == "COMPLETED", done.get("error_message")
    assert done["attempt"] >= 2 and "PREEMPTED" in api.statuses(job_id)
    assert "starting at step 0" not in api.logs(job_id).split("attempt 2", 1)[-1]
    # And the trainer the killed process left behind does not live on
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(trainer, 0)
        except ProcessLookupError:
            break
        time.sleep(0.5)
    else:
        pytest.fail(f"the orphaned trainer (pid {trainer}) is still running")
