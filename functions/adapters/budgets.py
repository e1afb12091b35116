"""Budgets in the jobs table (issue 25; TABLE_DESIGN.md), Query only, never Scan.

One partition, `pk = BUDGETS`: a budget is `sk = BUDGET#<id>` with `doc` (the Budget, meter included, as
JSON) and `version`. Every write is conditional on the version it read: admission's reservations, the
meter's tick and a PATCH racing each other never lose an update (the loser re-reads and decides again).
A tick's threshold events go to the outbox (functions/adapters/outbox.py) in the same transaction as the
crossing they report, so an event is never lost nor sent for a crossing that was not stored.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from functions import constants
from functions.adapters import outbox
from functions.adapters.partition import PartitionTable
from functions.catalog import own_events as et
from functions.errors import BudgetChanged, BudgetNotFound
from schemas.budgets import Budget
from schemas.events import BudgetOverride, BudgetThresholdCrossed

_PK = "BUDGETS"
_PREFIX = "BUDGET#"


class DynamoBudgetRepository(PartitionTable):
    PK = _PK
    PREFIX = _PREFIX

    def _item(self, budget: Budget) -> dict[str, Any]:
        return {**self._key(budget.budget_id), "doc": {"S": budget.model_dump_json()}, "version": {"N": str(budget.version)}}

    def get(self, budget_id: str) -> Budget:
        item = self._ddb.get_item(TableName=self.table, Key=self._key(budget_id), ConsistentRead=True).get("Item")
        if not item:
            raise BudgetNotFound(budget_id)
        return Budget.model_validate_json(item["doc"]["S"])

    def list(self) -> list[Budget]:
        found: list[Budget] = []
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "#pk = :pk AND begins_with(#sk, :prefix)",
            "ExpressionAttributeNames": {"#pk": constants.PK, "#sk": constants.SK},
            "ExpressionAttributeValues": {":pk": {"S": _PK}, ":prefix": {"S": _PREFIX}},
            "ConsistentRead": True,
        }
        while True:
            page = self._ddb.query(**kwargs)
            found.extend(Budget.model_validate_json(i["doc"]["S"]) for i in page.get("Items", []))
            if "LastEvaluatedKey" not in page:
                return sorted(found, key=lambda b: b.budget_id)
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def create(self, budget: Budget) -> None:
        self._ddb.put_item(
            TableName=self.table,
            Item=self._item(budget),
            ConditionExpression="attribute_not_exists(#pk)",
            ExpressionAttributeNames={"#pk": constants.PK},
        )

    def put(self, budget: Budget, expected_version: int, events: Iterable[BudgetThresholdCrossed | BudgetOverride] = ()) -> Budget:
        stored = budget.model_copy(update={"version": expected_version + 1})
        put = {
            "TableName": self.table,
            "Item": self._item(stored),
            "ConditionExpression": "#v = :v",
            "ExpressionAttributeNames": {"#v": "version"},
            "ExpressionAttributeValues": {":v": {"N": str(expected_version)}},
        }
        writes = [{"Put": put}] + [
            {"Put": {"TableName": self.table, "Item": outbox.outbox_item(_kind(e), et.SUBJECT_BUDGET, budget.budget_id, e)}} for e in events
        ]
        try:
            if len(writes) == 1:
                self._ddb.put_item(**put)
            else:
                self._ddb.transact_write_items(TransactItems=writes)
        except self._ddb.exceptions.ConditionalCheckFailedException as exc:
            raise BudgetChanged(budget.budget_id) from exc
        except self._ddb.exceptions.TransactionCanceledException as exc:
            codes = {r.get("Code") for r in exc.response.get("CancellationReasons", [])}
            if "ConditionalCheckFailed" in codes or "TransactionConflict" in codes:
                raise BudgetChanged(budget.budget_id) from exc
            raise
        return stored

    def delete(self, budget_id: str) -> bool:
        reply = self._ddb.delete_item(TableName=self.table, Key=self._key(budget_id), ReturnValues="ALL_OLD")
        return "Attributes" in reply


def _kind(event: BudgetThresholdCrossed | BudgetOverride) -> et.EventType:
    return et.BUDGET_OVERRIDE if isinstance(event, BudgetOverride) else et.BUDGET_THRESHOLD
