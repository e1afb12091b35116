"""Job use cases behind the HTTP API: submit, read, list, edit, delete, summary, history, metrics, logs.

The lifecycle verbs (cancel, pause, resume, retry) live in controls.py and are mixed into JobService.
Every decision about a job is a conditional write in the repository; the Workflow (the lifecycle
engine) is told afterwards, and only about a decision that won.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from functions import constants
from functions.catalog import page_tokens
from functions.catalog import placement as placement_rules
from functions.catalog.gpu_types import gpu_type_of, inventory_problem
from functions.catalog.images import check_custom_image
from functions.catalog.quotas import parse_gpu_inventory
from functions.catalog.shapes import ShapeCatalog, catalog_from_json
from functions.errors import DomainError, IllegalTransition, InvalidRequest, JobNotFound
from functions.service import telemetry
from functions.service.compat.ome import apply_ome_trainer
from functions.service.compat.shapes import apply_shape
from functions.service.controls import LifecycleControls, WorkflowUnavailable
from functions.service.metrics_reduce import MIN_MAX_POINTS, parse_documents, reduce_documents
from functions.service.paths import PathRules
from functions.service.ports import ArtifactStore, JobQuery, JobRepository, LogSource, NameClaim, Transition, Workflow
from functions.service.principal import CognitoUser, Principal
from functions.settings import Settings
from schemas.api import EventList, JobList, LogLine, LogsResponse, LogStream, MetricsPoint, MetricsResponse, PatchJobRequest, Summary
from schemas.job import Actor, ErrorType, Job, StatusEvent, SubmitJobRequest, without_reserved_labels
from schemas.shapes import parse_shape_ref
from schemas.status import EDITABLE, RUNNING, TERMINAL, JobStatus
from schemas.telemetry import DEFAULT_MAX_SAMPLES, SystemMetricsResponse
from schemas.trainer import EVENT_PREFIX

if TYPE_CHECKING:
    from functions.service.teams import TeamDirectory

logger = logging.getLogger(__name__)

MAX_LIST_LIMIT = 200
MIN_PRIORITY, MAX_PRIORITY = 0, 10  # schemas.configs.Priority
DEFAULT_LOG_LINES = 1000
MAX_LOG_LINES = 5000


def new_job_id() -> str:
    """Sortable by creation day, unique enough that create()'s existence check never fires in practice."""
    return f"job-{datetime.now(UTC):%Y%m%d}-{uuid.uuid4().hex[:12]}"


def _utcnow() -> datetime:
    return datetime.now(UTC)


