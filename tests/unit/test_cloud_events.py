"""EventBridge events -> the lifecycle (functions/service/cloud_events.py, functions/handlers/events.py).

The real LifecycleService on in-memory fakes decides; the events are the recorded files in
tests/events. Duplicate, late and out-of-order events must change nothing.
"""

from __future__ import annotations

import copy
import io
import json
from typing import Any

import boto3
import pytest
from botocore.response import StreamingBody
from botocore.stub import Stubber

from functions import composition
from functions.adapters.launchers.ec2 import EC2Launcher
from functions.adapters.launchers.sagemaker import SageMakerLauncher, describe_training_job
from functions.handlers import events as handler
from functions.service.budgets import TickResult
from functions.service.cloud_events import CloudEventsService
from functions.service.lifecycle import LifecycleConfig, LifecycleService
from functions.service.ports import LaunchHandle, LaunchRequest, RunDescription, RunState, Transition
from functions.service.reconciler import Reconciler, ReconcileReport
from functions.service.scheduler import LocalCapacity, Scheduler
from schemas.job import ErrorType, Job, PendingAction, StatusEvent
from schemas.status import JobStatus
from tests.cloud_fixtures import cloud_settings, load_event
from tests.fakes import InMemoryArtifactStore, InMemoryJobRepository
from tests.lifecycle_support import InMemoryLedger, make_job, make_request

S = JobStatus
EXEC = "arn:aws:states:us-east-1:123456789012:execution:lifecycle:one"
INSTANCE = "i-0abcd1234ef567890"


class Tokens:
    def __init__(self) -> None:
        self.answers: list[tuple[str, dict[str, Any]]] = []
        self.heartbeats: list[str] = []

    def send_success(self, token: str, output: Any) -> bool:
        self.answers.append((token, dict(output)))
        return True

    def send_heartbeat(self, token: str) -> bool:
        self.heartbeats.append(token)
        return True

    def stop_run(self, job: Job, *, graceful: bool, reason: str) -> None:
        pass


class CloudLauncher:
    """Stands in for SageMakerLauncher / EC2Launcher at launch time; the events carry the rest."""

    def __init__(self, name: str, run_id: str) -> None:
        self.name = name
        self.run_id = run_id
        self.interrupted: list[str] = []
        self.described: list[LaunchHandle] = []
        self.description = RunDescription(state=RunState.RUNNING)
        self.refs: dict[str, tuple[str, int]] = {}

    def launch(self, request: LaunchRequest) -> LaunchHandle:
        self.refs[self.run_id] = (request.job_id, request.attempt)
        extra = {"instance_type": "ml.g5.xlarge" if self.name == "sagemaker" else "g5.xlarge", "instance_count": "1", "spot": "false"}
        return LaunchHandle(self.name, self.run_id, request.attempt, extra)

    def stop(self, handle: LaunchHandle, *, graceful: bool = True) -> None:
        pass

    def describe(self, handle: LaunchHandle) -> RunDescription:
        self.described.append(handle)
        return self.description

    # EC2 extras
    def job_ref(self, instance_id: str) -> tuple[str, int] | None:
        return self.refs.get(instance_id)

    def mark_interrupted(self, instance_id: str) -> None:
        self.interrupted.append(instance_id)


class World:
    def __init__(self, compute: str, run_id: str) -> None:
        self.repo = InMemoryJobRepository()
        self.tokens = Tokens()
        self.launcher = CloudLauncher(compute, run_id)
        scheduler = Scheduler(self.repo, InMemoryLedger(), LocalCapacity(gpu_slots=8, cpu_slots=2), self.tokens, self.tokens)
        self.lifecycle = LifecycleService(
            self.repo,
            InMemoryArtifactStore(),
            {compute: self.launcher},
            self.tokens,
            self.tokens,
            scheduler,
            LifecycleConfig(bucket="trainplane-artifacts", launcher=compute, heartbeat_seconds=4, max_preemptions=2),
        )
        self.events = CloudEventsService(self.repo, self.lifecycle, {compute: self.launcher}, describe_training_job)
        job = make_job(make_request()).model_copy(update={"job_id": "job-0a1b2c3d"})
        self.repo.create(job, StatusEvent(at=job.created_at, to_status=S.PENDING, reason="submitted"))
        self.repo.annotate(job.job_id, {"execution_arn": EXEC})
        self.job_id = job.job_id

    def to_training(self) -> Job:
        assert self.lifecycle.admit(self.job_id, EXEC) == {"next": "wait_capacity"}
        self.lifecycle.wait_capacity(self.job_id, EXEC, "cap")
        assert self.lifecycle.prepare(self.job_id, EXEC) == {"next": "launch"}
        assert self.lifecycle.launch(self.job_id, EXEC)["next"] == "wait"
        assert self.lifecycle.wait_run(self.job_id, EXEC, "run-token") == {"next": "waiting"}
        return self.repo.get(self.job_id)

    def run_answers(self) -> list[dict[str, Any]]:
        return [out for token, out in self.tokens.answers if token == "run-token"]

    def send(self, name: str, **detail_changes: Any) -> dict[str, Any]:
        event = copy.deepcopy(load_event(name))
        event["detail"].update(detail_changes)
        return self.events.handle(event["detail-type"], event["detail"]).as_dict()


