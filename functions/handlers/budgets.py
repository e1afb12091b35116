"""/budgets: a Router of the API Lambda (functions/handlers/api.py includes it); docs/BUDGETS.md.

Thin routes as everywhere: the caller through ResourceRules (errors.principal_of), one service call each,
errors mapped in functions/handlers/errors.py. Admins budget any scope; anyone else budgets only itself or
its own team, sees its own, its team's and the deployment's budgets (another's is 404) and changes only
the budgets it created (an admin's cap is 403).
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
    from schemas import budgets as models
else:
    models = LazyModels("schemas.budgets")  # imported on a route's first request (functions/handlers/models.py)

router = Router()
logger = Logger(service=constants.SERVICE_NAME, child=True)
BudgetId = Annotated[str, Path(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$", description="The budget's id")]
TAGS = ["budgets"]
rules = ResourceRules(
    router,
    logger,
    id_key="budget_id",
    wording={
        403: "Not signed, or not allowed: only admins budget another scope or change an admin's budget",
        404: "No such budget (or one the caller may not see)",
        409: "Another request (or the meter) changed the budget first; retry",
        503: "The user pool that decides a dashboard user's team (and so the team budgets they see) did not answer; retry later",
    },
    params=frozenset(),
)


@router.post(
    "/budgets",
    status_code=201,
    summary="Create a budget: a USD cap over a team, a principal, a label or the deployment, with thresholds",
    description="Thresholds default to notify at 50% and 80%, hold new jobs and pause running ones at 100%.",
    responses=rules.responses(201, "The budget, with its meter", *BODY_ERRORS, 422, 503),
    tags=TAGS,
)
def create_budget(body: Annotated[models.BudgetSpec, Body()]) -> models.BudgetView:
    return composition.budget_service().create(body, rules.principal())


@router.get(
    "/budgets",
    summary="List the budgets you may see (every budget for admins)",
    responses=rules.responses(200, "The budgets, each with its spend, reservations and what is left", 422, 503),
    tags=TAGS,
)
def list_budgets() -> models.BudgetList:
    return composition.budget_service().list_budgets(rules.principal())


@router.patch(
    "/budgets/<budget_id>",
    summary="Change a budget's amount or thresholds; raising it resumes the jobs it paused",
    responses=rules.responses(200, "The budget, as stored", *BODY_ERRORS, 404, 409, 422, 503),
    tags=TAGS,
)
def patch_budget(budget_id: BudgetId, body: Annotated[models.BudgetPatch, Body()]) -> models.BudgetView:
    return composition.budget_service().patch(budget_id, body, rules.principal(budget_id))


@router.post(
    "/budgets/<budget_id>/resume",
    summary="Let one job run over the budget, for a reason (admins): it resumes, and a budget.override event records it",
    responses=rules.responses(200, "The budget, with the job among its overrides", *BODY_ERRORS, 404, 409, 422, 503),
    tags=TAGS,
)
def override_budget(budget_id: BudgetId, body: Annotated[models.OverrideRequest, Body()]) -> models.BudgetView:
    return composition.budget_service().override(budget_id, body, rules.principal(budget_id))


add_collection(
    rules,
    "/budgets",
    service=composition.budget_service,
    names=("budget", "budgets"),
    models=("schemas.budgets:BudgetView", None),
    id_type=BudgetId,
    summaries={
        "get": "A budget: its spend this period, reservations and what is left",
        "delete": "Delete a budget (its paused jobs resume)",
    },
    tags=TAGS,
    get_errors=(404, 422, 503),
    delete_errors=(404, 422, 503),
)


@router.get(
    "/forecast-accuracy",
    summary="How far the duration forecast was from what finished jobs took, per shape",
    description=(
        "Per shape (GPU type x units / training type / model size bucket): completed jobs recorded, the median absolute % error of the "
        "forecast each was scored against before it was learned from, and the measured seconds/step and tokens/s."
    ),
    responses=rules.responses(200, "The per-shape accuracy (no job ids: aggregates only)", 422),
    tags=TAGS,
)
def forecast_accuracy() -> models.ForecastAccuracy:
    rules.principal()  # any signed caller: the figures are aggregates over shapes, no job or owner in them
    return composition.forecast_learner().accuracy()
