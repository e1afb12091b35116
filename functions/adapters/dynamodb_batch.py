"""BatchWriteItem deletes done to the end: the adapters' one way to remove many items of the table."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

BATCH_MAX = 25  # BatchWriteItem takes at most 25 requests (DynamoDB refuses more: ValidationException)
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