def test_a_completed_training_job_completes_the_job_once_and_records_its_cost() -> None:
    # Given a job training on SageMaker, waiting on its run token
    w = World("sagemaker", "tp-job-0a1b2c3d-a1")
    w.to_training()
    # When SageMaker's "Completed" state change arrives, twice (EventBridge delivers at least once)
    first = w.send("sagemaker_event_completed")
    second = w.send("sagemaker_event_completed")
    # Then the job completes, the wait is answered exactly once, the duplicate is ignored
    assert first["action"] == "finished" and first["run_state"] == "COMPLETED"
    assert second["action"] == "ignored"
    job = w.repo.get(w.job_id)
    assert job.status == S.COMPLETED
    assert w.run_answers() == [{"next": "completed"}]
    # And the attempt's cost is recorded once: 2000 billable s of ml.g5.xlarge
    assert len(job.cost.attempts) == 1
    assert job.cost.estimated_cost_usd == pytest.approx(2000 * 1.408 / 3600, abs=1e-5)
    assert job.cost.gpu_hours == pytest.approx(2000 / 3600, abs=1e-5)


def test_in_progress_is_a_heartbeat_before_the_end_and_nothing_after_it() -> None:
    # Given a training job
    w = World("sagemaker", "tp-job-0a1b2c3d-a1")
    w.to_training()
    # When "InProgress" arrives, then "Completed", then a late "InProgress"
    alive = w.send("sagemaker_event_in_progress")
    w.send("sagemaker_event_completed")
    late = w.send("sagemaker_event_in_progress")
    # Then the first kept the wait alive, the late one changed nothing
    assert alive["action"] == "alive" and w.tokens.heartbeats == ["run-token"]
    assert late["action"] == "ignored"
    assert w.repo.get(w.job_id).status == S.COMPLETED and w.run_answers() == [{"next": "completed"}]


def test_events_of_an_earlier_attempt_or_another_run_are_ignored() -> None:
    # Given a job on its first attempt
    w = World("sagemaker", "tp-job-0a1b2c3d-a1")
    w.to_training()
    # When an event names attempt 7, or an attempt-1 training job that is not the recorded run
    stale = w.send("sagemaker_event_completed", Tags={"trainplane:job-id": "job-0a1b2c3d", "trainplane:attempt": "7"})
    other = w.send("sagemaker_event_completed", TrainingJobName="tp-job-0a1b2c3d-a1-copy", Tags={})
    foreign = w.send("sagemaker_event_completed", TrainingJobName="someone-elses-job", Tags={})
    # Then nothing changes
    assert [stale["action"], other["action"], foreign["action"]] == ["ignored", "ignored", "ignored"]
    assert "attempt 7" in stale["reason"]
    assert w.repo.get(w.job_id).status == S.TRAINING and w.run_answers() == []


def test_a_late_end_of_a_paused_run_does_not_end_the_resumed_job_being_scheduled() -> None:
    # Given a job whose run stopped for a pause, resumed and granted capacity again (SCHEDULING, same attempt)
    w = World("sagemaker", "tp-job-0a1b2c3d-a1")
    w.to_training()
    w.repo.update(w.job_id, w.repo.get(w.job_id).version, {"pending_action": PendingAction.PAUSE})
    w.lifecycle.on_run_finished(w.job_id, 1, RunDescription(state=RunState.STOPPED))
    w.repo.transition(Transition(w.job_id, w.repo.get(w.job_id).version, S.PAUSED, S.QUEUED, "resume", "user"))
    w.lifecycle.wait_capacity(w.job_id, EXEC, "cap-again")
    assert w.repo.get(w.job_id).status == S.SCHEDULING
    # When SageMaker's state change for that stopped training job arrives late
    late = w.send("sagemaker_event_completed")
    # Then it is ignored: the job goes on to its next attempt
    assert late["action"] == "ignored" and "SCHEDULING" in late["reason"]
    assert w.repo.get(w.job_id).status == S.SCHEDULING


