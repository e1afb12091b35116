"""Issue 25's "Done when" in local mode: `trainplane up --gpus H100=5`, emulated GPUs priced by the deployment's
price table (functions/catalog/gpu_types.py unit_hourly_usd), a team budget of a few cents (docs/BUDGETS.md).

- at 80% a `budget.threshold_crossed` event arrives on the bus endpoint.json names (an SQS rule, as
  docs/EVENTS.md shows);
- at 100% the running jobs pass CHECKPOINTING -> PAUSED (BUDGET), and a queued one waits with reason BUDGET;
- the overshoot is within budget_meter.overshoot_bound_usd, computed from the jobs' rates;
- raising the budget resumes them, and their loss curves are an uninterrupted run's, step for step;
- a job whose forecast exceeds what is left is held and never launched: on `--compute sagemaker`, moto's
  SageMaker backend holds no training job for it until a raise lets it run.

The trainer is the real tiny LoRA trainer (the loss curves prove the model itself continued, not only that no step
was lost or repeated, which is all the fast stand-in tests/fake_trainer.py could show: a stand-in variant would be
redundant). The budget test's cost is its trainers' CPU time, so (docs/TESTING.md "The budgets e2e"):
- the trainers run torch on one thread (OMP_NUM_THREADS=1): two or three tiny trainers on a loaded machine each
  spinning two OpenMP threads took over ten times the CPU per step;
- the budget is one cent over what the jobs have cost (2 x 1 H100, 13.76 USD/h: crossed about 2.6 s later) and
  the meter ticks every second, so a job pauses a few seconds after its first step, and 40 steps (of 16 accumulated
  batches, a few tenths of a second each) are enough to train through the cent, the tick and the pause.
The sagemaker test's jobs use the fast stand-in (no model to continue: it proves that nothing is launched).
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from functions.catalog import own_events as et
from functions.catalog.gpu_types import unit_hourly_usd
from functions.service.budget_meter import PRIOR_HIGH_SECONDS, overshoot_bound_usd
from tests.e2e.conftest import REPO_ROOT, LocalPlane
from tests.e2e.test_cloud_compute_e2e import CloudPlane, ended, fake_job, get_job, submit, training, wait_for
from tests.e2e.test_events_e2e import _receive_until
from tests.e2e.test_lifecycle_e2e import Api, real_spec
from tests.helpers.waits import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

FAKE_TRAINER = f"{sys.executable} -m tests.fake_trainer"
TICK_SECONDS = 1  # the reconciler's interval: the budget meter's tick
GRACE_SECONDS = 20  # SIGTERM -> checkpoint -> exit
H100_RATE = unit_hourly_usd("H100")  # USD per emulated H100-hour
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED"}
MAX_STEPS = 40  # enough to train through the cent, the tick and the pause
MARGIN_USD = 0.01  # the budget over what the jobs have cost when it is set: the smallest amount a budget counts in


class GpusPlane(LocalPlane):
    """`trainplane up --gpus ...` with a short tick and grace, its trainers on one torch thread each."""

    def __init__(self, state_dir: Path, gpus: str) -> None:
        env = {
            "TRAINPLANE_RECONCILE_INTERVAL_SECONDS": str(TICK_SECONDS),
            "TRAINPLANE_STOP_GRACE_SECONDS": str(GRACE_SECONDS),
            "OMP_NUM_THREADS": "1",  # the trainers inherit it (the local launcher passes its environment on)
        }
        super().__init__(state_dir, env=env, allow_dirs=[REPO_ROOT / "examples"])
        self.gpus = gpus
        self.max_steps = MAX_STEPS

    def command(self) -> list[str]:
        return [*super().command(), "--gpus", self.gpus]

    def job(self, name: str, *, gpus: int = 1) -> dict[str, Any]:
        """A 1 x H100 tiny LoRA job of `max_steps` steps, slowed by gradient accumulation, a checkpoint every 10
        steps (gpus=0: the same job on the CPU)."""
        spec = real_spec(name, max_steps=self.max_steps, save_steps=10, accumulate=16)
        spec["resource_config"] = {"gpu_count": gpus, "gpu_type": "H100"} if gpus else {"gpu_count": 0}
        return spec


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GpusPlane]:
    started = GpusPlane(tmp_path_factory.mktemp("budgets") / "state", "H100=5")
    started.start()
    yield started
    started.stop()


def losses(plane: LocalPlane, job_id: str) -> list[tuple[int, float]]:
    points = plane.request("GET", f"/jobs/{job_id}/metrics").json()["points"]
    return sorted({(p["step"], p["loss"]) for p in points if p.get("loss") is not None})


def budget_of(plane: LocalPlane, budget_id: str) -> dict[str, Any]:
    response = plane.request("GET", f"/budgets/{budget_id}", principal="admin")
    assert response.status_code == 200, response.text
    return dict(response.json())


def history(plane: LocalPlane, job_id: str) -> list[dict[str, Any]]:
    return list(plane.request("GET", f"/jobs/{job_id}/events").json()["events"])


def accrued_usd(job: dict[str, Any], now: datetime) -> float:
    """What a running emulated-H100 job has cost so far: its units x the unit rate x its seconds."""
    started = datetime.fromisoformat(job["run_started_at"])
    return job["resource_config"]["gpu_count"] * H100_RATE * max((now - started).total_seconds(), 0.0) / 3600


def test_a_few_cents_team_budget_notifies_pauses_holds_and_a_raise_resumes_exactly(plane: GpusPlane) -> None:
    api = Api(plane)
    run = uuid.uuid4().hex[:12]
    sqs, events = plane.client("sqs"), plane.client("events")
    queue_url = sqs.create_queue(QueueName=f"budget-events-{run}")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    pattern = {"source": [et.SOURCE], "detail-type": [et.BUDGET_THRESHOLD.detail_type]}
    events.put_rule(Name=f"budgets-{run}", EventBusName=plane.endpoint["event_bus"], EventPattern=json.dumps(pattern))
    events.put_targets(Rule=f"budgets-{run}", EventBusName=plane.endpoint["event_bus"], Targets=[{"Id": "q", "Arn": queue_arn}])

    # Given two 1 x H100 jobs of alice's team training on emulated GPUs
    running = [api.submit(plane.job(f"budgeted-{i}")) for i in range(2)]
    jobs = [api.wait(j, lambda job: job["status"] == "TRAINING" and job["progress"]["step"] >= 1, 120, "training") for j in running]
    team = jobs[0]["team"]
    assert team and all(job["team"] == team for job in jobs)

    # And a team budget of a cent over what they have cost so far (default ladder: 50, 80 notify, 100 hold + pause)
    now = datetime.now(UTC)
    amount = round(sum(accrued_usd(job, now) for job in jobs) + MARGIN_USD, 2)
    spec = {"name": f"team-{run}", "scope": {"kind": "team", "value": team}, "amount_usd": amount, "period": "lifetime"}
    created = plane.request("POST", "/budgets", principal="admin", json=spec)
    assert created.status_code == 201, created.text
    budget_id = created.json()["budget_id"]

    # When a third job of the team is submitted: its forecast (the prior's 4 h of 3 H100s) exceeds what is left
    held = api.submit(plane.job("held", gpus=3))
    # Then it waits with reason BUDGET although three H100s are free
    api.wait(held, lambda job: job["status"] == "QUEUED" and job["wait_reason"] == "BUDGET", 60, "held on BUDGET")

    # When the spend passes 80%: Then a budget event arrives on the bus
    def crossed(percent: float) -> Any:
        return lambda got: any(e["detail"]["budget_id"] == budget_id and e["detail"]["percent"] == percent for e in got)

    received = _receive_until(sqs, queue_url, crossed(80))
    eighty = next(e["detail"] for e in received if e["detail"]["budget_id"] == budget_id and e["detail"]["percent"] == 80)
    assert eighty["action"] == "notify" and eighty["scope"] == f"team:{team}" and eighty["spent_usd"] >= 0.8 * amount

    # When it reaches 100%: Then the running jobs take the checkpointed pause (CHECKPOINTING -> PAUSED, BUDGET)
    for job_id in running:
        paused = api.wait_status(job_id, "PAUSED", *TERMINAL, timeout=120)
        assert paused["status"] == "PAUSED", paused.get("error_message")
        # (the trainer reports CHECKPOINTING for the stop's checkpoint, then TRAINING as after every save,
        # then the run ends PAUSED: the pause's checkpoint is at the very step the job had reached)
        changes = history(plane, job_id)
        assert changes[-1]["to"] == "PAUSED" and changes[-1]["reason"].startswith("BUDGET: budget"), changes[-1]
        last_checkpointing = max(i for i, change in enumerate(changes) if change["to"] == "CHECKPOINTING")
        assert {c["to"] for c in changes[last_checkpointing + 1 : -1]} <= {"TRAINING"}, changes[last_checkpointing:]
        assert paused["checkpoints"][-1]["step"] == paused["progress"]["step"] < plane.max_steps
        assert paused["latest_checkpoint_id"] == paused["checkpoints"][-1]["checkpoint_id"]
    pause_events = [e["detail"] for e in _receive_until(sqs, queue_url, crossed(100)) if e["detail"]["budget_id"] == budget_id]
    pause_event = next(e for e in pause_events if e["action"] == "pause_running")
    assert sorted(pause_event["paused_job_ids"]) == sorted(running)

    # And the overshoot is within the stated bound, from the jobs' rates (1 x H100 each)
    # (once a tick has seen the runs end, the spend is each job's recorded run seconds x its rate)
    ran_usd = sum(a["run_seconds"] * H100_RATE / 3600 for job_id in running for a in api.job(job_id)["cost"]["attempts"])
    wait_until(lambda: abs(budget_of(plane, budget_id)["spent_usd"] - ran_usd) < 1e-4, 60, what=f"the spend to be the runs' {ran_usd} USD")
    spent = budget_of(plane, budget_id)["spent_usd"]
    meter = budget_of(plane, budget_id)
    assert sorted(meter["paused_jobs"]) == sorted(running)
    assert spent >= amount
    assert spent - amount <= overshoot_bound_usd([H100_RATE] * len(running), TICK_SECONDS, GRACE_SECONDS)
    # And the queued job still waits on BUDGET and never ran
    still = api.job(held)
    assert still["status"] == "QUEUED" and still["wait_reason"] == "BUDGET" and still["run_handle"] is None
    assert "TRAINING" not in [e["to"] for e in history(plane, held)]

    # When the budget is raised enough for the two paused jobs' forecasts (the prior's upper end each), never the third's
    reservation = H100_RATE * PRIOR_HIGH_SECONDS / 3600
    raised_to = round(spent + 2.5 * reservation, 2)
    raised = plane.request("PATCH", f"/budgets/{budget_id}", principal="admin", json={"amount_usd": raised_to})
    assert raised.status_code == 200, raised.text

    # And an uninterrupted run of the same job (on the CPU: its forecast fits what is left)
    reference = api.submit(plane.job("uninterrupted", gpus=0))

    # Then both resume from their checkpoints and complete, their loss curves the uninterrupted run's
    finished = api.wait_status(reference, *TERMINAL, timeout=600)
    assert finished["status"] == "COMPLETED" and finished["attempt"] == 1, finished.get("error_message")
    uninterrupted = losses(plane, reference)
    assert [step for step, _ in uninterrupted] == list(range(1, plane.max_steps + 1))
    for job_id in running:
        done = api.wait_status(job_id, *TERMINAL, timeout=600)
        assert done["status"] == "COMPLETED" and done["attempt"] == 2, done.get("error_message")
        curve = losses(plane, job_id)
        assert [step for step, _ in curve] == list(range(1, plane.max_steps + 1))
        assert curve == uninterrupted
    # And the third, whose forecast exceeds what is left even once they have given their reservations back,
    # is still held on BUDGET and never ran
    still = api.job(held)
    assert still["status"] == "QUEUED" and still["wait_reason"] == "BUDGET" and still["run_handle"] is None
    assert "TRAINING" not in [e["to"] for e in history(plane, held)]
    assert api.verb(held, "cancel")["status"] in {"CANCELLED", "CANCELLING"}


@pytest.fixture(scope="module")
def sagemaker_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CloudPlane]:
    started = CloudPlane(tmp_path_factory.mktemp("budgets-sm") / "state", "sagemaker", FAKE_TRAINER)
    started.start()
    yield started
    started.stop()


def test_a_job_whose_forecast_exceeds_what_is_left_is_held_and_never_launched(sagemaker_plane: CloudPlane) -> None:
    plane = sagemaker_plane
    sm, ec2 = plane.client("sagemaker"), plane.client("ec2")
    # Given a deployment budget of one cent (a CPU job's prior forecast, 4 h of its instance, is far more)
    spec = {"name": "one-cent", "scope": {"kind": "deployment"}, "amount_usd": 0.01, "period": "lifetime"}
    created = plane.request("POST", "/budgets", principal="admin", json=spec)
    assert created.status_code == 201, created.text
    budget_id = created.json()["budget_id"]
    body = fake_job("over-budget", plane.bucket, max_steps="10", resources={"gpu_count": 0, "cpu_cores": 4, "ram_min_mb": 16_000})

    # When its dry run is asked for: Then it says the budget would hold it, and creates nothing
    dry = plane.request("POST", "/jobs", params={"dry_run": "true"}, json=body)
    assert dry.status_code == 200, dry.text
    covering = {b["budget_id"]: b for b in dry.json()["budgets"]}
    assert covering[budget_id]["would_hold"] is True and dry.json()["total_high_usd"] > 0.01

    # When it is submitted
    job_id = submit(plane, body)
    # Then it waits with reason BUDGET, and the control plane made no CreateTrainingJob (nor RunInstances):
    # moto's backends hold no training job and no instance
    wait_for(lambda: get_job(plane, job_id)["wait_reason"] == "BUDGET", 60, "held on BUDGET", plane)
    held = get_job(plane, job_id)
    assert held["status"] == "QUEUED" and held["run_handle"] is None
    assert sm.list_training_jobs()["TrainingJobSummaries"] == []
    assert ec2.describe_instances()["Reservations"] == []

    # When the budget is raised past its forecast: Then it is launched, as one training job tagged with its id
    raised = plane.request("PATCH", f"/budgets/{budget_id}", principal="admin", json={"amount_usd": 50})
    assert raised.status_code == 200, raised.text
    job = wait_for(lambda: training(plane, job_id), 120, "the job training", plane)
    launched = sm.describe_training_job(TrainingJobName=job["run_handle"]["run_id"])
    tags = {t["Key"]: t["Value"] for t in sm.list_tags(ResourceArn=launched["TrainingJobArn"])["Tags"]}
    assert tags["trainplane:job-id"] == job_id and len(sm.list_training_jobs()["TrainingJobSummaries"]) == 1
    done = wait_for(lambda: ended(plane, job_id, "COMPLETED"), 180, "the job to complete", plane)
    assert done["attempt"] == 1
