"""Capacity claims in the jobs table: one item per pool, each claim and release one conditional write.

Item `pk = CAPACITY#<pool>, sk = CAPACITY`: `used` (units held) and `holders` (job id -> units). A
claim adds the job's units only if the job holds none yet and `used` stays within the pool's
capacity, so two scheduler passes racing can never book the same units twice. These items carry no
GSI attributes, so they never appear in the job listings or the queue index.
"""

from __future__ import annotations

from typing import Any, Protocol

from functions import constants

_SK = "CAPACITY"
_QUEUES_PK = "QUEUES"


class Clients(Protocol):
    def client(self, service: str) -> Any: ...


class DynamoDBCapacityLedger:
    def __init__(self, clients: Clients, table: str) -> None:
        self._clients = clients
        self.table = table
        # Pools and queues already known to exist: creating them again is a wasted write per job.
        self._known_pools: set[str] = set()
        self._known_queues: set[str] = set()

    @property
    def _ddb(self) -> Any:
        return self._clients.client("dynamodb")

    @staticmethod
    def _key(pool: str) -> dict[str, Any]:
        return {constants.PK: {"S": f"CAPACITY#{pool}"}, constants.SK: {"S": _SK}}

    def _ensure(self, pool: str) -> None:
        from botocore.exceptions import ClientError

        if pool in self._known_pools:
            return

        try:
            self._ddb.put_item(
                TableName=self.table,
                Item={**self._key(pool), "used": {"N": "0"}, "holders": {"M": {}}, "pool": {"S": pool}},
                ConditionExpression="attribute_not_exists(#pk)",
                ExpressionAttributeNames={"#pk": constants.PK},
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            self._known_pools.add(pool)
            return
        self.register_pool(pool)
        self._known_pools.add(pool)

    def claim(self, pool: str, job_id: str, units: int, capacity: int) -> bool:
        from botocore.exceptions import ClientError

        if units > capacity:
            return False
        self._ensure(pool)
        try:
            self._ddb.update_item(
                TableName=self.table,
                Key=self._key(pool),
                UpdateExpression="SET used = used + :u, holders.#j = :u",
                ConditionExpression="attribute_not_exists(holders.#j) AND used <= :limit",
                ExpressionAttributeNames={"#j": job_id},
                ExpressionAttributeValues={":u": {"N": str(units)}, ":limit": {"N": str(capacity - units)}},
            )
            return True
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
        # Full, or the job already holds a claim: only the call that made a claim may undo it.
        return False

    def release(self, pool: str, job_id: str) -> bool:
        from botocore.exceptions import ClientError

        units = self.holders(pool).get(job_id)
        if units is None:
            return False
        try:
            self._ddb.update_item(
                TableName=self.table,
                Key=self._key(pool),
                UpdateExpression="SET used = used - :u REMOVE holders.#j",
                ConditionExpression="holders.#j = :u",
                ExpressionAttributeNames={"#j": job_id},
                ExpressionAttributeValues={":u": {"N": str(units)}},
            )
            return True
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            return False  # released by a concurrent call

    def holders(self, pool: str) -> dict[str, int]:
        item = self._ddb.get_item(TableName=self.table, Key=self._key(pool), ConsistentRead=True).get("Item")
        if not item:
            return {}
        return {job_id: int(value["N"]) for job_id, value in item.get("holders", {}).get("M", {}).items()}

    def pools(self) -> list[str]:
        item = self._ddb.get_item(TableName=self.table, Key={constants.PK: {"S": _QUEUES_PK}, constants.SK: {"S": "POOLS"}}).get("Item")
        return sorted(item["names"]["SS"]) if item and "names" in item else []

    def register_queue(self, queue: str) -> None:
        if queue in self._known_queues:
            return
        self._ddb.update_item(
            TableName=self.table,
            Key={constants.PK: {"S": _QUEUES_PK}, constants.SK: {"S": _QUEUES_PK}},
            UpdateExpression="ADD #names :q",
            ExpressionAttributeNames={"#names": "names"},
            ExpressionAttributeValues={":q": {"SS": [queue]}},
        )
        self._known_queues.add(queue)

    def register_pool(self, pool: str) -> None:
        self._ddb.update_item(
            TableName=self.table,
            Key={constants.PK: {"S": _QUEUES_PK}, constants.SK: {"S": "POOLS"}},
            UpdateExpression="ADD #names :p",
            ExpressionAttributeNames={"#names": "names"},
            ExpressionAttributeValues={":p": {"SS": [pool]}},
        )

    def queues(self) -> list[str]:
        item = self._ddb.get_item(TableName=self.table, Key={constants.PK: {"S": _QUEUES_PK}, constants.SK: {"S": _QUEUES_PK}}).get("Item")
        return sorted(item["names"]["SS"]) if item and "names" in item else []
