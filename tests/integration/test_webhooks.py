"""Webhooks on moto (issue 23.3, 23.4, 23.6): the routes through the API Lambda, the fan-out from the
publisher, and the delivery worker with a recording sender and an injected clock (no sleeping).

Every delivery is checked with the reference verifier (PyPI `standardwebhooks`), byte for byte.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from standardwebhooks import Webhook as Verifier
from standardwebhooks.webhooks import WebhookVerificationError

from functions import composition
from functions.adapters.aws import AwsClients
from functions.adapters.outbox import DynamoOutbox
from functions.adapters.webhooks import DynamoWebhookRepository
from functions.catalog import own_events as et
from functions.handlers.webhook_delivery import fan_out
from functions.service.webhook_delivery import SCHEDULE, DeliveryWorker, Schedule
from schemas.webhook_records import SendResult
from tests.fakes import RecordingWorkflow
from tests.helpers.api_lambda import Api
from tests.helpers.aws import fresh_resources
from tests.helpers.events import Caller
from tests.helpers.jobs import ADMIN, ALICE

PUBLIC_URL = "https://93.184.215.14/hooks"  # a public address literal: nothing to resolve in tests
ALICE_CALLER = Caller("alice", ALICE)
ADMIN_CALLER = Caller("admin", ADMIN)


@dataclass
class Clock:
    now: datetime = field(default_factory=lambda: datetime.now(UTC))

    def __call__(self) -> datetime:
        return self.now


@dataclass
class Sent:
    url: str
    body: bytes
    headers: dict[str, str]


@dataclass
class Receiver:
    """A WebhookSender that records each request and answers the scripted statuses (then 200)."""

    answers: list[tuple[int | None, str | None]] = field(default_factory=list)
    sent: list[Sent] = field(default_factory=list)

    def send(self, url: str, body: bytes, headers: Mapping[str, str], timeout: float) -> SendResult:
        assert timeout == 15.0
        self.sent.append(Sent(url, body, dict(headers)))
        status, retry_after = self.answers.pop(0) if self.answers else (200, None)
        return SendResult(status, 3, "ok" if status == 200 else "nope", retry_after)


@pytest.fixture
def call(aws: AwsClients) -> Iterator[Api]:
    """The API on fresh tables, and the cloud's path of events to webhooks: the own bus, a rule sending every
    trainplane event to an SQS queue, which `publish` hands to the delivery Lambda's fan-out."""
    settings = fresh_resources(aws, admin_arns=(ADMIN,))
    events, sqs = aws.client("events"), aws.client("sqs")
    bus = settings.trainplane_bus_name
    events.create_event_bus(Name=bus)
    queue_url = sqs.create_queue(QueueName=f"webhook-fanout-{settings.jobs_table}")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    events.put_rule(Name="webhooks", EventBusName=bus, EventPattern=json.dumps({"source": [et.SOURCE]}))
    events.put_targets(Rule="webhooks", EventBusName=bus, Targets=[{"Id": "fanout", "Arn": queue_arn}])
    composition.configure(settings=settings, clients=aws, workflow=RecordingWorkflow())
    try:
        yield Api(aws, RecordingWorkflow(), settings)
    finally:
        events.remove_targets(Rule="webhooks", EventBusName=bus, Ids=["fanout"])
        events.delete_rule(Name="webhooks", EventBusName=bus)
        events.delete_event_bus(Name=bus)
        sqs.delete_queue(QueueUrl=queue_url)
        composition.reset()


def publish(call: Api) -> int:
    """The publisher drains the outbox onto the bus; the rule's queue goes through the delivery Lambda's fan-out."""
    sent = composition.current().event_publisher.drain().sent
    sqs = call.clients.client("sqs")
    queue_url = sqs.get_queue_url(QueueName=f"webhook-fanout-{call.settings.jobs_table}")["QueueUrl"]
    while messages := sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10).get("Messages", []):
        records = [{"messageId": m["MessageId"], "body": m["Body"]} for m in messages]
        assert fan_out(records) == []
        for m in messages:
            sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=m["ReceiptHandle"])
    return sent


