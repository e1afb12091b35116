"""The forecast's per-shape records in the jobs table (issue 25 point 6; TABLE_DESIGN.md), Query only.

One partition, `pk = FORECAST`: a shape is `sk = SHAPE#<shape>` with `doc` (the ShapeRecord as JSON) and
`version`. Every write is conditional on the version it read (0: the item must not exist yet), so two
completions of one shape racing never lose one: the loser re-reads and adds its job to the winner's record.
"""

from __future__ import annotations

from typing import Any

from functions import constants
from functions.adapters.partition import PartitionTable
from functions.errors import ConcurrentModification
from schemas.budgets import ShapeRecord

_PK = "FORECAST"
_PREFIX = "SHAPE#"


class DynamoShapeRecords(PartitionTable):
    PK = _PK
    PREFIX = _PREFIX

    def get(self, shape: str) -> ShapeRecord | None:
        item = self._ddb.get_item(TableName=self.table, Key=self._key(shape), ConsistentRead=True).get("Item")
        return ShapeRecord.model_validate_json(item["doc"]["S"]) if item else None

    def put(self, record: ShapeRecord, expected_version: int) -> None:
        stored = record.model_copy(update={"version": expected_version + 1})
        condition: dict[str, Any] = (
            {"ConditionExpression": "attribute_not_exists(#pk)", "ExpressionAttributeNames": {"#pk": constants.PK}}
            if expected_version == 0
            else {
                "ConditionExpression": "#v = :v",
                "ExpressionAttributeNames": {"#v": "version"},
                "ExpressionAttributeValues": {":v": {"N": str(expected_version)}},
            }
        )
        item = {**self._key(record.shape), "doc": {"S": stored.model_dump_json()}, "version": {"N": str(stored.version)}}
        try:
            self._ddb.put_item(TableName=self.table, Item=item, **condition)
        except self._ddb.exceptions.ConditionalCheckFailedException as exc:
            raise ConcurrentModification(f"forecast shape {record.shape}", "recorded by another completion") from exc

    def list(self) -> list[ShapeRecord]:
        found: list[ShapeRecord] = []
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "#pk = :pk AND begins_with(#sk, :prefix)",
            "ExpressionAttributeNames": {"#pk": constants.PK, "#sk": constants.SK},
            "ExpressionAttributeValues": {":pk": {"S": _PK}, ":prefix": {"S": _PREFIX}},
            "ConsistentRead": True,
        }
        while True:
            page = self._ddb.query(**kwargs)
            found.extend(ShapeRecord.model_validate_json(i["doc"]["S"]) for i in page.get("Items", []))
            if "LastEvaluatedKey" not in page:
                return found
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
