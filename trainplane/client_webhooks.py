"""The SDK's webhook methods, mixed into trainplane.Client and AsyncClient: /webhooks (docs/EVENTS.md).

hook = client.create_webhook({"url": "https://ci.example.com/hooks/trainplane", "event_types": ["job.*"]})
print(hook.secret)                              # whsec_...: shown this once; verify deliveries with it
client.test_webhook(hook.webhook_id)            # a signed `webhook.test` delivery
for attempt in client.webhook_deliveries(hook.webhook_id).deliveries: ...
client.redeliver_webhook(hook.webhook_id, event_id="evt_...")   # or since=..., until=...

AsyncClient has the same calls, awaited.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any
from urllib.parse import quote

from schemas.webhooks import DeliveryList, Redelivered, SecretRotated, TestSent, Webhook, WebhookCreated, WebhookList, WebhookRequest
from trainplane.transport import Steps, asynced, synced

WebhookBody = WebhookRequest | Mapping[str, Any]
COLLECTION = "/webhooks"


class WebhookOps:
    """The webhook calls, written once as steps (trainplane/transport.py)."""

    _request: Callable[..., Steps[Any]]

    def create_webhook(self, request: WebhookBody) -> Steps[WebhookCreated]:
        body = request.model_dump(mode="json", exclude_unset=True) if isinstance(request, WebhookRequest) else dict(request)
        return WebhookCreated.model_validate((yield from self._request("POST", COLLECTION, body=body)))

    def list_webhooks(self) -> Steps[list[Webhook]]:
        return WebhookList.model_validate((yield from self._request("GET", COLLECTION))).webhooks

    def get_webhook(self, webhook_id: str) -> Steps[Webhook]:
        return Webhook.model_validate((yield from self._request("GET", _path(webhook_id))))

    def delete_webhook(self, webhook_id: str) -> Steps[None]:
        yield from self._request("DELETE", _path(webhook_id))

    def test_webhook(self, webhook_id: str) -> Steps[TestSent]:
        return TestSent.model_validate((yield from self._request("POST", _path(webhook_id, "test"))))

    def webhook_deliveries(self, webhook_id: str, *, limit: int | None = None) -> Steps[DeliveryList]:
        return DeliveryList.model_validate((yield from self._request("GET", _path(webhook_id, "deliveries"), params={"limit": limit})))

    def redeliver_webhook(
        self, webhook_id: str, *, event_id: str | None = None, since: datetime | None = None, until: datetime | None = None
    ) -> Steps[Redelivered]:
        body = {
            k: (v.isoformat() if isinstance(v, datetime) else v)
            for k, v in {"event_id": event_id, "since": since, "until": until}.items()
            if v
        }
        return Redelivered.model_validate((yield from self._request("POST", _path(webhook_id, "redeliver"), body=body)))

    def rotate_webhook_secret(self, webhook_id: str) -> Steps[SecretRotated]:
        return SecretRotated.model_validate((yield from self._request("POST", _path(webhook_id, "rotate-secret"))))


class WebhookMethods:
    """The webhook calls as Client's methods."""

    create_webhook = synced(WebhookOps.create_webhook)
    list_webhooks = synced(WebhookOps.list_webhooks)
    get_webhook = synced(WebhookOps.get_webhook)
    delete_webhook = synced(WebhookOps.delete_webhook)
    test_webhook = synced(WebhookOps.test_webhook)
    webhook_deliveries = synced(WebhookOps.webhook_deliveries)
    redeliver_webhook = synced(WebhookOps.redeliver_webhook)
    rotate_webhook_secret = synced(WebhookOps.rotate_webhook_secret)


class AsyncWebhookMethods:
    """The same calls as AsyncClient's coroutines."""

    create_webhook = asynced(WebhookOps.create_webhook)
    list_webhooks = asynced(WebhookOps.list_webhooks)
    get_webhook = asynced(WebhookOps.get_webhook)
    delete_webhook = asynced(WebhookOps.delete_webhook)
    test_webhook = asynced(WebhookOps.test_webhook)
    webhook_deliveries = asynced(WebhookOps.webhook_deliveries)
    redeliver_webhook = asynced(WebhookOps.redeliver_webhook)
    rotate_webhook_secret = asynced(WebhookOps.rotate_webhook_secret)


def _path(webhook_id: str, action: str = "") -> str:
    if not webhook_id or "/" in webhook_id:
        raise ValueError(f"not a webhook id: {webhook_id!r}")
    return f"{COLLECTION}/{quote(webhook_id, safe='')}" + (f"/{action}" if action else "")