def create(call: Api, caller: Caller, **body: Any) -> dict[str, Any]:
    reply = call.route("POST", "/webhooks", caller=caller, body={"url": PUBLIC_URL, **body})
    assert reply.status == 201, reply.body
    return reply.body  # type: ignore[no-any-return]


def worker(call: Api, receiver: Receiver, clock: Clock, schedule: Schedule = Schedule()) -> DeliveryWorker:
    repo = DynamoWebhookRepository(call.clients, call.settings.jobs_table)
    return DeliveryWorker(repo, receiver, schedule=schedule, clock=clock)


def verified(sent: Sent, secret: str) -> dict[str, Any]:
    return Verifier(secret).verify(sent.body, sent.headers)  # type: ignore[no-any-return]


def test_create_answers_the_secret_once_and_the_routes_are_the_owners(call: Api) -> None:
    created = create(call, ALICE_CALLER, event_types=["job.*"], labels={"team": "support"})
    assert created["secret"].startswith("whsec_") and created["owner"] == ALICE
    path = {"webhook_id": created["webhook_id"]}

    got = call.route("GET", "/webhooks/{webhook_id}", path, caller=ALICE_CALLER)
    assert got.status == 200 and "secret" not in got.body and got.body["event_types"] == ["job.*"]
    assert [w["webhook_id"] for w in call.route("GET", "/webhooks", caller=ALICE_CALLER).body["webhooks"]] == [created["webhook_id"]]
    assert call.route("GET", "/webhooks/{webhook_id}", path, caller=Caller("bob", "arn:aws:iam::123456789012:user/bob")).status == 404
    assert call.route("GET", "/webhooks/{webhook_id}", path, caller=ADMIN_CALLER).status == 200  # admins see every webhook

    assert call.route("DELETE", "/webhooks/{webhook_id}", path, caller=ALICE_CALLER).status == 204
    assert call.route("GET", "/webhooks/{webhook_id}", path, caller=ALICE_CALLER).status == 404


@pytest.mark.parametrize(
    "url",
    [
        "https://10.0.0.5/hook",
        "https://169.254.169.254/latest/meta-data",
        "https://127.0.0.1/hook",
        "https://[::ffff:192.168.1.1]/hook",
        "https://[fd00::1]/hook",
        "http://93.184.215.14/hook",
        "https://user:pw@93.184.215.14/hook",
        "https://[::1/hook",
        "https://" + "a" * 70 + ".example.com/hook",
        "https://93.184.215.14:99999/hook",
    ],
)
def test_a_url_that_is_not_https_to_a_public_address_is_422_naming_url(call: Api, url: str) -> None:
    reply = call.route("POST", "/webhooks", caller=ALICE_CALLER, body={"url": url})
    assert reply.status == 422, reply.body
    assert [e["field"] for e in reply.body["errors"]] == ["url"]


def test_an_event_type_glob_that_matches_nothing_is_422(call: Api) -> None:
    reply = call.route("POST", "/webhooks", caller=ALICE_CALLER, body={"url": PUBLIC_URL, "event_types": ["jobs.*"]})
    assert reply.status == 422 and reply.body["errors"][0]["field"] == "event_types"


def test_a_principals_webhook_gets_only_its_own_events_and_each_verifies(call: Api) -> None:
    # Given: Alice's webhook for job events, and the admin's for everything
    alice = create(call, ALICE_CALLER, event_types=["job.*"])
    admin = create(call, ADMIN_CALLER)
    # When: Alice and the admin each submit a job and the publisher runs
    mine = call.submit(user=ALICE)["job_id"]
    theirs = call.submit(user=ADMIN, **{"name": "admins-job"})["job_id"]
    assert publish(call) == 2
    receiver, clock = Receiver(), Clock()
    assert worker(call, receiver, clock).deliver_due() == 3

    # Then: Alice's webhook got her job's event only; the admin's got both; each verifies byte for byte
    to_alice = [verified(s, alice["secret"]) for s in receiver.sent if _for(s, alice)]
    assert [d["data"]["job_id"] for d in to_alice] == [mine]
    to_admin = [verified(s, admin["secret"]) for s in receiver.sent if _for(s, admin)]
    assert {d["data"]["job_id"] for d in to_admin} == {mine, theirs}
    for sent in receiver.sent:
        body = json.loads(sent.body)
        assert sent.headers["webhook-id"] == body["data"]["event_id"] and body["type"] == "job.status_changed"
    with pytest.raises(WebhookVerificationError):
        verified(next(s for s in receiver.sent if _for(s, admin)), alice["secret"])


