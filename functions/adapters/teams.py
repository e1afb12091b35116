"""Teams and their decayed usage in the jobs table (issue 24; TABLE_DESIGN.md), Query only, never Scan.

One partition, `pk = TEAMS`: a team is `sk = TEAM#<name>` with `doc` (the Team as JSON) and `version`;
its usage is `sk = USAGE#<name>` with `usage` (price-weighted unit-hours, decayed to `at`) and `at`; a
dashboard identity seen in a signed request is `sk = IDENTITY#<identity id>` with its user pool's
`user_pool_id` and `sub` (whose Cognito groups decide its team when it acts without a request: a trial). Every
write is conditional (a team on its version, usage on the `at` it was read at), so two admins or two
scheduler passes racing never lose an update.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from functions import constants
from functions.adapters.partition import PartitionTable
from functions.catalog.gpu_types import decayed
from functions.errors import TeamChanged, TeamNotFound
from functions.service.feature_ports import CognitoUser
from schemas.teams import Team

_PK = "TEAMS"
_ATTEMPTS = 5


def _failed(exc: Exception) -> bool:
    from botocore.exceptions import ClientError

    return isinstance(exc, ClientError) and exc.response["Error"]["Code"] == "ConditionalCheckFailedException"


class DynamoTeamRepository(PartitionTable):
    PK = _PK
    PREFIX = ""

    def _query(self, prefix: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "#pk = :pk AND begins_with(#sk, :prefix)",
            "ExpressionAttributeNames": {"#pk": constants.PK, "#sk": constants.SK},
            "ExpressionAttributeValues": {":pk": {"S": _PK}, ":prefix": {"S": prefix}},
            "ConsistentRead": True,
        }
        while True:
            page = self._ddb.query(**kwargs)
            items.extend(page.get("Items", []))
            if "LastEvaluatedKey" not in page:
                return items
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def get(self, name: str) -> Team:
        item = self._ddb.get_item(TableName=self.table, Key=self._key(f"TEAM#{name}"), ConsistentRead=True).get("Item")
        if not item:
            raise TeamNotFound(name)
        return Team.model_validate_json(item["doc"]["S"])

    def list(self) -> list[Team]:
        return sorted((Team.model_validate_json(i["doc"]["S"]) for i in self._query("TEAM#")), key=lambda t: t.name)

    def put(self, team: Team, expected_version: int | None) -> Team:
        stored = team.model_copy(update={"version": (expected_version or 0) + 1})
        condition: dict[str, Any]
        if expected_version is None:
            condition = {"ConditionExpression": "attribute_not_exists(#pk)", "ExpressionAttributeNames": {"#pk": constants.PK}}
        else:
            condition = {
                "ConditionExpression": "#v = :v",
                "ExpressionAttributeNames": {"#v": "version"},
                "ExpressionAttributeValues": {":v": {"N": str(expected_version)}},
            }
        item = {**self._key(f"TEAM#{team.name}"), "doc": {"S": stored.model_dump_json()}, "version": {"N": str(stored.version)}}
        try:
            self._ddb.put_item(TableName=self.table, Item=item, **condition)
        except Exception as exc:
            if _failed(exc):
                raise TeamChanged(team.name) from exc
            raise
        return stored

    def delete(self, name: str) -> bool:
        reply = self._ddb.delete_item(TableName=self.table, Key=self._key(f"TEAM#{name}"), ReturnValues="ALL_OLD")
        return "Attributes" in reply

    def usage(self) -> dict[str, tuple[float, datetime]]:
        out = {}
        for item in self._query("USAGE#"):
            name = item[constants.SK]["S"].removeprefix("USAGE#")
            out[name] = (float(item["usage"]["N"]), datetime.fromisoformat(item["at"]["S"]))
        return out

    def add_usage(self, name: str, amount: float, now: datetime, half_life_seconds: float) -> None:
        key = self._key(f"USAGE#{name}")
        for _ in range(_ATTEMPTS):
            item = self._ddb.get_item(TableName=self.table, Key=key, ConsistentRead=True).get("Item")
            names = {"#u": "usage", "#at": "at"}
            values: dict[str, Any] = {":now": {"S": now.isoformat()}}
            if item:
                at = datetime.fromisoformat(item["at"]["S"])
                total = decayed(float(item["usage"]["N"]), at, now, half_life_seconds) + amount
                condition = "#at = :at"
                values.update({":at": item["at"], ":now": {"S": max(at, now).isoformat()}})
            else:
                total, condition = amount, "attribute_not_exists(#at)"
            values[":u"] = {"N": repr(total)}
            try:
                self._ddb.update_item(
                    TableName=self.table,
                    Key=key,
                    UpdateExpression="SET #u = :u, #at = :now",
                    ConditionExpression=condition,
                    ExpressionAttributeNames=names,
                    ExpressionAttributeValues=values,
                )
                return
            except Exception as exc:
                if not _failed(exc):
                    raise
        raise TeamChanged(name, "its usage kept changing")

    def link_identity(self, identity_id: str, user: CognitoUser) -> None:
        # A plain put: what a signed request last showed is true (an identity id names one login).
        item = {**self._key(f"IDENTITY#{identity_id}"), "user_pool_id": {"S": user.user_pool_id}, "sub": {"S": user.sub}}
        self._ddb.put_item(TableName=self.table, Item=item)

    def linked_user(self, identity_id: str) -> CognitoUser | None:
        item = self._ddb.get_item(TableName=self.table, Key=self._key(f"IDENTITY#{identity_id}"), ConsistentRead=True).get("Item")
        return CognitoUser(user_pool_id=item["user_pool_id"]["S"], sub=item["sub"]["S"]) if item else None
