"""Retraining policies in the jobs table (single-table design, TABLE_DESIGN.md), Query only, never Scan.

- Policy: pk `POLICY#<id>`, sk `META`; by-owner GSI `gsi1pk=POLICYOWNER#<owner>` (its own prefix: a
  principal's jobs and policies never share a listing), `gsi1sk=<created>#<id>`; by-created GSI
  `gsi2pk=POLICIES`, `gsi2sk=<created>#<id>` (admins, and local mode's schedule re-sync).
- Route: pk `ROUTE#s3#<bucket>` or `ROUTE#event#<source>`, sk `POLICY#<id>`; `policy_id`, `owner`, `match`.
- Event decision: pk `POLICY#<id>`, sk `EVENT#<event id>`; `state` (claimed, done), `outcome`, `job_id`,
  `at`, `expires_at` (epoch seconds, for a TTL on the table).

Writes that decide something are conditional:
- create / update / delete: the policy item (conditional on `version`) and its route items in ONE transaction.
- claim_fire: the event's decision item (must not exist: the same event twice starts one job) and the
  policy's fire bookkeeping (conditional on `enabled`, on `version` - the configuration the decision was
  made on - and on `last_fired_at` - no other fire since: the minimum interval, the daily cap and the
  skip check were all evaluated against it) in ONE transaction.
Fire bookkeeping never bumps `version`, so a PATCH never loses to a schedule firing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any, Literal

from functions import constants as c
from functions.adapters import dynamodb_items as items
from functions.adapters import outbox
from functions.adapters.aws import AwsClients
from functions.adapters.dynamodb_batch import delete_keys
from functions.catalog import own_events as et
from functions.errors import InvalidRequest, PolicyConflict, PolicyNotFound, TooLarge
from functions.service.feature_ports import EventRecord, FireClaim, Route
from schemas.configs import STORED
from schemas.events import PolicyState
from schemas.retraining import FireOutcome, RetrainingPolicy

POLICY_PREFIX = "POLICY#"
ROUTE_PREFIX = "ROUTE#"
EVENT_PREFIX = "EVENT#"
OWNER_PREFIX = "POLICYOWNER#"
ALL_POLICIES = "POLICIES"
# Decisions are kept this long (epoch seconds in `expires_at`, for a TTL on the table): longer than
# EventBridge's and EventBridge Scheduler's 24 h of retries, so a late redelivery is still a duplicate.
DECISION_TTL_SECONDS = 3 * 24 * 3600
# Configuration fields a PATCH may change; everything else is identity or fire bookkeeping.
CONFIG_FIELDS = (
    "description",
    "trigger",
    "job_template",
    "input_mapping",
    "concurrency_policy",
    "min_interval_seconds",
    "daily_cap",
    "enabled",
)
_ATTEMPTS = 6


def _utcnow() -> datetime:
    return datetime.now(UTC)


class DynamoPolicyRepository:
    def __init__(self, clients: AwsClients, table_name: str = c.JOBS_TABLE, *, clock: Callable[[], datetime] = _utcnow) -> None:
        self._clients = clients
        self.table = table_name
        self._clock = clock

    @property
    def _ddb(self) -> Any:
        return self._clients.dynamodb()

    # --- policies --------------------------------------------------------------------------------

    def create(self, policy: RetrainingPolicy, routes: list[Route]) -> None:
        item = policy_item(policy)
        _check_size(item)
        item[outbox.SEQ_ATTR] = {"N": "1"}
        writes = [
            {
                "Put": {
                    "TableName": self.table,
                    "Item": item,
                    "ConditionExpression": "attribute_not_exists(#pk)",
                    "ExpressionAttributeNames": {"#pk": c.PK},
                }
            },
            *({"Put": {"TableName": self.table, "Item": route_item(r)}} for r in routes),
            self._event_put(policy, None, outbox.policy_state(policy), 1),
        ]
        if self._transact(writes) is not None:
            raise PolicyConflict(policy.policy_id, "a policy with this id already exists")

    def get(self, policy_id: str) -> RetrainingPolicy:
        item = self._ddb.get_item(TableName=self.table, Key=_meta_key(policy_id), ConsistentRead=True).get("Item")
        if item is None:
            raise PolicyNotFound(policy_id)
        return policy_from_item(item)

    def list_policies(self, owner: str | None, limit: int, next_token: str | None) -> tuple[list[RetrainingPolicy], str | None]:
        if not 1 <= limit <= 1000:
            raise InvalidRequest("limit", "must be between 1 and 1000")
        index, pk_attr, sk_attr, pk_value = _listing(owner)
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "IndexName": index,
            "KeyConditionExpression": "#ipk = :ipk",
            "ExpressionAttributeNames": {"#ipk": pk_attr},
            "ExpressionAttributeValues": {":ipk": {"S": pk_value}},
            "ScanIndexForward": False,
            "Limit": limit,
        }
        if next_token:
            kwargs["ExclusiveStartKey"] = items.decode_key_token(next_token, pk_attr, sk_attr, pk_value)
        page = self._ddb.query(**kwargs)
        last = page.get("LastEvaluatedKey")
        return [policy_from_item(r) for r in page.get("Items", [])], items.encode_key_token(last) if last else None

    def all_policies(self) -> Iterator[RetrainingPolicy]:
        index, pk_attr, _, pk_value = _listing(None)
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "IndexName": index,
            "KeyConditionExpression": "#ipk = :ipk",
            "ExpressionAttributeNames": {"#ipk": pk_attr},
            "ExpressionAttributeValues": {":ipk": {"S": pk_value}},
        }
        while True:
            page = self._ddb.query(**kwargs)
            for row in page.get("Items", []):
                yield policy_from_item(row)
            if "LastEvaluatedKey" not in page:
                return
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def update(self, policy: RetrainingPolicy, expected_version: int, old_routes: list[Route], new_routes: list[Route]) -> RetrainingPolicy:
        _check_size(policy_item(policy))
        doc = policy_document(policy)
        sets, removes, names, values = [], [], {"#version": "version"}, {":expected": {"N": str(expected_version)}}
        for i, name in enumerate((*CONFIG_FIELDS, "version", "updated_at")):
            names[f"#f{i}"] = name
            if name in doc:
                sets.append(f"#f{i} = :f{i}")
                values[f":f{i}"] = _attr(doc[name])
            else:
                removes.append(f"#f{i}")
        # A change of state (enabled <-> disabled) numbers an event: the version guards the sequence, since
        # every write that numbers one also bumps the version.
        stored = self._ddb.get_item(TableName=self.table, Key=_meta_key(policy.policy_id), ConsistentRead=True).get("Item")
        event: list[dict[str, Any]] = []
        if stored is not None and int(stored["version"]["N"]) == expected_version:
            before, after = outbox.policy_state(policy_from_item(stored)), outbox.policy_state(policy)
            if before != after:
                seq = outbox.stored_seq(stored) + 1
                sets.append("#eseq = :eseq")
                names["#eseq"] = outbox.SEQ_ATTR
                values[":eseq"] = {"N": str(seq)}
                event.append(self._event_put(policy, before, after, seq))
        expression = "SET " + ", ".join(sets) + (" REMOVE " + ", ".join(removes) if removes else "")
        new_keys = {r.key for r in new_routes}
        writes = [
            {
                "Update": {
                    "TableName": self.table,
                    "Key": _meta_key(policy.policy_id),
                    "UpdateExpression": expression,
                    "ConditionExpression": "#version = :expected",
                    "ExpressionAttributeNames": names,
                    "ExpressionAttributeValues": values,
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            },
            # A transaction may not touch one item twice: a route that stays is only re-put.
            *({"Delete": {"TableName": self.table, "Key": _route_key(r)}} for r in old_routes if r.key not in new_keys),
            *({"Put": {"TableName": self.table, "Item": route_item(r)}} for r in new_routes),
            *event,
        ]
        reasons = self._transact(writes)
        if reasons is not None:
            if reasons[0].get("Item") is None:
                raise PolicyNotFound(policy.policy_id)
            raise PolicyConflict(policy.policy_id, "changed while being edited")
        return self.get(policy.policy_id)

    def delete(self, policy_id: str, expected_version: int, routes: list[Route]) -> None:
        stored = self._ddb.get_item(TableName=self.table, Key=_meta_key(policy_id), ConsistentRead=True).get("Item")
        event: list[dict[str, Any]] = []
        if stored is not None and int(stored["version"]["N"]) == expected_version:
            policy = policy_from_item(stored)
            event.append(self._event_put(policy, outbox.policy_state(policy), "DELETED", outbox.stored_seq(stored) + 1))
        writes = [
            {
                "Delete": {
                    "TableName": self.table,
                    "Key": _meta_key(policy_id),
                    "ConditionExpression": "#version = :v",
                    "ExpressionAttributeNames": {"#version": "version"},
                    "ExpressionAttributeValues": {":v": {"N": str(expected_version)}},
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            },
            *({"Delete": {"TableName": self.table, "Key": _route_key(r)}} for r in routes),
            *event,
        ]
        reasons = self._transact(writes)
        if reasons is not None:
            if reasons[0].get("Item") is None:
                raise PolicyNotFound(policy_id)
            raise PolicyConflict(policy_id, "changed while being deleted")
        # The decisions follow; if we die in between they are unreachable (no policy item) and harmless.
        rest = self._query_all(
            KeyConditionExpression="#pk = :pk",
            ExpressionAttributeNames={"#pk": c.PK, "#sk": c.SK},
            ExpressionAttributeValues={":pk": {"S": POLICY_PREFIX + policy_id}},
            ProjectionExpression="#pk, #sk",
        )
        self._batch_delete([{c.PK: r[c.PK], c.SK: r[c.SK]} for r in rest])

    def routes(self, key: str) -> list[Route]:
        rows = self._query_all(
            KeyConditionExpression="#pk = :pk",
            ExpressionAttributeNames={"#pk": c.PK},
            ExpressionAttributeValues={":pk": {"S": ROUTE_PREFIX + key}},
            ConsistentRead=True,
        )
        return [route_from_item(r) for r in rows]

    # --- decisions -------------------------------------------------------------------------------

    def event_record(self, policy_id: str, event_id: str) -> EventRecord | None:
        item = self._ddb.get_item(TableName=self.table, Key=_event_key(policy_id, event_id), ConsistentRead=True).get("Item")
        return None if item is None else _event_record(policy_id, event_id, items.from_item(item))

    def claim_fire(self, policy_id: str, claim: FireClaim) -> Literal["claimed", "duplicate", "changed"]:
        at = items.time_key(claim.at)
        names = {
            "#pk": c.PK,
            "#enabled": "enabled",
            "#version": "version",
            "#last": "last_fired_at",
            "#event": "last_event_id",
            "#day": "fired_day",
            "#today": "fired_today",
        }
        values: dict[str, Any] = {
            ":true": {"BOOL": True},
            ":v": {"N": str(claim.seen_version)},
            ":at": {"S": at},
            ":event": {"S": claim.event_id},
            ":day": {"S": claim.fired_day},
            ":today": {"N": str(claim.fired_today)},
        }
        condition = "attribute_exists(#pk) AND #enabled = :true AND #version = :v AND "
        if claim.seen_last_fired_at is None:
            condition += "attribute_not_exists(#last)"
        else:
            condition += "#last = :seen"
            values[":seen"] = {"S": items.time_key(claim.seen_last_fired_at)}
        writes = [
            {
                "Put": {
                    "TableName": self.table,
                    "Item": _event_item(policy_id, claim.event_id, state="claimed", outcome="started", at=claim.at),
                    "ConditionExpression": "attribute_not_exists(#pk)",
                    "ExpressionAttributeNames": {"#pk": c.PK},
                }
            },
            {
                "Update": {
                    "TableName": self.table,
                    "Key": _meta_key(policy_id),
                    "UpdateExpression": "SET #last = :at, #event = :event, #day = :day, #today = :today",
                    "ConditionExpression": condition,
                    "ExpressionAttributeNames": names,
                    "ExpressionAttributeValues": values,
                }
            },
        ]
        reasons = self._transact(writes)
        if reasons is None:
            return "claimed"
        return "duplicate" if reasons[0].get("Code") == "ConditionalCheckFailed" else "changed"

    def complete_fire(self, policy_id: str, event_id: str, job_id: str) -> bool:
        self._ddb.update_item(
            TableName=self.table,
            Key=_event_key(policy_id, event_id),
            UpdateExpression="SET #state = :done, #job = :job",
            ExpressionAttributeNames={"#state": "state", "#job": "job_id"},
            ExpressionAttributeValues={":done": {"S": "done"}, ":job": {"S": job_id}},
        )
        # The newest fire names the policy's last job; an older fire finishing late does not.
        try:
            self._ddb.update_item(
                TableName=self.table,
                Key=_meta_key(policy_id),
                UpdateExpression="SET #job = :job",
                ConditionExpression="#event = :event",
                ExpressionAttributeNames={"#job": "last_job_id", "#event": "last_event_id"},
                ExpressionAttributeValues={":job": {"S": job_id}, ":event": {"S": event_id}},
            )
        except self._ddb.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def take_over(self, policy_id: str, event_id: str, seen_at: datetime, now: datetime) -> bool:
        try:
            self._ddb.update_item(
                TableName=self.table,
                Key=_event_key(policy_id, event_id),
                UpdateExpression="SET #at = :now",
                ConditionExpression="#state = :claimed AND #at = :seen",
                ExpressionAttributeNames={"#state": "state", "#at": "at"},
                ExpressionAttributeValues={
                    ":claimed": {"S": "claimed"},
                    ":seen": {"S": items.time_key(seen_at)},
                    ":now": {"S": items.time_key(now)},
                },
            )
        except self._ddb.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def record_decision(self, policy_id: str, event_id: str, outcome: FireOutcome, at: datetime, detail: str = "") -> bool:
        try:
            self._ddb.put_item(
                TableName=self.table,
                Item=_event_item(policy_id, event_id, state="done", outcome=outcome, at=at, detail=detail),
                ConditionExpression="attribute_not_exists(#pk)",
                ExpressionAttributeNames={"#pk": c.PK},
            )
        except self._ddb.exceptions.ConditionalCheckFailedException:
            return False
        return True

    # --- helpers ---------------------------------------------------------------------------------

    def _event_put(self, policy: RetrainingPolicy, before: PolicyState | None, after: PolicyState, seq: int) -> dict[str, Any]:
        detail = outbox.policy_state_detail(policy, before, after, sequence=seq, at=self._clock())
        return {
            "Put": {
                "TableName": self.table,
                "Item": outbox.outbox_item(et.POLICY_STATE_CHANGE, et.SUBJECT_POLICY, policy.policy_id, detail),
            }
        }

    def _query_all(self, **kwargs: Any) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        kwargs["TableName"] = self.table
        while True:
            page = self._ddb.query(**kwargs)
            rows.extend(page.get("Items", []))
            if "LastEvaluatedKey" not in page:
                return rows
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def _transact(self, writes: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        """None on success, else the cancellation reasons of a failed condition (conflicts retried)."""
        for attempt in range(_ATTEMPTS):
            try:
                self._ddb.transact_write_items(TransactItems=writes)
                return None
            except self._ddb.exceptions.TransactionCanceledException as exc:
                reasons = exc.response.get("CancellationReasons", [])
                codes = {r.get("Code") for r in reasons}
                if "ConditionalCheckFailed" in codes:
                    return reasons
                if "TransactionConflict" in codes and attempt < _ATTEMPTS - 1:
                    time.sleep(0.01 * 2**attempt)
                    continue
                raise
        raise AssertionError("unreachable")

    def _batch_delete(self, keys: list[dict[str, Any]]) -> None:
        delete_keys(self._ddb, self.table, keys, "a retraining policy's records")


# --- items ---------------------------------------------------------------------------------------


def policy_document(policy: RetrainingPolicy) -> dict[str, Any]:
    """As stored: JSON mode with the template's hub token revealed (the API masks it), None fields absent."""
    return policy.model_dump(mode="json", context={"reveal_secrets": True}, exclude_none=True)