def test_the_job_is_found_from_the_name_when_tags_are_missing() -> None:
    # Given an event without tags (the job name encodes job id and attempt)
    w = World("sagemaker", "tp-job-0a1b2c3d-a1")
    w.to_training()
    # When it arrives / Then it still reaches the job
    assert w.send("sagemaker_event_completed", Tags={})["action"] == "finished"


@pytest.mark.parametrize(
    ("recorded", "status", "error_type", "answer"),
    [
        ("sagemaker_event_failed_data_error", S.FAILED, ErrorType.DATA_ERROR, "failed"),
        ("sagemaker_event_stopped_spot_interrupted", S.PREEMPTED, ErrorType.PREEMPTED, "resume_preempted"),
    ],
)
def test_failures_and_spot_loss_reach_the_job(recorded: str, status: JobStatus, error_type: ErrorType, answer: str) -> None:
    # Given a training job (the spot one is another job id: rename it to ours)
    w = World("sagemaker", "tp-job-0a1b2c3d-a1")
    w.to_training()
    # When the failure / spot-loss state change arrives
    outcome = w.send(recorded, TrainingJobName="tp-job-0a1b2c3d-a1", Tags={"trainplane:job-id": "job-0a1b2c3d", "trainplane:attempt": "1"})
    # Then the job gets the mapped status and error type, and the wait the lifecycle's decision
    job = w.repo.get(w.job_id)
    assert outcome["action"] == "finished"
    assert (job.status, job.error_type) == (status, error_type)
    assert w.run_answers() == [{"next": answer}]


def test_ec2_end_spot_warning_and_non_ends() -> None:
    # Given a job running on an EC2 spot instance
    w = World("ec2", INSTANCE)
    w.to_training()
    # When the spot warning arrives, then "running" (late), then "terminated" twice
    warning = w.send("ec2_event_spot_interruption")
    running = w.send("ec2_event_state_running")
    assert w.launcher.described == []  # non-ends cost no AWS call
    w.launcher.description = RunDescription(RunState.PREEMPTED, ErrorType.PREEMPTED, "spot instance reclaimed", run_seconds=600.0)
    ended = w.send("ec2_event_state_terminated")
    again = w.send("ec2_event_state_terminated")
    # Then the instance was marked interrupted, the end preempted the job once, the rest was ignored
    assert warning["action"] == "interrupted" and w.launcher.interrupted == [INSTANCE]
    assert running["action"] == "ignored"
    assert ended["action"] == "finished" and again["action"] == "ignored"
    job = w.repo.get(w.job_id)
    assert job.status == S.PREEMPTED and job.preemptions == 1
    assert w.run_answers() == [{"next": "resume_preempted"}]
    assert w.launcher.described[0].run_id == INSTANCE
    # And the cost used the launch handle's instance type: 600 s of on-demand g5.xlarge
    assert job.cost.estimated_cost_usd == pytest.approx(600 * 1.006 / 3600, abs=1e-5)


def test_ec2_events_for_instances_not_ours_are_ignored() -> None:
    # Given a deployment with an EC2 launcher but no job on this instance
    w = World("ec2", INSTANCE)
    # When its end and a spot warning arrive / Then both are ignored and nothing is tagged
    assert w.send("ec2_event_state_terminated")["action"] == "ignored"
    assert w.send("ec2_event_spot_interruption")["action"] == "ignored"
    assert w.launcher.interrupted == []
    # And a deployment without an EC2 launcher ignores EC2 events outright
    sm = World("sagemaker", "tp-job-0a1b2c3d-a1")
    assert sm.send("ec2_event_state_terminated")["reason"] == "no EC2 launcher in this deployment"


def test_a_still_running_instance_after_a_terminated_event_waits_for_the_reconciler() -> None:
    w = World("ec2", INSTANCE)
    w.to_training()
    w.launcher.description = RunDescription(state=RunState.STOPPING)
    assert w.send("ec2_event_state_terminated")["action"] == "ignored"
    assert w.repo.get(w.job_id).status == S.TRAINING


