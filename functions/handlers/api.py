"""The REST API Lambda (API Gateway REST proxy, AWS_IAM auth): every route of docs/CONTRACTS.md.

Thin routes: the resolver validates input against the pydantic models (unknown fields rejected),
each route calls one service method and returns a typed model; errors become HTTP in errors.py only.
Every route's caller is errors.principal_of (the IAM ARN, or the dashboard user's Cognito identity).
Import time is kept small on purpose (a cold start pays it): boto3, the adapters and the idempotency
layer load on first use, through the composition.
"""

from __future__ import annotations

import json
from functools import cache
from typing import TYPE_CHECKING, Annotated, Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.middlewares import NextMiddleware
from aws_lambda_powertools.event_handler.openapi.params import Body, Header, Path, Query
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.metrics import MetricUnit

from functions import composition, constants
from functions.handlers import budgets, deployment, errors, policies, queues, shapes, sweeps, teams, train, webhooks
from functions.handlers.edge import EdgeResolver
from functions.handlers.errors import (
    BODY_ERRORS,
    IdempotencyInProgress,
    IdempotencyKeyReused,
    PageLimit,
    PageToken,
    no_content,
    principal_of,
    reject_unknown_params,
    responses,
)
from functions.handlers.models import LazyModels
from functions.handlers.tracing import LazyTracer
from schemas.api import (
    CancelRequest,
    EventList,
    JobList,
    LogsResponse,
    LogStream,
    MetricsResponse,
    PatchJobRequest,
    PauseRequest,
    ResumeRequest,
    RetryRequest,
    Summary,
)
from schemas.bounds import DEFAULT_MAX_SAMPLES
from schemas.forecast import Forecast
from schemas.job import Job, SubmitJobRequest
from schemas.status import JobStatus

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from functions.service.principal import Principal
    from schemas import telemetry
else:
    telemetry = LazyModels("schemas.telemetry")  # GET /jobs/{id}/metrics/system's answer, on its first request

TITLE = "trainplane"
VERSION = "1.0.0"
LABEL_PREFIX = "labels."
SUBMIT_PARAMS = frozenset({"dry_run"})
LIST_PARAMS = frozenset({"status", "queue", "name", "priority_min", "priority_max", "limit", "next_token"})
LOGS_PARAMS = frozenset({"since", "next_token", "limit", "stream"})
METRICS_PARAMS = frozenset({"max_points"})
SYSTEM_METRICS_PARAMS = frozenset({"max_samples"})

logger = Logger(service=constants.SERVICE_NAME)
metrics = Metrics(namespace=constants.METRICS_NAMESPACE, service=constants.SERVICE_NAME)
tracer = LazyTracer(service=constants.SERVICE_NAME)

app = EdgeResolver()  # Powertools' REST resolver, strict at the edge (edge.py): no input gets a 5xx
jobs = Router()
controls = Router()
reports = Router()

JobId = Annotated[str, Path(min_length=1, max_length=128, description="The job's id")]


def _for_job(router: Router, job_id: str) -> Principal:
    logger.append_keys(job_id=job_id)
    return principal_of(router)


# --- /jobs ---------------------------------------------------------------------------------------


