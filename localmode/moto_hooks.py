"""THE one module that reaches into moto's internals. Pinned to moto 5.2.5; tests/integration/test_journal.py
(test_hooks_are_pinned_to_the_moto_they_were_written_for) fails loudly when an upgrade moves anything this relies on.

Two jobs:
1. Thread safety. moto is not thread-safe: under concurrent HTTP load an optimistic-lock UpdateItem
   lost a write (docs/LOCAL_AWS.md). One process-wide re-entrant lock per service serialises every
   DynamoDB request (condition check + write + response serialisation: moto's update_item mutates
   items in place, so readers must not run beside it) and every S3 request and write.
2. Durability. The write paths mark what they touch (a table + key, a bucket + key); when the
   outermost locked call returns, still under the lock, the touched items and objects are read back as
   they now are and appended to the journal as one record (fsync; the ops: moto_journal_ops.py). A client
   is answered only after its write is on disk; a rolled-back transaction journals the unchanged state,
   which is harmless.

Not journaled (the deployers rebuild it on every start, or a deployer's reconciler redoes it): the
tables and buckets the deployers create and the buckets' configuration, schema changes of a table after
it was created (UpdateTable), object tags and ACLs, older versions in a versioned bucket (the latest
only), and every other service's state (executions, queues, functions, schedules).

moto_speedups.py and moto_ddb_reads.py hold the speed-ups of moto's hot paths, moto_ec2.py EC2 Fleet as AWS
answers an instant fleet (docs/PLACEMENT.md); install() installs them too.

Locks never nest across services and never wait on HTTP, so they cannot deadlock with the API
handler or Step Functions' task threads (which reach moto over HTTP). One thing must not be built on
top: a DynamoDB stream consumer that calls DynamoDB back synchronously in-process.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
import logging
import threading
import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

from moto.dynamodb.models import DynamoDBBackend, dynamodb_backends
from moto.dynamodb.models.dynamo_type import DynamoType, Item
from moto.dynamodb.models.table import Table
from moto.dynamodb.responses import DynamoHandler
from moto.s3.models import FakeKey, S3Backend, s3_backends
from moto.s3.responses import S3Response

from localmode import moto_ddb_reads, moto_ec2, moto_pin, moto_speedups
from localmode.journal import Journal, State
from localmode.moto_journal_ops import ddb_ops, key_values, restore_object, s3_ops

logger = logging.getLogger(__name__)


DDB_LOCK = threading.RLock()
S3_LOCK = threading.RLock()

# Backend methods that are entry points for in-process callers (the HTTP path is locked one level up).
DDB_ENTRY_POINTS = (
    "create_table",
    "delete_table",
    "update_table",
    "put_item",
    "get_item",
    "update_item",
    "delete_item",
    "query",
    "scan",
    "transact_write_items",
    "execute_statement",
    "execute_transaction",
    "batch_execute_statement",
)
S3_ENTRY_POINTS = (
    "create_bucket",
    "delete_bucket",
    "put_object",
    "copy_object",
    "delete_object",
    "delete_objects",
    "complete_multipart_upload",
)


class _Unit(threading.local):
    """Per thread: how deep in locked calls we are, and what the current unit of work touched."""

    def __init__(self) -> None:
        self.ddb_depth = 0
        self.s3_depth = 0
        self.ddb_touched: list[tuple[Any, ...]] = []
        self.s3_touched: list[tuple[Any, ...]] = []
        self.replaying = False
        # Set while TransactWriteItems runs: before-images of the items it writes, for rollback.
        self.undo: list[tuple[Table, DynamoType, DynamoType | None, Item | None]] | None = None


_unit = _Unit()
_journal: Journal | None = None
_patches: list[tuple[type, str, Any, bool]] = []
_SPEEDUPS = (moto_speedups, moto_ddb_reads, moto_ec2)  # their own patches, installed and removed with these


# --- installation ----------------------------------------------------------------------------------


def install() -> None:
    """Patch moto (idempotent). Locks apply at once; journaling starts with attach()."""
    if _patches:
        return
    moto_pin.check("localmode.moto_hooks", "the DynamoDB and S3 internals localmode/moto_hooks.py patches")
    # Write paths first: they mark what changed, and must run INSIDE the unit that flushes the marks.
    # Table.put_item/delete_item are the primitives that PutItem, BatchWriteItem, transactions and
    # PartiQL all end in; UpdateItem edits the stored item in place.
    _patch(Table, "put_item", _marks_put_item)
    _patch(Table, "delete_item", _marks_delete_item)
    _patch(DynamoDBBackend, "update_item", _marks_update_item)
    _patch(DynamoDBBackend, "create_table", _marks_create_table)
    _patch(DynamoDBBackend, "delete_table", _marks_delete_table)
    _patch(DynamoDBBackend, "transact_write_items", _item_level_rollback)
    _patch_table_deepcopy()
    _patch(S3Backend, "put_object", _marks_put_object)
    _patch(S3Backend, "delete_object", _marks_delete_object)
    _patch(S3Backend, "create_bucket", _marks_create_bucket)
    _patch(S3Backend, "delete_bucket", _marks_delete_bucket)
    # Request level: the whole request, serialisation included, under the service's lock.
    _patch(DynamoHandler, "call_action", _in_ddb_unit)
    _patch(S3Response, "_key_response", _in_s3_unit)
    _patch(S3Response, "_bucket_response", _in_s3_unit)
    # In-process entry points (outermost): the same locks and units for callers that skip HTTP.
    for name in DDB_ENTRY_POINTS:
        _patch(DynamoDBBackend, name, _in_ddb_unit)
    for name in S3_ENTRY_POINTS:
        _patch(S3Backend, name, _in_s3_unit)
    for module in _SPEEDUPS:
        module.install()


def installed() -> bool:
    return bool(_patches)


def uninstall() -> None:
    """Undo install() (tests): restore every patched attribute, newest first."""
    global _journal
    _journal = None
    for module in reversed(_SPEEDUPS):  # newest first, as below: a later patch may wrap an earlier one
        module.uninstall()
    while _patches:
        owner, name, original, owned = _patches.pop()
        if owned:
            setattr(owner, name, original)
        else:
            delattr(owner, name)


def attach(journal: Journal) -> None:
    """From now on every committed DynamoDB/S3 write is journaled before it is answered."""
    global _journal
    if not _patches:
        raise RuntimeError("moto_hooks.install() first")
    with DDB_LOCK, S3_LOCK:
        _journal = journal


def detach() -> None:
    global _journal
    with DDB_LOCK, S3_LOCK:
        _journal = None


def _patch(owner: type, name: str, decorate: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    original = getattr(owner, name)  # AttributeError here = moto moved something: loud, at start-up
    owned = name in owner.__dict__
    _patches.append((owner, name, owner.__dict__.get(name, original), owned))
    setattr(owner, name, functools.wraps(original)(decorate(original)))


# --- units of work -----------------------------------------------------------------------------------


@contextlib.contextmanager
def ddb_unit() -> Iterator[None]:
    with DDB_LOCK:
        _unit.ddb_depth += 1
        try:
            yield
        finally:
            _unit.ddb_depth -= 1
            if _unit.ddb_depth == 0:
                touched, _unit.ddb_touched = _unit.ddb_touched, []
                if touched and _journal is not None and not _unit.replaying:
                    _journal.append(ddb_ops(touched))


@contextlib.contextmanager
def s3_unit() -> Iterator[None]:
    with S3_LOCK:
        _unit.s3_depth += 1
        try:
            yield
        finally:
            _unit.s3_depth -= 1
            if _unit.s3_depth == 0:
                touched, _unit.s3_touched = _unit.s3_touched, []
                if touched and _journal is not None and not _unit.replaying:
                    _journal.append(s3_ops(touched, _journal))


def _in_ddb_unit(original: Callable[..., Any]) -> Callable[..., Any]:
    def locked(*args: Any, **kwargs: Any) -> Any:
        with ddb_unit():
            return original(*args, **kwargs)

    return locked


def _in_s3_unit(original: Callable[..., Any]) -> Callable[..., Any]:
    def locked(*args: Any, **kwargs: Any) -> Any:
        with s3_unit():
            return original(*args, **kwargs)

    return locked


# --- marking (DynamoDB) ------------------------------------------------------------------------------


def _canonical_key(table: Table, attrs: dict[str, Any]) -> dict[str, Any] | None:
    """The item's primary key in DynamoDB JSON, numbers normalised (1, 1.0 and 1E0 are one key)."""
    key = {}
    for name in (table.hash_key_attr, table.range_key_attr):
        if name is None:
            continue
        value = attrs.get(name)
        if not isinstance(value, dict) or len(value) != 1:
            return None
        ((kind, raw),) = value.items()
        key[name] = {kind: format(Decimal(raw).normalize(), "f") if kind == "N" else raw}
    return key


