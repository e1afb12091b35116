"""The composition root: lazy, overridable, and the defaults it wires from Settings."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from functions import composition
from functions.adapters.dynamodb import DynamoJobRepository
from functions.adapters.s3 import S3ArtifactStore
from functions.service.jobs import JobService
from functions.settings import Settings
from tests.fakes import InMemoryArtifactStore, InMemoryJobRepository, RecordingWorkflow


@pytest.fixture(autouse=True)
def _fresh() -> Any:
    composition.reset()
    yield
    composition.reset()


def test_nothing_talks_to_aws_until_used() -> None:
    # Given a composition from settings
    root = composition.configure(settings=Settings(jobs_table="t", artifacts_bucket="b"))
    # When the service is built
    service = root.jobs
    # Then the adapters are the DynamoDB and S3 ones on the configured names, and no client exists yet
    assert isinstance(service, JobService)
    assert isinstance(root.repository, DynamoJobRepository) and root.repository.table == "t"
    assert isinstance(root.artifacts, S3ArtifactStore) and root.artifacts.bucket == "b"
    assert root.clients._clients == {}
    # And without a state machine there is no workflow: verbs record decisions only
    assert root.workflow is None
    assert composition.job_service() is service


def test_parts_can_be_replaced_for_tests_and_local_mode() -> None:
    repo, store, workflow = InMemoryJobRepository(), InMemoryArtifactStore(), RecordingWorkflow()
    built: list[Any] = []

    def lifecycle(root: composition.Composition) -> str:
        built.append(root)
        return "the lifecycle"

    root = composition.configure(
        settings=Settings(), repository=repo, artifacts=store, workflow=workflow, lifecycle=lifecycle, ids=lambda: "job-x"
    )
    assert root.jobs.repo is repo and root.jobs.store is store and root.jobs.workflow is workflow
    assert composition.lifecycle_service() == "the lifecycle" and composition.lifecycle_service() == "the lifecycle"
    assert built == [root]  # built once
    assert root.jobs.ids() == "job-x"


def test_a_workflow_factory_sees_the_root_and_a_state_machine_wires_step_functions() -> None:
    root = composition.configure(settings=Settings(), workflow=lambda r: RecordingWorkflow())
    assert isinstance(root.workflow, RecordingWorkflow)
    arn = "arn:aws:states:us-east-1:123456789012:stateMachine:trainplane-lifecycle"
    root = composition.configure(settings=Settings(state_machine_arn=arn, compute="sagemaker"))
    workflow = root.workflow
    assert type(workflow).__name__ == "StepFunctionsWorkflow" and workflow.state_machine_arn == arn  # type: ignore[union-attr]
    assert set(root.launchers) == {"sagemaker"}


def test_the_root_builds_every_service_from_its_own_parts() -> None:
    # Given a root on a state machine (the cloud defaults) with an in-memory repository
    from functions.adapters.capacity import DynamoDBCapacityLedger
    from functions.adapters.stepfunctions import StepFunctionsWorkflow

    arn = "arn:aws:states:us-east-1:123456789012:stateMachine:trainplane-lifecycle"
    repo = InMemoryJobRepository()
    root = composition.configure(settings=Settings(state_machine_arn=arn, compute="ec2"), repository=repo)
    # When each service is asked for
    lifecycle, events, queues, reconciler = root.lifecycle, root.cloud_events, root.queue_view, root.new_reconciler()
    # Then every one is wired to the same parts of this root: one repository, one engine, one ledger, one launcher set
    assert isinstance(root.engine, StepFunctionsWorkflow) and isinstance(root.capacity_ledger, DynamoDBCapacityLedger)
    assert lifecycle.repository is repo and lifecycle.launchers is root.launchers and set(root.launchers) == {"ec2"}
    assert events.lifecycle is lifecycle and events.repository is repo and events.launchers is root.launchers
    assert queues.repository is repo and queues.ledger is root.capacity_ledger
    assert reconciler.service is lifecycle and reconciler.executions is root.engine and reconciler.repository is repo
    assert root.retraining.jobs is root.jobs
    # And each is built once
    assert root.lifecycle is lifecycle and root.cloud_events is events and root.queue_view is queues


def test_the_lifecycle_engine_refuses_a_workflow_that_is_not_step_functions() -> None:
    root = composition.configure(settings=Settings(), workflow=RecordingWorkflow())
    with pytest.raises(TypeError, match="Step Functions workflow, not RecordingWorkflow"):
        _ = root.lifecycle
    with pytest.raises(RuntimeError, match="state_machine_arn is not set"):
        _ = composition.configure(settings=Settings()).lifecycle


def test_importing_the_api_loads_neither_boto3_nor_the_xray_sdk() -> None:
    # Given a fresh interpreter (the import-time goal: nothing heavy that can be deferred)
    import subprocess

    code = "import sys, functions.handlers.api; print(sorted(m for m in ('boto3', 'aws_xray_sdk', 'moto') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # Then neither boto3 nor the X-Ray SDK was imported
    assert out.stdout.strip() == "[]"


def test_the_tracer_is_built_only_when_tracing_is_wanted(monkeypatch: pytest.MonkeyPatch) -> None:
    import aws_lambda_powertools

    from functions.handlers import tracing

    built: list[str] = []

    class FakeTracer:
        def __init__(self, service: str) -> None:
            built.append(service)

        def capture_lambda_handler(self, handler: Any) -> Any:
            return lambda event, context: ("traced", handler(event, context))

    monkeypatch.setattr(aws_lambda_powertools, "Tracer", FakeTracer)
    lazy = tracing.LazyTracer(service="svc")
    handler = lazy.capture_lambda_handler(lambda event, context: event)
    # Outside Lambda: no tracer at all
    monkeypatch.delenv("LAMBDA_TASK_ROOT", raising=False)
    assert handler(1, None) == 1 and built == []
    # In Lambda: built once, on the first invocation
    monkeypatch.setenv("LAMBDA_TASK_ROOT", "/var/task")
    monkeypatch.delenv("POWERTOOLS_TRACE_DISABLED", raising=False)
    assert handler(2, None) == ("traced", 2) and handler(3, None) == ("traced", 3) and built == ["svc"]
    # Disabled explicitly, or under SAM local: not traced
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    assert not tracing.tracing_wanted()
    monkeypatch.delenv("POWERTOOLS_TRACE_DISABLED")
    monkeypatch.setenv("AWS_SAM_LOCAL", "true")
    assert not tracing.tracing_wanted()


def test_cloud_engines_read_logs_from_cloudwatch_and_local_runs_from_s3() -> None:
    from functions.adapters.cloudwatch_logs import CloudWatchLogSource

    # Given the local engine / When the job service is built / Then logs come from the S3 files
    assert composition.configure(settings=Settings()).jobs.log_source is None
    # Given a cloud engine / Then the job service reads CloudWatch, still without a client until used
    root = composition.configure(settings=Settings(compute="ec2"))
    assert isinstance(root.jobs.log_source, CloudWatchLogSource)
    assert root.clients._clients == {}