@jobs.post(
    "/jobs",
    status_code=201,
    summary="Submit a training job",
    description=(
        "Creates the job PENDING and starts its lifecycle. The same Idempotency-Key (per caller) returns the same job. "
        "With `dry_run=true` it creates nothing: the same checks (the same 422s), then 200 with the forecast "
        "(price, duration and total ranges, queue position, what each covering budget would have left; docs/BUDGETS.md)."
    ),
    responses={
        **responses(201, "The job, as created", *BODY_ERRORS, 409, 422, 503),
        201: {"description": "The job, as created", "content": {"application/json": {"model": Job}}},
        200: {"description": "dry_run=true: the forecast; nothing was created", "content": {"application/json": {"model": Forecast}}},
    },
    tags=["jobs"],
)
def submit_job(
    body: Annotated[SubmitJobRequest, Body()],
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key", max_length=256)] = None,
    dry_run: Annotated[bool, Query(description="Validate exactly as a submit and answer the forecast (200); create nothing")] = False,
) -> Job | Forecast:
    principal = principal_of(jobs)
    reject_unknown_params(jobs, SUBMIT_PARAMS)
    if dry_run:
        return _forecast(body, principal)  # a Response: 200 with the Forecast
    job = _submit_once(principal, idempotency_key, body) if idempotency_key else composition.job_service().submit(body, principal)
    logger.append_keys(job_id=job.job_id)
    logger.info("job submitted", extra={"training_type": str(job.training_config.training_type), "queue": job.queue})
    metrics.add_metric(name="JobsSubmitted", unit=MetricUnit.Count, value=1)
    return job


def _forecast(body: SubmitJobRequest, principal: Principal) -> Any:
    """The dry run: every check a submit makes (the same 422s), then the forecast; nothing is stored or started."""
    root = composition.current()
    draft = root.jobs.draft(body, principal)
    forecast = root.budgets.forecast(draft, principal, root.queue_view.with_position)
    return Response(status_code=200, content_type="application/json", body=forecast.model_dump(mode="json"))


def _submit_once(principal: Principal, key: str, body: SubmitJobRequest) -> Job:
    """Powertools idempotency keyed on (owner, key); the same key with another body is refused (422)."""
    # Imported here: the idempotency package loads boto3 and jmespath, which GET requests never need.
    from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function
    from aws_lambda_powertools.utilities.idempotency.exceptions import (
        IdempotencyAlreadyInProgressError,
        IdempotencyValidationError,
    )

    root = composition.current()
    config = IdempotencyConfig(
        event_key_jmespath="[owner, key]",
        payload_validation_jmespath="request",
        expires_after_seconds=root.settings.idempotency_ttl_seconds,
        raise_on_no_idempotency_key=True,
    )
    if app.lambda_context is not None:
        config.register_lambda_context(app.lambda_context)

    def create(payload: dict[str, Any]) -> dict[str, Any]:
        # What is stored is the API's own response (hub_token masked), never the secret.
        return root.jobs.submit(body, principal).model_dump(mode="json")

    once = idempotent_function(
        create, data_keyword_argument="payload", persistence_store=root.idempotency_store, config=config, key_prefix="trainplane.submit_job"
    )
    # The body as sent (secrets included, so that a different hub token is a different body); only its
    # hash is stored, as Powertools' payload validation key.
    request = body.model_dump(mode="json", exclude_unset=True, context={"reveal_secrets": True})
    payload = {"owner": principal.arn, "key": key, "request": request}
    try:
        return Job.model_validate(once(payload=payload))
    except IdempotencyValidationError as exc:
        raise IdempotencyKeyReused() from exc
    except IdempotencyAlreadyInProgressError as exc:
        raise IdempotencyInProgress() from exc


@jobs.get(
    "/jobs",
    summary="List jobs, newest first",
    description=(
        "Filters are ANDed: status, queue, name (substring), priority_min/priority_max "
        "(scheduling_config.priority, inclusive), and any number of labels.<key>=<value>. "
        "A page holds at most `limit` jobs; pass next_token to get the next one. "
        "Each QUEUED job carries queue_position, estimated_wait_seconds and wait_reason, as GET /jobs/{job_id} does."
    ),
    responses=responses(200, "A page of jobs", 422),
    tags=["jobs"],
)
def list_jobs(
    status: Annotated[JobStatus | None, Query()] = None,
    queue: Annotated[str | None, Query(max_length=64)] = None,
    name: Annotated[str | None, Query(max_length=128)] = None,
    priority_min: Annotated[int | None, Query(ge=0, le=10, description="Only jobs of this priority or higher")] = None,
    priority_max: Annotated[int | None, Query(ge=0, le=10, description="Only jobs of this priority or lower")] = None,
    limit: PageLimit = 50,
    next_token: PageToken = None,
) -> JobList:
    principal = principal_of(jobs)
    reject_unknown_params(jobs, LIST_PARAMS, LABEL_PREFIX)
    params = jobs.current_event.query_string_parameters or {}
    labels = {k[len(LABEL_PREFIX) :]: v for k, v in params.items() if k.startswith(LABEL_PREFIX)}
    page = composition.job_service().list_jobs(
        principal,
        status=status,
        queue=queue,
        labels=labels,
        name=name,
        priority_min=priority_min,
        priority_max=priority_max,
        limit=limit,
        next_token=next_token,
    )
    return page.model_copy(update={"jobs": queues.with_positions(page.jobs)})


