"""Webhook delivery (issue 23.3-23.4): signed attempts on a schedule that outlives failures.

Signing is Standard Webhooks 1.0, by its reference implementation (the PyPI `standardwebhooks`):
`webhook-id` is the event id (the same on every attempt and redelivery, so receivers drop duplicates),
`webhook-timestamp` the attempt's time, `webhook-signature` one `v1,<base64 HMAC-SHA256>` per secret
still valid (two for 24 hours after a rotation), space-separated.

The schedule: attempts at once, then 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 14 h, 20 h and 24 h after the
previous one (10 attempts over ~75 h), each delay jittered by +-10 %. A 2xx is success. 429 and 503
with `Retry-After` wait at least that long (at most 24 h). 410 Gone disables the webhook at once; a
webhook whose deliveries have all failed for 5 days is disabled too, and either way a
`Trainplane Webhook Disabled` event says so. Each attempt has 15 s in all.

The queue is the repository's (DynamoDB items, durable in the cloud and, through local mode's journal,
across a `kill -9` of `trainplane up`); a worker leases an item for one attempt, so a worker that dies
mid-attempt leaves it to be tried again (a duplicate with the same webhook-id, never a loss).
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Protocol

from standardwebhooks import Webhook as Signer

from functions.service import webhook_slack as slack
from functions.service.webhooks import WebhookRepository
from schemas.webhook_records import HeldEvent, QueuedDelivery, SendResult, StoredWebhook
from schemas.webhooks import DeliveryAttempt, DeliveryOutcome

logger = logging.getLogger(__name__)

# Seconds before each attempt after the previous one (the first: at once).
SCHEDULE: tuple[float, ...] = (0, 5, 5 * 60, 30 * 60, 2 * 3600, 5 * 3600, 10 * 3600, 14 * 3600, 20 * 3600, 24 * 3600)
JITTER = 0.10
MAX_RETRY_AFTER = timedelta(hours=24)
DISABLE_AFTER = timedelta(days=5)
TIMEOUT_SECONDS = 15.0
LEASE = timedelta(seconds=60)  # > TIMEOUT_SECONDS: a live worker's attempt ends before its lease does
EXCERPT = 512
RETRY_AFTER_STATUSES = frozenset({429, 503})


class WebhookSender(Protocol):
    """POSTs one delivery (functions/adapters/webhooks.py: connect-time address check, 15 s timeout)."""

    def send(self, url: str, body: bytes, headers: Mapping[str, str], timeout: float) -> SendResult: ...


@dataclass(frozen=True)
class Schedule:
    delays: tuple[float, ...] = SCHEDULE
    jitter: float = JITTER

    @property
    def attempts(self) -> int:
        return len(self.delays)

    def delay_after(self, attempts_made: int, rng: random.Random) -> timedelta | None:
        """How long to wait after `attempts_made` attempts failed; None when none is left."""
        if attempts_made >= len(self.delays):
            return None
        base = self.delays[attempts_made]
        return timedelta(seconds=base * rng.uniform(1 - self.jitter, 1 + self.jitter))


def signature_headers(event_id: str, at: datetime, body: str, secrets: Sequence[str]) -> dict[str, str]:
    """The Standard Webhooks headers of one attempt: a `v1,` signature for each valid secret."""
    signatures = " ".join(Signer(secret).sign(event_id, at, body) for secret in secrets)
    return {
        "webhook-id": event_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": signatures,
        "content-type": "application/json",
        "user-agent": "trainplane-webhooks/1",
    }


def retry_after(value: str | None, now: datetime) -> timedelta | None:
    """Retry-After as seconds or an HTTP date; None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return min(timedelta(seconds=int(value)), MAX_RETRY_AFTER)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return min(max(when - now, timedelta(0)), MAX_RETRY_AFTER)


def render(stored: StoredWebhook, events: Sequence[HeldEvent]) -> str:
    """The body a webhook receives: the Standard Webhooks payload of its one event, or a Slack message
    (format `slack`) for one event or a burst."""
    return slack.message(events) if stored.webhook.format == "slack" else events[0].body