def _mark_item(table: Table, key: dict[str, Any] | None) -> None:
    if key is not None and not _unit.replaying:
        _unit.ddb_touched.append(("item", table.account_id, table.region_name, table.name, key))
    for signal in _write_signals:
        signal.set()


# Local mode's outbox publisher and webhook worker sleep until an item is written (instead of polling
# DynamoDB every 50 ms: 40 Queries a second per loop kept an idle `trainplane up` at ~10-20% of a core).
_write_signals: list[threading.Event] = []


def write_signal() -> threading.Event:
    """An Event set whenever any DynamoDB item is written or deleted in this process (clear it, then look)."""
    signal = threading.Event()
    _write_signals.append(signal)
    return signal


def wait_for_write(stop: threading.Event, signal: threading.Event, seconds: float) -> None:
    """Sleep until `signal` (an item was written), `stop`, or `seconds` (a safety net) pass."""
    deadline = time.monotonic() + seconds
    while not stop.is_set() and not signal.is_set() and time.monotonic() < deadline:
        signal.wait(0.2)


def _marks_put_item(original: Callable[..., Item]) -> Callable[..., Item]:
    def put_item(self: Table, item_attrs: dict[str, Any], *args: Any, **kwargs: Any) -> Item:
        key = _canonical_key(self, item_attrs)
        if key is not None:
            _remember_before(self, *key_values(self, key))
        item = original(self, item_attrs, *args, **kwargs)
        _mark_item(self, key)
        return item

    return put_item