def _attr(value: Any) -> dict[str, Any]:
    """Documents (template, trigger, mapping) as one packed JSON attribute, as the jobs table does
    (dynamodb_items.field_attr): nothing filters inside them, and one attribute reads far faster than
    hundreds of nested ones. Packed as they are: numbers in an event pattern must stay numbers."""
    return items.packed_attr(value) if isinstance(value, dict | list) else items.to_attr(value)


def policy_item(policy: RetrainingPolicy) -> dict[str, Any]:
    item = {k: _attr(v) for k, v in policy_document(policy).items()}
    created = f"{items.time_key(policy.created_at)}#{policy.policy_id}"
    item.update(
        {
            c.PK: {"S": POLICY_PREFIX + policy.policy_id},
            c.SK: {"S": items.META},
            c.GSI_OWNER_PK: {"S": OWNER_PREFIX + policy.owner},
            c.GSI_OWNER_SK: {"S": created},
            c.GSI_ALL_PK: {"S": ALL_POLICIES},
            c.GSI_ALL_SK: {"S": created},
            "entity": {"S": "POLICY"},
        }
    )
    return item


def _check_size(item: Mapping[str, Any]) -> None:
    # The template becomes a job item when the policy fires: it must fit a job's budget, not just 400 KB.
    size = items.item_size(item)
    if size > items.SUBMITTED_JOB_MAX_BYTES:
        raise TooLarge(
            "body",
            f"the policy takes {size:,} bytes as stored; a policy may take at most {items.SUBMITTED_JOB_MAX_BYTES:,} bytes "
            f"(its template becomes a job, whose request may take at most that much of DynamoDB's {items.MAX_ITEM_BYTES:,}-byte item)",
        )