@jobs.get(
    "/jobs/<job_id>",
    summary="Get a job",
    responses=responses(200, "The job", 404, 422),
    tags=["jobs"],
)
def get_job(job_id: JobId) -> Job:
    return queues.with_position(composition.job_service().get(job_id, _for_job(jobs, job_id)))


@jobs.patch(
    "/jobs/<job_id>",
    summary="Edit a PENDING, QUEUED or FAILED job",
    description="name, description, priority, hyperparameters (merged key by key), resource_config (replaced).",
    responses=responses(200, "The edited job", *BODY_ERRORS, 404, 409, 422, 503),
    tags=["jobs"],
)
def patch_job(job_id: JobId, body: Annotated[PatchJobRequest, Body()]) -> Job:
    return composition.job_service().patch(job_id, _for_job(jobs, job_id), body)


@jobs.delete(
    "/jobs/<job_id>",
    status_code=204,
    summary="Delete a terminal job, its history and its objects on S3",
    responses=responses(204, "Deleted", 404, 409, 422, content=False),
    tags=["jobs"],
)
def delete_job(job_id: JobId):  # no return annotation: no response model, a 204 has no body
    composition.job_service().delete(job_id, _for_job(jobs, job_id))
    metrics.add_metric(name="JobsDeleted", unit=MetricUnit.Count, value=1)
    return no_content()


# --- lifecycle verbs -----------------------------------------------------------------------------


@controls.post(
    "/jobs/<job_id>/cancel",
    summary="Cancel a job (any non-terminal status)",
    responses=responses(200, "The job, CANCELLED", *BODY_ERRORS, 404, 409, 422),
    tags=["lifecycle"],
)
def cancel_job(job_id: JobId, body: Annotated[CancelRequest | None, Body()] = None) -> Job:
    job = composition.job_service().cancel(job_id, _for_job(controls, job_id), (body or CancelRequest()).reason)
    metrics.add_metric(name="JobsCancelled", unit=MetricUnit.Count, value=1)
    return job


@controls.post(
    "/jobs/<job_id>/pause",
    status_code=202,
    summary="Pause a TRAINING or CHECKPOINTING job (checkpoint, release the GPUs, PAUSED)",
    description="Accepted: the job keeps its status with pending_action=pause until the engine has saved the checkpoint.",
    responses=responses(202, "The job, with the pause pending", *BODY_ERRORS, 404, 409, 422, 503),
    tags=["lifecycle"],
)
def pause_job(job_id: JobId, body: Annotated[PauseRequest | None, Body()] = None) -> Job:
    return composition.job_service().pause(job_id, _for_job(controls, job_id), (body or PauseRequest()).save_checkpoint)


@controls.post(
    "/jobs/<job_id>/resume",
    summary="Resume a PAUSED job from the latest or the named checkpoint (back to QUEUED)",
    responses=responses(200, "The job, QUEUED again", *BODY_ERRORS, 404, 409, 422),
    tags=["lifecycle"],
)
def resume_job(job_id: JobId, body: Annotated[ResumeRequest | None, Body()] = None) -> Job:
    return composition.job_service().resume(job_id, _for_job(controls, job_id), (body or ResumeRequest()).checkpoint_id)