def _marks_delete_item(original: Callable[..., Item | None]) -> Callable[..., Item | None]:
    def delete_item(self: Table, hash_key: DynamoType, range_key: DynamoType | None, *args: Any, **kwargs: Any) -> Item | None:
        _remember_before(self, hash_key, range_key)
        item = original(self, hash_key, range_key, *args, **kwargs)
        attrs = {self.hash_key_attr: hash_key.to_json()}
        if range_key is not None and self.range_key_attr is not None:
            attrs[self.range_key_attr] = range_key.to_json()
        _mark_item(self, _canonical_key(self, attrs))
        return item

    return delete_item


def _marks_update_item(original: Callable[..., Item]) -> Callable[..., Item]:
    def update_item(self: DynamoDBBackend, table_name: str, key: dict[str, Any], *args: Any, **kwargs: Any) -> Item:
        if _unit.undo is not None:
            table = _table_or_none(self, table_name)
            canonical = _canonical_key(table, key) if table is not None and isinstance(key, dict) else None
            if table is not None and canonical is not None:
                _remember_before(table, *key_values(table, canonical))
        try:
            return original(self, table_name, key, *args, **kwargs)
        finally:
            # Marked even on failure: a failed update expression may have edited the item half-way,
            # and journaling the item as it now is stays correct either way.
            table = _table_or_none(self, table_name)
            if table is not None and isinstance(key, dict):
                _mark_item(table, _canonical_key(table, key))

    return update_item


