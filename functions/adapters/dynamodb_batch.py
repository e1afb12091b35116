"""Batch calls done to the end: BatchWriteItem deletes (the adapters' one way to remove many items of the table)
and BatchGetItem reads (many items by key in a few calls)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

BATCH_MAX = 25  # BatchWriteItem takes at most 25 requests (DynamoDB refuses more: ValidationException)
GET_BATCH_MAX = 100  # BatchGetItem takes at most 100 keys (and answers at most 16 MB: the rest comes back unprocessed)
ATTEMPTS = 6


def delete_keys(ddb: Any, table: str, keys: Sequence[dict[str, Any]], what: str) -> None:
    """Delete every key, 25 per call; what a call reports unprocessed (throttling) is sent again, with a growing
    pause. RuntimeError (naming `what`) if some are still unprocessed after ATTEMPTS calls."""
    for i in range(0, len(keys), BATCH_MAX):
        request = {table: [{"DeleteRequest": {"Key": k}} for k in keys[i : i + BATCH_MAX]]}
        for attempt in range(ATTEMPTS):
            request = ddb.batch_write_item(RequestItems=request).get("UnprocessedItems") or {}
            if not request:
                break
            time.sleep(0.05 * 2**attempt)
        if request:
            raise RuntimeError(f"could not delete {len(request.get(table, []))} items of {what}")


def get_keys(ddb: Any, table: str, keys: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The items of `keys` that exist (any order), read consistently, 100 keys per call; what a call reports
    unprocessed (throttling, the 16 MB answer limit) is asked again."""
    rows: list[dict[str, Any]] = []
    for i in range(0, len(keys), GET_BATCH_MAX):
        request: dict[str, Any] = {table: {"Keys": list(keys[i : i + GET_BATCH_MAX]), "ConsistentRead": True}}
        while request:
            response = ddb.batch_get_item(RequestItems=request)
            rows.extend(response.get("Responses", {}).get(table, []))
            request = response.get("UnprocessedKeys") or {}
    return rows
