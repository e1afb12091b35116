"""Webhooks (issue 23.3-23.6, docs/EVENTS.md): who subscribes to what, and the fan-out of published events.

A webhook belongs to the principal that created it and receives only the events that principal may
see: those of its own jobs, sweeps, policies and webhooks (an event's `owner`); an admin's webhook
receives everyone's. Its filters narrow that further: `event_types` globs over the short types
(`job.*`), a label selector (every label must match) and job/sweep ids (a sweep's trials carry the
label `sweep_id`).

The fan-out is the publisher's bus wrapped (`WebhookFanoutBus`): before a batch goes onto EventBridge,
each event is held for every matching webhook and queued for delivery, idempotently (one held event
per webhook and event id). A publisher that dies after queueing and before PutEvents sends the batch
again and the queueing is a no-op; nothing published is lost to the webhooks, and nothing is queued
twice. Delivery itself is functions/service/webhook_delivery.py.
"""

from __future__ import annotations

import base64
import fnmatch
import json
import secrets as secrets_module
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from functions.catalog import own_events as et
from functions.catalog.address_guard import AddressRefused, PortResolver, check_url, resolve
from functions.errors import InvalidRequest, WebhookNotFound
from functions.service.event_publisher import EventBus
from functions.service.principal import Principal
from schemas.events import OutboxRecord
from schemas.webhook_records import HeldEvent, PendingEvent, QueuedDelivery, SigningSecret, StoredWebhook
from schemas.webhooks import (
    DeliveryAttempt,
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

SECRET_BYTES = 32  # Standard Webhooks: 24 to 64 bytes
ROTATION_OVERLAP = timedelta(hours=24)  # the previous secret keeps signing this long after a rotation
KEEP_DELIVERIES = timedelta(days=30)
MAX_REDELIVER = 1000


class WebhookRepository(Protocol):
    """Webhooks, the events held for them, their delivery queue and attempts (functions/adapters/webhooks.py)."""

    def create(self, stored: StoredWebhook) -> None: ...

    def find(self, webhook_id: str) -> StoredWebhook | None: ...

    def list_webhooks(self, owner: str | None) -> list[StoredWebhook]: ...

    def delete(self, webhook_id: str) -> None: ...

    def set_secrets(self, webhook_id: str, secrets: Sequence[SigningSecret]) -> None: ...

    def hold(self, event: HeldEvent, due: datetime) -> bool:
        """Hold the event for its webhook and queue its first attempt at `due`, unless it is held already
        (False: a re-published duplicate)."""

    def requeue(self, event: HeldEvent, due: datetime) -> None:
        """Queue the held event again (a redelivery), attempts from 0."""

    def held(self, webhook_id: str, event_id: str) -> HeldEvent | None: ...

    def held_between(self, webhook_id: str, since: datetime, until: datetime, limit: int) -> list[HeldEvent]: ...

    def due(self, now: datetime, limit: int) -> list[QueuedDelivery]:
        """Queued deliveries due at `now`, oldest due first, not leased by another worker."""

    def lease(self, item: QueuedDelivery, now: datetime, until: datetime) -> bool:
        """Take the item for one attempt (False: another worker has it); a worker that dies leaves it to
        be taken again at `until`."""

    def finish(self, item: QueuedDelivery, attempt: DeliveryAttempt | None, next_due: datetime | None) -> None:
        """Record the attempt, and either queue the next one at `next_due` or take the item off the queue."""

    def attempts(self, webhook_id: str, since: datetime, limit: int) -> list[DeliveryAttempt]:
        """The webhook's delivery attempts since `since`, newest first."""

    def failing(self, webhook_id: str, at: datetime) -> datetime:
        """Mark the webhook failing since `at` unless it already is; returns since when."""

    def succeeding(self, webhook_id: str) -> None: ...

    # An ordered webhook's events of one job (HeldEvent.subject): each is pending from its hold (or requeue)
    # until its item leaves the queue for good; a later one that comes due while an earlier one is pending
    # is parked off the queue, and released when the earlier ones have finished.

    def first_pending(self, webhook_id: str, subject: str) -> PendingEvent | None:
        """The job's earliest pending event for the webhook (lowest sequence)."""

    def park(self, item: QueuedDelivery, behind: PendingEvent) -> bool:
        """Take the item off the queue while `behind` is still pending (one transaction, conditional on
        it); False when `behind` finished meanwhile (the item stays queued)."""

    def release(self, webhook_id: str, subject: str, due: datetime) -> None:
        """Queue the job's earliest pending event at `due` if it is parked."""

    def disable(self, webhook_id: str, reason: str, at: datetime) -> bool:
        """Disable the webhook and write its `webhook.disabled` event in the same transaction; False when
        it was disabled (or deleted) already."""


def new_secret() -> str:
    return "whsec_" + base64.b64encode(secrets_module.token_bytes(SECRET_BYTES)).decode()


def payload(event_type: str, at: datetime, data: dict[str, Any]) -> str:
    """The Standard Webhooks payload: `type`, `timestamp`, `data`, as compact JSON (the signed bytes)."""
    return json.dumps({"type": event_type, "timestamp": at.astimezone(UTC).isoformat(), "data": data}, separators=(",", ":"))


def matches(webhook: Webhook, event_type: str, detail: dict[str, Any], *, sees_everything: bool) -> bool:
    """Whether an event goes to a webhook: visible to its owner, and through every one of its filters."""
    if not webhook.enabled or not (sees_everything or detail.get("owner") == webhook.owner):
        return False
    if not any(fnmatch.fnmatchcase(event_type, glob) for glob in webhook.event_types):
        return False
    labels = detail.get("labels") or {}
    if any(labels.get(k) != v for k, v in webhook.labels.items()):
        return False
    if webhook.job_ids and detail.get("job_id") not in webhook.job_ids:
        return False
    return not (webhook.sweep_ids and detail.get("sweep_id", labels.get("sweep_id")) not in webhook.sweep_ids)


class WebhookService:
    def __init__(
        self,
        repository: WebhookRepository,
        *,
        admin_arns: Sequence[str] = (),
        allow_loopback: bool = False,
        resolver: PortResolver = resolve,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        ids: Callable[[], str] = lambda: "wh-" + uuid.uuid4().hex[:20],
    ) -> None:
        self.repository = repository
        self.admin_arns = tuple(admin_arns)
        self.allow_loopback = allow_loopback
        self.resolver = resolver
        self.clock = clock
        self.ids = ids

    # --- the routes ---------------------------------------------------------------------------------

    def create(self, request: WebhookRequest, principal: Principal) -> WebhookCreated:
        self.check_url(request.url)
        for glob in request.event_types:
            if not fnmatch.filter(et.WEBHOOK_TYPES, glob):
                raise InvalidRequest("event_types", f"{glob!r} matches no event type; known: {', '.join(et.WEBHOOK_TYPES)}")
        webhook = Webhook(webhook_id=self.ids(), owner=principal.arn, created_at=self.clock(), **request.model_dump())
        secret = new_secret()
        self.repository.create(StoredWebhook(webhook, (SigningSecret(secret),)))
        return WebhookCreated(**webhook.model_dump(), secret=secret)

    def check_url(self, url: str) -> None:
        try:
            check_url(url, allow_loopback=self.allow_loopback, resolver=self.resolver)
        except AddressRefused as exc:
            raise InvalidRequest("url", str(exc)) from exc

    def list_webhooks(self, principal: Principal) -> WebhookList:
        stored = self.repository.list_webhooks(principal.owner_scope)
        return WebhookList(webhooks=sorted((s.webhook for s in stored), key=lambda w: w.created_at, reverse=True))

    def get(self, webhook_id: str, principal: Principal) -> Webhook:
        return self._visible(webhook_id, principal).webhook

    def delete(self, webhook_id: str, principal: Principal) -> None:
        self._visible(webhook_id, principal)
        self.repository.delete(webhook_id)  # its queued deliveries are dropped when they come due

    def rotate_secret(self, webhook_id: str, principal: Principal) -> SecretRotated:
        stored = self._visible(webhook_id, principal)
        now = self.clock()
        expires = now + ROTATION_OVERLAP
        kept = [
            replace(s, expires_at=expires) if s.expires_at is None else s
            for s in stored.secrets
            if s.expires_at is None or s.expires_at > now
        ]
        secret = new_secret()
        self.repository.set_secrets(webhook_id, [SigningSecret(secret), *kept])
        return SecretRotated(webhook_id=webhook_id, secret=secret, previous_expires_at=expires)

    def deliveries(self, webhook_id: str, principal: Principal, limit: int = 100) -> DeliveryList:
        self._visible(webhook_id, principal)
        return DeliveryList(deliveries=self.repository.attempts(webhook_id, self.clock() - KEEP_DELIVERIES, limit))

    def send_test(self, webhook_id: str, principal: Principal) -> TestSent:
        stored = self._visible(webhook_id, principal)
        now = self.clock()
        event_id = "evt_test_" + uuid.uuid4().hex[:20]
        data = {"webhook_id": webhook_id, "owner": stored.webhook.owner, "message": "a test delivery from trainplane"}
        held = HeldEvent(webhook_id, event_id, et.WEBHOOK_TEST_TYPE, now, 0, payload(et.WEBHOOK_TEST_TYPE, now, data))
        self.repository.hold(held, now)
        return TestSent(webhook_id=webhook_id, event_id=event_id)

    def redeliver(self, webhook_id: str, principal: Principal, request: RedeliverRequest) -> Redelivered:
        self._visible(webhook_id, principal)
        now = self.clock()
        if request.event_id is not None:
            one = self.repository.held(webhook_id, request.event_id)
            if one is None:
                raise InvalidRequest("event_id", f"no event {request.event_id} was sent to this webhook in the last 30 days")
            events = [one]
        else:
            assert request.since is not None  # the model's rule: event_id or since
            until = request.until or now
            if until <= request.since:
                raise InvalidRequest("until", "must be after since")
            events = self.repository.held_between(webhook_id, request.since, until, MAX_REDELIVER)
        for event in events:
            self.repository.requeue(event, now)
        return Redelivered(webhook_id=webhook_id, event_ids=[e.event_id for e in events])

    def _visible(self, webhook_id: str, principal: Principal) -> StoredWebhook:
        stored = self.repository.find(webhook_id)
        if stored is None or not (principal.is_admin or stored.webhook.owner == principal.arn):
            raise WebhookNotFound(webhook_id)
        return stored

    # --- the fan-out ----------------------------------------------------------------------------------

    def fan_out(self, records: Sequence[OutboxRecord]) -> int:
        """Hold and queue each record for every webhook it goes to; returns how many were newly queued."""
        if not records:
            return 0
        webhooks = [s.webhook for s in self.repository.list_webhooks(None) if s.webhook.enabled]
        if not webhooks:
            return 0
        admins = {w.owner: Principal.from_arn(w.owner, self.admin_arns).is_admin for w in webhooks}
        queued = 0
        for record in records:
            kind = et.BY_DETAIL_TYPE.get(record.detail_type)
            if kind is None:
                continue
            detail = json.loads(record.detail)
            at = datetime.fromisoformat(detail["at"])
            for webhook in webhooks:
                if matches(webhook, kind.type, detail, sees_everything=admins[webhook.owner]):
                    subject = str(detail.get("job_id") or "") if webhook.ordered else ""
                    body = payload(kind.type, at, detail)
                    held = HeldEvent(webhook.webhook_id, record.event_id, kind.type, at, record.sequence, body, subject)
                    # first attempt due at the commit time: the queue then holds a job's events in commit order
                    queued += self.repository.hold(held, at)
        return queued


class WebhookFanoutBus:
    """The publisher's EventBus, wrapped: a batch is queued for the webhooks before it goes on the bus."""

    def __init__(self, bus: EventBus, webhooks: WebhookService) -> None:
        self.bus = bus
        self.webhooks = webhooks

    def put(self, records: Sequence[OutboxRecord]) -> list[str | None]:
        self.webhooks.fan_out(records)
        return self.bus.put(records)
