"""Ordered delivery per (webhook, job) (issue 23.4): a job's later events wait for its earlier ones.

The delivery worker with a recording receiver and an injected clock (no sleeping), on moto.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from functions.adapters.webhooks import DynamoWebhookRepository
from schemas.job import JobStatus
from tests.helpers.api_lambda import Api
from tests.helpers.jobs import ALICE
from tests.integration.test_webhooks import ALICE_CALLER, Clock, Receiver, call, create, publish, worker

__all__ = ["call"]  # the fixture


def states(receiver: Receiver, hook: dict[str, Any], job_id: str) -> list[tuple[int, str]]:
    """The (sequence, state) of each delivery of the job to the (test's one) webhook, in the order they were sent."""
    assert all(s.url == hook["url"] for s in receiver.sent)
    got = [json.loads(s.body)["data"] for s in receiver.sent]
    return [(d["sequence"], d["state"]) for d in got if d.get("job_id") == job_id]


def a_job_with_three_events(call: Api) -> str:
    job_id: str = call.submit(user=ALICE)["job_id"]
    call.move(job_id, JobStatus.QUEUED, JobStatus.SCHEDULING)
    publish(call)
    return job_id


def test_a_retrying_event_holds_back_the_jobs_later_ones_until_it_succeeds(call: Api) -> None:
    # Given: an ordered webhook, and a job with three events whose first the receiver refuses twice
    hook = create(call, ALICE_CALLER, ordered=True)
    assert hook["ordered"] is True
    job_id = a_job_with_three_events(call)
    other = call.submit(user=ALICE, name="another-job")["job_id"]
    publish(call)
    clock = Clock()
    receiver = Receiver(answers=[(500, None), (200, None), (500, None)])  # the job's first event, the other's, the job's retry
    work = worker(call, receiver, clock)

    # When: the first pass; then the first event's retries come due
    work.deliver_due()
    # Then: only the first event was tried; the job's later ones wait (another job's event is not held back)
    assert [seq for seq, _ in states(receiver, hook, job_id)] == [1]
    assert [seq for seq, _ in states(receiver, hook, other)] == [1]
    clock.now += timedelta(seconds=10)  # past the 5 s retry: fails again
    work.deliver_due()
    assert [seq for seq, _ in states(receiver, hook, job_id)] == [1, 1]
    clock.now += timedelta(minutes=4)  # before the 5 min retry: nothing of the job goes
    assert work.deliver_due() == 0
    clock.now += timedelta(minutes=2)  # the third attempt succeeds, and the later events go next, in order
    while work.deliver_due():
        pass
    assert [seq for seq, _ in states(receiver, hook, job_id)] == [1, 1, 1, 2, 3]
    assert work.deliver_due() == 0


def test_an_unordered_webhook_does_not_wait(call: Api) -> None:
    hook = create(call, ALICE_CALLER)
    assert hook["ordered"] is False
    job_id = a_job_with_three_events(call)
    receiver = Receiver(answers=[(500, None)])
    worker(call, receiver, Clock()).deliver_due()
    assert sorted(seq for seq, _ in states(receiver, hook, job_id)) == [1, 2, 3]


def test_a_disabled_webhook_releases_nothing(call: Api) -> None:
    # Given: an ordered webhook whose receiver fails the job's first event, and the later ones parked
    hook = create(call, ALICE_CALLER, ordered=True)
    job_id = a_job_with_three_events(call)
    clock = Clock()
    receiver = Receiver(answers=[(500, None), (410, None)])
    work = worker(call, receiver, clock)
    work.deliver_due()
    # When: the retry is answered 410 Gone: the webhook is disabled
    clock.now += timedelta(seconds=10)
    work.deliver_due()
    got = call.route("GET", "/webhooks/{webhook_id}", {"webhook_id": hook["webhook_id"]}, caller=ALICE_CALLER).body
    assert got["enabled"] is False
    # Then: the later events are never sent, however long the worker runs, and nothing is left queued
    for _ in range(4):
        clock.now += timedelta(hours=1)
        work.deliver_due()
    assert [seq for seq, _ in states(receiver, hook, job_id)] == [1, 1]
    repo = DynamoWebhookRepository(call.clients, call.settings.jobs_table)
    assert repo.due(clock.now + timedelta(days=3), 100) == []
    assert repo.first_pending(hook["webhook_id"], job_id) is None


def test_a_redelivered_earlier_event_goes_before_a_pending_later_one(call: Api) -> None:
    hook = create(call, ALICE_CALLER, ordered=True, event_types=["job.*"])
    job_id = a_job_with_three_events(call)
    clock = Clock()
    receiver = Receiver()
    work = worker(call, receiver, clock)
    work.deliver_due()
    assert [seq for seq, _ in states(receiver, hook, job_id)] == [1, 2, 3]
    first = json.loads(receiver.sent[0].body)["data"]["event_id"]
    path = {"webhook_id": hook["webhook_id"]}
    reply = call.route("POST", "/webhooks/{webhook_id}/redeliver", path, caller=ALICE_CALLER, body={"event_id": first})
    assert reply.status == 202, reply.body
    clock.now += timedelta(minutes=1)  # the route queued it at its own (real) now
    work.deliver_due()
    assert [seq for seq, _ in states(receiver, hook, job_id)] == [1, 2, 3, 1]
    assert DynamoWebhookRepository(call.clients, call.settings.jobs_table).first_pending(hook["webhook_id"], job_id) is None
