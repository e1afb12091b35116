"""/retraining-policies: a Router of the API Lambda (functions/handlers/api.py includes it).

Thin routes like the job routes: the resolver validates bodies against the pydantic models (unknown
fields, a template that is not a valid job, a mapping that points at no field, a bad cron: 422 naming
the field), one service call each, errors mapped in functions/handlers/errors.py. Another principal's
policy is 404, as for jobs.
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
    from schemas import retraining as models
else:
    models = LazyModels("schemas.retraining")  # imported on a route's first request (functions/handlers/models.py)

router = Router()
logger = Logger(service=constants.SERVICE_NAME, child=True)
PolicyId = Annotated[str, Path(min_length=1, max_length=64, description="The policy's id")]
TAGS = ["retraining"]
# The router rules (errors.py), with the job-worded error descriptions reworded for policies.
rules = ResourceRules(
    router,
    logger,
    id_key="policy_id",
    wording={
        404: "No such policy (or it belongs to another principal)",
        409: "Another request changed the policy first; reload and retry",
        413: "Too large: the policy would not fit its database record (the message says the limit)",
        503: "EventBridge Scheduler could not be reached (nothing was changed); retry later",
    },
)


@router.post(
    "/retraining-policies",
    status_code=201,
    summary="Create a retraining policy",
    description=(
        "A trigger (new S3 objects under a prefix, a cron/rate schedule, or an EventBridge event pattern), a job template "
        "(a SubmitJobRequest), an input mapping from event fields to job fields, a concurrency policy, a minimum interval "
        "and a daily cap. The whole policy is validated now, so it never fails at fire time for a reason known in advance."
    ),
    responses=rules.responses(201, "The policy, as created", *BODY_ERRORS, 422, 503),
    tags=TAGS,
)
def create_policy(body: Annotated[models.RetrainingPolicyRequest, Body()]) -> models.RetrainingPolicy:
    return composition.retraining_service().create(body, rules.principal())


@router.patch(
    "/retraining-policies/<policy_id>",
    summary="Edit a retraining policy (enable/disable, trigger, template, mapping, limits)",
    description="The edited policy is validated whole again; a schedule follows its policy.",
    responses=rules.responses(200, "The edited policy", *BODY_ERRORS, 404, 409, 422, 503),
    tags=TAGS,
)
def patch_policy(policy_id: PolicyId, body: Annotated[models.RetrainingPolicyPatch, Body()]) -> models.RetrainingPolicy:
    return composition.retraining_service().patch(policy_id, rules.principal(policy_id), body)


# The collection's own routes (a page, one policy, delete): functions/handlers/collection.py.
add_collection(
    rules,
    "/retraining-policies",
    service=composition.retraining_service,
    names=("policy", "policies"),
    models=("schemas.retraining:RetrainingPolicy", "schemas.retraining:PolicyList"),
    id_type=PolicyId,
    summaries={
        "list": "List retraining policies, newest first (every principal's for admins)",
        "get": "Get a retraining policy (with when it last fired and the job it started)",
        "delete": "Delete a retraining policy and its schedule (the jobs it started stay)",
    },
    tags=TAGS,
)