@controls.post(
    "/jobs/<job_id>/retry",
    status_code=201,
    summary="Retry a terminal job as a child job, from the named or latest checkpoint",
    responses=responses(201, "The child job (parent_job_id set)", *BODY_ERRORS, 404, 409, 422, 503),
    tags=["lifecycle"],
)
def retry_job(job_id: JobId, body: Annotated[RetryRequest | None, Body()] = None) -> Job:
    child = composition.job_service().retry(job_id, _for_job(controls, job_id), body or RetryRequest())
    metrics.add_metric(name="JobsRetried", unit=MetricUnit.Count, value=1)
    return child


# --- what a job produced, and the dashboard ------------------------------------------------------


@reports.get(
    "/jobs/<job_id>/events",
    summary="The job's status history, oldest first",
    responses=responses(200, "Status history", 404, 422),
    tags=["reports"],
)
def job_events(job_id: JobId) -> EventList:
    return composition.job_service().events(job_id, _for_job(reports, job_id))


@reports.get(
    "/jobs/<job_id>/metrics",
    summary="The job's training metrics (metrics.jsonl)",
    description=(
        "Points in step order. `max_points` reduces a long curve to at most that many points that keep its shape "
        "(per bucket of steps, the points of lowest and highest loss, and of eval_loss; the first and last kept): "
        "a chart asks for about two per pixel. `total_points` says how many the job has."
    ),
    responses=responses(200, "Metric points", 404, 422),
    tags=["reports"],
)
def job_metrics(
    job_id: JobId,
    max_points: Annotated[int | None, Query(ge=10, le=1_000_000, description="At most this many points, the curve's shape kept")] = None,
) -> MetricsResponse:
    principal = _for_job(reports, job_id)
    reject_unknown_params(reports, METRICS_PARAMS)
    return composition.job_service().metrics(job_id, principal, max_points=max_points)


@reports.get(
    "/jobs/<job_id>/metrics/system",
    summary="What the job's GPUs did (NVML, every 10 s)",
    description=(
        "Per attempt and device (node, index), samples oldest first: utilization_pct, memory_used_mib, memory_total_mib, "
        "power_w, sm_clock_mhz (null: NVML had no reading). `available: false` (with `reason`): the trainer had no NVML "
        "(no GPU or no driver). `max_samples` (per device) averages longer series in consecutive groups."
    ),
    responses=responses(200, "GPU samples", 404, 422),
    tags=["reports"],
)
def job_system_metrics(
    job_id: JobId,
    max_samples: Annotated[int, Query(ge=10, le=100_000, description="At most this many samples per device")] = DEFAULT_MAX_SAMPLES,
) -> telemetry.SystemMetricsResponse:
    principal = _for_job(reports, job_id)
    reject_unknown_params(reports, SYSTEM_METRICS_PARAMS)
    return composition.job_service().system_metrics(job_id, principal, max_samples=max_samples)


@reports.get(
    "/jobs/<job_id>/logs",
    summary="The job's log lines, every attempt in order",
    description=(
        "`since` (epoch seconds) returns only lines stamped after it; next_token pages on. Each line says its `stream` "
        "(stdout or stderr) where the compute knows it (local runs; null on SageMaker and EC2, which merge the two); "
        "`stream` keeps only that stream's lines (a 422 where lines carry no stream)."
    ),
    responses=responses(200, "Log lines", 404, 422),
    tags=["reports"],
)
def job_logs(
    job_id: JobId,
    since: Annotated[float | None, Query(ge=0)] = None,
    next_token: Annotated[str | None, Query(max_length=512)] = None,
    limit: Annotated[int, Query(ge=1, le=5000)] = 1000,
    stream: Annotated[LogStream | None, Query(description="Only the lines of this stream")] = None,
) -> LogsResponse:
    principal = _for_job(reports, job_id)
    reject_unknown_params(reports, LOGS_PARAMS)
    return composition.job_service().logs(job_id, principal, since=since, next_token=next_token, limit=limit, stream=stream)


