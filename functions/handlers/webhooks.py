"""/webhooks: a Router of the API Lambda (functions/handlers/api.py includes it); docs/EVENTS.md.

Thin routes as everywhere: the caller from errors.principal_of, one service call each, errors mapped
in functions/handlers/errors.py. A webhook is its creator's; another principal's is 404. A URL that
is not HTTPS or reaches a private address is a 422 naming `url` (functions/catalog/address_guard.py).
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
from schemas.webhooks import (
    DeliveryList,
    Redelivered,
    RedeliverRequest,
    SecretRotated,
    TestSent,
    Webhook,
    WebhookCreated,
    WebhookList,
    WebhookRequest,
)

if TYPE_CHECKING:
    from functions.service.principal import Principal

router = Router()
logger = Logger(service=constants.SERVICE_NAME, child=True)
WebhookId = Annotated[str, Path(min_length=1, max_length=64, description="The webhook's id")]
TAGS = ["webhooks"]
_responses = partial(responses, wording={404: "No such webhook (or it belongs to another principal)"})


def _principal(webhook_id: str | None = None) -> Principal:
    if webhook_id is not None:
        logger.append_keys(webhook_id=webhook_id)
    principal = principal_of(router)
    reject_unknown_params(router, frozenset({"limit"}) if router.current_event.path.endswith("/deliveries") else frozenset())
    return principal


@router.post(
    "/webhooks",
    status_code=201,
    summary="Create a webhook: signed deliveries of the events you may see (Standard Webhooks 1.0)",
    description=(
        "`event_types` are globs over the event types (`job.*`); `labels`, `job_ids` and `sweep_ids` narrow them. "
        "The answer carries the signing secret (`whsec_...`) this once."
    ),
    responses=_responses(201, "The webhook and its secret", *BODY_ERRORS, 422),
    tags=TAGS,
)
def create_webhook(body: Annotated[WebhookRequest, Body()]) -> WebhookCreated:
    return composition.webhook_service().create(body, _principal())


@router.get(
    "/webhooks", summary="List your webhooks (every principal's for admins)", responses=_responses(200, "The webhooks", 422), tags=TAGS
)
def list_webhooks() -> WebhookList:
    return composition.webhook_service().list_webhooks(_principal())


@router.get(
    "/webhooks/<webhook_id>", summary="Get a webhook (never its secret)", responses=_responses(200, "The webhook", 404, 422), tags=TAGS
)
def get_webhook(webhook_id: WebhookId) -> Webhook:
    return composition.webhook_service().get(webhook_id, _principal(webhook_id))


@router.delete(
    "/webhooks/<webhook_id>",
    status_code=204,
    summary="Delete a webhook (its queued deliveries are dropped)",
    responses=_responses(204, "Deleted", 404, 422, content=False),
    tags=TAGS,
)
def delete_webhook(webhook_id: WebhookId):  # no return annotation: a 204 has no body
    composition.webhook_service().delete(webhook_id, _principal(webhook_id))
    return Response(status_code=204, body="")


@router.get(
    "/webhooks/<webhook_id>/deliveries",
    summary="The webhook's delivery attempts of the last 30 days, newest first",
    responses=_responses(200, "Each attempt's time, outcome, status, latency and response excerpt", 404, 422),
    tags=TAGS,
)
def list_deliveries(webhook_id: WebhookId, limit: Annotated[int, Query(ge=1, le=500)] = 100) -> DeliveryList:
    return composition.webhook_service().deliveries(webhook_id, _principal(webhook_id), limit=limit)


@router.post(
    "/webhooks/<webhook_id>/test",
    status_code=202,
    summary="Queue a signed `webhook.test` delivery to this webhook",
    responses=_responses(202, "Queued; its attempts show in the deliveries", 404, 422),
    tags=TAGS,
)
def test_webhook(webhook_id: WebhookId) -> TestSent:
    return composition.webhook_service().send_test(webhook_id, _principal(webhook_id))


@router.post(
    "/webhooks/<webhook_id>/redeliver",
    status_code=202,
    summary="Send again one event, or every event of a time range, re-signed (same webhook-id, new timestamp)",
    responses=_responses(202, "The events queued again", *BODY_ERRORS, 404, 422),
    tags=TAGS,
)
def redeliver(webhook_id: WebhookId, body: Annotated[RedeliverRequest, Body()]) -> Redelivered:
    return composition.webhook_service().redeliver(webhook_id, _principal(webhook_id), body)


@router.post(
    "/webhooks/<webhook_id>/rotate-secret",
    summary="Rotate the signing secret: deliveries carry both signatures for 24 hours",
    responses=_responses(200, "The new secret (shown this once)", 404, 422),
    tags=TAGS,
)
def rotate_secret(webhook_id: WebhookId) -> SecretRotated:
    return composition.webhook_service().rotate_secret(webhook_id, _principal(webhook_id))