def _for(sent: Sent, webhook: dict[str, Any]) -> bool:
    try:
        Verifier(webhook["secret"]).verify(sent.body, sent.headers)
    except WebhookVerificationError:
        return False
    return True


def test_a_republished_batch_queues_nothing_twice(call: Api) -> None:
    create(call, ALICE_CALLER)
    call.submit(user=ALICE)
    records = DynamoOutbox(call.clients, call.settings.jobs_table).pending()
    webhooks = composition.current().webhooks
    assert webhooks.fan_out(records) == 1
    assert webhooks.fan_out(records) == 0  # the publisher died after queueing and sends the batch again
    receiver = Receiver()
    worker(call, receiver, Clock()).deliver_due()
    assert len(receiver.sent) == 1


def test_the_schedule_over_75_hours_with_jitter_then_failed(call: Api) -> None:
    hook = create(call, ALICE_CALLER)
    call.submit(user=ALICE)
    publish(call)
    clock = Clock()
    receiver = Receiver(answers=[(500, None)] * 10)
    work = worker(call, receiver, clock)
    times = []
    for _ in range(10):
        assert work.deliver_due() == 1
        times.append(clock.now)
        assert work.deliver_due() == 0  # nothing is due before its time
        attempts = call.route("GET", "/webhooks/{webhook_id}/deliveries", {"webhook_id": hook["webhook_id"]}, caller=ALICE_CALLER).body
        latest = attempts["deliveries"][0]
        if latest["next_attempt_at"] is None:
            break
        clock.now = datetime.fromisoformat(latest["next_attempt_at"])
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(times)]
    assert len(times) == 10 and latest["outcome"] == "failed" and latest["attempt"] == 10
    for gap, base in zip(gaps, SCHEDULE[1:], strict=True):
        assert base * 0.9 <= gap <= base * 1.1  # jitter bounds
    assert 0.9 * 75.5 * 3600 <= (times[-1] - times[0]).total_seconds() <= 1.1 * 75.6 * 3600
    assert len({s.headers["webhook-id"] for s in receiver.sent}) == 1  # the same id on every attempt
    clock.now += timedelta(days=1)
    assert work.deliver_due() == 0  # given up: off the queue


def test_retry_after_is_honoured_on_503_and_429(call: Api) -> None:
    create(call, ALICE_CALLER)
    call.submit(user=ALICE)
    publish(call)
    clock = Clock()
    work = worker(call, Receiver(answers=[(503, "3600"), (429, "120")]), clock)
    start = clock.now
    work.deliver_due()
    clock.now = start + timedelta(seconds=10)  # past the schedule's 5 s, before Retry-After's hour
    assert work.deliver_due() == 0
    clock.now = start + timedelta(seconds=3601)
    assert work.deliver_due() == 1
    clock.now += timedelta(seconds=119)  # 429 asked for 120 s: the schedule's 5 min (+-10 %) is longer and wins
    assert work.deliver_due() == 0
    clock.now += timedelta(seconds=300 * 1.1)
    assert work.deliver_due() == 1


def test_410_disables_the_webhook_and_says_so_with_an_event(call: Api) -> None:
    hook = create(call, ALICE_CALLER)
    call.submit(user=ALICE)
    publish(call)
    worker(call, Receiver(answers=[(410, None)]), Clock()).deliver_due()

    got = call.route("GET", "/webhooks/{webhook_id}", {"webhook_id": hook["webhook_id"]}, caller=ALICE_CALLER).body
    assert got["enabled"] is False and "410" in got["disabled_reason"]
    pending = DynamoOutbox(call.clients, call.settings.jobs_table).pending()
    disabled = [r for r in pending if r.detail_type == et.WEBHOOK_DISABLED.detail_type]
    assert len(disabled) == 1 and json.loads(disabled[0].detail)["webhook_id"] == hook["webhook_id"]
    assert json.loads(disabled[0].detail)["owner"] == ALICE


