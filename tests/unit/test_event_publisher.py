"""The event publisher (functions/service/event_publisher.py) and its stream handler, on fakes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from functions import composition
from functions.adapters.outbox import OUTBOX_PK
from functions.handlers.event_publisher import publish_stream_batch
from functions.service.event_publisher import EventPublisher
from schemas.events import OutboxRecord


def _record(subject: str, seq: int) -> OutboxRecord:
    return OutboxRecord(
        key=f"2026-01-01T00:00:00.{seq:06d}Z#job#{subject}#{seq:09d}",
        event_id=f"evt_{subject}_{seq}",
        detail_type="Trainplane Job State Change",
        subject_id=subject,
        sequence=seq,
        detail=f'{{"job_id": "{subject}", "sequence": {seq}}}',
    )


class ListOutbox:
    def __init__(self, records: list[OutboxRecord]) -> None:
        self.records = list(records)

    def pending(self, limit: int = 100) -> list[OutboxRecord]:
        return sorted(self.records, key=lambda r: r.key)[:limit]

    def remove(self, records: Sequence[OutboxRecord]) -> None:
        gone = {r.key for r in records}
        self.records = [r for r in self.records if r.key not in gone]


class RefusingBus:
    """Refuses the given event ids a number of times each, then accepts them."""

    def __init__(self, refusals: dict[str, int] | None = None) -> None:
        self.refusals = dict(refusals or {})
        self.calls: list[list[str]] = []
        self.accepted: list[str] = []

    def put(self, records: Sequence[OutboxRecord]) -> list[str | None]:
        assert len(records) <= 10  # PutEvents' limit
        self.calls.append([r.event_id for r in records])
        codes: list[str | None] = []
        for r in records:
            if self.refusals.get(r.event_id, 0) > 0:
                self.refusals[r.event_id] -= 1
                codes.append("InternalFailure")
            else:
                self.accepted.append(r.event_id)
                codes.append(None)
        return codes


def test_refused_entries_are_sent_again_and_only_accepted_ones_leave_the_outbox() -> None:
    # Given 23 events, two of which PutEvents refuses once and one it refuses every time
    records = [_record("a", n) for n in range(1, 24)]
    outbox = ListOutbox(records)
    bus = RefusingBus({"evt_a_3": 1, "evt_a_12": 1, "evt_a_20": 99})
    publisher = EventPublisher(bus, outbox, put_attempts=3, sleep=lambda _s: None)

    # When the outbox is drained
    result = publisher.drain()

    # Then batches are of 10 at most, the refused-once went on a retry, the always-refused one stays behind
    assert result.failed == 1 and result.sent == 22
    assert sorted(bus.accepted) == sorted(r.event_id for r in records if r.event_id != "evt_a_20")
    assert [r.event_id for r in outbox.records] == ["evt_a_20"]
    assert ["evt_a_3"] in bus.calls  # the retry sent only what was refused


def test_a_subjects_events_go_out_in_sequence_order_within_a_run() -> None:
    records = [_record("b", 2), _record("a", 1), _record("b", 1), _record("a", 2)]
    bus = RefusingBus()
    EventPublisher(bus, ListOutbox(records), sleep=lambda _s: None).publish(records)
    order = bus.accepted
    assert order.index("evt_a_1") < order.index("evt_a_2") and order.index("evt_b_1") < order.index("evt_b_2")


def _stream_record(record: OutboxRecord, stream_seq: str, *, name: str = "INSERT") -> dict[str, Any]:
    image = {
        "pk": {"S": OUTBOX_PK},
        "sk": {"S": record.key},
        "entity": {"S": "OUTBOX"},
        "event_id": {"S": record.event_id},
        "detail_type": {"S": record.detail_type},
        "subject_id": {"S": record.subject_id},
        "sequence": {"N": str(record.sequence)},
        "detail": {"S": record.detail},
    }
    return {"eventName": name, "dynamodb": {"NewImage": image, "SequenceNumber": stream_seq}}


@pytest.fixture
def publisher_with(request: pytest.FixtureRequest) -> Any:
    def configure(bus: RefusingBus, outbox: ListOutbox) -> None:
        composition.configure(event_publisher=EventPublisher(bus, outbox, put_attempts=2, sleep=lambda _s: None))

    yield configure
    composition.reset()


def test_the_stream_handler_reports_the_first_refused_record_so_the_stream_never_passes_it(publisher_with: Any) -> None:
    # Given a stream batch of three outbox inserts and a job item's change (not an event), and a bus
    # that keeps refusing the second event
    records = [_record("a", 1), _record("a", 2), _record("a", 3)]
    outbox = ListOutbox(records)
    bus = RefusingBus({"evt_a_2": 99})
    publisher_with(bus, outbox)
    batch = {"Records": [_stream_record(r, str(100 + i)) for i, r in enumerate(records)]}
    batch["Records"].append({"eventName": "MODIFY", "dynamodb": {"NewImage": {"pk": {"S": "JOB#a"}}, "SequenceNumber": "200"}})

    # When the handler runs
    answer = publish_stream_batch(batch)

    # Then Lambda is told to resend from the refused record, which stays in the outbox
    assert answer == {"batchItemFailures": [{"itemIdentifier": "101"}]}
    assert [r.event_id for r in outbox.records] == ["evt_a_2"]
