"""/sweeps: a Router of the API Lambda (functions/handlers/api.py includes it). Never imports Optuna.

Thin routes: the body is validated against schemas/sweeps.py (OME's camelCase or snake_case; a bad
range, a log scale from 0, a step that does not divide, a grid larger than maxTrials: 422 naming the
field), the service validates the template with POST /jobs' own validation for the caller and every
target; one service call each. Another principal's sweep is 404, as for jobs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Path

from functions import composition, constants
from functions.handlers.collection import add_collection
from functions.handlers.errors import BODY_ERRORS, ResourceRules
from functions.handlers.models import LazyModels

if TYPE_CHECKING:
    from schemas import sweeps as models
else:
    models = LazyModels("schemas.sweeps")  # imported on a route's first request (functions/handlers/models.py)

router = Router()
logger = Logger(service=constants.SERVICE_NAME, child=True)
SweepId = Annotated[str, Path(min_length=1, max_length=64, description="The sweep's id")]
TAGS = ["sweeps"]
# The router rules (errors.py), with the job-worded error descriptions reworded for sweeps.
rules = ResourceRules(
    router,
    logger,
    id_key="sweep_id",
    wording={
        404: "No such sweep (or it belongs to another principal)",
        409: "The sweep's status does not allow this action, or another request changed it first",
        503: "The lifecycle engine could not be reached to start, pause or cancel a trial, or the user pool that decides a"
        " dashboard user's team did not answer; retry later",
    },
)


@router.post(
    "/sweeps",
    status_code=201,
    summary="Create a hyperparameter sweep",
    description=(
        "A job template (a SubmitJobRequest, validated as POST /jobs validates it for the caller) and OME's "
        "hyperParameterTuningConfig (camelCase, or hyperparameter_tuning_config in snake_case): method grid|random|bayes, "
        "maxTrials, metric {name, goal}, typed parameters, maxParallelTrials, seed, earlyStopping none|median|asha|hyperband, "
        "completionCriteria, maxFailedTrials. Trials are ordinary jobs of the caller labelled sweep_id and trial."
    ),
    responses=rules.responses(201, "The sweep, RUNNING", *BODY_ERRORS, 422, 503),
    tags=TAGS,
)
def create_sweep(body: Annotated[models.SweepRequest, Body()]) -> models.Sweep:
    return composition.sweep_service().create(body, rules.principal())


@router.post(
    "/sweeps/<sweep_id>/pause",
    summary="Pause a sweep: no new trials, running trials paused with a checkpoint",
    responses=rules.responses(200, "The sweep, PAUSED", *BODY_ERRORS, 404, 409, 422, 503),
    tags=TAGS,
)
def pause_sweep(sweep_id: SweepId, body: Annotated[models.SweepAction | None, Body()] = None) -> models.Sweep:
    return composition.sweep_service().pause(sweep_id, rules.principal(sweep_id), (body or models.SweepAction()).reason)


@router.post(
    "/sweeps/<sweep_id>/resume",
    summary="Resume a paused sweep: its paused trials resume from their checkpoints and new trials start",
    responses=rules.responses(200, "The sweep, RUNNING", *BODY_ERRORS, 404, 409, 422, 503),
    tags=TAGS,
)
def resume_sweep(sweep_id: SweepId, body: Annotated[models.SweepAction | None, Body()] = None) -> models.Sweep:
    return composition.sweep_service().resume(sweep_id, rules.principal(sweep_id), (body or models.SweepAction()).reason)


@router.post(
    "/sweeps/<sweep_id>/cancel",
    summary="Cancel a sweep and every trial still running",
    responses=rules.responses(200, "The sweep, CANCELLED", *BODY_ERRORS, 404, 409, 422, 503),
    tags=TAGS,
)
def cancel_sweep(sweep_id: SweepId, body: Annotated[models.SweepAction | None, Body()] = None) -> models.Sweep:
    return composition.sweep_service().cancel(sweep_id, rules.principal(sweep_id), (body or models.SweepAction()).reason)


# The collection's own routes (a page, one sweep, delete): functions/handlers/collection.py.
add_collection(
    rules,
    "/sweeps",
    service=composition.sweep_service,
    names=("sweep", "sweeps"),
    models=("schemas.sweeps:Sweep", "schemas.sweeps:SweepList"),
    id_type=SweepId,
    summaries={
        "list": "List sweeps, newest first (every principal's for admins); trials are in GET /sweeps/{id}",
        "get": "Get a sweep: status, counts, its trials (params, metric values, job status) and the best trial",
        "delete": "Delete a finished sweep's record (its trial jobs stay, as ordinary jobs)",
    },
    tags=TAGS,
)
