"""localmode/moto_ddb_reads.py: moto's Query and Scan without whole-table sorts answer exactly what plain moto
answers (items, their order, Count, ScannedCount, LastEvaluatedKey, errors), page by page, on random tables with
GSIs and LSIs; and the patch refuses to install on a moto whose methods it relies on have changed."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterator
from typing import Any

import moto
import pytest
from botocore.exceptions import ClientError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from moto.dynamodb.models.table import Table

from localmode import moto_ddb_reads, moto_pin
from tests.helpers.aws import emulated_aws

_tables = itertools.count(1)
S_VALUES = ["a", "ab", "b", "ba", "c", "x#1", "x#2", "x#10"]
N_VALUES = ["1", "2", "10", "-3", "0.5", "1.50", "1.5", "7"]
COMPARISONS = ["=", "<", "<=", ">", ">=", "BETWEEN", "begins_with"]


@pytest.fixture(scope="module")
def ddb() -> Iterator[Any]:
    was_installed = moto_ddb_reads.installed()
    with emulated_aws() as clients:
        yield clients.dynamodb()
    (moto_ddb_reads.install if was_installed else moto_ddb_reads.uninstall)()


def answer(call: Callable[[], dict[str, Any]]) -> Any:
    try:
        response = call()
    except ClientError as e:
        return ("error", e.response["Error"].get("Code"), e.response["Error"].get("Message"))
    response.pop("ResponseMetadata", None)
    return response


def plain_and_patched(call: Callable[[], dict[str, Any]]) -> tuple[Any, Any]:
    moto_ddb_reads.uninstall()
    plain = answer(call)
    moto_ddb_reads.install()
    return plain, answer(call)


def value_of(kind: str, draw: Callable[[Any], Any]) -> dict[str, str]:
    return {kind: draw(st.sampled_from(S_VALUES if kind == "S" else N_VALUES))}


@st.composite
def tables(draw: Callable[[Any], Any]) -> dict[str, Any]:
    """A table definition: key types, an optional range key, up to two GSIs and (with a range key) an LSI."""
    hash_type = draw(st.sampled_from("SN"))
    range_type = draw(st.sampled_from(["S", "N", None]))
    types = {"h": hash_type}
    key_schema = [{"AttributeName": "h", "KeyType": "HASH"}]
    if range_type:
        types["r"] = range_type
        key_schema.append({"AttributeName": "r", "KeyType": "RANGE"})
    projections = st.sampled_from(
        [{"ProjectionType": "ALL"}, {"ProjectionType": "KEYS_ONLY"}, {"ProjectionType": "INCLUDE", "NonKeyAttributes": ["a"]}]
    )
    gsis = []
    for n in range(draw(st.integers(0, 2))):
        schema = [{"AttributeName": f"g{n}h", "KeyType": "HASH"}]
        types[f"g{n}h"] = draw(st.sampled_from("SN"))
        if draw(st.booleans()):
            types[f"g{n}r"] = draw(st.sampled_from("SN"))
            schema.append({"AttributeName": f"g{n}r", "KeyType": "RANGE"})
        gsis.append({"IndexName": f"gsi{n}", "KeySchema": schema, "Projection": draw(projections)})
    lsis = []
    if range_type and draw(st.booleans()):
        types["l0r"] = draw(st.sampled_from("SN"))
        lsis.append(
            {
                "IndexName": "lsi0",
                "KeySchema": [{"AttributeName": "h", "KeyType": "HASH"}, {"AttributeName": "l0r", "KeyType": "RANGE"}],
                "Projection": draw(projections),
            }
        )
    definition: dict[str, Any] = {
        "TableName": f"equivalence-{next(_tables)}",
        "BillingMode": "PAY_PER_REQUEST",
        "KeySchema": key_schema,
        "AttributeDefinitions": [{"AttributeName": a, "AttributeType": t} for a, t in types.items()],
    }
    if gsis:
        definition["GlobalSecondaryIndexes"] = gsis
    if lsis:
        definition["LocalSecondaryIndexes"] = lsis
    items = []
    for _ in range(draw(st.integers(0, 30))):
        item = {"h": value_of(hash_type, draw)}
        if range_type:
            item["r"] = value_of(range_type, draw)
        for attribute, kind in types.items():
            if attribute not in ("h", "r") and draw(st.integers(0, 3)):  # index keys: mostly present (sparse indexes too)
                item[attribute] = value_of(kind, draw)
        if draw(st.booleans()):
            item["a"] = {"N": draw(st.sampled_from(N_VALUES))}
        if draw(st.booleans()):
            item["b"] = {"S": draw(st.sampled_from(S_VALUES)) * draw(st.integers(1, 3))}
        items.append(item)
    return {"definition": definition, "types": types, "items": items, "gsis": gsis, "lsis": lsis}


def key_condition(
    draw: Callable[[Any], Any], hash_attr: str, range_attr: str | None, types: dict[str, str], items: list[dict[str, Any]]
) -> tuple[str, dict[str, Any]]:
    stored = [item[hash_attr] for item in items if hash_attr in item]
    values = {":h": draw(st.sampled_from(stored)) if stored and draw(st.integers(0, 4)) else value_of(types[hash_attr], draw)}
    expression = "#h = :h"
    if range_attr and draw(st.booleans()):
        comparison = draw(st.sampled_from(COMPARISONS if types[range_attr] == "S" else COMPARISONS[:-1]))
        values[":r1"] = value_of(types[range_attr], draw)
        if comparison == "BETWEEN":
            values[":r2"] = value_of(types[range_attr], draw)
            expression += " AND #r BETWEEN :r1 AND :r2"
        elif comparison == "begins_with":
            expression += " AND begins_with(#r, :r1)"
        else:
            expression += f" AND #r {comparison} :r1"
    return expression, values


def read_options(draw: Callable[[Any], Any]) -> dict[str, Any]:
    """Limit, a filter, a projection or COUNT, as a caller might ask."""
    options: dict[str, Any] = {}
    if draw(st.booleans()):
        options["Limit"] = draw(st.integers(1, 4))
    extra_names: dict[str, str] = {}
    extra_values: dict[str, Any] = {}
    if draw(st.booleans()):
        options["FilterExpression"] = draw(
            st.sampled_from(["#fa > :fa", "attribute_exists(#fb)", "#fa < :fa OR attribute_not_exists(#fb)"])
        )
        extra_names.update({k: v for k, v in (("#fa", "a"), ("#fb", "b")) if k in options["FilterExpression"]})
        if ":fa" in options["FilterExpression"]:
            extra_values[":fa"] = {"N": draw(st.sampled_from(N_VALUES))}
    select = draw(st.sampled_from(["default", "COUNT", "projection"]))
    if select == "COUNT":
        options["Select"] = "COUNT"
    elif select == "projection":
        options["ProjectionExpression"] = "#pa, #pb"
        extra_names.update({"#pa": "a", "#pb": "b"})
    return {**options, "_names": extra_names, "_values": extra_values}


def paged(ddb: Any, operation: str, request: dict[str, Any]) -> list[Any]:
    """Every page plain moto answers, each compared with the patched answer; the next page starts at the plain
    answer's LastEvaluatedKey (the patched one equals it)."""
    pages = []
    start = None
    for _ in range(50):
        kwargs = dict(request, **({"ExclusiveStartKey": start} if start else {}))
        plain, patched = plain_and_patched(functools.partial(getattr(ddb, operation), **kwargs))
        assert patched == plain, f"{operation} {kwargs}"
        pages.append(plain)
        start = plain.get("LastEvaluatedKey") if isinstance(plain, dict) else None
        if not start:
            break
    return pages