def _table_or_none(backend: DynamoDBBackend, table_name: str) -> Table | None:
    try:
        return backend.get_table(table_name)  # by name or ARN
    except Exception:
        return None


def _marks_create_table(original: Callable[..., Table]) -> Callable[..., Table]:
    signature = inspect.signature(original)

    def create_table(self: DynamoDBBackend, *args: Any, **kwargs: Any) -> Table:
        table = original(self, *args, **kwargs)
        if not _unit.replaying:
            bound = signature.bind(self, *args, **kwargs)
            params = {k: v for k, v in bound.arguments.items() if k not in ("self", "name")}
            _unit.ddb_touched.append(("create_table", self.account_id, self.region_name, table.name, params))
        return table

    return create_table


def _marks_delete_table(original: Callable[..., Table]) -> Callable[..., Table]:
    def delete_table(self: DynamoDBBackend, name: str) -> Table:
        table = original(self, name)
        if not _unit.replaying:
            _unit.ddb_touched.append(("delete_table", self.account_id, self.region_name, table.name))
        return table

    return delete_table


# --- transactions: item-level rollback ------------------------------------------------------------------
#
# moto's TransactWriteItems backs up every table it touches with copy.deepcopy BEFORE it starts, to
# restore them if the transaction is cancelled: O(table size) per transaction, ~0.25 s at 250 jobs and
# growing, under the lock that serialises all of DynamoDB. Here the backup is a no-op (the deep copy of
# a table returns the table itself while a transaction runs) and the write paths record the
# before-image of each item they are about to change; a failed transaction puts those back.


def _remember_before(table: Table, hash_key: DynamoType, range_key: DynamoType | None) -> None:
    if _unit.undo is not None:
        current = table.get_item(hash_key, range_key) if (range_key is not None or not table.has_range_key) else None
        _unit.undo.append((table, hash_key, range_key, copy.deepcopy(current)))


def _item_level_rollback(original: Callable[..., None]) -> Callable[..., None]:
    def transact_write_items(self: DynamoDBBackend, *args: Any, **kwargs: Any) -> None:
        if _unit.undo is not None:  # nested: the outer call owns the log
            return original(self, *args, **kwargs)
        undo: list[tuple[Table, DynamoType, DynamoType | None, Item | None]] = []
        _unit.undo = undo
        try:
            return original(self, *args, **kwargs)
        except BaseException:
            _unit.undo = None
            for table, hash_key, range_key, before in reversed(undo):
                _restore_item(table, hash_key, range_key, before)
            raise
        finally:
            _unit.undo = None

    return transact_write_items


def _restore_item(table: Table, hash_key: DynamoType, range_key: DynamoType | None, before: Item | None) -> None:
    # Table.items is {hash: Item} or {hash: {range: Item}} (moto 5.2.5, Table.put_item).
    if before is None:
        table.delete_item(hash_key, range_key)
    elif range_key is not None:
        table.items[hash_key][range_key] = before
    else:
        # moto annotates only the range-key layout of Table.items.
        table.items[hash_key] = before  # type: ignore[assignment]


def _patch_table_deepcopy() -> None:
    if "__deepcopy__" in Table.__dict__:
        raise RuntimeError("moto's Table now defines __deepcopy__: re-verify moto_hooks._patch_table_deepcopy")

    def table_deepcopy(self: Table, memo: dict[int, Any]) -> Table:
        if _unit.undo is not None:
            return self  # transact_write_items' whole-table backup: the undo log replaces it
        # Otherwise exactly what copy.deepcopy does for a plain object (backups, restores).
        clone: Table = object.__new__(type(self))
        memo[id(self)] = clone
        clone.__dict__.update(copy.deepcopy(self.__dict__, memo))
        return clone

    _patches.append((Table, "__deepcopy__", None, False))
    Table.__deepcopy__ = table_deepcopy  # type: ignore[attr-defined]


