"""/sweeps: a Router of the API Lambda (functions/handlers/api.py includes it). Never imports Optuna.

Thin routes: the body is validated against schemas/sweeps.py (OME's camelCase or snake_case; a bad
range, a log scale from 0, a step that does not divide, a grid larger than maxTrials: 422 naming the
field), the service validates the template with POST /jobs' own validation for the caller and every
target; one service call each. Another principal's sweep is 404, as for jobs.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Annotated

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query

from functions import composition, constants
from functions.handlers.errors import BODY_ERRORS, principal_of, reject_unknown_params, responses
from schemas.sweeps import Sweep, SweepAction, SweepList, SweepRequest

if TYPE_CHECKING:
    from functions.service.principal import Principal

router = Router()
logger = Logger(service=constants.SERVICE_NAME, child=True)
SweepId = Annotated[str, Path(min_length=1, max_length=64, description="The sweep's id")]
LIST_PARAMS = frozenset({"limit", "next_token"})
TAGS = ["sweeps"]

_SWEEP_ERRORS = {
    404: "No such sweep (or it belongs to another principal)",
    409: "The sweep's status does not allow this action, or another request changed it first",
    503: "The lifecycle engine could not be reached to start, pause or cancel a trial; retry later",
}


_responses = partial(responses, wording=_SWEEP_ERRORS)


def _principal(sweep_id: str | None = None) -> Principal:
    if sweep_id is not None:
        logger.append_keys(sweep_id=sweep_id)
    return principal_of(router)


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
    responses=_responses(201, "The sweep, RUNNING", *BODY_ERRORS, 422),
    tags=TAGS,
)
def create_sweep(body: Annotated[SweepRequest, Body()]) -> Sweep:
    return composition.sweep_service().create(body, _principal())


@router.get(
    "/sweeps",
    summary="List sweeps, newest first (every principal's for admins); trials are in GET /sweeps/{id}",
    responses=_responses(200, "A page of sweeps", 422),
    tags=TAGS,
)
def list_sweeps(
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    next_token: Annotated[str | None, Query(max_length=2048)] = None,
) -> SweepList:
    principal = _principal()
    reject_unknown_params(router, LIST_PARAMS)
    return composition.sweep_service().list_sweeps(principal, limit=limit, next_token=next_token)


@router.get(
    "/sweeps/<sweep_id>",
    summary="Get a sweep: status, counts, its trials (params, metric values, job status) and the best trial",
    responses=_responses(200, "The sweep", 404, 422),
    tags=TAGS,
)
def get_sweep(sweep_id: SweepId) -> Sweep:
    return composition.sweep_service().get(sweep_id, _principal(sweep_id))


@router.post(
    "/sweeps/<sweep_id>/pause",
    summary="Pause a sweep: no new trials, running trials paused with a checkpoint",
    responses=_responses(200, "The sweep, PAUSED", *BODY_ERRORS, 404, 409, 422, 503),
    tags=TAGS,
)
def pause_sweep(sweep_id: SweepId, body: Annotated[SweepAction | None, Body()] = None) -> Sweep:
    return composition.sweep_service().pause(sweep_id, _principal(sweep_id), (body or SweepAction()).reason)


@router.post(
    "/sweeps/<sweep_id>/resume",
    summary="Resume a paused sweep: its paused trials resume from their checkpoints and new trials start",
    responses=_responses(200, "The sweep, RUNNING", *BODY_ERRORS, 404, 409, 422, 503),
    tags=TAGS,
)
def resume_sweep(sweep_id: SweepId, body: Annotated[SweepAction | None, Body()] = None) -> Sweep:
    return composition.sweep_service().resume(sweep_id, _principal(sweep_id), (body or SweepAction()).reason)


@router.post(
    "/sweeps/<sweep_id>/cancel",
    summary="Cancel a sweep and every trial still running",
    responses=_responses(200, "The sweep, CANCELLED", *BODY_ERRORS, 404, 409, 422, 503),
    tags=TAGS,
)
def cancel_sweep(sweep_id: SweepId, body: Annotated[SweepAction | None, Body()] = None) -> Sweep:
    return composition.sweep_service().cancel(sweep_id, _principal(sweep_id), (body or SweepAction()).reason)


@router.delete(
    "/sweeps/<sweep_id>",
    status_code=204,
    summary="Delete a finished sweep's record (its trial jobs stay, as ordinary jobs)",
    responses=_responses(204, "Deleted", 404, 409, 422, content=False),
    tags=TAGS,
)
def delete_sweep(sweep_id: SweepId):  # no return annotation: no response model, a 204 has no body
    composition.sweep_service().delete(sweep_id, _principal(sweep_id))
    return Response(status_code=204, body="")
