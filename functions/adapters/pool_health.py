"""Pool health in the jobs table (docs/PLACEMENT.md): one item per pool, every change one atomic update.

Item `pk = POOL#<platform/instance type/zone/purchase>, sk = HEALTH`: `capacity_errors` and `preemptions`
(counts, ADDed so two reporters never lose one), `blocked_until` (epoch seconds, only ever raised by a
conditional write, so the longer of two racing blocks stays) and `last_reason`. These items carry no GSI
attributes, so they never appear in the job listings or the queue index.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from functions import constants
from functions.service.ports import PoolState

_SK = "HEALTH"
_COUNTERS = {"capacity": "capacity_errors", "preempted": "preemptions"}
_BATCH = 100  # BatchGetItem's most keys per call


class Clients(Protocol):
    def client(self, service: str) -> Any: ...


class DynamoDBPoolHealth:
    def __init__(self, clients: Clients, table: str) -> None:
        self._clients = clients
        self.table = table

    @property
    def _ddb(self) -> Any:
        return self._clients.client("dynamodb")

    @staticmethod
    def _key(pool: str) -> dict[str, Any]:
        return {constants.PK: {"S": f"POOL#{pool}"}, constants.SK: {"S": _SK}}

    def record(self, pool: str, kind: str, now: float, reason: str) -> PoolState:
        counter = _COUNTERS[kind]
        item = self._ddb.update_item(
            TableName=self.table,
            Key=self._key(pool),
            UpdateExpression="ADD #c :one SET last_reason = :r, #pool = :p, last_at = :now",
            ExpressionAttributeNames={"#c": counter, "#pool": "pool"},
            ExpressionAttributeValues={":one": {"N": "1"}, ":r": {"S": reason[:512]}, ":p": {"S": pool}, ":now": {"N": f"{now:.3f}"}},
            ReturnValues="ALL_NEW",
        )["Attributes"]
        return _state(pool, item)

    def block(self, pool: str, until: float) -> None:
        from botocore.exceptions import ClientError

        try:
            self._ddb.update_item(
                TableName=self.table,
                Key=self._key(pool),
                UpdateExpression="SET blocked_until = :u",
                ConditionExpression="attribute_not_exists(blocked_until) OR blocked_until < :u",
                ExpressionAttributeValues={":u": {"N": f"{until:.3f}"}},
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            # Already blocked for longer by another reporter: keep that.

    def states(self, pools: Sequence[str]) -> dict[str, PoolState]:
        found: dict[str, PoolState] = {}
        unique = list(dict.fromkeys(pools))
        for start in range(0, len(unique), _BATCH):
            keys = [self._key(pool) for pool in unique[start : start + _BATCH]]
            request: dict[str, Any] = {self.table: {"Keys": keys, "ConsistentRead": True}}
            while request:
                answer = self._ddb.batch_get_item(RequestItems=request)
                for item in answer.get("Responses", {}).get(self.table, []):
                    pool = item[constants.PK]["S"].removeprefix("POOL#")
                    found[pool] = _state(pool, item)
                request = answer.get("UnprocessedKeys") or {}
        return found


def _state(pool: str, item: dict[str, Any]) -> PoolState:
    def number(name: str) -> float:
        return float(item[name]["N"]) if name in item else 0.0

    return PoolState(
        pool=pool,
        capacity_errors=int(number("capacity_errors")),
        preemptions=int(number("preemptions")),
        blocked_until=number("blocked_until"),
        last_reason=item.get("last_reason", {}).get("S", ""),
    )
