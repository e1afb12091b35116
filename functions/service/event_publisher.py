"""The event publisher: moves outbox records onto the deployment's EventBridge bus (issue 23, docs/EVENTS.md).

One code path for both drivers: the cloud's stream Lambda hands `publish` the records a DynamoDB
stream batch holds; a drain (local mode's loop, and in the cloud a scheduled sweep for what the stream
gave up on) reads the outbox itself. Either way an outbox record is removed only after PutEvents
accepted it, so a publisher that dies between the commit and PutEvents, or between PutEvents and the
removal, leaves the record to be sent by the next run: duplicates (same event_id) are possible, loss
is not. Entries PutEvents reports as failed are sent again, with backoff, within the same run.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from schemas.events import OutboxRecord

logger = logging.getLogger(__name__)

PUT_BATCH = 10  # PutEvents' limit on entries per call


class EventBus(Protocol):
    """The deployment's own bus (EventBridge PutEvents)."""

    def put(self, records: Sequence[OutboxRecord]) -> list[str | None]:
        """Put up to 10 records; for each, None when accepted, else the error code (to be sent again)."""


class Outbox(Protocol):
    """The outbox the repositories write in their transactions."""

    def pending(self, limit: int = 100) -> list[OutboxRecord]:
        """Records not yet removed, oldest first (commit time order)."""

    def remove(self, records: Sequence[OutboxRecord]) -> None:
        """Forget records the bus has accepted."""


@dataclass(frozen=True)
class DrainResult:
    sent: int
    failed: int


class EventPublisher:
    def __init__(
        self,
        bus: EventBus,
        outbox: Outbox,
        *,
        put_attempts: int = 5,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.bus = bus
        self.outbox = outbox
        self.put_attempts = put_attempts
        self._sleep = sleep

    def publish(self, records: Sequence[OutboxRecord]) -> list[OutboxRecord]:
        """Put the records on the bus, a subject's in sequence order, and remove those accepted from the
        outbox. Returns those still refused after `put_attempts` tries (they stay in the outbox)."""
        ordered = sorted(records, key=lambda r: (r.key.split("#", 1)[0], r.subject_id, r.sequence))
        failed: list[OutboxRecord] = []
        for i in range(0, len(ordered), PUT_BATCH):
            batch = ordered[i : i + PUT_BATCH]
            accepted, refused = self._put_with_retries(batch)
            if accepted:
                self.outbox.remove(accepted)
            failed.extend(refused)
        return failed

    def drain(self, *, batch: int = 100, max_rounds: int = 100) -> DrainResult:
        """Send what the outbox holds, until it is empty or only refused records remain."""
        sent = 0
        for _round in range(max_rounds):
            pending = self.outbox.pending(batch)
            if not pending:
                return DrainResult(sent, 0)
            refused = self.publish(pending)
            sent += len(pending) - len(refused)
            if refused:
                return DrainResult(sent, len(refused))
        return DrainResult(sent, 0)

    def _put_with_retries(self, batch: list[OutboxRecord]) -> tuple[list[OutboxRecord], list[OutboxRecord]]:
        accepted: list[OutboxRecord] = []
        todo = batch
        for attempt in range(self.put_attempts):
            codes = self.bus.put(todo)
            accepted.extend(r for r, code in zip(todo, codes, strict=True) if code is None)
            todo = [r for r, code in zip(todo, codes, strict=True) if code is not None]
            if not todo:
                break
            logger.warning(
                "PutEvents refused %d of %d entries (%s); sending them again", len(todo), len(batch), sorted(set(filter(None, codes)))
            )
            if attempt < self.put_attempts - 1:
                self._sleep(random.uniform(0, 0.05 * 2**attempt))
        return accepted, todo