def test_failing_for_five_days_disables_the_webhook(call: Api) -> None:
    hook = create(call, ALICE_CALLER)
    clock = Clock()
    work = worker(call, Receiver(answers=[(500, None)] * 100), clock, Schedule((0,)))  # one attempt per event
    start = clock.now
    for day in range(6):
        clock.now = start + timedelta(days=day, seconds=60)
        call.submit(user=ALICE, name=f"day-{day}")
        publish(call)
        work.deliver_due()
        enabled = call.route("GET", "/webhooks/{webhook_id}", {"webhook_id": hook["webhook_id"]}, caller=ALICE_CALLER).body["enabled"]
        assert enabled is (day < 5), day


def test_a_rotated_secret_signs_beside_the_old_one_for_24_hours(call: Api) -> None:
    hook = create(call, ALICE_CALLER)
    path = {"webhook_id": hook["webhook_id"]}
    rotated = call.route("POST", "/webhooks/{webhook_id}/rotate-secret", path, caller=ALICE_CALLER)
    assert rotated.status == 200 and rotated.body["secret"] != hook["secret"]
    sent = call.route("POST", "/webhooks/{webhook_id}/test", path, caller=ALICE_CALLER)
    assert sent.status == 202
    receiver = Receiver()
    worker(call, receiver, Clock()).deliver_due()
    (delivery,) = receiver.sent
    assert delivery.headers["webhook-id"] == sent.body["event_id"]
    assert len(delivery.headers["webhook-signature"].split(" ")) == 2
    assert verified(delivery, hook["secret"])["type"] == "webhook.test"
    assert verified(delivery, rotated.body["secret"])["type"] == "webhook.test"

    # a day later only the new secret signs
    receiver.sent.clear()
    later = Clock(datetime.now(UTC) + timedelta(hours=24, seconds=1))
    call.route("POST", "/webhooks/{webhook_id}/redeliver", path, caller=ALICE_CALLER, body={"event_id": sent.body["event_id"]})
    worker(call, receiver, later).deliver_due()
    assert len(receiver.sent) == 1 and len(receiver.sent[0].headers["webhook-signature"].split(" ")) == 1


def test_redeliver_sends_the_same_id_re_signed_and_an_unknown_event_is_422(call: Api) -> None:
    hook = create(call, ALICE_CALLER)
    path = {"webhook_id": hook["webhook_id"]}
    call.submit(user=ALICE)
    publish(call)
    receiver, clock = Receiver(), Clock()
    work = worker(call, receiver, clock)
    work.deliver_due()
    clock.now += timedelta(seconds=30)
    since = (clock.now - timedelta(hours=1)).isoformat()
    again = call.route("POST", "/webhooks/{webhook_id}/redeliver", path, caller=ALICE_CALLER, body={"since": since})
    assert again.status == 202 and len(again.body["event_ids"]) == 1
    work.deliver_due()
    first, second = receiver.sent
    assert first.headers["webhook-id"] == second.headers["webhook-id"] and first.body == second.body
    assert int(second.headers["webhook-timestamp"]) > int(first.headers["webhook-timestamp"])
    unknown = call.route("POST", "/webhooks/{webhook_id}/redeliver", path, caller=ALICE_CALLER, body={"event_id": "evt_nope"})
    assert unknown.status == 422 and unknown.body["errors"][0]["field"] == "event_id"


def test_a_leased_delivery_is_not_attempted_by_a_second_worker(call: Api) -> None:
    create(call, ALICE_CALLER)
    call.submit(user=ALICE)
    publish(call)
    repo = DynamoWebhookRepository(call.clients, call.settings.jobs_table)
    now = datetime.now(UTC)
    (item,) = repo.due(now, 10)
    assert repo.lease(item, now, now + timedelta(seconds=60))
    assert not repo.lease(item, now, now + timedelta(seconds=60))
    assert repo.due(now, 10) == []
    # a worker that died mid-attempt: the item comes due again when its lease ends
    assert [d.event_id for d in repo.due(now + timedelta(seconds=61), 10)] == [item.event_id]


