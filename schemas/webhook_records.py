"""What the webhook service and its adapters keep and pass between them (not part of the API): stored secrets, held
events, queued deliveries, an attempt's answer. Apart from schemas/webhooks.py so the API Lambda's import does not
build them (its routes need only the request and response models)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from schemas.webhooks import Webhook


@dataclass(frozen=True)
class SigningSecret:
    secret: str  # whsec_<base64>
    expires_at: datetime | None = None  # None: the current one


@dataclass(frozen=True)
class StoredWebhook:
    webhook: Webhook
    secrets: tuple[SigningSecret, ...]

    def signing_secrets(self, now: datetime) -> list[str]:
        return [s.secret for s in self.secrets if s.expires_at is None or s.expires_at > now]


@dataclass(frozen=True)
class HeldEvent:
    """An event held for one webhook: the exact body every attempt (and a redelivery) sends."""

    webhook_id: str
    event_id: str
    event_type: str
    at: datetime
    order: int  # the subject's sequence: ties in the queue go in commit order
    body: str
    subject: str = ""  # an ordered webhook's job id: the job's later events wait for this one; "" for no order


@dataclass(frozen=True)
class QueuedDelivery:
    key: str  # the queue item's sort key (opaque to the service)
    webhook_id: str
    event_id: str
    attempts: int  # made so far
    due: datetime
    subject: str = ""  # HeldEvent.subject
    order: int = 0


@dataclass(frozen=True)
class PendingEvent:
    """An ordered webhook's event of one job not yet finished (queued, retrying, or parked behind an earlier one)."""

    event_id: str
    order: int
    parked: bool  # off the queue, waiting for the earlier events to finish


@dataclass(frozen=True)
class SendResult:
    """One HTTP attempt's answer (functions/adapters/webhooks.py)."""

    status: int | None  # None: no HTTP answer (refused address, timeout, connection error)
    latency_ms: int
    excerpt: str = ""
    retry_after: str | None = None
