"""moto's state as the journal records it, and back: the ops a unit of work's marks become, and an S3
object put back from its op. Read by localmode/moto_hooks.py, which marks what each write touches, appends
these ops when the unit ends (still under its lock) and restores the folded journal at start.

An item is journaled exactly as moto holds it (DynamoDB JSON, binary as base64 text); an object as its
body (a blob file, journal.py) with the ETag, metadata, date and storage class clients saw. Reads moto's
internals (FakeKey's buffer and ETag): pinned with moto_hooks (moto_pin.py; tests/integration/test_journal.py).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

from moto.dynamodb.models import dynamodb_backends
from moto.dynamodb.models.dynamo_type import DynamoType, Item
from moto.dynamodb.models.table import Table
from moto.s3.models import FakeKey, S3Backend, s3_backends

from localmode.journal import Journal, Op

# --- DynamoDB ------------------------------------------------------------------------------------------


def ddb_ops(touched: list[tuple[Any, ...]]) -> list[Op]:
    ops: list[Op] = []
    seen: set[str] = set()
    for entry in touched:
        kind, account, region, table_name = entry[:4]
        where = {"account": account, "region": region, "table": table_name}
        if kind == "create_table":
            ops.append({"op": "ddb.create_table", **where, "params": entry[4]})
        elif kind == "delete_table":
            ops.append({"op": "ddb.delete_table", **where})
        else:
            key = entry[4]
            ident = repr((account, region, table_name, sorted(key.items())))
            if ident in seen:
                continue
            seen.add(ident)
            table = dynamodb_backends[account][region].tables.get(table_name)
            if table is None:  # deleted later in the same unit; the delete_table op says so
                continue
            item = table.get_item(*key_values(table, key))
            if item is None:
                ops.append({"op": "ddb.delete", **where, "key": key})
            else:
                ops.append({"op": "ddb.put", **where, "key": key, "item": dump_item(item)})
    return ops


def key_values(table: Table, key: dict[str, Any]) -> tuple[DynamoType, DynamoType | None]:
    hash_value = DynamoType(key[table.hash_key_attr])
    range_value = DynamoType(key[table.range_key_attr]) if table.range_key_attr else None
    return hash_value, range_value


def dump_item(item: Item) -> dict[str, Any]:
    """The item in DynamoDB JSON exactly as moto holds it (binary stays base64 text), JSON-safe."""
    return {name: _dump_value(value) for name, value in item.attrs.items()}


def _dump_value(value: DynamoType) -> dict[str, Any]:
    kind, raw = value.type, value.value
    if kind == "M":
        return {"M": {k: _dump_value(v) for k, v in raw.items()}}
    if kind == "L":
        return {"L": [_dump_value(v) for v in raw]}
    if kind == "B" and isinstance(raw, bytes):
        return {"B": _b64(raw)}
    if kind == "BS":
        return {"BS": [_b64(v) if isinstance(v, bytes) else v for v in raw]}
    return {kind: raw}


def _b64(raw: bytes) -> str:
    import base64

    return base64.b64encode(raw).decode()


# --- S3 ------------------------------------------------------------------------------------------------


def s3_ops(touched: list[tuple[Any, ...]], journal: Journal) -> list[Op]:
    ops: list[Op] = []
    seen: set[tuple[str, str, str]] = set()
    for entry in touched:
        kind, account, bucket_name = entry[:3]
        if kind == "create_bucket":
            ops.append({"op": "s3.create_bucket", "account": account, "bucket": bucket_name, "region": entry[3]})
            continue
        if kind == "delete_bucket":
            ops.append({"op": "s3.delete_bucket", "account": account, "bucket": bucket_name})
            continue
        ident = (account, bucket_name, entry[3])
        if ident in seen:
            continue
        seen.add(ident)
        bucket = s3_backends[account]["global"].buckets.get(bucket_name)
        if bucket is None:
            continue
        key = bucket.keys.get(entry[3])
        where = {"account": account, "bucket": bucket_name, "key": entry[3]}
        if not isinstance(key, FakeKey):  # gone, or a delete marker of a versioned bucket
            ops.append({"op": "s3.delete", **where})
            continue
        blob, size = journal.put_blob(_read_body(key))
        ops.append(
            {
                "op": "s3.put",
                **where,
                "blob": blob,
                "size": size,
                "etag": key.etag,
                "metadata": dict(key.metadata),
                "last_modified": key.last_modified.isoformat(),
                "storage_class": key.storage_class,
            }
        )
    return ops


def _read_body(key: FakeKey) -> Iterator[bytes]:
    # In chunks from moto's spooled buffer (large checkpoints), under the key's own lock as moto reads it.
    with key.lock:
        buffer = key._value_buffer
        buffer.seek(0)
        while chunk := buffer.read(1 << 20):
            yield chunk


def restore_object(backend: S3Backend, op: Op, journal: Journal) -> None:
    key = backend.put_object(op["bucket"], op["key"], journal.read_blob(op["blob"]), storage=op["storage_class"], disable_notification=True)
    key.set_metadata(dict(op["metadata"]))
    # What clients saw before the restart: the same ETag (multipart ones are not an MD5) and date.
    key._etag = op["etag"].strip('"')  # moto stores it unquoted and quotes on the way out
    key.last_modified = dt.datetime.fromisoformat(op["last_modified"])