def test_the_handler_parses_the_envelope_and_routes_schedules_to_the_reconciler(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given the handler wired to a world's service, a recording reconciler and a recording budget meter
    w = World("sagemaker", "tp-job-0a1b2c3d-a1")
    w.to_training()
    sweeps: list[int] = []
    ticks: list[int] = []

    class RecordingReconciler:
        def run_once(self, *, startup: bool = False) -> ReconcileReport:
            sweeps.append(1)
            return ReconcileReport()

    class RecordingMeter:
        def tick(self) -> TickResult:
            ticks.append(1)
            return TickResult(budgets=2, paused=["job-x"])

    monkeypatch.setattr(composition.Composition, "budget_meter", property(lambda root: RecordingMeter()))

    composition.configure(cloud_events=w.events, reconciler=lambda root: RecordingReconciler())  # type: ignore[arg-type,return-value]
    try:
        # When a recorded state change and a scheduled tick arrive as EventBridge delivers them
        finished = handler.lambda_handler(load_event("sagemaker_event_completed"), _Context())
        tick = handler.lambda_handler(
            {**load_event("ec2_event_state_running"), "detail-type": "Scheduled Event", "source": "aws.events", "detail": {}}, _Context()
        )
        # And a malformed event is refused by the parser
        with pytest.raises(Exception, match="detail"):
            handler.lambda_handler({"version": "0", "id": "x", "source": "aws.sagemaker"}, _Context())
    finally:
        composition.reset()
    # Then the state change finished the job and the tick ran one sweep
    assert finished["action"] == "finished" and w.repo.get(w.job_id).status == S.COMPLETED
    # (and the budgets' meter ticked on the same schedule: docs/BUDGETS.md)
    assert tick == {"action": "reconciled", "budgets_metered": 2, "budget_pauses": ["job-x"]} and sweeps == [1] and ticks == [1]


class _Context:
    function_name = "trainplane-events"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:trainplane-events"
    aws_request_id = "req-1"


class Executions:
    def start(self, job: Job, before_start: Any = None) -> str:
        raise AssertionError("a running job with a live execution needs no new one")

    def execution_running(self, execution_arn: str | None) -> bool:
        return True


class StubClients:
    def __init__(self, **clients: Any) -> None:
        self._clients = clients

    def client(self, service: str) -> Any:
        return self._clients[service]


def test_a_missed_sagemaker_event_is_caught_by_the_reconcilers_describe() -> None:
    # Given a job training on SageMaker whose end event never arrived; SageMaker says it failed for memory
    w = World("sagemaker", "tp-job-0a1b2c3d-a1")
    w.to_training()
    client = boto3.client("sagemaker", region_name="us-east-1")
    response = {**load_event("sagemaker_describe_failed_oom"), "TrainingJobName": "tp-job-0a1b2c3d-a1"}
    with Stubber(client) as stub:
        stub.add_response("describe_training_job", response, {"TrainingJobName": "tp-job-0a1b2c3d-a1"})
        launcher = SageMakerLauncher(cloud_settings(), StubClients(sagemaker=client))
        # When the reconciler sweeps with the real launcher
        report = Reconciler(w.repo, w.lifecycle, Executions(), {"sagemaker": launcher}).run_once()
    # Then the end is reported as the event would have: FAILED, out of memory, the wait answered
    job = w.repo.get(w.job_id)
    assert report.reported_ends == [w.job_id]
    assert (job.status, job.error_type) == (S.FAILED, ErrorType.OUT_OF_MEMORY)
    assert w.run_answers() == [{"next": "failed"}]
    # And the event arriving late changes nothing
    assert w.send("sagemaker_event_completed")["action"] == "ignored"


def test_a_missed_ec2_end_is_caught_by_the_reconcilers_describe() -> None:
    # Given a job on an EC2 spot instance that ended (exit status: interrupted) without its event
    w = World("ec2", INSTANCE)
    w.to_training()
    ec2 = boto3.client("ec2", region_name="us-east-1")
    s3 = boto3.client("s3", region_name="us-east-1")
    body = json.dumps(load_event("ec2_exit_status_spot")).encode()
    with Stubber(ec2) as ec2_stub, Stubber(s3) as s3_stub:
        ec2_stub.add_response("describe_instances", load_event("ec2_describe_terminated_by_user_data"), {"InstanceIds": [INSTANCE]})
        s3_stub.add_response(
            "get_object",
            {"Body": StreamingBody(io.BytesIO(body), len(body))},
            {"Bucket": "trainplane-artifacts", "Key": "jobs/job-0a1b2c3d/runs/001/exit.json"},
        )
        launcher = EC2Launcher(cloud_settings(), StubClients(ec2=ec2, s3=s3))
        # When the reconciler sweeps with the real launcher (the stand-in's handle has no exit key: tags give it)
        report = Reconciler(w.repo, w.lifecycle, Executions(), {"ec2": launcher}).run_once()
    # Then the job is preempted and resumes, as with the event
    job = w.repo.get(w.job_id)
    assert report.reported_ends == [w.job_id]
    assert (job.status, job.preemptions) == (S.PREEMPTED, 1)
    assert w.run_answers() == [{"next": "resume_preempted"}]
