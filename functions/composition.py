"""The one composition root: the ONLY place that builds services and adapters and wires them together.

Nothing is built at import time. The first request builds what it needs (settings, boto3 clients,
repository, store, workflow, services) and keeps it for the life of the process (a Lambda execution
environment, or local mode). Every handler asks this root for its service; no other module
constructs a collaborator of another. The cloud deployment uses the defaults; local mode and tests
differ only in the parts they hand to `configure(...)` - an instance, or a builder `f(root)` that is
called once with this root:

    from functions import composition
    composition.configure(settings=Settings(...), repository=InMemoryJobRepository(), workflow=None)
    composition.configure(launchers=lambda root: {"local": launcher, **cloud_launchers(root.settings, root.clients)})
    composition.configure(lifecycle=LifecycleService(...))
    composition.reset()  # back to the defaults (from the environment)

Defaults: DynamoJobRepository and S3ArtifactStore on `Settings`' tables, bucket, region and endpoint;
the Workflow is StepFunctionsWorkflow on `settings.state_machine_arn` (None when unset: the API then
records decisions without starting executions), with the cloud launcher of `settings.compute` so
that cancel and pause can stop runs; the lifecycle engine, the retraining service, the cloud-events
service, the queue view and the reconciler are built below from those parts.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from functions.composition_budgets import BUDGETS_ACTOR as BUDGETS_ACTOR
from functions.composition_budgets import BudgetParts

if TYPE_CHECKING:
    from functions.adapters.aws import AwsClients
    from functions.adapters.stepfunctions import StepFunctionsWorkflow
    from functions.adapters.sweeps import DynamoSweepRepository
    from functions.service.budgets import BudgetService
    from functions.service.cloud_events import CloudEventsService
    from functions.service.event_publisher import EventPublisher
    from functions.service.forecast_learning import ForecastLearner
    from functions.service.jobs import JobService
    from functions.service.lifecycle import LifecycleService
    from functions.service.paths import PathRules
    from functions.service.placement import PlacementService
    from functions.service.ports import ArtifactStore, CapacityLedger, JobRepository, Launcher, Workflow
    from functions.service.queues import QueueView
    from functions.service.reconciler import Reconciler
    from functions.service.retraining.policies import RetrainingService
    from functions.service.sweeps.controller import SweepController
    from functions.service.sweeps.hooks import SweepHooks
    from functions.service.sweeps.service import SweepService
    from functions.service.teams import TeamDirectory, TeamService
    from functions.service.trainer_reports import TrainerLogReports
    from functions.service.webhook_delivery import DeliveryWorker
    from functions.service.webhooks import WebhookService
    from functions.settings import Settings

# The cloud launchers, by the `launcher` name stored in a job's run_handle (cloud_launchers below).
CLOUD_LAUNCHER_NAMES = frozenset({"sagemaker", "ec2"})

_UNSET: Any = object()


def cloud_launchers(settings: Settings, clients: AwsClients) -> dict[str, Launcher]:
    """The cloud launcher `settings.compute` names (none for the local engine), so the API can stop its runs."""
    if settings.compute == "sagemaker":
        from functions.adapters.launchers.sagemaker import SageMakerLauncher

        return {"sagemaker": SageMakerLauncher(settings, clients)}
    if settings.compute == "ec2":
        from functions.adapters.launchers.ec2 import EC2Launcher

        return {"ec2": EC2Launcher(settings, clients)}
    return {}


class Composition(BudgetParts):
    """Everything a handler needs, each part built on first use (thread-safe) and then kept."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        clients: AwsClients | None = None,
        repository: JobRepository | None = None,
        artifacts: ArtifactStore | None = None,
        # Each part: the thing itself, or a builder called once with this root.
        workflow: Workflow | Callable[[Composition], Workflow | None] | None = _UNSET,
        launchers: Mapping[str, Launcher] | Callable[[Composition], Mapping[str, Launcher]] | None = None,
        lifecycle: LifecycleService | Callable[[Composition], LifecycleService] | None = None,
        retraining: RetrainingService | Callable[[Composition], RetrainingService] | None = None,
        cloud_events: CloudEventsService | Callable[[Composition], CloudEventsService] | None = None,
        trainer_reports: TrainerLogReports | Callable[[Composition], TrainerLogReports] | None = None,
        event_publisher: EventPublisher | None = None,
        reconciler: Callable[[Composition], Reconciler] | None = None,
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
            "lifecycle": lifecycle,
            "retraining": retraining,
            "cloud_events": cloud_events,
            "trainer_reports": trainer_reports,
            "event_publisher": event_publisher,
        }
        self._workflow = workflow
        self._launchers = launchers
        self._reconciler = reconciler
        self._clock = clock
        self._ids = ids
        self._lock = threading.RLock()

    def _given_or(self, name: str, build: Callable[[], Any]) -> Any:
        """What was handed in for `name` (called with the root when it is a builder), else `build()`; once."""

        def make() -> Any:
            given = self._given.get(name)
            if given is None:
                return build()
            return given(self) if callable(given) else given

        return self._once("_" + name, make)

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

            return DynamoJobRepository(self.clients, self.settings.jobs_table, dashboard_url=self.settings.dashboard_url)

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
            return cloud_launchers(self.settings, self.clients)

        return self._once("_launchers", build)

    @property
    def workflow(self) -> Workflow | None:
        def build() -> Workflow | None:
            if self._workflow is not _UNSET:
                given = self._workflow
                return given(self) if callable(given) else given
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
            return JobService(
                self.repository, self.artifacts, self.workflow, self.settings, paths=self.path_rules, teams=self.team_directory, **extra
            )

        return self._once("_jobs", build)

    @property
    def team_directory(self) -> TeamDirectory:
        """Teams as submit and the scheduler read them (functions/service/teams.py), stored in the jobs table."""

        def build() -> TeamDirectory:
            from functions.adapters.teams import DynamoTeamRepository
            from functions.service.teams import TeamDirectory

            repository = DynamoTeamRepository(self.clients, self.settings.jobs_table)
            groups = None
            if self.settings.dashboard_user_pool_id:
                from functions.adapters.cognito_groups import CognitoUserGroups

                groups = CognitoUserGroups(self.clients)  # dashboard users' groups: members.cognito_groups
            if self._clock is not None:
                return TeamDirectory(repository, self.settings, self._clock, groups=groups)
            return TeamDirectory(repository, self.settings, groups=groups)

        return self._once("_team_directory", build)

    @property
    def teams(self) -> TeamService:
        """/teams: admins define teams; each caller sees its own."""

        def build() -> TeamService:
            from functions.service.teams import TeamService

            return TeamService(self.team_directory, self.capacity_ledger, self.repository)

        return self._once("_teams", build)

    @property
    def path_rules(self) -> PathRules:
        """What the paths a job names may be (docs/SECURITY.md): submit (and retraining, through it) and the lifecycle use this one."""

        def build() -> PathRules:
            from functions.service.paths import PathRules

            return PathRules(self.settings, self.repository, self.artifacts)

        return self._once("_path_rules", build)

    @property
    def engine(self) -> StepFunctionsWorkflow:
        """The workflow as the lifecycle engine uses it: executions, task tokens and run stops (Step Functions)."""
        from functions.adapters.stepfunctions import StepFunctionsWorkflow

        workflow = self.workflow
        if workflow is None:
            raise RuntimeError("settings.state_machine_arn is not set: the lifecycle engine needs its state machine")
        if not isinstance(workflow, StepFunctionsWorkflow):
            raise TypeError(f"the lifecycle engine needs the Step Functions workflow, not {type(workflow).__name__}")
        return workflow

    @property
    def capacity_ledger(self) -> CapacityLedger:
        """Who holds which capacity (the scheduler's ledger in the jobs table)."""

        def build() -> CapacityLedger:
            from functions.adapters.capacity import DynamoDBCapacityLedger

            return DynamoDBCapacityLedger(self.clients, self.settings.jobs_table)

        return self._once("_capacity_ledger", build)

    @property
    def placement(self) -> PlacementService:
        """Placement candidates and pool health (functions/service/placement.py; the pools in the jobs table)."""

        def build() -> PlacementService:
            from functions.adapters.pool_health import DynamoDBPoolHealth
            from functions.service.placement import PlacementService

            return PlacementService(DynamoDBPoolHealth(self.clients, self.settings.jobs_table))

        return self._given_or("placement", build)

    @property
    def lifecycle(self) -> LifecycleService:
        """The lifecycle engine: the state machine's tasks, run reports and ends (functions/service/lifecycle.py)."""

        def build() -> LifecycleService:
            from functions.service.lifecycle import LifecycleConfig, LifecycleService
            from functions.service.scheduler import Scheduler, capacity_model

            settings = self.settings
            workflow = self.engine
            scheduler = Scheduler(
                self.repository,
                self.capacity_ledger,
                capacity_model(settings),
                workflow,
                workflow,
                teams=self.team_directory,
                admission=self.budget_gate,
            )
            config = LifecycleConfig(
                bucket=settings.artifacts_bucket,
                launcher=settings.compute,
                heartbeat_seconds=settings.run_heartbeat_seconds,
                stop_grace_seconds=settings.stop_grace_seconds,
                max_preemptions=settings.max_preemptions,
            )
            service = LifecycleService(
                self.repository, self.artifacts, self.launchers, workflow, workflow, scheduler, config, paths=self.path_rules
            )
            service.sweep_hooks = self.sweep_hooks  # a trial's reports and ends wake its sweep's controller
            service.placement = self.placement
            service.completions = self.forecast_learner.record  # the forecast learns from each completed job
            return service

        return self._given_or("lifecycle", build)

    @property
    def sweeps(self) -> SweepService:
        """Sweeps' API side (functions/service/sweeps/service.py; no Optuna): the sweep items in the jobs table."""

        def build() -> SweepService:
            from functions.adapters.sweeps_wake import waker_for
            from functions.service.sweeps.service import SweepService

            repository = self._sweep_repository()
            return SweepService(repository, self.jobs, waker_for(self.settings, self.clients))

        return self._once("_sweeps", build)

    def _sweep_repository(self) -> DynamoSweepRepository:
        from functions.adapters.sweeps import DynamoSweepRepository

        return DynamoSweepRepository(self.clients, self.settings.jobs_table, dashboard_url=self.settings.dashboard_url)

    @property
    def sweep_hooks(self) -> SweepHooks:
        """What the lifecycle tells sweeps: a trial's metric reports and transitions wake the controller."""

        def build() -> SweepHooks:
            from functions.adapters.sweeps_wake import waker_for
            from functions.service.sweeps.hooks import SweepHooks

            return SweepHooks(self._sweep_repository(), waker_for(self.settings, self.clients))

        return self._once("_sweep_hooks", build)

    @property
    def sweep_controller(self) -> SweepController:
        """The sweep controller (imports Optuna: only its own Lambda and local mode's worker, never the API)."""

        def build() -> SweepController:
            from functions.service.sweeps.controller import SweepController

            return SweepController(self._sweep_repository(), self.jobs)

        return self._once("_sweep_controller", build)

    @property
    def event_publisher(self) -> EventPublisher:
        """The outbox -> the deployment's own EventBridge bus (functions/service/event_publisher.py)."""

        def build() -> EventPublisher:
            from functions.adapters.outbox import DynamoOutbox, EventBridgeBus
            from functions.service.event_publisher import EventPublisher
            from functions.service.webhooks import WebhookFanoutBus

            bus: Any = EventBridgeBus(self.clients, self.settings.trainplane_bus_name)
            if self.settings.local_mode:
                # Local mode queues each batch for the webhooks before it goes on the bus (the journaled
                # table is the durable queue; moto's SQS is not journaled). In the cloud a rule on the bus
                # feeds an SQS queue the delivery Lambda fans out from, and the publisher stays confined to
                # the outbox (functions/handlers/webhook_delivery.py).
                bus = WebhookFanoutBus(bus, self.webhooks)
            return EventPublisher(bus, DynamoOutbox(self.clients, self.settings.jobs_table))

        return self._given_or("event_publisher", build)

    def _webhook_repository(self) -> Any:
        from functions.adapters.webhooks import DynamoWebhookRepository

        return self._once("_webhook_repository", lambda: DynamoWebhookRepository(self.clients, self.settings.jobs_table))

    @property
    def webhooks(self) -> WebhookService:
        """Webhooks: the routes' service and the publisher's fan-out (functions/service/webhooks.py)."""

        def build() -> WebhookService:
            from functions.service.webhooks import WebhookService

            extra: dict[str, Any] = {"clock": self._clock} if self._clock is not None else {}
            settings = self.settings
            # Loopback receivers in local mode only (functions/catalog/address_guard.py).
            return WebhookService(self._webhook_repository(), admin_arns=settings.admin_arns, allow_loopback=settings.local_mode, **extra)

        return self._once("_webhooks", build)

    @property
    def webhook_delivery(self) -> DeliveryWorker:
        """The worker that makes due webhook attempts (the delivery Lambda's, and local mode's loop)."""

        def build() -> DeliveryWorker:
            from functions.adapters.webhooks import HttpWebhookSender
            from functions.service.webhook_delivery import DeliveryWorker, Schedule

            settings = self.settings
            schedule = Schedule(settings.webhook_retry_delays) if settings.webhook_retry_delays else Schedule()
            sender = HttpWebhookSender(allow_loopback=settings.local_mode)
            extra: dict[str, Any] = {"clock": self._clock} if self._clock is not None else {}
            return DeliveryWorker(self._webhook_repository(), sender, schedule=schedule, **extra)

        return self._once("_webhook_delivery", build)

    @property
    def retraining(self) -> RetrainingService:
        """Retraining policies and their dispatcher: the DynamoDB repository on the jobs table, Scheduler when configured."""

        def build() -> RetrainingService:
            from functions.adapters.policies import DynamoPolicyRepository
            from functions.adapters.schedules import EventBridgeSchedules
            from functions.service.retraining.policies import RetrainingService

            settings = self.settings
            schedules = None
            if settings.retraining_schedule_group and settings.retraining_scheduler_role_arn and settings.retraining_function_arn:
                schedules = EventBridgeSchedules(
                    self.clients,
                    settings.retraining_schedule_group,
                    settings.retraining_scheduler_role_arn,
                    settings.retraining_function_arn,
                )
            policies = DynamoPolicyRepository(self.clients, settings.jobs_table)
            return RetrainingService(policies, self.jobs, settings, schedules)

        return self._given_or("retraining", build)

    @property
    def cloud_events(self) -> CloudEventsService:
        """SageMaker / EC2 state changes -> the lifecycle (the events Lambda's service)."""

        def build() -> CloudEventsService:
            from functions.adapters.launchers.sagemaker import describe_training_job
            from functions.service.cloud_events import CloudEventsService

            return CloudEventsService(self.repository, self.lifecycle, self.launchers, describe_training_job)

        return self._given_or("cloud_events", build)

    @property
    def trainer_reports(self) -> TrainerLogReports:
        """The trainer's TRAINPLANE_EVENT lines from the CloudWatch Logs subscription -> the lifecycle."""

        def build() -> TrainerLogReports:
            from functions.service.trainer_reports import TrainerLogReports

            return TrainerLogReports(self.lifecycle)

        return self._given_or("trainer_reports", build)

    @property
    def queue_view(self) -> QueueView:
        """The read side of the scheduler for the API: GET /queues and a queued job's place."""

        def build() -> QueueView:
            from functions.service.queues import QueueView
            from functions.service.scheduler import capacity_model

            return QueueView(
                self.repository, self.capacity_ledger, capacity_model(self.settings), teams=self.team_directory, admission=self.budget_gate
            )

        return self._once("_queue_view", build)

    def new_reconciler(self) -> Reconciler:
        """A reconciler on this root's parts (the events Lambda builds one per tick; local mode keeps one)."""
        if self._reconciler is not None:
            return self._reconciler(self)
        from functions.service.reconciler import Reconciler

        return Reconciler(self.repository, self.lifecycle, self.engine, self.launchers)

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


def team_service() -> TeamService:
    return current().teams


def sweep_service() -> SweepService:
    """Sweeps' API side (functions/service/sweeps/service.py; no Optuna)."""
    return current().sweeps


def budget_service() -> BudgetService:
    return current().budgets


def forecast_learner() -> ForecastLearner:
    return current().forecast_learner


def webhook_service() -> WebhookService:
    return current().webhooks


def lifecycle_service() -> LifecycleService:
    return current().lifecycle