def build_request(table: str, options: dict[str, Any], names: dict[str, str], values: dict[str, Any]) -> dict[str, Any]:
    names = {**names, **options.pop("_names")}
    values = {**values, **options.pop("_values")}
    request = {"TableName": table, **options}
    if names:
        request["ExpressionAttributeNames"] = names
    if values:
        request["ExpressionAttributeValues"] = values
    return request


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(table=tables(), data=st.data())
def test_patched_query_and_scan_answer_what_plain_moto_answers(ddb: Any, table: dict[str, Any], data: st.DataObject) -> None:
    definition = table["definition"]
    name = definition["TableName"]
    ddb.create_table(**definition)
    try:
        for item in table["items"]:
            ddb.put_item(TableName=name, Item=item)
        types = table["types"]
        ranged = "r" in types
        indexes: list[tuple[str | None, str, str | None]] = [(None, "h", "r" if ranged else None)]
        for index in table["gsis"] + table["lsis"]:
            keys = {k["KeyType"]: k["AttributeName"] for k in index["KeySchema"]}
            indexes.append((index["IndexName"], keys["HASH"], keys.get("RANGE")))
        for _ in range(6):
            index_name, hash_attr, range_attr = data.draw(st.sampled_from(indexes))
            expression, values = key_condition(data.draw, hash_attr, range_attr, types, table["items"])
            names = {"#h": hash_attr, **({"#r": range_attr} if range_attr and "#r" in expression else {})}
            request = build_request(name, read_options(data.draw), names, values)
            request["KeyConditionExpression"] = expression
            request["ScanIndexForward"] = data.draw(st.booleans())
            if index_name:
                request["IndexName"] = index_name
            paged(ddb, "query", request)
        for _ in range(2):
            index_name = data.draw(st.sampled_from([i[0] for i in indexes]))
            request = build_request(name, read_options(data.draw), {}, {})
            if index_name:
                request["IndexName"] = index_name
            paged(ddb, "scan", request)
    finally:
        ddb.delete_table(TableName=name)