def policy_from_item(item: Mapping[str, Any]) -> RetrainingPolicy:
    doc = {k: v for k, v in items.from_item(item).items() if k not in items.KEY_ATTRS}
    return RetrainingPolicy.model_validate(doc, context=STORED)


def route_item(route: Route) -> dict[str, Any]:
    return {
        **_route_key(route),
        "policy_id": {"S": route.policy_id},
        "owner": {"S": route.owner},
        "match": _attr(dict(route.match)),
        "entity": {"S": "ROUTE"},
    }


def route_from_item(item: Mapping[str, Any]) -> Route:
    doc = items.from_item(item)
    return Route(doc[c.PK].removeprefix(ROUTE_PREFIX), doc["policy_id"], doc["owner"], doc.get("match") or {})


def _route_key(route: Route) -> dict[str, Any]:
    return {c.PK: {"S": ROUTE_PREFIX + route.key}, c.SK: {"S": POLICY_PREFIX + route.policy_id}}


def _meta_key(policy_id: str) -> dict[str, Any]:
    return {c.PK: {"S": POLICY_PREFIX + policy_id}, c.SK: {"S": items.META}}


def _event_key(policy_id: str, event_id: str) -> dict[str, Any]:
    return {c.PK: {"S": POLICY_PREFIX + policy_id}, c.SK: {"S": EVENT_PREFIX + event_id}}


def _event_item(policy_id: str, event_id: str, *, state: str, outcome: str, at: datetime, detail: str = "") -> dict[str, Any]:
    item = {
        **_event_key(policy_id, event_id),
        "state": {"S": state},
        "outcome": {"S": outcome},
        "at": {"S": items.time_key(at)},
        "expires_at": {"N": str(int(at.timestamp()) + DECISION_TTL_SECONDS)},
        "entity": {"S": "POLICY_EVENT"},
    }
    if detail:
        item["detail"] = {"S": detail[:1000]}
    return item


def _event_record(policy_id: str, event_id: str, doc: Mapping[str, Any]) -> EventRecord:
    return EventRecord(
        policy_id=policy_id,
        event_id=event_id,
        state=doc["state"],
        outcome=doc["outcome"],
        at=datetime.strptime(doc["at"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC),
        job_id=doc.get("job_id"),
        detail=doc.get("detail", ""),
    )


def _listing(owner: str | None) -> tuple[str, str, str, str]:
    if owner is None:
        return c.GSI_ALL, c.GSI_ALL_PK, c.GSI_ALL_SK, ALL_POLICIES
    return c.GSI_OWNER, c.GSI_OWNER_PK, c.GSI_OWNER_SK, OWNER_PREFIX + owner
