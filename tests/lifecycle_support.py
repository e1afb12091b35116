"""Test support for the lifecycle engine: a fake capacity ledger, and `LocalEngine`, the whole engine
on moto's server in this process (the real ASL on moto's Step Functions engine, the lifecycle
handler through localmode.moto_lambda, LocalLauncher running tests/fake_trainer.py as child
processes that reach the emulated S3 over HTTP), as `trainplane up` wires it, minus the HTTP API.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from functions import composition, constants
from functions.adapters.launchers.local import LocalLauncher
from functions.adapters.stepfunctions import StepFunctionsWorkflow
from functions.service.lifecycle import LifecycleConfig, LifecycleService
from functions.service.ports import TeamHold, Transition
from functions.service.scheduler import LocalCapacity, Scheduler
from functions.settings import Settings
from schemas.checkpoint import MANIFEST_NAME, CheckpointManifest
from schemas.job import Actor, Job, PendingAction, StatusEvent, SubmitJobRequest
from schemas.lifecycle import Decision
from schemas.status import JobStatus
from tests.fake_trainer import knobs_apart
from tests.fakes import InMemoryJobRepository
from tests.helpers.waits import wait_until  # also what the lifecycle tests import from here

FAKE_TRAINER = (sys.executable, "-m", "tests.fake_trainer")
REPO_ROOT = Path(__file__).resolve().parents[1]
_ids = itertools.count(1)


class InMemoryLedger:
    """CapacityLedger in a dict, one lock: claims are atomic like the DynamoDB conditional write."""

    def __init__(self) -> None:
        self.pools_held: dict[str, dict[str, int]] = {}
        self.teams_held: dict[tuple[str, str], dict[str, int]] = {}  # (team, gpu type) -> job id -> units
        self.team_of: dict[tuple[str, str], tuple[str, str]] = {}  # (pool, job id) -> its team hold's key
        self.queue_names: set[str] = set()
        self._lock = threading.Lock()
        self.claims = 0

    def claim(self, pool: str, job_id: str, units: int, capacity: int, team: TeamHold | None = None) -> bool:
        with self._lock:
            held = self.pools_held.setdefault(pool, {})
            if job_id in held:
                return False  # already held: only the call that made a claim may undo it
            if sum(held.values()) + units > capacity:
                return False
            if team is not None:
                key = (team.team, team.gpu_type)
                team_held = self.teams_held.setdefault(key, {})
                if job_id in team_held or sum(team_held.values()) + units > team.limit:
                    return False
                team_held[job_id] = units
                self.team_of[(pool, job_id)] = key
            held[job_id] = units
            self.claims += 1
            return True

    def release(self, pool: str, job_id: str) -> bool:
        with self._lock:
            key = self.team_of.pop((pool, job_id), None)
            if key is not None:
                self.teams_held[key].pop(job_id, None)
            return self.pools_held.get(pool, {}).pop(job_id, None) is not None

    def team_holders(self, team: str, gpu_type: str) -> dict[str, int]:
        with self._lock:
            return dict(self.teams_held.get((team, gpu_type), {}))

    def holders(self, pool: str) -> dict[str, int]:
        with self._lock:
            return dict(self.pools_held.get(pool, {}))

    def pools(self) -> list[str]:
        with self._lock:
            return sorted(self.pools_held)

    def register_queue(self, queue: str) -> None:
        with self._lock:
            self.queue_names.add(queue)

    def queues(self) -> list[str]:
        with self._lock:
            return sorted(self.queue_names)


def make_request(
    name: str = "job", *, max_steps: int = 6, save_steps: int = 2, step_seconds: float = 0.05, **overrides: Any
) -> SubmitJobRequest:
    hp, knobs = knobs_apart({"max_steps": str(max_steps), "fake_step_seconds": str(step_seconds), **overrides.pop("hyperparameters", {})})
    body: dict[str, Any] = {
        "name": name,
        "training_config": {
            "training_type": "SFT",
            "base_model": {"model_id": "tiny", "source": "config", "tokenizer_id": "byte", "model_kwargs": {"architecture": "llama"}},
            "hyperparameters": hp,
            "environment": knobs,
            **overrides.pop("training_config", {}),
        },
        "data_config": {"sources": [{"path": "/tmp/data.jsonl"}]},
        "resource_config": {"gpu_count": 0, **overrides.pop("resource_config", {})},
        "output_config": {"checkpoint": {"save_steps": save_steps, "save_total_limit": 3}},
        "scheduling_config": overrides.pop("scheduling_config", {}),
    }
    assert not overrides, f"unknown overrides {overrides}"
    return SubmitJobRequest.model_validate(body)


def make_job(request: SubmitJobRequest, *, owner: str = "arn:aws:iam::123456789012:user/alice", created_at: datetime | None = None) -> Job:
    now = created_at or datetime.now(UTC)
    return Job(
        job_id=f"job-{next(_ids):04d}-{uuid.uuid4().hex[:6]}",
        owner=owner,
        name=request.name,
        status=JobStatus.PENDING,
        labels=request.labels,
        training_config=request.training_config,
        data_config=request.data_config,
        resource_config=request.resource_config,
        output_config=request.output_config,
        scheduling_config=request.scheduling_config.model_copy(update={"priority": request.effective_priority}),
        created_at=now,
        updated_at=now,
    )


class S3Artifacts:
    """The ArtifactStore port over the emulated S3 (what the API core's S3 adapter provides in the app)."""

    def __init__(self, s3: Any, bucket: str) -> None:
        self.s3 = s3
        self.bucket = bucket

    def put_json(self, key: str, document: Mapping[str, Any]) -> str:
        self.s3.put_object(Bucket=self.bucket, Key=key, Body=json.dumps(document).encode())
        return f"s3://{self.bucket}/{key}"

    def list_keys(self, prefix: str) -> list[str]:
        keys: list[str] = []
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            keys.extend(obj["Key"] for obj in page.get("Contents", []))
        return sorted(keys)

    def first_keys(self, prefix: str, limit: int) -> list[str]:
        return self.list_keys(prefix)[:limit]

    def list_manifests(self, job_id: str) -> list[CheckpointManifest]:
        keys = [k for k in self.list_keys(constants.checkpoints_prefix(job_id)) if k.endswith("/" + MANIFEST_NAME)]
        found = [CheckpointManifest.model_validate_json(self.s3.get_object(Bucket=self.bucket, Key=k)["Body"].read()) for k in keys]
        return sorted(found, key=lambda m: m.step)

    def checkpoint_uri(self, job_id: str, checkpoint_id: str) -> str:
        return f"s3://{self.bucket}/{constants.checkpoints_prefix(job_id)}{checkpoint_id}"

    def delete_prefix(self, prefix: str) -> int:
        keys = self.list_keys(prefix)
        for key in keys:
            self.s3.delete_object(Bucket=self.bucket, Key=key)
        return len(keys)

    def read_lines(self, key: str) -> Iterator[str]:
        try:
            body = self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read().decode()
        except self.s3.exceptions.NoSuchKey:
            return iter(())
        return iter(body.splitlines())


class Clients:
    def __init__(self, endpoint_url: str, region: str = constants.LOCAL_REGION) -> None:
        self.endpoint_url = endpoint_url
        self.region = region
        self._clients: dict[str, Any] = {}
        self._lock = threading.Lock()

    def client(self, service: str) -> Any:
        import boto3
        from botocore.config import Config

        with self._lock:
            if service not in self._clients:
                self._clients[service] = boto3.client(
                    service,
                    endpoint_url=self.endpoint_url,
                    region_name=self.region,
                    config=Config(max_pool_connections=32, retries={"max_attempts": 4}),
                )
            return self._clients[service]

    def dynamodb(self) -> Any:
        return self.client("dynamodb")

    def s3(self) -> Any:
        return self.client("s3")


class Controls:
    """The user verbs as the API's controls make them: a conditional write first, then the Workflow call.

    Kept here only until functions/service/controls.py (API core) is wired into these tests.
    """

    def __init__(self, repository: InMemoryJobRepository, workflow: StepFunctionsWorkflow) -> None:
        self.repository = repository
        self.workflow = workflow

    def submit(self, job: Job) -> Job:
        self.repository.create(
            job, StatusEvent(at=job.created_at, from_status=None, to_status=JobStatus.PENDING, reason="submitted", actor=Actor.USER.value)
        )
        arn = self.workflow.start(job)
        self.repository.annotate(job.job_id, {"execution_arn": arn})
        return self.repository.get(job.job_id)

    def pause(self, job_id: str) -> Job:
        job = self.repository.get(job_id)
        job = self.repository.update(
            job_id,
            job.version,
            {"pending_action": PendingAction.PAUSE, "pending_reason": "paused by request"},
            allowed=frozenset({JobStatus.TRAINING, JobStatus.CHECKPOINTING}),
            action="pause",
        )
        self.workflow.stop_run(job, graceful=True, reason="pause")
        return job

    def resume(self, job_id: str, checkpoint_id: str = "") -> Job:
        job = self.repository.get(job_id)
        job = self.repository.transition(
            Transition(
                job_id,
                job.version,
                JobStatus.PAUSED,
                JobStatus.QUEUED,
                "resumed",
                Actor.USER.value,
                {"resume_checkpoint_id": checkpoint_id or None},
            )
        )
        self.workflow.answer_wait(job, Decision.RESUME)
        return job

    def cancel(self, job_id: str) -> Job:
        job = self.repository.get(job_id)
        job = self.repository.transition(
            Transition(job_id, job.version, job.status, JobStatus.CANCELLED, "cancelled", Actor.USER.value, {})
        )
        self.workflow.stop_run(job, graceful=False, reason="cancel")
        self.workflow.answer_wait(job, Decision.CANCEL)
        return job


class LocalEngine:
    """The lifecycle engine on moto's server, wired as local mode wires it. Use as a context manager."""

    def __init__(
        self,
        work_dir: Path,
        *,
        cpu_slots: int = 1,
        gpu_slots: int = 0,
        heartbeat_seconds: int = 30,
        stop_grace_seconds: float = 10.0,
        max_preemptions: int = 3,
        tick_seconds: float = 1.0,
        dynamodb: bool = False,
    ) -> None:
        self.work_dir = work_dir
        self.cpu_slots = cpu_slots
        self.gpu_slots = gpu_slots
        self.heartbeat_seconds = heartbeat_seconds
        self.stop_grace_seconds = stop_grace_seconds
        self.max_preemptions = max_preemptions
        self.tick_seconds = tick_seconds
        self.dynamodb = dynamodb  # the real repository and capacity ledger on moto's DynamoDB (else in-memory fakes)

    def __enter__(self) -> LocalEngine:
        import os

        from moto.core.models import default_user_config
        from moto.moto_api._internal.models import moto_api_backend
        from moto.server import ThreadedMotoServer

        from infra.statemachine import render
        from localmode import moto_hooks, moto_lambda, moto_pin

        # As local mode runs moto: its DynamoDB and S3 are not thread-safe without these locks.
        moto_hooks.install()
        self._saved_config = json.loads(json.dumps(default_user_config))
        self._saved_port = os.environ.get("MOTO_PORT")
        moto_api_backend.set_config(moto_pin.MOTO_CONFIG)
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.server.start()
        port = self.server.get_host_and_port()[1]
        os.environ["MOTO_PORT"] = str(port)
        self.endpoint_url = f"http://127.0.0.1:{port}"
        moto_lambda.install()
        self.clients = Clients(self.endpoint_url)
        self.bucket = f"{constants.ARTIFACTS_BUCKET}-{uuid.uuid4().hex[:8]}"
        self.clients.s3().create_bucket(Bucket=self.bucket)
        role = self.clients.client("iam").create_role(
            RoleName=f"lifecycle-{uuid.uuid4().hex[:8]}",
            AssumeRolePolicyDocument=json.dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [{"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}],
                }
            ),
        )["Role"]["Arn"]
        fn = self.clients.client("lambda").create_function(
            FunctionName=f"lifecycle-{uuid.uuid4().hex[:8]}",
            Runtime="python3.12",
            Role=role,
            Handler="functions.handlers.lifecycle.handler",
            Code={"ZipFile": b"in-process"},
            Timeout=900,
        )
        definition = render(
            {
                "LifecycleFunctionArn": fn["FunctionArn"],
                "JobsTableName": constants.JOBS_TABLE,
                "ArtifactsBucketName": self.bucket,
                "EventBusName": "default",
            }
        )
        sm = self.clients.client("stepfunctions").create_state_machine(
            name=f"lifecycle-{uuid.uuid4().hex[:8]}", definition=definition, roleArn=f"arn:aws:iam::{constants.LOCAL_ACCOUNT_ID}:role/sfn"
        )
        self.state_machine_arn = sm["stateMachineArn"]
        self.artifacts = S3Artifacts(self.clients.s3(), self.bucket)
        self.repository: Any
        self.ledger: Any
        if self.dynamodb:
            from functions.adapters.capacity import DynamoDBCapacityLedger
            from functions.adapters.dynamodb import DynamoJobRepository
            from functions.adapters.dynamodb_items import create_tables

            table = f"jobs-{uuid.uuid4().hex[:8]}"
            create_tables(self.clients.dynamodb(), jobs_table=table, idempotency_table=table + "-idem")
            self.repository = DynamoJobRepository(self.clients, table)  # type: ignore[arg-type]
            self.ledger = DynamoDBCapacityLedger(self.clients, table)
        else:
            self.repository = InMemoryJobRepository()
            self.ledger = InMemoryLedger()
        s3 = self.clients.s3()
        self.launcher = LocalLauncher(
            self.work_dir / "runs",
            command=FAKE_TRAINER,
            env={
                "PYTHONPATH": str(REPO_ROOT),
                "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_DEFAULT_REGION": "us-east-1",
            },
            s3_endpoint_url=self.endpoint_url,
            upload_log=lambda key, body: s3.put_object(Bucket=self.bucket, Key=key, Body=body),
            stop_grace_seconds=self.stop_grace_seconds,
            tick_seconds=self.tick_seconds,
        )
        launchers = {"local": self.launcher}
        self.workflow = StepFunctionsWorkflow(self.clients, self.state_machine_arn, launchers, jobs=self.repository.get)
        self.scheduler = Scheduler(
            self.repository, self.ledger, LocalCapacity(gpu_slots=self.gpu_slots, cpu_slots=self.cpu_slots), self.workflow, self.workflow
        )
        config = LifecycleConfig(
            progress_interval_seconds=0.0,
            bucket=self.bucket,
            heartbeat_seconds=self.heartbeat_seconds,
            stop_grace_seconds=int(self.stop_grace_seconds),
            max_preemptions=self.max_preemptions,
        )
        self.service = LifecycleService(self.repository, self.artifacts, launchers, self.workflow, self.workflow, self.scheduler, config)
        self.launcher.observer = self.service
        # The engine's bucket and table are this deployment's names (the recorder of `make iam-check` names the
        # deployment's resources by the settings: localmode/iam_calls.py), not a foreign bucket.
        names = {"artifacts_bucket": self.bucket} | ({"jobs_table": self.repository.table} if self.dynamodb else {})
        composition.configure(lifecycle=self.service, settings=Settings.from_env().model_copy(update=names))
        self.controls = Controls(self.repository, self.workflow)
        return self

    def __exit__(self, *exc: object) -> None:
        import os

        from moto.moto_api._internal.models import moto_api_backend

        from localmode import moto_lambda

        # Let the last runs' reports land before their endpoint goes away.
        with contextlib.suppress(AssertionError):
            wait_until(lambda: not self.launcher.active(), 10, what="runs to end")
        time.sleep(0.3)
        self.launcher.shutdown(timeout=5)
        composition.reset()
        moto_lambda.uninstall()
        self.server.stop()
        moto_api_backend.set_config(self._saved_config)
        if self._saved_port is None:
            os.environ.pop("MOTO_PORT", None)
        else:
            os.environ["MOTO_PORT"] = self._saved_port

    # --- helpers ---------------------------------------------------------------------------------
    def submit(self, request: SubmitJobRequest | None = None, **kwargs: Any) -> Job:
        job = make_job(request or make_request(**kwargs), created_at=datetime.now(UTC) + timedelta(microseconds=next(_ids)))
        return self.controls.submit(job)

    def job(self, job_id: str) -> Job:
        return self.repository.get(job_id)

    def wait_status(self, job_id: str, *statuses: JobStatus, timeout: float = 30.0) -> Job:
        return wait_until(
            lambda: (j := self.job(job_id)).status in statuses and j,
            timeout,
            what=f"{job_id} to reach {statuses} (now {self.job(job_id).status})",
        )

    def execution(self, job_id: str) -> dict[str, Any]:
        arn = self.job(job_id).execution_arn
        return self.clients.client("stepfunctions").describe_execution(executionArn=arn)

    def wait_execution(self, job_id: str, *statuses: str, timeout: float = 30.0) -> dict[str, Any]:
        return wait_until(
            lambda: (e := self.execution(job_id))["status"] in statuses and e, timeout, what=f"execution of {job_id} to reach {statuses}"
        )

    def history(self, job_id: str) -> list[tuple[str | None, str]]:
        return [(e.from_status.value if e.from_status else None, e.to_status.value) for e in self.repository.history(job_id)]

    def transitions(self, job_id: str) -> list[dict[str, Any]]:
        arn = self.job(job_id).execution_arn
        events = self.clients.client("stepfunctions").get_execution_history(executionArn=arn, maxResults=1000)["events"]
        return [e for e in events if e["type"].endswith("StateEntered")]