def test_a_query_on_one_partition_reads_that_partition_only(ddb: Any) -> None:
    """The point of the patch: a base-table Query sorts nothing but its partition (moto sorts the whole table)."""
    ddb.create_table(
        TableName="one-partition",
        BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "h", "KeyType": "HASH"}, {"AttributeName": "r", "KeyType": "RANGE"}],
        AttributeDefinitions=[{"AttributeName": "h", "AttributeType": "S"}, {"AttributeName": "r", "AttributeType": "S"}],
    )
    for n in range(50):
        ddb.put_item(TableName="one-partition", Item={"h": {"S": f"p{n % 5}"}, "r": {"S": f"{n:03d}"}})

    def query_watching_all_items() -> tuple[dict[str, Any], list[int]]:
        """The query's answer, and the length of each list all_items() handed to moto's code."""
        lengths: list[int] = []
        current = Table.all_items

        def watching(self: Table) -> list[Any]:
            answer = current(self)
            lengths.append(len(answer))
            return answer

        Table.all_items = watching  # type: ignore[method-assign]
        try:
            response = ddb.query(TableName="one-partition", KeyConditionExpression="h = :h", ExpressionAttributeValues={":h": {"S": "p3"}})
        finally:
            Table.all_items = current  # type: ignore[method-assign]
        response.pop("ResponseMetadata")
        return response, lengths

    moto_ddb_reads.uninstall()
    plain, plain_lengths = query_watching_all_items()
    moto_ddb_reads.install()
    patched, patched_lengths = query_watching_all_items()
    assert plain_lengths == [50]  # plain moto sorts all 50 items for a partition of 10
    assert patched_lengths == [10]
    assert [i["r"]["S"] for i in patched["Items"]] == [f"{n:03d}" for n in range(3, 50, 5)]
    assert patched == plain
    ddb.delete_table(TableName="one-partition")


def test_the_patch_is_written_for_the_pinned_moto_and_its_query_code() -> None:
    assert moto.__version__ == moto_pin.PINNED_MOTO_VERSION
    for name, digest in moto_ddb_reads.QUERY_SOURCES.items():
        assert moto_ddb_reads.source_digest(name) == digest, f"moto's Table.{name} changed: re-read localmode/moto_ddb_reads.py"


def test_a_changed_moto_refuses_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    was_installed = moto_ddb_reads.installed()
    moto_ddb_reads.uninstall()
    try:
        monkeypatch.setattr(moto_pin.moto, "__version__", "9.9.9")
        with pytest.raises(moto_pin.MotoVersionError, match="moto_ddb_reads"):
            moto_ddb_reads.install()
        monkeypatch.undo()
        monkeypatch.setitem(moto_ddb_reads.QUERY_SOURCES, "query", "0" * 64)
        with pytest.raises(RuntimeError, match=r"Table\.query"):
            moto_ddb_reads.install()
        assert not moto_ddb_reads.installed()
    finally:
        monkeypatch.undo()
        if was_installed:
            moto_ddb_reads.install()