# --- marking (S3) --------------------------------------------------------------------------------------


def _marks_put_object(original: Callable[..., FakeKey]) -> Callable[..., FakeKey]:
    def put_object(self: S3Backend, bucket_name: str, key_name: str, *args: Any, **kwargs: Any) -> FakeKey:
        key = original(self, bucket_name, key_name, *args, **kwargs)
        if not _unit.replaying:
            _unit.s3_touched.append(("object", self.account_id, bucket_name, key_name))
        return key

    return put_object


def _marks_delete_object(original: Callable[..., Any]) -> Callable[..., Any]:
    def delete_object(self: S3Backend, bucket_name: str, key_name: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return original(self, bucket_name, key_name, *args, **kwargs)
        finally:
            if not _unit.replaying:
                _unit.s3_touched.append(("object", self.account_id, bucket_name, key_name))

    return delete_object


def _marks_create_bucket(original: Callable[..., Any]) -> Callable[..., Any]:
    def create_bucket(self: S3Backend, bucket_name: str, region_name: str, *args: Any, **kwargs: Any) -> Any:
        bucket = original(self, bucket_name, region_name, *args, **kwargs)
        if not _unit.replaying:
            _unit.s3_touched.append(("create_bucket", self.account_id, bucket_name, region_name))
        return bucket

    return create_bucket


def _marks_delete_bucket(original: Callable[..., Any]) -> Callable[..., Any]:
    def delete_bucket(self: S3Backend, bucket_name: str) -> Any:
        deleted = original(self, bucket_name)
        if deleted is not None and not _unit.replaying:
            _unit.s3_touched.append(("delete_bucket", self.account_id, bucket_name))
        return deleted

    return delete_bucket


# --- restore -----------------------------------------------------------------------------------------


def restore(state: State, journal: Journal) -> dict[str, int]:
    """Load the folded journal into moto (after the deployers created their resources). Nothing
    restored here is journaled again: the caller compacts the journal to `state` right after."""
    counts = {"tables": 0, "items": 0, "buckets": 0, "objects": 0, "skipped": 0}
    _unit.replaying = True
    try:
        with ddb_unit():
            for table_state in state.tables.values():
                backend = dynamodb_backends[table_state.account][table_state.region]
                if table_state.name not in backend.tables and table_state.params is not None:
                    backend.create_table(table_state.name, **table_state.params)
                    counts["tables"] += 1
                table = backend.tables.get(table_state.name)
                if table is None:
                    logger.warning("journal: table %s no longer exists; %d items not restored", table_state.name, len(table_state.items))
                    counts["skipped"] += len(table_state.items)
                    continue
                for op in table_state.items.values():
                    try:
                        table.put_item(op["item"])
                    except Exception as exc:
                        # Loud, not skipped: a silently dropped job is worse than a start-up that stops.
                        raise RuntimeError(
                            f"journal {journal.path}: cannot restore item {op['key']} into table {table.name} ({exc}); "
                            "did the table's definition change since it was written? Move the state dir aside to start empty."
                        ) from exc
                    counts["items"] += 1
        with s3_unit():
            for bucket_state in state.buckets.values():
                s3 = s3_backends[bucket_state.account]["global"]
                if bucket_state.name not in s3.buckets and bucket_state.region is not None:
                    s3.create_bucket(bucket_state.name, bucket_state.region)
                    counts["buckets"] += 1
                if bucket_state.name not in s3.buckets:
                    missing = len(bucket_state.objects)
                    logger.warning("journal: bucket %s no longer exists; %d objects not restored", bucket_state.name, missing)
                    counts["skipped"] += missing
                    continue
                for op in bucket_state.objects.values():
                    restore_object(s3, op, journal)
                    counts["objects"] += 1
    finally:
        _unit.replaying = False
    return counts
