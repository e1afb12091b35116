"""/webhooks: a Router of the API Lambda (functions/handlers/api.py includes it); docs/EVENTS.md.

Thin routes as everywhere: the caller from errors.principal_of, one service call each, errors mapped
in functions/handlers/errors.py. A webhook is its creator's; another principal's is 404. A URL that
is not HTTPS or reaches a private address is a 422 naming `url` (functions/catalog/address_guard.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query

from functions import composition, constants
from functions.handlers.collection import add_collection
from functions.handlers.errors import BODY_ERRORS, ResourceRules
from functions.handlers.models import LazyModels

if TYPE_CHECKING:
    from schemas import webhooks as models
else:
    models = LazyModels("schemas.webhooks")  # imported on a route's first request (functions/handlers/models.py)

router = Router()
logger = Logger(service=constants.SERVICE_NAME, child=True)
WebhookId = Annotated[str, Path(min_length=1, max_length=64, description="The webhook's id")]
TAGS = ["webhooks"]
# The router rules (errors.py): no route takes a query parameter but the deliveries' `limit`.
rules = ResourceRules(
    router, logger, id_key="webhook_id", wording={404: "No such webhook (or it belongs to another principal)"}, params=frozenset()
)


@router.post(
    "/webhooks",
    status_code=201,
    summary="Create a webhook: signed deliveries of the events you may see (Standard Webhooks 1.0)",
    description=(
        "`event_types` are globs over the event types (`job.*`); `labels`, `job_ids` and `sweep_ids` narrow them. "
        "The answer carries the signing secret (`whsec_...`) this once."
    ),
    responses=rules.responses(201, "The webhook and its secret", *BODY_ERRORS, 422),
    tags=TAGS,
)
def create_webhook(body: Annotated[models.WebhookRequest, Body()]) -> models.WebhookCreated:
    return composition.webhook_service().create(body, rules.principal())


@router.get(
    "/webhooks", summary="List your webhooks (every principal's for admins)", responses=rules.responses(200, "The webhooks", 422), tags=TAGS
)
def list_webhooks() -> models.WebhookList:
    return composition.webhook_service().list_webhooks(rules.principal())


@router.get(
    "/webhooks/<webhook_id>/deliveries",
    summary="The webhook's delivery attempts of the last 30 days, newest first",
    responses=rules.responses(200, "Each attempt's time, outcome, status, latency and response excerpt", 404, 422),
    tags=TAGS,
)
def list_deliveries(webhook_id: WebhookId, limit: Annotated[int, Query(ge=1, le=500)] = 100) -> models.DeliveryList:
    return composition.webhook_service().deliveries(webhook_id, rules.principal(webhook_id, params=frozenset({"limit"})), limit=limit)


@router.post(
    "/webhooks/<webhook_id>/test",
    status_code=202,
    summary="Queue a signed `webhook.test` delivery to this webhook",
    responses=rules.responses(202, "Queued; its attempts show in the deliveries", 404, 422),
    tags=TAGS,
)
def test_webhook(webhook_id: WebhookId) -> models.TestSent:
    return composition.webhook_service().send_test(webhook_id, rules.principal(webhook_id))


@router.post(
    "/webhooks/<webhook_id>/redeliver",
    status_code=202,
    summary="Send again one event, or every event of a time range, re-signed (same webhook-id, new timestamp)",
    responses=rules.responses(202, "The events queued again", *BODY_ERRORS, 404, 422),
    tags=TAGS,
)
def redeliver(webhook_id: WebhookId, body: Annotated[models.RedeliverRequest, Body()]) -> models.Redelivered:
    return composition.webhook_service().redeliver(webhook_id, rules.principal(webhook_id), body)


@router.post(
    "/webhooks/<webhook_id>/rotate-secret",
    summary="Rotate the signing secret: deliveries carry both signatures for 24 hours",
    responses=rules.responses(200, "The new secret (shown this once)", 404, 422),
    tags=TAGS,
)
def rotate_secret(webhook_id: WebhookId) -> models.SecretRotated:
    return composition.webhook_service().rotate_secret(webhook_id, rules.principal(webhook_id))


# The collection's own routes (one webhook, delete; the list is above, not paged): functions/handlers/collection.py.
add_collection(
    rules,
    "/webhooks",
    service=composition.webhook_service,
    names=("webhook", "webhooks"),
    models=("schemas.webhooks:Webhook", None),
    id_type=WebhookId,
    summaries={"get": "Get a webhook (never its secret)", "delete": "Delete a webhook (its queued deliveries are dropped)"},
    tags=TAGS,
    delete_errors=(404, 422),
)