@reports.get(
    "/summary",
    summary="Counts of the caller's jobs by status (every job's for admins)",
    responses=responses(200, "Dashboard counts"),
    tags=["reports"],
)
def summary() -> Summary:
    return composition.job_service().summary(principal_of(reports))


@reports.get(
    "/openapi.json",
    summary="This API's OpenAPI document (generated from the code; schemas/openapi.json is a copy)",
    responses=responses(200, "The OpenAPI 3 document"),
    tags=["reports"],
)
def openapi_document() -> dict[str, Any]:
    principal_of(reports)  # any signed caller; as every route, it asks the one gate
    return json.loads(openapi_json())


@cache  # the routes and models are fixed once the module is loaded; generating it costs ~0.3 s
def openapi_json() -> str:
    """The OpenAPI document generated from the routes and models (schemas/openapi.json is a copy).

    Powertools adds its own 422 (HTTPValidationError) to every operation; our 422s have the
    ErrorResponse shape and only routes with input declare one, so its entries are dropped here:
    the document lists exactly the codes each route returns.
    """
    document = json.loads(
        app.get_openapi_json_schema(
            title=TITLE,
            version=VERSION,
            description="Serverless control plane for ML training jobs. Every request is signed with AWS SigV4 (service execute-api).",
        )
    )
    for operations in document.get("paths", {}).values():
        for operation in operations.values():
            by_code = operation.get("responses", {})
            schema = by_code.get("422", {}).get("content", {}).get("application/json", {}).get("schema", {})
            if schema.get("$ref", "").endswith("/HTTPValidationError"):
                del by_code["422"]
    schemas = document.get("components", {}).get("schemas", {})
    # Powertools' own error shapes, which this API never returns (errors.py answers with ErrorResponse).
    for unused in ("HTTPValidationError", "ResponseValidationError", "ValidationError"):
        schemas.pop(unused, None)
    return json.dumps(document)


def _count_request(resolver: APIGatewayRestResolver, next_middleware: NextMiddleware) -> Response:
    # One EMF metric per request: traffic on the dashboard, and never an empty metrics flush.
    metrics.add_metric(name="ApiRequests", unit=MetricUnit.Count, value=1)
    return next_middleware(resolver)


def _count_error(status: int) -> None:
    name = "ApiClientErrors" if status < 500 else "ApiServerErrors"
    metrics.add_metric(name=name, unit=MetricUnit.Count, value=1)


app.use(middlewares=[_count_request])
app.include_router(jobs)
app.include_router(controls)
app.include_router(reports)
app.include_router(policies.router)
app.include_router(queues.router)
app.include_router(shapes.router)
app.include_router(train.router)
app.include_router(sweeps.router)
app.include_router(deployment.router)
app.include_router(teams.router)
app.include_router(webhooks.router)
app.include_router(budgets.router)
errors.register(app, on_error=_count_error)


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST, clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return _with_cors(event, app.resolve(event, context))


def _with_cors(event: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    # API Gateway answers the preflight (OPTIONS); the actual responses, errors included, must carry
    # the origin too or a browser dashboard cannot read them. Added here, after the exception
    # handlers, so that every response gets it; only for the one configured origin.
    allowed = composition.current().settings.cors_origin
    if not allowed:
        return result
    headers = {k.lower(): v for k, v in (event.get("headers") or {}).items()}
    origin = headers.get("origin")
    if allowed != "*" and origin != allowed:
        return result
    cors = {"Access-Control-Allow-Origin": allowed if allowed == "*" else origin, "Vary": "Origin"}
    if "multiValueHeaders" in result:
        result["multiValueHeaders"].update({k: [v] for k, v in cors.items()})
    else:
        result.setdefault("headers", {}).update(cors)
    return result
