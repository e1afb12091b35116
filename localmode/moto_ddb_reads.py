"""DynamoDB Query and Scan in moto without sorting the whole table. Installed with moto_hooks (local mode and
the test fixtures that install it); pinned to moto 5.2.5 and to the source of the methods it narrows
(QUERY_SOURCES: a moto upgrade that edits them refuses to install until they are re-read).
tests/integration/test_moto_ddb_reads.py proves that plain and patched moto answer alike, on random tables with
GSIs and LSIs.

moto 5.2.5's `Table.query` takes its candidates from `Table.all_items()`, which lists and SORTS every item of
the table, on every Query: the base table's (then keeps one partition) and an index's (then filters and sorts
again by the index's keys). Local mode keeps jobs, timelines, checkpoints, the event outbox, teams, budgets
and sweeps in one jobs table, so each Query cost O(N log N) of the whole table, through DynamoType's Python
comparison methods (a Decimal built per comparison of numbers): the event publisher's drain (a Query of the
OUTBOX partition) fell behind with 100 jobs running (docs/BENCHMARKS.md, Events).

Here `Table.query` hands moto's own code (which runs unchanged, filters, limits, paging and projection
included) a narrower `all_items()` for that one call:
- a base-table Query: the queried partition only (`self.items[hash_key]`, unsorted: moto sorts the
  candidates by range key next, and range keys are unique within a partition);
- an index Query: every item, unsorted, less those whose index hash key plainly differs (an `S`/`B` value
  not equal to the one asked for; any other type is left to moto's own comparison). moto then sorts the
  candidates by the index keys followed by the table's keys: unique per item, so the order does not depend
  on the order the candidates came in.
Every other caller of `all_items()` (Scan, exports, streams) gets the sorted list moto builds, with the same
order computed from keys read once per item (the values DynamoType compares) instead of per comparison;
a table whose key attributes mix types (DynamoDB refuses that) is sorted by moto's own code.
"""

from __future__ import annotations

import hashlib
import inspect
import threading
from typing import Any

from moto.dynamodb.models.dynamo_type import DynamoType, Item
from moto.dynamodb.models.table import Table

from localmode import moto_pin

# sha256 of the source of each method this module relies on, as moto 5.2.5 has it: query takes its
# candidates from one call of self.all_items(), all_items is the sorted list.
QUERY_SOURCES = {
    "query": "002b4d00be6df07cf37f6cbe0132e5eb89455ae12a8e79b23db3fb492450f21e",
    "all_items": "c80d2ee3c896acd0cab6ca35aaeae3ab3fb65858933f8a3403d4e027c240f31d",
}
_PLAIN_EQUALITY_TYPES = frozenset({"S", "B"})  # DynamoType equality is value equality for these

_originals: dict[str, Any] = {}
_narrowed = threading.local()  # .table, .candidates: the all_items() answer of the Query running on this thread


def source_digest(name: str) -> str:
    return hashlib.sha256(inspect.getsource(_originals.get(name) or Table.__dict__[name]).encode()).hexdigest()


def install() -> None:
    if _originals:
        return
    moto_pin.check("localmode.moto_ddb_reads", "moto/dynamodb/models/table.py's Table.query and Table.all_items")
    for name, digest in QUERY_SOURCES.items():
        if source_digest(name) != digest:
            raise RuntimeError(f"moto's Table.{name} is not the code localmode/moto_ddb_reads.py was written against: re-read it")
    _originals["query"] = Table.__dict__["query"]
    _originals["all_items"] = Table.__dict__["all_items"]
    Table.query = _query  # type: ignore[method-assign]
    Table.all_items = _all_items  # type: ignore[method-assign]


def uninstall() -> None:
    while _originals:
        name, original = _originals.popitem()
        setattr(Table, name, original)


def installed() -> bool:
    return bool(_originals)


def _query(
    self: Table,
    hash_key: DynamoType | None,
    range_comparison: str | None,
    range_objs: list[DynamoType],
    limit: int,
    exclusive_start_key: dict[str, Any],
    scan_index_forward: bool,
    projection_expressions: list[list[str]] | None,
    index_name: str | None = None,
    consistent_read: bool = False,
    filter_expression: Any = None,
    hash_key_conditions: list[tuple[str, DynamoType]] | None = None,
    range_key_conditions: list[tuple[str, str, list[DynamoType]]] | None = None,
    **filter_kwargs: Any,
) -> Any:
    def original() -> Any:
        return _originals["query"](
            self,
            hash_key,
            range_comparison,
            range_objs,
            limit,
            exclusive_start_key,
            scan_index_forward,
            projection_expressions,
            index_name,
            consistent_read,
            filter_expression,
            hash_key_conditions=hash_key_conditions,
            range_key_conditions=range_key_conditions,
            **filter_kwargs,
        )

    if index_name:
        candidates = _index_candidates(self, hash_key_conditions or [])
    elif hash_key is not None:
        candidates = _partition(self, hash_key)
    else:
        return original()
    _narrowed.table, _narrowed.candidates = self, candidates
    try:
        return original()
    finally:
        _narrowed.table = _narrowed.candidates = None


def _all_items(self: Table) -> list[Item]:
    if getattr(_narrowed, "table", None) is self:
        candidates = _narrowed.candidates
        _narrowed.table = _narrowed.candidates = None  # for the Query's one call only
        return candidates
    return _sorted_items(self)


def _unsorted(table: Table) -> list[Item]:
    if table.range_key_attr:
        return [item for partition in table.items.values() for item in partition.values()]
    return list(table.items.values())  # type: ignore[arg-type]


def _partition(table: Table, hash_key: DynamoType) -> list[Item]:
    partition = table.items.get(hash_key)  # .get: table.items is a defaultdict, indexing would add an entry
    if partition is None:
        return []
    if table.range_key_attr:
        return list(partition.values())
    return [partition]  # type: ignore[list-item]


def _index_candidates(table: Table, conditions: list[tuple[str, DynamoType]]) -> list[Item]:
    """Every item moto's index Query could keep: those whose hash key attributes might equal the ones asked."""
    plain = [(name, value.type, value.value) for name, value in conditions if value.type in _PLAIN_EQUALITY_TYPES]
    if not plain:
        return _unsorted(table)
    kept = []
    for item in _unsorted(table):
        attrs = getattr(item, "attrs", None)
        if attrs is None:  # not an Item: moto's own check drops it
            kept.append(item)
            continue
        for name, kind, raw in plain:
            value = attrs.get(name)
            if value is None or value.type != kind or value.value != raw:
                break
        else:
            kept.append(item)
    return kept


def _sorted_items(table: Table) -> list[Item]:
    """What moto's all_items() answers (every item, by hash key then range key), with the keys read once."""
    items = _unsorted(table)
    if not items or not all(isinstance(item, Item) for item in items):
        return _originals["all_items"](table)
    hash_types = {item.hash_key.type for item in items}
    ranged = items[0].range_key is not None
    range_types = {item.range_key.type for item in items if item.range_key is not None}
    if len(hash_types) > 1 or len(range_types) > 1 or any((item.range_key is not None) != ranged for item in items):
        return _originals["all_items"](table)
    if ranged:
        return sorted(items, key=lambda item: (item.hash_key.cast_value, item.range_key.cast_value))  # type: ignore[union-attr]
    return sorted(items, key=lambda item: item.hash_key.cast_value)