def test_a_slack_webhook_gets_a_readable_message(call: Api) -> None:
    hook = create(call, ALICE_CALLER, format="slack", event_types=["job.status_changed"])
    job_id = call.submit(user=ALICE, name="slack-job")["job_id"]
    publish(call)
    receiver = Receiver()
    worker(call, receiver, Clock()).deliver_due()
    (sent,) = receiver.sent
    message = verified(sent, hook["secret"])  # signed all the same; Slack ignores the headers
    assert set(message) == {"text"} and "slack-job" in message["text"] and job_id in message["text"]
    assert message["text"] == f"*slack-job* `{job_id}`: PENDING\n> submitted"


def test_held_events_and_attempts_carry_their_30_day_expiry(call: Api) -> None:
    hook = create(call, ALICE_CALLER)
    call.submit(user=ALICE)
    publish(call)
    worker(call, Receiver(), Clock()).deliver_due()
    items = call.clients.dynamodb().query(
        TableName=call.settings.jobs_table,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": f"WEBHOOK#{hook['webhook_id']}"}},
    )["Items"]
    assert {i["sk"]["S"].split("#")[0] for i in items} == {"EVENT", "ATTEMPT"}
    for item in items:
        remaining = int(item["expires_at_epoch"]["N"]) - datetime.now(UTC).timestamp()
        assert 29 * 86400 < remaining <= 30 * 86400


def test_a_slack_burst_is_one_message_and_posts_are_a_second_apart(call: Api) -> None:
    hook = create(call, ALICE_CALLER, format="slack", event_types=["job.status_changed"])
    for n in range(3):
        call.submit(user=ALICE, name=f"burst-{n}")
    publish(call)
    receiver, clock = Receiver(), Clock(datetime.now(UTC) + timedelta(hours=1))  # every event below is due
    work = worker(call, receiver, clock)
    assert work.deliver_due() == 3
    (burst,) = receiver.sent
    text = json.loads(burst.body)["text"]  # (signed as every delivery; the clock here is an hour ahead of the verifier's)
    assert text.startswith("*3 trainplane events*: 3 PENDING") and all(f"burst-{n}" in text for n in range(3))

    # a new event (due) within the second waits; a second later it is posted, once
    call.submit(user=ALICE, name="later")
    publish(call)
    clock.now = burst_time = clock.now + timedelta(milliseconds=500)
    assert work.deliver_due() == 0
    clock.now = burst_time + timedelta(seconds=1)
    assert work.deliver_due() == 1 and len(receiver.sent) == 2 and "later" in json.loads(receiver.sent[1].body)["text"]
    assert work.deliver_due() == 0
    outcomes = call.route("GET", "/webhooks/{webhook_id}/deliveries", {"webhook_id": hook["webhook_id"]}, caller=ALICE_CALLER).body
    assert sorted(d["outcome"] for d in outcomes["deliveries"]) == ["delivered"] * 4


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"since": "2026-01-01T00:00:00", "until": "2026-01-02T00:00:00+00:00"}, None),  # no offset: UTC
        ({"since": "0001-01-01T00:00:00+23:59"}, "since"),
        ({"since": "2026-01-02T00:00:00Z", "until": "2026-01-01T00:00:00Z"}, "until"),
    ],
)
def test_redeliver_time_ranges_are_utc_and_bounded(call: Api, body: dict[str, Any], field: str | None) -> None:
    hook = create(call, ALICE_CALLER)
    reply = call.route("POST", "/webhooks/{webhook_id}/redeliver", {"webhook_id": hook["webhook_id"]}, caller=ALICE_CALLER, body=body)
    if field is None:
        assert reply.status == 202 and reply.body["event_ids"] == []
    else:
        assert reply.status == 422 and reply.body["errors"][0]["field"] == field, reply.body