class JobService(LifecycleControls):
    def __init__(
        self,
        repo: JobRepository,
        store: ArtifactStore,
        workflow: Workflow | None,
        settings: Settings,
        clock: Callable[[], datetime] = _utcnow,
        ids: Callable[[], str] = new_job_id,
        log_source: LogSource | None = None,
        paths: PathRules | None = None,
        teams: TeamDirectory | None = None,
    ) -> None:
        self.log_source = log_source
        self.teams = teams  # None: no team rules (tests that build a JobService alone)
        self.repo = repo
        self.store = store
        self.workflow = workflow
        self.settings = settings
        self.clock = clock
        self.ids = ids
        self._shape_catalog: ShapeCatalog | None = None
        # The composition root hands the one PathRules it wires; tests that build a JobService alone get their own.
        self.paths = paths if paths is not None else PathRules(settings, repo, store)

    def principal(self, arn: str, cognito: CognitoUser | None = None) -> Principal:
        return Principal.from_arn(arn, self.settings.admin_arns, cognito)

    # --- submit ----------------------------------------------------------------------------------

    def submit(
        self,
        request: SubmitJobRequest,
        principal: Principal,
        *,
        owner: str | None = None,
        parent_job_id: str | None = None,
        reason: str = "submitted",
        claim: NameClaim | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> Job:
        """Create the job PENDING (with its first history entry), then start its lifecycle if wired. With
        `claim`, the job is created only as the claimed name's new holder (NameTaken otherwise). `labels` are
        set by the control plane on top of the request's (a sweep's reserved labels, which no request carries)."""
        job = self.draft(request, principal, owner=owner, parent_job_id=parent_job_id, labels=labels)
        now = job.created_at
        first = StatusEvent(at=now, from_status=None, to_status=JobStatus.PENDING, reason=reason, actor=Actor.USER.value)
        if claim is None:
            self.repo.create(job, first)
        else:
            self.repo.create(job, first, claim)
        if self.workflow is None:
            return job
        try:
            execution_arn = self.workflow.start(job)
        except Exception as exc:
            logger.exception("could not start the lifecycle of %s", job.job_id)
            self._fail_unstarted(job, exc)
            raise WorkflowUnavailable(f"could not start the lifecycle of job {job.job_id}; it is recorded as FAILED, submit again") from exc
        self.repo.annotate(job.job_id, {"execution_arn": execution_arn})
        # Re-read: the execution may already have moved the job on (PENDING -> QUEUED).
        return self.repo.get(job.job_id)

    def draft(
        self,
        request: SubmitJobRequest,
        principal: Principal,
        *,
        owner: str | None = None,
        parent_job_id: str | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> Job:
        """The job a submit would create (every check of validate_submit made), stored nowhere: submit stores
        it; the dry run (POST /jobs?dry_run=true) forecasts it."""
        request, shape = self.validate_submit(request, principal, owner=owner)
        team = self.teams.team_of(self.owner_principal(principal, owner)).name if self.teams is not None else None
        now = self.clock()
        priority = request.effective_priority
        return Job(
            job_id=self.ids(),
            owner=owner or principal.arn,
            name=request.name,
            description=request.description,
            status=JobStatus.PENDING,
            labels={**request.labels, **(labels or {})},
            training_config=request.training_config.model_copy(update={"priority": priority}),
            data_config=request.data_config,
            resource_config=request.resource_config,
            output_config=request.output_config,
            scheduling_config=request.scheduling_config.model_copy(update={"priority": priority}),
            parent_job_id=parent_job_id,
            created_at=now,
            updated_at=now,
            training_shape=shape,
            team=team,
        )

    def validate_submit(self, request: SubmitJobRequest, principal: Principal, *, owner: str | None = None) -> tuple[SubmitJobRequest, Any]:
        """Every check POST /jobs makes before it creates a job (422 naming the field), on the request as it
        will run (OME's trainer block and the training shape applied): that request and its shape. Anything
        else that creates jobs (sweeps, retraining policies) calls this, for the same principal, never a copy."""
        image_field = "trainer.image" if request.trainer is not None and request.trainer.image else "training_config.image"
        request = apply_ome_trainer(request)
        request, shape = apply_shape(request, self.shape_catalog())
        if request.training_config.image is not None:
            s = self.settings
            check_custom_image(image_field, request.training_config.image, s.custom_image_repositories, s.compute, local_mode=s.local_mode)
        # With placement candidates the job counts as its first candidate (quotas, capacity pool, cost estimate).
        request = request.model_copy(update={"resource_config": placement_rules.first_candidate(request.resource_config)})
        self._check_compute(request)
        placement_rules.validate(
            request.resource_config,
            request.scheduling_config,
            request.training_config,
            request.data_config,
            self.settings.compute,
            self.clock().timestamp(),
            shape,
        )
        self.check_paths(request, principal, owner=owner)
        if self.teams is not None:
            self.teams.check_submit(request, self.owner_principal(principal, owner))  # the team of the job's owner, from its identity
        return request, shape

    def shape_catalog(self) -> ShapeCatalog:
        """The deployment's training shapes (defaults + settings.training_shapes), built once."""
        if self._shape_catalog is None:
            self._shape_catalog = catalog_from_json(self.settings.training_shapes, compute=self.settings.compute)
        return self._shape_catalog

    def check_paths(self, request: SubmitJobRequest, principal: Principal, *, owner: str | None = None) -> None:
        """Every path the request names must be one its owner may use (docs/SECURITY.md): InvalidRequest
        naming the field. The job runs with its owner's rights, also when an admin submits it for them."""
        self.paths.check_submission(request, self.owner_principal(principal, owner))

    def owner_principal(self, principal: Principal, owner: str | None) -> Principal:
        return principal if owner is None or owner == principal.arn else self.principal(owner)

    def _check_emulated_gpus(self, request: SubmitJobRequest) -> None:
        """Local mode with an emulated GPU inventory (`trainplane up --gpus`): a type or count it never has is a 422."""
        rc = request.resource_config
        inventory = parse_gpu_inventory(self.settings.local_gpu_inventory)
        if not inventory or rc.gpu_count == 0:
            return
        problem = inventory_problem(inventory, gpu_type_of(rc), rc.gpu_count * rc.node_count)
        if problem is not None:
            raise InvalidRequest(*problem)

    def _check_compute(self, request: SubmitJobRequest) -> None:
        """What the configured compute cannot run is refused now (422 naming the field), not at launch."""
        if self.settings.compute == "local":
            if request.resource_config.node_count > 1:
                why = (
                    "compute 'local' runs one node; multi-node jobs need compute 'ec2' or 'sagemaker' "
                    "(in local mode: `trainplane up --compute ec2` runs the nodes as processes on loopback)"
                )
                raise InvalidRequest("resource_config.node_count", why)
            self._check_emulated_gpus(request)
            return
        from functions.catalog.cloud_rules import validate_cloud_job

        shape = None
        if request.resource_config.training_shape:
            name, version = parse_shape_ref(request.resource_config.training_shape)
            shape = self.shape_catalog().get(name, version)
        validate_cloud_job(request.training_config, request.data_config, request.resource_config, self.settings.compute, shape)

    def _fail_unstarted(self, job: Job, exc: Exception) -> None:
        try:
            changes = {"error_type": ErrorType.INTERNAL, "error_message": f"lifecycle not started: {type(exc).__name__}"}
            self.repo.transition(
                Transition(job.job_id, job.version, job.status, JobStatus.FAILED, "lifecycle not started", "system", changes)
            )
        except DomainError:
            logger.exception("could not mark %s FAILED after its lifecycle failed to start", job.job_id)

    # --- reads -----------------------------------------------------------------------------------

    def get(self, job_id: str, principal: Principal) -> Job:
        job = self.repo.get(job_id)
        if not principal.can_see(job):
            raise JobNotFound(job_id)  # never 403: another principal's job ids are not disclosed
        return job

    def list_jobs(
        self,
        principal: Principal,
        *,
        status: JobStatus | None = None,
        queue: str | None = None,
        labels: Mapping[str, str] | None = None,
        name: str | None = None,
        priority_min: int | None = None,
        priority_max: int | None = None,
        limit: int = 50,
        next_token: str | None = None,
    ) -> JobList:
        if not 1 <= limit <= MAX_LIST_LIMIT:
            raise InvalidRequest("limit", f"must be between 1 and {MAX_LIST_LIMIT}")
        for field, value in (("priority_min", priority_min), ("priority_max", priority_max)):
            if value is not None and not MIN_PRIORITY <= value <= MAX_PRIORITY:
                raise InvalidRequest(field, f"must be between {MIN_PRIORITY} and {MAX_PRIORITY}")
        if priority_min is not None and priority_max is not None and priority_min > priority_max:
            raise InvalidRequest("priority_min", f"must not be above priority_max ({priority_max})")
        query = JobQuery(
            owner=principal.owner_scope,
            status=status,
            queue=queue or None,
            labels=dict(labels or {}),
            name_contains=name or None,
            priority_min=priority_min,
            priority_max=priority_max,
            limit=limit,
            next_token=next_token or None,
        )
        jobs, token = self.repo.list_jobs(query)
        return JobList(jobs=jobs, next_token=token)

    def events(self, job_id: str, principal: Principal) -> EventList:
        self.get(job_id, principal)
        return EventList(events=self.repo.history(job_id))

    def summary(self, principal: Principal) -> Summary:
        counts = self.repo.counts(principal.owner_scope)
        full = {status: max(0, counts.get(status, 0)) for status in JobStatus}
        return Summary(
            counts=full,
            total=sum(full.values()),
            running=sum(full[s] for s in RUNNING),
            queued=full[JobStatus.PENDING] + full[JobStatus.QUEUED],
            completed=full[JobStatus.COMPLETED],
            failed=full[JobStatus.FAILED],
            paused=full[JobStatus.PAUSED],
        )

    def metrics(self, job_id: str, principal: Principal, *, max_points: int | None = None) -> MetricsResponse:
        """Every point of metrics.jsonl as written; with `max_points`, at most that many, in step order, that
        keep the loss curves' shape (functions/service/metrics_reduce.py). A torn line is skipped."""
        if max_points is not None and max_points < MIN_MAX_POINTS:
            raise InvalidRequest("max_points", f"must be at least {MIN_MAX_POINTS}")
        self.get(job_id, principal)
        lines = [line for line in self.store.read_lines(constants.metrics_key(job_id)) if line.strip()]
        points = []
        if max_points is None:
            for n, line in enumerate(lines, start=1):
                try:
                    points.append(MetricsPoint.model_validate_json(line))
                except ValueError:
                    # One torn line (a run killed mid-write) must not hide the others.
                    logger.warning("metrics line %d of %s is not a metrics point; skipped", n, job_id)
            return MetricsResponse(points=points, total_points=len(points))
        # A long curve: parsed as plain JSON, reduced, and only the kept points built as models.
        documents = parse_documents(lines)
        if len(documents) < len(lines):
            logger.warning("%d metrics lines of %s are not metrics points; skipped", len(lines) - len(documents), job_id)
        for document in reduce_documents(documents, max_points):
            try:
                points.append(MetricsPoint.model_validate(document))
            except ValueError:
                logger.warning("a metrics line of %s (step %s) is not a metrics point; skipped", job_id, document.get("step"))
        return MetricsResponse(points=points, total_points=len(documents))

    def system_metrics(self, job_id: str, principal: Principal, *, max_samples: int = DEFAULT_MAX_SAMPLES) -> SystemMetricsResponse:
        """The GPU samples (NVML) of every attempt, per device (functions/service/telemetry.py)."""
        self.get(job_id, principal)
        return telemetry.system_metrics(self.store, job_id, max_samples=max_samples)

    def logs(
        self,
        job_id: str,
        principal: Principal,
        *,
        since: float | None = None,
        next_token: str | None = None,
        limit: int = DEFAULT_LOG_LINES,
        stream: LogStream | None = None,
    ) -> LogsResponse:
        """Log lines of every attempt in order, after `since` (epoch seconds, exclusive), `limit` per page;
        with `stream`, only that stream's lines (skipped lines still move the cursor, as `since` does)."""
        job = self.get(job_id, principal)
        if not 1 <= limit <= MAX_LOG_LINES:
            raise InvalidRequest("limit", f"must be between 1 and {MAX_LOG_LINES}")
        if self.log_source is not None:
            if stream is not None:
                raise InvalidRequest(
                    "stream",
                    f"compute {self.settings.compute!r} ships the trainer's stdout and stderr as one CloudWatch stream: "
                    "its lines carry no stream to filter on (docs/DASHBOARD.md)",
                )
            return self.log_source.read(job, since=since, next_token=next_token, limit=limit)
        start_attempt, start_line = _decode_log_token(next_token) if next_token else (0, 0)
        files = sorted(
            (int(m.group("attempt")), key)
            for key in self.store.list_keys(constants.logs_prefix(job_id))
            if (m := constants.LOG_KEY.match(key)) is not None
        )
        lines: list[LogLine] = []
        last_stamp = 0.0
        # Where a reader resumes: just after the last line this request looked at (returned or skipped).
        # A file is only ever appended to, so (attempt, line index) stays valid as the run writes on.
        resume_at = (start_attempt, start_line)
        for attempt, key in files:
            streams: list[str] = []  # each stored line's stream, in step with what _stamped yields
            printed = (_untagged(stored, streams) for stored in self.store.read_lines(key))
            for index, (stamp, message) in enumerate(_stamped(printed, last_stamp)):
                last_stamp = stamp
                line_stream = streams[-1]
                if (attempt, index) < (start_attempt, start_line):
                    continue
                if len(lines) == limit:
                    token = page_tokens.encode([attempt, index])
                    return LogsResponse(lines=lines, next_token=token, cursor=token)
                resume_at = (attempt, index + 1)
                if (since is not None and stamp <= since) or (stream is not None and line_stream != stream):
                    continue
                lines.append(LogLine(timestamp=stamp, attempt=attempt, message=message, stream=line_stream))
        return LogsResponse(lines=lines, next_token=None, cursor=page_tokens.encode(list(resume_at)))

    # --- edit and delete -------------------------------------------------------------------------

    def patch(self, job_id: str, principal: Principal, request: PatchJobRequest) -> Job:
        job = self.get(job_id, principal)
        if job.status not in EDITABLE:
            raise IllegalTransition(job_id, job.status, "edit", EDITABLE)
        changes: dict[str, Any] = {}
        given = request.model_fields_set
        if "name" in given and request.name is not None:
            changes["name"] = request.name
        if "description" in given:
            changes["description"] = request.description
        training = job.training_config
        if "hyperparameters" in given and request.hyperparameters is not None:
            training = training.model_copy(update={"hyperparameters": {**training.hyperparameters, **request.hyperparameters}})
        if "priority" in given and request.priority is not None:
            if self.teams is not None:
                self.teams.check_priority(self.owner_principal(principal, job.owner), request.priority, "priority")
            # scheduling_config.priority is the one the scheduler reads; the repository re-keys the
            # queue index from it. training_config.priority follows so the two never disagree.
            training = training.model_copy(update={"priority": request.priority})
            changes["scheduling_config"] = job.scheduling_config.model_copy(update={"priority": request.priority})
        if training is not job.training_config:
            changes["training_config"] = training
        if "resource_config" in given and request.resource_config is not None:
            changes["resource_config"] = request.resource_config
        if not changes:
            return job  # only nulls of fields a job cannot clear (the model refuses an empty body): a no-op
        edited = _revalidate(job, changes)
        if "resource_config" in changes and request.resource_config is not None:
            # New resources: the shape they name (if any) is resolved again, as at submit, against the
            # fields the edit itself sets.
            edited = edited.model_copy(update={"resource_config": request.resource_config})
            edited, shape = apply_shape(edited, self.shape_catalog(), only_resources_are_the_users=True)
            changes.update(resource_config=edited.resource_config, training_config=edited.training_config, training_shape=shape)
        self._check_compute(edited)
        return self.repo.update(job_id, job.version, changes, EDITABLE, action="edit")

    def delete(self, job_id: str, principal: Principal) -> None:
        job = self.get(job_id, principal)
        if job.status not in TERMINAL:
            raise IllegalTransition(job_id, job.status, "delete", TERMINAL)
        # Items first, conditional on the version we checked: a PREEMPTED job that the engine resumes
        # meanwhile is not deleted, and its checkpoints on S3 are still there for it.
        self.repo.delete(job_id, expected_version=job.version)
        removed = self.store.delete_prefix(constants.job_prefix(job_id))
        logger.info("deleted job %s and %d objects", job_id, removed)


def _revalidate(job: Job, changes: Mapping[str, Any]) -> SubmitJobRequest:
    """The edited job must still be a valid submission (e.g. QLORA cannot move to gpu_count 0)."""
    request = job.submit_request().model_dump()
    request["labels"] = without_reserved_labels(request["labels"])  # a sweep's trial job may be edited too
    for name, value in changes.items():
        if name in request:
            request[name] = value.model_dump() if hasattr(value, "model_dump") else value
    try:
        return SubmitJobRequest.model_validate(request)
    except ValueError as exc:
        field = _first_location(exc) or ("resource_config" if "resource_config" in changes else next(iter(changes)))
        raise InvalidRequest(field, _first_error(exc)) from exc


def _first_location(exc: ValueError) -> str | None:
    # A rule with a field of its own (training_config.hyperparameters.<key>) names it; model-wide rules do not.
    errors = getattr(exc, "errors", None)
    if callable(errors):
        location = ".".join(str(part) for part in errors()[0].get("loc", ()))
        return location or None
    return None


def _first_error(exc: ValueError) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        first = errors()[0]
        return str(first.get("msg", exc)).removeprefix("Value error, ")
    return str(exc)


# --- logs ----------------------------------------------------------------------------------------

_EPOCH_PREFIX = re.compile(r"^\[?(\d{9,11}(?:\.\d+)?)\]?\s")
_ISO_PREFIX = re.compile(r"^\[?(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?)\]?\s?")
_TICK = 1e-6  # lines without a time of their own follow the previous one by a microsecond


def _untagged(stored: str, streams: list[str]) -> str:
    stream, printed = constants.untag_log_line(stored)
    streams.append(stream)
    return printed


def _stamped(lines: Iterator[str], previous: float) -> Iterator[tuple[float, str]]:
    """Each line with a timestamp: its own (epoch, ISO, JSON or trainer event) or just after the one before.

    Stamps never go backwards, so `since=<last timestamp seen>` resumes exactly after that line.
    """
    for line in lines:
        stamp = _stamp_of(line)
        previous = stamp if stamp is not None and stamp > previous else previous + _TICK
        yield previous, line


def _stamp_of(line: str) -> float | None:
    if line.startswith(EVENT_PREFIX) or line.startswith("{"):
        try:
            doc = json.loads(line.removeprefix(EVENT_PREFIX))
            value = doc.get("time", doc.get("timestamp")) if isinstance(doc, dict) else None
            return float(value) if isinstance(value, int | float) else None
        except ValueError:
            return None
    if m := _EPOCH_PREFIX.match(line):
        return float(m.group(1))
    if m := _ISO_PREFIX.match(line):
        try:
            at = datetime.fromisoformat(m.group(1).replace(",", ".").replace(" ", "T"))
        except ValueError:
            return None
        return (at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp()
    return None


def _decode_log_token(token: str) -> tuple[int, int]:
    try:
        attempt, line = page_tokens.decode(token)
        return int(attempt), int(line)
    except (ValueError, TypeError) as exc:
        raise InvalidRequest("next_token", page_tokens.NOT_OURS) from exc