class DeliveryWorker:
    def __init__(
        self,
        repository: WebhookRepository,
        sender: WebhookSender,
        *,
        render: Callable[[StoredWebhook, Sequence[HeldEvent]], str] = render,
        schedule: Schedule = Schedule(),
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        rng: random.Random | None = None,
    ) -> None:
        self.repository = repository
        self.sender = sender
        self.render = render
        self.schedule = schedule
        self.clock = clock
        self.rng = rng or random.Random()
        self._posted: dict[str, datetime] = {}  # a Slack webhook's last post (this worker's)

    def deliver_due(self, limit: int = 50) -> int:
        """Make one attempt of each delivery due now (oldest first); a Slack webhook's due deliveries go
        as one message, at most one per second. Returns how many deliveries were attempted."""
        attempted = 0
        webhooks: dict[str, StoredWebhook | None] = {}
        slack_due: dict[str, list[QueuedDelivery]] = {}
        for item in self.repository.due(self.clock(), limit):
            if item.webhook_id not in webhooks:
                webhooks[item.webhook_id] = self.repository.find(item.webhook_id)
            stored = webhooks[item.webhook_id]
            if stored is not None and stored.webhook.enabled and item.subject and self._waits(item):
                continue  # an ordered webhook's later event: parked until the job's earlier ones finish
            if stored is not None and stored.webhook.format == "slack":
                slack_due.setdefault(item.webhook_id, []).append(item)
                continue
            attempted += self._attempt(self._leased([item]), stored)
        for webhook_id, items in slack_due.items():
            last = self._posted.get(webhook_id)
            if last is not None and self.clock() - last < slack.MIN_INTERVAL:
                continue  # due again on the next pass, a second after the last post
            attempted += self._attempt(self._leased(items), webhooks[webhook_id])
        return attempted

    def _waits(self, item: QueuedDelivery) -> bool:
        """Whether an earlier event of the item's job is still pending for its (ordered) webhook; if so the
        item is parked off the queue, to be released when that one finishes."""
        head = self.repository.first_pending(item.webhook_id, item.subject)
        if head is None or head.event_id == item.event_id or head.order >= item.order:
            return False
        return self.repository.park(item, head)  # False: the earlier one just finished, so this one goes now

    def _finish(self, item: QueuedDelivery, attempt: DeliveryAttempt | None, next_due: datetime | None) -> None:
        self.repository.finish(item, attempt, next_due)
        if item.subject and next_due is None:  # off the queue for good: the job's next event may go
            self.repository.release(item.webhook_id, item.subject, self.clock())

    def _leased(self, items: Sequence[QueuedDelivery]) -> list[QueuedDelivery]:
        now = self.clock()
        return [i for i in items if self.repository.lease(i, now, now + LEASE)]  # others: another worker has them

    def _attempt(self, items: Sequence[QueuedDelivery], stored: StoredWebhook | None) -> int:
        """One POST for the items (one, or a Slack webhook's burst); each finished with its outcome."""
        pairs: list[tuple[QueuedDelivery, HeldEvent]] = []
        for item in items:
            held = self.repository.held(item.webhook_id, item.event_id)
            if stored is None or held is None or not stored.webhook.enabled:
                self._finish(item, None, None)  # deleted or disabled since: nothing to send
                continue
            pairs.append((item, held))
        if not pairs or stored is None:
            return 0
        started = self.clock()
        events = [held for _, held in pairs]
        body = self.render(stored, events)
        headers = signature_headers(slack.message_id(events), started, body, stored.signing_secrets(started))
        try:
            result = self.sender.send(stored.webhook.url, body.encode(), headers, TIMEOUT_SECONDS)
        except Exception as exc:  # a sender's bug must not stall the queue: a failed attempt, retried on schedule
            logger.exception("webhook sender failed", extra={"webhook_id": stored.webhook.webhook_id})
            result = SendResult(None, 0, f"{type(exc).__name__}: {exc}")
        if stored.webhook.format == "slack":
            self._posted[stored.webhook.webhook_id] = started
        for item, held in pairs:
            self._record(item, stored, held, result, started)
        return len(pairs)

    def _record(self, item: QueuedDelivery, stored: StoredWebhook, held: HeldEvent, result: SendResult, at: datetime) -> None:
        number = item.attempts + 1
        status = result.status
        next_due: datetime | None = None
        outcome: DeliveryOutcome
        webhook_id = stored.webhook.webhook_id
        if status is not None and 200 <= status < 300:
            outcome = "delivered"
            if stored.webhook.failing_since is not None:
                self.repository.succeeding(webhook_id)
        elif status == 410:
            outcome = "gone"
            self.repository.disable(webhook_id, "the receiver answered 410 Gone", at)
        else:
            failing_since = self.repository.failing(webhook_id, at)
            delay = self.schedule.delay_after(number, self.rng)
            waited = retry_after(result.retry_after, at) if status in RETRY_AFTER_STATUSES else None
            if waited is not None and delay is not None:
                delay = max(delay, waited)
            if at - failing_since >= DISABLE_AFTER:
                outcome = "failed"
                self.repository.disable(webhook_id, f"every delivery failed since {failing_since.isoformat()} (5 days)", at)
            elif delay is None:
                outcome = "failed"
            else:
                outcome = "retrying"
                next_due = at + delay
        record = DeliveryAttempt(
            event_id=held.event_id,
            event_type=held.event_type,
            attempt=number,
            at=at,
            outcome=outcome,
            status_code=status,
            latency_ms=result.latency_ms,
            response=result.excerpt[:EXCERPT],
            next_attempt_at=next_due,
        )
        logger.info("webhook attempt", extra={"webhook_id": webhook_id, **json.loads(record.model_dump_json(exclude={"response"}))})
        self._finish(item, record, next_due)
