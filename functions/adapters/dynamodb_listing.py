"""Reading jobs back from the jobs table: GET /jobs's filtered, paged listing over the owner or all-jobs
index, and the paged Query the repository's other reads use (functions/adapters/dynamodb.py). Query only,
never Scan; page tokens are the index's keys (dynamodb_items.encode_key_token)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from functions import constants as c
from functions.adapters import dynamodb_items as items
from functions.errors import InvalidRequest
from functions.service.ports import JobQuery
from schemas.job import Job
from schemas.status import JobStatus

# A filtered listing stops after reading this many items and hands back a token, so a selective
# filter over a large history costs a bounded time per request (the client just asks again).
MAX_EVALUATED_PER_LIST = 5000
# A page of jobs ends early (with a next_token) once its items reach this size: a job may take up to 400 KB,
# and 200 of them would be an answer far over Lambda's 6 MB response limit (API Gateway answers 502).
MAX_LIST_BYTES = 3 * 1024 * 1024


def list_jobs(ddb: Any, table: str, query: JobQuery) -> tuple[list[Job], str | None]:
    if not 1 <= query.limit <= 1000:
        raise InvalidRequest("limit", "must be between 1 and 1000")
    if query.owner is None:
        index, pk_attr, sk_attr, pk_value = c.GSI_ALL, c.GSI_ALL_PK, c.GSI_ALL_SK, items.ALL_JOBS
    else:
        index, pk_attr, sk_attr, pk_value = c.GSI_OWNER, c.GSI_OWNER_PK, c.GSI_OWNER_SK, items.owner_pk(query.owner)
    names: dict[str, str] = {"#ipk": pk_attr}
    values: dict[str, Any] = {":ipk": {"S": pk_value}}
    filters = list_filters(query, names, values)
    kwargs: dict[str, Any] = {
        "TableName": table,
        "IndexName": index,
        "KeyConditionExpression": "#ipk = :ipk",
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
        "ScanIndexForward": False,
        # Without filters one page is exactly what we need; with filters read ahead.
        "Limit": query.limit if not filters else min(1000, max(4 * query.limit, 100)),
    }
    if filters:
        kwargs["FilterExpression"] = " AND ".join(filters)
    start = items.decode_key_token(query.next_token, pk_attr, sk_attr, pk_value) if query.next_token else None

    found: list[dict[str, Any]] = []
    evaluated = size = 0
    while True:
        if start:
            kwargs["ExclusiveStartKey"] = start
        page = ddb.query(**kwargs)
        evaluated += page.get("ScannedCount", 0)
        last = page.get("LastEvaluatedKey")
        page_items = page.get("Items", [])
        for i, row in enumerate(page_items):
            found.append(row)
            size += items.item_size(row)
            if len(found) == query.limit or size >= MAX_LIST_BYTES:
                more = i < len(page_items) - 1 or last is not None
                token = items.encode_key_token(_key_of(row, pk_attr, sk_attr)) if more else None
                return [items.job_from_item(r) for r in found], token
        if last is None:
            return [items.job_from_item(r) for r in found], None
        if evaluated >= MAX_EVALUATED_PER_LIST:
            return [items.job_from_item(r) for r in found], items.encode_key_token(last)
        start = last


def query_all(ddb: Any, table: str, *, max_items: int | None = None, **kwargs: Any) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    kwargs["TableName"] = table
    if max_items is not None:
        kwargs["Limit"] = max_items
    while True:
        page = ddb.query(**kwargs)
        rows.extend(page.get("Items", []))
        if max_items is not None and len(rows) >= max_items:
            return rows[:max_items]
        if "LastEvaluatedKey" not in page:
            return rows
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def list_filters(query: JobQuery, names: dict[str, str], values: dict[str, Any]) -> list[str]:
    filters = []
    if query.status is not None:
        names["#status"] = "status"
        values[":status"] = {"S": JobStatus(query.status).value}
        filters.append("#status = :status")
    if query.queue:
        names.update({"#sc": "scheduling_config", "#queue": "queue"})
        values[":queue"] = {"S": query.queue}
        filters.append("#sc.#queue = :queue")
    for i, (key, value) in enumerate(sorted(query.labels.items())):
        names.update({"#labels": "labels", f"#lk{i}": key})
        values[f":lv{i}"] = {"S": value}
        filters.append(f"#labels.#lk{i} = :lv{i}")
    if query.name_contains:
        names["#name"] = "name"
        values[":name"] = {"S": query.name_contains}
        filters.append("contains(#name, :name)")
    if query.priority_min is not None:
        names.update({"#sc": "scheduling_config", "#priority": "priority"})
        values[":pmin"] = {"N": str(int(query.priority_min))}
        filters.append("#sc.#priority >= :pmin")
    if query.priority_max is not None:
        names.update({"#sc": "scheduling_config", "#priority": "priority"})
        values[":pmax"] = {"N": str(int(query.priority_max))}
        filters.append("#sc.#priority <= :pmax")
    return filters


def _key_of(row: Mapping[str, Any], pk_attr: str, sk_attr: str) -> dict[str, Any]:
    return {a: row[a] for a in (c.PK, c.SK, pk_attr, sk_attr)}
