"""The one composition root: builds the services from Settings with lazily created adapters.

Nothing is built at import time. The first request builds what it needs (settings, boto3 clients,
repository, store, workflow) and keeps it for the life of the process (a Lambda execution
environment, or local mode). Tests and local mode replace parts with `configure(...)`:

    from functions import composition
    composition.configure(settings=Settings(...), repository=InMemoryJobRepository(), workflow=None)
    composition.configure(workflow_factory=lambda root: StepFunctionsWorkflow(root.clients, arn, launchers))
    composition.configure(factories={"lifecycle": lambda root: LifecycleService(root.repository, ...)})
    composition.reset()  # back to the defaults (from the environment)

Defaults: DynamoJobRepository and S3ArtifactStore on `Settings`' tables, bucket, region and endpoint;
the Workflow is StepFunctionsWorkflow on `settings.state_machine_arn` (None when unset: the API then
records decisions without starting executions), with the cloud launchers of `settings.compute` so
that cancel and pause can stop runs. Other services are named factories `f(root)`: `factories=` wins,
else DEFAULT_FACTORIES (the lifecycle engine's and the retraining dispatcher's `build_service`).
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from functions.adapters.aws import AwsClients
    from functions.adapters.launchers.base import Launcher
    from functions.adapters.ports import ArtifactStore, JobRepository, Workflow
    from functions.service.jobs import JobService
    from functions.service.retraining import RetrainingService
    from functions.settings import Settings

WorkflowFactory = Callable[["Composition"], "Workflow | None"]
LifecycleFactory = Callable[["Composition"], Any]
LaunchersFactory = Callable[["Composition"], "Mapping[str, Launcher]"]

# Launchers the API may need to stop a run, by the `launcher` name stored in a job's run_handle.
CLOUD_LAUNCHERS = {
    "sagemaker": "functions.adapters.launchers.sagemaker:SageMakerLauncher",
    "ec2": "functions.adapters.launchers.ec2:EC2Launcher",
}
# Services owned by other parts of the system, built from this root on first use: name -> "module:function".
DEFAULT_FACTORIES = {
    "lifecycle": "functions.service.lifecycle:build_service",
    "retraining": "functions.service.retraining:build_service",
    "sweeps": "functions.service.sweeps:build_service",
    "sweep_hooks": "functions.service.sweeps_hooks:build_hooks",
    "sweep_controller": "functions.service.sweeps_controller:build_controller",  # imports Optuna: never the API's
}
DEFAULT_LIFECYCLE_FACTORY = DEFAULT_FACTORIES["lifecycle"]

_UNSET: Any = object()


class Composition:
    """Everything a handler needs, each part built on first use (thread-safe) and then kept."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        clients: AwsClients | None = None,
        repository: JobRepository | None = None,
        artifacts: ArtifactStore | None = None,
        workflow: Workflow | None = _UNSET,
        workflow_factory: WorkflowFactory | None = None,
        launchers: Mapping[str, Launcher] | LaunchersFactory | None = None,
        lifecycle_factory: LifecycleFactory | None = None,
        factories: Mapping[str, Callable[[Composition], Any]] | None = None,
        clock: Callable[[], datetime] | None = None,
        ids: Callable[[], str] | None = None,
        idempotency_store: Any = None,
    ) -> None:
        self._settings = settings
        self._given: dict[str, Any] = {
            "clients": clients,
            "repository": repository,
            "artifacts": artifacts,
            "idempotency_store": idempotency_store,
        }
        self._workflow = workflow
        self._workflow_factory = workflow_factory
        self._launchers = launchers
        self._factories: dict[str, Callable[[Composition], Any]] = dict(factories or {})
        if lifecycle_factory is not None:
            self._factories["lifecycle"] = lifecycle_factory
        self._clock = clock
        self._ids = ids
        self._lock = threading.RLock()

    def _once(self, name: str, build: Callable[[], Any]) -> Any:
        # cached_property is not thread-safe; local mode serves requests from many threads.
        key = "_built" + name
        with self._lock:
            if key not in self.__dict__:
                self.__dict__[key] = build()
            return self.__dict__[key]

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            from functions.settings import get_settings

            with self._lock:
                if self._settings is None:
                    self._settings = get_settings()
        return self._settings

    @property
    def clients(self) -> AwsClients:
        def build() -> AwsClients:
            from functions.adapters.aws import AwsClients

            return self._given["clients"] or AwsClients.from_settings(self.settings)

        return self._once("_clients", build)

    @property
    def repository(self) -> JobRepository:
        def build() -> JobRepository:
            if self._given["repository"] is not None:
                return self._given["repository"]
            from functions.adapters.dynamodb import DynamoJobRepository

            return DynamoJobRepository(self.clients, self.settings.jobs_table)

        return self._once("_repository", build)

    @property
    def artifacts(self) -> ArtifactStore:
        def build() -> ArtifactStore:
            if self._given["artifacts"] is not None:
                return self._given["artifacts"]
            from functions.adapters.s3 import S3ArtifactStore

            return S3ArtifactStore(self.clients, self.settings.artifacts_bucket)

        return self._once("_artifacts", build)

    @property
    def launchers(self) -> Mapping[str, Launcher]:
        def build() -> Mapping[str, Launcher]:
            if callable(self._launchers):
                return self._launchers(self)
            if self._launchers is not None:
                return self._launchers
            names = [self.settings.compute] if self.settings.compute in CLOUD_LAUNCHERS else []
            return {name: _load(CLOUD_LAUNCHERS[name])(self.settings, self.clients) for name in names}

        return self._once("_launchers", build)

    @property
    def workflow(self) -> Workflow | None:
        def build() -> Workflow | None:
            if self._workflow is not _UNSET:
                return self._workflow
            if self._workflow_factory is not None:
                return self._workflow_factory(self)
            if not self.settings.state_machine_arn:
                return None
            from functions.adapters.stepfunctions import StepFunctionsWorkflow

            # jobs=: the workflow re-reads the job as stored now (tokens and run handles are written
            # without a version bump, so the job a verb holds may predate them).
            return StepFunctionsWorkflow(self.clients, self.settings.state_machine_arn, self.launchers, jobs=self.repository.get)

        return self._once("_workflow", build)

    @property
    def jobs(self) -> JobService:
        def build() -> JobService:
            from functions.service.jobs import JobService

            extra: dict[str, Any] = {}
            if self._clock is not None:
                extra["clock"] = self._clock
            if self._ids is not None:
                extra["ids"] = self._ids
            from functions.adapters.cloudwatch_logs import log_source_for

            # The cloud engines' trainers log to CloudWatch; local runs write the S3 files.
            extra["log_source"] = log_source_for(self.settings, self.clients)
            return JobService(self.repository, self.artifacts, self.workflow, self.settings, **extra)

        return self._once("_jobs", build)

    def service(self, name: str) -> Any:
        """A named service (e.g. "lifecycle", "retraining"), built once by its factory."""

        def build() -> Any:
            factory = self._factories.get(name)
            if factory is None:
                spec = DEFAULT_FACTORIES.get(name)
                if spec is None:
                    raise RuntimeError(f"no service {name!r}: configure(factories={{{name!r}: ...}})")
                try:
                    factory = _load(spec)
                except (ImportError, AttributeError) as exc:
                    raise RuntimeError(f"service {name!r} is not wired: configure(factories=...) or define {spec}") from exc
            return factory(self)

        return self._once("_service_" + name, build)

    @property
    def lifecycle(self) -> Any:
        return self.service("lifecycle")

    @property
    def retraining(self) -> RetrainingService:
        """Retraining policies and their dispatcher (functions/service/retraining.py:build_service)."""
        return self.service("retraining")

    @property
    def idempotency_store(self) -> Any:
        """Powertools' DynamoDBPersistenceLayer on the idempotency table, built on first use only."""

        def build() -> Any:
            if self._given["idempotency_store"] is not None:
                return self._given["idempotency_store"]
            from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer

            from functions import constants

            return DynamoDBPersistenceLayer(
                table_name=self.settings.idempotency_table,
                key_attr=constants.IDEMPOTENCY_KEY_ATTR,
                expiry_attr=constants.IDEMPOTENCY_TTL_ATTR,
                boto3_client=self.clients.dynamodb(),
            )

        return self._once("_idempotency_store", build)


def _load(spec: str) -> Any:
    module, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module), attr)


_current: Composition | None = None
_current_lock = threading.Lock()


def current() -> Composition:
    """The process-wide composition, created from the environment on first use."""
    global _current
    if _current is None:
        with _current_lock:
            if _current is None:
                _current = Composition()
    return _current


def configure(**parts: Any) -> Composition:
    """Replace the process-wide composition (tests, local mode); parts are Composition's arguments."""
    global _current
    with _current_lock:
        _current = Composition(**parts)
    return _current


def reset() -> None:
    global _current
    with _current_lock:
        _current = None


def job_service() -> JobService:
    return current().jobs


def retraining_service() -> RetrainingService:
    return current().retraining


def sweep_service() -> Any:
    """Sweeps' API side (functions/service/sweeps.py; no Optuna)."""
    return current().service("sweeps")


def lifecycle_service() -> Any:
    return current().lifecycle
