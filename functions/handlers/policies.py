"""/retraining-policies: a Router of the API Lambda (functions/handlers/api.py includes it).

Thin routes like the job routes: the resolver validates bodies against the pydantic models (unknown
fields, a template that is not a valid job, a mapping that points at no field, a bad cron: 422 naming
the field), one service call each, errors mapped in functions/handlers/errors.py. Another principal's
policy is 404, as for jobs.
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
from schemas.retraining import PolicyList, RetrainingPolicy, RetrainingPolicyPatch, RetrainingPolicyRequest

if TYPE_CHECKING:
    from functions.service.principal import Principal

router = Router()
logger = Logger(service=constants.SERVICE_NAME, child=True)
PolicyId = Annotated[str, Path(min_length=1, max_length=64, description="The policy's id")]
LIST_PARAMS = frozenset({"limit", "next_token"})
TAGS = ["retraining"]


_POLICY_ERRORS = {
    404: "No such policy (or it belongs to another principal)",
    409: "Another request changed the policy first; reload and retry",
    413: "Too large: the policy would not fit its database record (the message says the limit)",
    503: "EventBridge Scheduler could not be reached (nothing was changed); retry later",
}


# errors.responses() with the job-worded error descriptions reworded for policies
_responses = partial(responses, wording=_POLICY_ERRORS)


def _principal(policy_id: str | None = None) -> Principal:
    if policy_id is not None:
        logger.append_keys(policy_id=policy_id)
    return principal_of(router)


@router.post(
    "/retraining-policies",
    status_code=201,
    summary="Create a retraining policy",
    description=(
        "A trigger (new S3 objects under a prefix, a cron/rate schedule, or an EventBridge event pattern), a job template "
        "(a SubmitJobRequest), an input mapping from event fields to job fields, a concurrency policy, a minimum interval "
        "and a daily cap. The whole policy is validated now, so it never fails at fire time for a reason known in advance."
    ),
    responses=_responses(201, "The policy, as created", *BODY_ERRORS, 422, 503),
    tags=TAGS,
)
def create_policy(body: Annotated[RetrainingPolicyRequest, Body()]) -> RetrainingPolicy:
    return composition.retraining_service().create(body, _principal())


@router.get(
    "/retraining-policies",
    summary="List retraining policies, newest first (every principal's for admins)",
    responses=_responses(200, "A page of policies", 422),
    tags=TAGS,
)
def list_policies(
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    next_token: Annotated[str | None, Query(max_length=2048)] = None,
) -> PolicyList:
    principal = _principal()
    reject_unknown_params(router, LIST_PARAMS)
    return composition.retraining_service().list_policies(principal, limit=limit, next_token=next_token)


@router.get(
    "/retraining-policies/<policy_id>",
    summary="Get a retraining policy (with when it last fired and the job it started)",
    responses=_responses(200, "The policy", 404, 422),
    tags=TAGS,
)
def get_policy(policy_id: PolicyId) -> RetrainingPolicy:
    return composition.retraining_service().get(policy_id, _principal(policy_id))


@router.patch(
    "/retraining-policies/<policy_id>",
    summary="Edit a retraining policy (enable/disable, trigger, template, mapping, limits)",
    description="The edited policy is validated whole again; a schedule follows its policy.",
    responses=_responses(200, "The edited policy", *BODY_ERRORS, 404, 409, 422, 503),
    tags=TAGS,
)
def patch_policy(policy_id: PolicyId, body: Annotated[RetrainingPolicyPatch, Body()]) -> RetrainingPolicy:
    return composition.retraining_service().patch(policy_id, _principal(policy_id), body)


@router.delete(
    "/retraining-policies/<policy_id>",
    status_code=204,
    summary="Delete a retraining policy and its schedule (the jobs it started stay)",
    responses=_responses(204, "Deleted", 404, 409, 422, content=False),
    tags=TAGS,
)
def delete_policy(policy_id: PolicyId):  # no return annotation: no response model, a 204 has no body
    composition.retraining_service().delete(policy_id, _principal(policy_id))
    return Response(status_code=204, body="")
