"""Capacity claims in the jobs table: one item per pool, each claim and release one conditional write.

Item `pk = CAPACITY#<pool>, sk = CAPACITY`: `used` (units held) and `holders` (job id -> units). A
claim adds the job's units only if the job holds none yet and `used` stays within the pool's
capacity, so two scheduler passes racing can never book the same units twice. These items carry no
GSI attributes, so they never appear in the job listings or the queue index.

Teams (issue 24): a claim that names its team's hold (TeamHold) writes, in the same transaction, item
`pk = TEAMHOLD#<team>#<gpu type>, sk = CAPACITY` (`used`, `holders`, the team's units of that type across
every pool), conditional on staying within the team's nominal quota plus borrow limit; the pool item
records which team hold the job's units count against (`team_claims`: job id -> hold key), so that a
release, by anyone (the lifecycle, the reconciler's orphan sweep), gives the units back to both at once.
"""

from __future__ import annotations

from typing import Any, Protocol

from functions import constants
from functions.service.ports import TeamHold

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

    @staticmethod
    def _team_key(hold_key: str) -> dict[str, Any]:
        return {constants.PK: {"S": f"TEAMHOLD#{hold_key}"}, constants.SK: {"S": _SK}}

    def _ensure(self, pool: str) -> None:
        if pool in self._known_pools:
            return
        if self._create(self._key(pool), {"pool": {"S": pool}, "team_claims": {"M": {}}}):
            self.register_pool(pool)
        else:
            # A pool item from before team holds: give it its (empty) map of team claims once.
            self._ddb.update_item(
                TableName=self.table,
                Key=self._key(pool),
                UpdateExpression="SET team_claims = if_not_exists(team_claims, :empty)",
                ExpressionAttributeValues={":empty": {"M": {}}},
            )
        self._known_pools.add(pool)

    def _create(self, key: dict[str, Any], extra: dict[str, Any]) -> bool:
        """Create a counter item (used 0, no holders); False if it exists already."""
        from botocore.exceptions import ClientError

        try:
            self._ddb.put_item(
                TableName=self.table,
                Item={**key, "used": {"N": "0"}, "holders": {"M": {}}, **extra},
                ConditionExpression="attribute_not_exists(#pk)",
                ExpressionAttributeNames={"#pk": constants.PK},
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            return False
        return True

    def claim(self, pool: str, job_id: str, units: int, capacity: int, team: TeamHold | None = None) -> bool:
        from botocore.exceptions import ClientError

        if units > capacity or (team is not None and units > team.limit):
            return False
        self._ensure(pool)
        add = {":u": {"N": str(units)}, ":limit": {"N": str(capacity - units)}}
        pool_update: dict[str, Any] = {
            "TableName": self.table,
            "Key": self._key(pool),
            "UpdateExpression": "SET used = used + :u, holders.#j = :u",
            "ConditionExpression": "attribute_not_exists(holders.#j) AND used <= :limit",
            "ExpressionAttributeNames": {"#j": job_id},
            "ExpressionAttributeValues": add,
        }
        try:
            if team is None:
                self._ddb.update_item(**pool_update)
                return True
            hold = f"{team.team}#{team.gpu_type}"
            self._create(self._team_key(hold), {"team": {"S": team.team}, "gpu_type": {"S": team.gpu_type}})
            pool_update["UpdateExpression"] += ", team_claims.#j = :hold"
            pool_update["ExpressionAttributeValues"] = {**add, ":hold": {"S": hold}}
            team_update = {
                "TableName": self.table,
                "Key": self._team_key(hold),
                "UpdateExpression": "SET used = used + :u, holders.#j = :u",
                "ConditionExpression": "attribute_not_exists(holders.#j) AND used <= :limit",
                "ExpressionAttributeNames": {"#j": job_id},
                "ExpressionAttributeValues": {":u": add[":u"], ":limit": {"N": str(team.limit - units)}},
            }
            # One transaction: the pool's units and the team's, or neither (two passes racing, each on
            # what it read, can never take a team beyond its nominal quota plus borrow limit).
            self._ddb.transact_write_items(TransactItems=[{"Update": pool_update}, {"Update": team_update}])
            return True
        except ClientError as exc:
            if exc.response["Error"]["Code"] not in {"ConditionalCheckFailedException", "TransactionCanceledException"}:
                raise
        # Full, the team at its limit, or the job already holds a claim: only the call that made a claim may undo it.
        return False

    def release(self, pool: str, job_id: str) -> bool:
        from botocore.exceptions import ClientError

        units = self.holders(pool).get(job_id)
        if units is None:
            return False
        # Which team hold the units count against: written with the claim, the same for every claim of the job.
        hold = self._item(pool).get("team_claims", {}).get("M", {}).get(job_id, {}).get("S")
        pool_update: dict[str, Any] = {
            "TableName": self.table,
            "Key": self._key(pool),
            "UpdateExpression": "SET used = used - :u REMOVE holders.#j",
            "ConditionExpression": "holders.#j = :u",
            "ExpressionAttributeNames": {"#j": job_id},
            "ExpressionAttributeValues": {":u": {"N": str(units)}},
        }
        try:
            if hold is None:
                self._ddb.update_item(**pool_update)
                return True
            pool_update["UpdateExpression"] += ", team_claims.#j"
            team_update = {**pool_update, "Key": self._team_key(hold), "UpdateExpression": "SET used = used - :u REMOVE holders.#j"}
            self._ddb.transact_write_items(TransactItems=[{"Update": pool_update}, {"Update": team_update}])
            return True
        except ClientError as exc:
            if exc.response["Error"]["Code"] not in {"ConditionalCheckFailedException", "TransactionCanceledException"}:
                raise
            return False  # released by a concurrent call

    def _item(self, pool: str) -> dict[str, Any]:
        return dict(self._ddb.get_item(TableName=self.table, Key=self._key(pool), ConsistentRead=True).get("Item") or {})

    def holders(self, pool: str) -> dict[str, int]:
        return _holders(self._item(pool))

    def team_holders(self, team: str, gpu_type: str) -> dict[str, int]:
        """The jobs holding units of `gpu_type` under the team's hold, every pool together."""
        key = self._team_key(f"{team}#{gpu_type}")
        return _holders(self._ddb.get_item(TableName=self.table, Key=key, ConsistentRead=True).get("Item") or {})

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


def _holders(item: dict[str, Any]) -> dict[str, int]:
    return {job_id: int(value["N"]) for job_id, value in item.get("holders", {}).get("M", {}).items()}
