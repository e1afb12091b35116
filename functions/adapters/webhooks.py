"""Webhooks in the jobs table, and the HTTP sender that checks the address it reaches (docs/EVENTS.md).

| Item | pk | sk | attributes |
|---|---|---|---|
| Webhook | `WEBHOOKS` | `<webhook_id>` | `entity=WEBHOOK`, `doc` (the Webhook), `secrets`, `event_seq` |
| Held event | `WEBHOOK#<id>` | `EVENT#<event_id>` | `event_type`, `at`, `order`, `body` (the signed bytes) |
| Attempt | `WEBHOOK#<id>` | `ATTEMPT#<at>#<event_id>#<n:02>` | the DeliveryAttempt |
| Queued delivery | `WEBHOOK_QUEUE` | `<due>#<order:09>#<webhook_id>#<event_id>` | `attempts`, `lease_until`, `subject`, `order` |
| Pending event (ordered webhooks) | `WEBHOOK#<id>` | `PENDING#<job_id>#<order:09>#<event_id>` | `parked` (off the queue, waiting) |

One partition for the webhooks (a deployment has tens, the fan-out reads them all per batch) and one
for the queue, ordered by due time (then the subject's sequence: a job's events queue in commit
order). The queue is DynamoDB rather than SQS because the schedule waits up to 24 h between attempts
and SQS delays stop at 15 minutes; a due item is leased by a conditional update, so two workers never
make the same attempt at once. Holding an event is conditional on it not being held yet, in the same
transaction as its first queue item: a re-published duplicate queues nothing.

An ordered webhook's event also gets a pending item in that transaction, removed with its queue item
when it leaves the queue for good; the job's earliest pending item is the one query that says whether
a later event must wait. Parking a waiting event is conditional on the earlier one's pending item still
existing, so an event is never parked behind one that has already finished (and never left stranded).
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import urllib3
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from functions import constants as c
from functions.adapters import dynamodb_items as items
from functions.adapters import outbox
from functions.adapters.aws import AwsClients
from functions.catalog import own_events as et
from functions.catalog.address_guard import AddressRefused, check_address
from schemas.events import WebhookDisabled, event_id
from schemas.webhook_records import HeldEvent, PendingEvent, QueuedDelivery, SendResult, SigningSecret, StoredWebhook
from schemas.webhooks import DeliveryAttempt, Webhook

WEBHOOKS_PK = c.WEBHOOKS_PK
QUEUE_PK = c.WEBHOOK_QUEUE_PK
ENTITY = "WEBHOOK"
KEEP_SECONDS = 30 * 24 * 3600  # held events and attempts: GET .../deliveries and redeliver look back 30 days


def _expires(at: datetime) -> dict[str, str]:
    return {"N": str(int(at.timestamp()) + KEEP_SECONDS)}


def _webhook_pk(webhook_id: str) -> str:
    return f"{c.WEBHOOK_PK_PREFIX}{webhook_id}"


def _key(pk: str, sk: str) -> dict[str, Any]:
    return {c.PK: {"S": pk}, c.SK: {"S": sk}}


def _secrets_attr(secrets: Sequence[SigningSecret]) -> dict[str, Any]:
    doc = [{"secret": s.secret, "expires_at": s.expires_at.isoformat() if s.expires_at else None} for s in secrets]
    return {"S": json.dumps(doc)}


def _stored(item: Mapping[str, Any]) -> StoredWebhook:
    secrets = tuple(
        SigningSecret(s["secret"], datetime.fromisoformat(s["expires_at"]) if s["expires_at"] else None)
        for s in json.loads(item["secrets"]["S"])
    )
    return StoredWebhook(Webhook.model_validate_json(item["doc"]["S"]), secrets)


def _queue_item(event: HeldEvent, due: datetime, attempts: int) -> dict[str, Any]:
    sk = f"{items.time_key(due)}#{event.order:09d}#{event.webhook_id}#{event.event_id}"
    return {
        **_key(QUEUE_PK, sk),
        "webhook_id": {"S": event.webhook_id},
        "event_id": {"S": event.event_id},
        "order": {"N": str(event.order)},
        "attempts": {"N": str(attempts)},
        "due": {"S": items.time_key(due)},
        "subject": {"S": event.subject},
    }


def _pending_sk(subject: str, order: int, event_id: str) -> str:
    return f"PENDING#{subject}#{order:09d}#{event_id}"


def _pending_item(event: HeldEvent) -> dict[str, Any]:
    return {
        **_key(_webhook_pk(event.webhook_id), _pending_sk(event.subject, event.order, event.event_id)),
        "event_id": {"S": event.event_id},
        "order": {"N": str(event.order)},
        "parked": {"BOOL": False},
        c.JOBS_TTL_ATTR: _expires(event.at),
    }


def _held(item: Mapping[str, Any]) -> HeldEvent:
    return HeldEvent(
        webhook_id=item["webhook_id"]["S"],
        event_id=item["event_id"]["S"],
        event_type=item["event_type"]["S"],
        at=datetime.fromisoformat(item["at"]["S"]),
        order=int(item["order"]["N"]),
        body=item["body"]["S"],
        subject=item.get("subject", {}).get("S", ""),
    )


class DynamoWebhookRepository:
    """The WebhookRepository port (functions/service/webhooks.py) on the jobs table."""

    def __init__(self, clients: AwsClients, table_name: str = c.JOBS_TABLE, *, dashboard_url: str | None = None) -> None:
        self._clients = clients
        self.table = table_name
        self.dashboard_url = dashboard_url

    @property
    def _ddb(self) -> Any:
        return self._clients.dynamodb()

    def create(self, stored: StoredWebhook) -> None:
        webhook = stored.webhook
        item = {
            **_key(WEBHOOKS_PK, webhook.webhook_id),
            "entity": {"S": ENTITY},
            "owner": {"S": webhook.owner},
            "doc": {"S": webhook.model_dump_json()},
            "secrets": _secrets_attr(stored.secrets),
        }
        self._ddb.put_item(
            TableName=self.table, Item=item, ConditionExpression="attribute_not_exists(#pk)", ExpressionAttributeNames={"#pk": c.PK}
        )

    def _item(self, webhook_id: str) -> dict[str, Any] | None:
        return self._ddb.get_item(TableName=self.table, Key=_key(WEBHOOKS_PK, webhook_id), ConsistentRead=True).get("Item")

    def find(self, webhook_id: str) -> StoredWebhook | None:
        item = self._item(webhook_id)
        return _stored(item) if item else None

    def list_webhooks(self, owner: str | None) -> list[StoredWebhook]:
        query: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "#pk = :pk",
            "ExpressionAttributeNames": {"#pk": c.PK},
            "ExpressionAttributeValues": {":pk": {"S": WEBHOOKS_PK}},
            "ConsistentRead": True,
        }
        if owner is not None:
            query["FilterExpression"] = "#owner = :owner"
            query["ExpressionAttributeNames"]["#owner"] = "owner"
            query["ExpressionAttributeValues"][":owner"] = {"S": owner}
        found: list[StoredWebhook] = []
        for page in self._ddb.get_paginator("query").paginate(**query):
            found.extend(_stored(i) for i in page.get("Items", []))
        return found

    def delete(self, webhook_id: str) -> None:
        self._ddb.delete_item(TableName=self.table, Key=_key(WEBHOOKS_PK, webhook_id))

    def set_secrets(self, webhook_id: str, secrets: Sequence[SigningSecret]) -> None:
        self._ddb.update_item(
            TableName=self.table,
            Key=_key(WEBHOOKS_PK, webhook_id),
            UpdateExpression="SET secrets = :s",
            ConditionExpression="attribute_exists(#pk)",
            ExpressionAttributeNames={"#pk": c.PK},
            ExpressionAttributeValues={":s": _secrets_attr(secrets)},
        )

    def _set_doc(self, webhook_id: str, **changes: Any) -> Webhook | None:
        stored = self.find(webhook_id)
        if stored is None:
            return None
        webhook = stored.webhook.model_copy(update=changes)
        self._ddb.update_item(
            TableName=self.table,
            Key=_key(WEBHOOKS_PK, webhook_id),
            UpdateExpression="SET doc = :d",
            ConditionExpression="attribute_exists(#pk)",
            ExpressionAttributeNames={"#pk": c.PK},
            ExpressionAttributeValues={":d": {"S": webhook.model_dump_json()}},
        )
        return webhook

    def hold(self, event: HeldEvent, due: datetime) -> bool:
        held = {
            **_key(_webhook_pk(event.webhook_id), f"EVENT#{event.event_id}"),
            "webhook_id": {"S": event.webhook_id},
            "event_id": {"S": event.event_id},
            "event_type": {"S": event.event_type},
            "at": {"S": event.at.astimezone(UTC).isoformat()},
            "at_key": {"S": items.time_key(event.at)},
            "order": {"N": str(event.order)},
            "body": {"S": event.body},
            "subject": {"S": event.subject},
            c.JOBS_TTL_ATTR: _expires(event.at),
        }
        pending = [{"Put": {"TableName": self.table, "Item": _pending_item(event)}}] if event.subject else []
        try:
            self._ddb.transact_write_items(
                TransactItems=[
                    *pending,
                    {
                        "Put": {
                            "TableName": self.table,
                            "Item": held,
                            "ConditionExpression": "attribute_not_exists(#pk)",
                            "ExpressionAttributeNames": {"#pk": c.PK},
                        }
                    },
                    {"Put": {"TableName": self.table, "Item": _queue_item(event, due, 0)}},
                ]
            )
        except self._ddb.exceptions.TransactionCanceledException as exc:
            reasons = [r.get("Code") for r in exc.response.get("CancellationReasons", [])]
            if len(reasons) > len(pending) and reasons[len(pending)] == "ConditionalCheckFailed":
                return False  # held already: a duplicate of a published event
            raise
        return True

    def requeue(self, event: HeldEvent, due: datetime) -> None:
        writes = [{"Put": {"TableName": self.table, "Item": _queue_item(event, due, 0)}}]
        if event.subject:
            writes.append({"Put": {"TableName": self.table, "Item": _pending_item(event)}})
        self._ddb.transact_write_items(TransactItems=writes)

    def held(self, webhook_id: str, event_id: str) -> HeldEvent | None:
        item = self._ddb.get_item(TableName=self.table, Key=_key(_webhook_pk(webhook_id), f"EVENT#{event_id}"), ConsistentRead=True).get(
            "Item"
        )
        return _held(item) if item else None

    def held_between(self, webhook_id: str, since: datetime, until: datetime, limit: int) -> list[HeldEvent]:
        found: list[HeldEvent] = []
        pages = self._ddb.get_paginator("query").paginate(
            TableName=self.table,
            KeyConditionExpression="#pk = :pk AND begins_with(#sk, :event)",
            FilterExpression="at_key BETWEEN :since AND :until",
            ExpressionAttributeNames={"#pk": c.PK, "#sk": c.SK},
            ExpressionAttributeValues={
                ":pk": {"S": _webhook_pk(webhook_id)},
                ":event": {"S": "EVENT#"},
                ":since": {"S": items.time_key(since)},
                ":until": {"S": items.time_key(until)},
            },
            ConsistentRead=True,
        )
        for page in pages:
            found.extend(_held(i) for i in page.get("Items", []))
        return sorted(found, key=lambda e: (e.at, e.order))[:limit]

    def due(self, now: datetime, limit: int) -> list[QueuedDelivery]:
        now_key = items.time_key(now)
        response = self._ddb.query(
            TableName=self.table,
            KeyConditionExpression="#pk = :pk AND #sk <= :now",
            ExpressionAttributeNames={"#pk": c.PK, "#sk": c.SK},
            ExpressionAttributeValues={":pk": {"S": QUEUE_PK}, ":now": {"S": now_key + "~"}},
            ConsistentRead=True,
            Limit=limit,
        )
        return [
            QueuedDelivery(
                key=i[c.SK]["S"],
                webhook_id=i["webhook_id"]["S"],
                event_id=i["event_id"]["S"],
                attempts=int(i["attempts"]["N"]),
                due=datetime.strptime(i["due"]["S"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC),
                subject=i.get("subject", {}).get("S", ""),
                order=int(i["order"]["N"]),
            )
            for i in response.get("Items", [])
            if "lease_until" not in i or i["lease_until"]["S"] <= now_key
        ]

    def lease(self, item: QueuedDelivery, now: datetime, until: datetime) -> bool:
        try:
            self._ddb.update_item(
                TableName=self.table,
                Key=_key(QUEUE_PK, item.key),
                UpdateExpression="SET lease_until = :until",
                ConditionExpression="attribute_exists(#pk) AND (attribute_not_exists(lease_until) OR lease_until <= :now)",
                ExpressionAttributeNames={"#pk": c.PK},
                ExpressionAttributeValues={":until": {"S": items.time_key(until)}, ":now": {"S": items.time_key(now)}},
            )
        except self._ddb.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def finish(self, item: QueuedDelivery, attempt: DeliveryAttempt | None, next_due: datetime | None) -> None:
        writes: list[dict[str, Any]] = [{"Delete": {"TableName": self.table, "Key": _key(QUEUE_PK, item.key)}}]
        if item.subject and not (next_due is not None and attempt is not None):  # off the queue for good
            pending = _key(_webhook_pk(item.webhook_id), _pending_sk(item.subject, item.order, item.event_id))
            writes.append({"Delete": {"TableName": self.table, "Key": pending}})
        if attempt is not None:
            sk = f"ATTEMPT#{items.time_key(attempt.at)}#{attempt.event_id}#{attempt.attempt:02d}"
            record = {
                **_key(_webhook_pk(item.webhook_id), sk),
                "doc": {"S": attempt.model_dump_json()},
                c.JOBS_TTL_ATTR: _expires(attempt.at),
            }
            writes.append({"Put": {"TableName": self.table, "Item": record}})
        if next_due is not None and attempt is not None:
            held = self.held(item.webhook_id, item.event_id)
            if held is not None:
                writes.append({"Put": {"TableName": self.table, "Item": _queue_item(held, next_due, attempt.attempt)}})
        self._ddb.transact_write_items(TransactItems=writes)

    def first_pending(self, webhook_id: str, subject: str) -> PendingEvent | None:
        found = self._ddb.query(
            TableName=self.table,
            KeyConditionExpression="#pk = :pk AND begins_with(#sk, :prefix)",
            ExpressionAttributeNames={"#pk": c.PK, "#sk": c.SK},
            ExpressionAttributeValues={":pk": {"S": _webhook_pk(webhook_id)}, ":prefix": {"S": f"PENDING#{subject}#"}},
            ConsistentRead=True,
            Limit=1,
        ).get("Items", [])
        if not found:
            return None
        return PendingEvent(found[0]["event_id"]["S"], int(found[0]["order"]["N"]), found[0]["parked"]["BOOL"])

    def park(self, item: QueuedDelivery, behind: PendingEvent) -> bool:
        pk = _webhook_pk(item.webhook_id)
        try:
            self._ddb.transact_write_items(
                TransactItems=[
                    {
                        "ConditionCheck": {
                            "TableName": self.table,
                            "Key": _key(pk, _pending_sk(item.subject, behind.order, behind.event_id)),
                            "ConditionExpression": "attribute_exists(#pk)",
                            "ExpressionAttributeNames": {"#pk": c.PK},
                        }
                    },
                    {
                        "Update": {
                            "TableName": self.table,
                            "Key": _key(pk, _pending_sk(item.subject, item.order, item.event_id)),
                            "UpdateExpression": "SET parked = :yes",
                            "ConditionExpression": "attribute_exists(#pk)",
                            "ExpressionAttributeNames": {"#pk": c.PK},
                            "ExpressionAttributeValues": {":yes": {"BOOL": True}},
                        }
                    },
                    {"Delete": {"TableName": self.table, "Key": _key(QUEUE_PK, item.key)}},
                ]
            )
        except self._ddb.exceptions.TransactionCanceledException:
            return False
        return True

    def release(self, webhook_id: str, subject: str, due: datetime) -> None:
        head = self.first_pending(webhook_id, subject)
        if head is None or not head.parked:
            return
        held = self.held(webhook_id, head.event_id)
        key = _key(_webhook_pk(webhook_id), _pending_sk(subject, head.order, head.event_id))
        if held is None:  # expired: nothing to send, and nothing more to wait for
            self._ddb.delete_item(TableName=self.table, Key=key)
            self.release(webhook_id, subject, due)
            return
        try:
            self._ddb.transact_write_items(
                TransactItems=[
                    {
                        "Update": {
                            "TableName": self.table,
                            "Key": key,
                            "UpdateExpression": "SET parked = :no",
                            "ConditionExpression": "parked = :yes",
                            "ExpressionAttributeValues": {":no": {"BOOL": False}, ":yes": {"BOOL": True}},
                        }
                    },
                    {"Put": {"TableName": self.table, "Item": _queue_item(held, due, 0)}},
                ]
            )
        except self._ddb.exceptions.TransactionCanceledException:
            return  # another worker released it

    def attempts(self, webhook_id: str, since: datetime, limit: int) -> list[DeliveryAttempt]:
        response = self._ddb.query(
            TableName=self.table,
            KeyConditionExpression="#pk = :pk AND #sk BETWEEN :since AND :end",
            ExpressionAttributeNames={"#pk": c.PK, "#sk": c.SK},
            ExpressionAttributeValues={
                ":pk": {"S": _webhook_pk(webhook_id)},
                ":since": {"S": f"ATTEMPT#{items.time_key(since)}"},
                ":end": {"S": "ATTEMPT#~"},
            },
            ScanIndexForward=False,
            ConsistentRead=True,
            Limit=limit,
        )
        return [DeliveryAttempt.model_validate_json(i["doc"]["S"]) for i in response.get("Items", [])]

    def failing(self, webhook_id: str, at: datetime) -> datetime:
        stored = self.find(webhook_id)
        if stored is None:
            return at
        if stored.webhook.failing_since is not None:
            return stored.webhook.failing_since
        self._set_doc(webhook_id, failing_since=at)
        return at

    def succeeding(self, webhook_id: str) -> None:
        self._set_doc(webhook_id, failing_since=None)

    def disable(self, webhook_id: str, reason: str, at: datetime) -> bool:
        item = self._item(webhook_id)
        if item is None:
            return False
        webhook = _stored(item).webhook
        if not webhook.enabled:
            return False
        disabled = webhook.model_copy(update={"enabled": False, "disabled_reason": reason})
        update: dict[str, Any] = {
            "TableName": self.table,
            "Key": _key(WEBHOOKS_PK, webhook_id),
            "UpdateExpression": "SET doc = :d",
            "ConditionExpression": "doc = :old",
            "ExpressionAttributeNames": {},
            "ExpressionAttributeValues": {":d": {"S": disabled.model_dump_json()}, ":old": item["doc"]},
        }
        sequence = outbox.take_sequence(update, outbox.stored_seq(item))
        detail = WebhookDisabled(
            event_id=event_id(et.SUBJECT_WEBHOOK, webhook_id, sequence),
            sequence=sequence,
            at=at,
            owner=webhook.owner,
            reason=reason,
            webhook_id=webhook_id,
            url=webhook.url,
            failing_since=webhook.failing_since,
        )
        event = outbox.outbox_item(et.WEBHOOK_DISABLED, et.SUBJECT_WEBHOOK, webhook_id, detail)
        try:
            self._ddb.transact_write_items(TransactItems=[{"Update": update}, {"Put": {"TableName": self.table, "Item": event}}])
        except self._ddb.exceptions.TransactionCanceledException:
            return False  # changed meanwhile (another worker disabled it, or it was deleted)
        return True


# --- the sender -------------------------------------------------------------------------------------


def _guarded(base: type[HTTPConnection], allow_loopback: bool) -> type[HTTPConnection]:
    class Guarded(base):  # type: ignore[valid-type, misc]
        """Checks the address the socket really reached, after DNS and before a byte is sent."""

        def _new_conn(self) -> socket.socket:
            sock = super()._new_conn()
            try:
                check_address(str(sock.getpeername()[0]), allow_loopback=allow_loopback)
            except AddressRefused:
                sock.close()
                raise
            return sock

    return Guarded


class HttpWebhookSender:
    """The WebhookSender port: one POST, no redirects, the address checked again at connect time."""

    def __init__(self, *, allow_loopback: bool = False) -> None:
        self._pool = urllib3.PoolManager(retries=False, maxsize=4)
        # The pool classes carry the connection classes: ours check the peer address after connecting.
        http = type("GuardedHTTPPool", (HTTPConnectionPool,), {"ConnectionCls": _guarded(HTTPConnection, allow_loopback)})
        https = type("GuardedHTTPSPool", (HTTPSConnectionPool,), {"ConnectionCls": _guarded(HTTPSConnection, allow_loopback)})
        self._pool.pool_classes_by_scheme = {"http": http, "https": https}

    def send(self, url: str, body: bytes, headers: Mapping[str, str], timeout: float) -> SendResult:
        started = time.monotonic()
        try:
            response = self._pool.request(
                "POST", url, body=body, headers=dict(headers), timeout=urllib3.Timeout(total=timeout), redirect=False, preload_content=False
            )
            try:
                excerpt = response.read(512, decode_content=True).decode("utf-8", "replace")
            finally:
                response.release_conn()
        except AddressRefused as exc:
            return SendResult(None, _ms(started), f"refused: {exc}")
        except urllib3.exceptions.HTTPError as exc:
            reason = exc.reason if isinstance(exc, urllib3.exceptions.MaxRetryError) else exc
            if isinstance(reason, urllib3.exceptions.NewConnectionError) and isinstance(reason.__cause__, AddressRefused):
                reason = reason.__cause__
            return SendResult(None, _ms(started), f"{type(reason).__name__}: {reason}"[:512])
        return SendResult(response.status, _ms(started), excerpt, response.headers.get("Retry-After"))


def _ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)
