"""Decoding DynamoDB items into plain Python (functions/adapters/dynamodb_items.py): the fast
decoder must give exactly what boto3's TypeDeserializer (+ _plain) gives, for every attribute kind."""

from __future__ import annotations

from typing import Any

import pytest
from boto3.dynamodb.types import TypeDeserializer

from functions.adapters import dynamodb_items as items

VALUES: dict[str, dict[str, Any]] = {
    "s": {"S": "text ✓"},
    "empty": {"S": ""},
    "int": {"N": "42"},
    "negative": {"N": "-7"},
    "zero": {"N": "0"},
    "minus_zero": {"N": "-0"},
    "padded": {"N": "007"},
    "wide": {"N": "9" * 38},
    "fraction": {"N": "1.50"},
    "exponent": {"N": "1E+2"},
    "small": {"N": "-3.5e-3"},
    "t": {"BOOL": True},
    "f": {"BOOL": False},
    "null": {"NULL": True},
    "map": {"M": {"a": {"N": "1"}, "b": {"L": [{"S": "x"}, {"N": "2.5"}, {"NULL": True}]}, "c": {"M": {}}}},
    "list": {"L": [{"M": {"k": {"BOOL": False}}}, {"L": []}, {"N": "10"}]},
    "ss": {"SS": ["b", "a"]},
    "ns": {"NS": ["1", "2.5"]},
    "nested_set": {"M": {"tags": {"SS": ["x"]}}},
}


def reference(value: dict[str, Any]) -> Any:
    return items._plain(TypeDeserializer().deserialize(value))


@pytest.mark.parametrize("name", sorted(VALUES))
def test_each_kind_decodes_as_boto3_does(name: str) -> None:
    # Given one attribute value, when decoded by the fast path
    decoded = items.from_item({name: VALUES[name]})[name]
    # Then it equals boto3's reading, of the same Python type (int stays int, float stays float)
    expected = reference(VALUES[name])
    if isinstance(expected, list) and name in ("ss", "ns"):
        assert sorted(decoded) == sorted(expected)
    else:
        assert decoded == expected
        assert type(decoded) is type(expected)


def test_numbers_keep_their_python_type() -> None:
    decoded = items.from_item({k: VALUES[k] for k in ("int", "wide", "fraction", "exponent", "minus_zero")})
    assert decoded == {"int": 42, "wide": int("9" * 38), "fraction": 1.5, "exponent": 100, "minus_zero": 0}
    assert [type(decoded[k]) for k in ("int", "fraction", "exponent")] == [int, float, int]


def test_packed_documents_are_unpacked() -> None:
    # A packed attribute (field_attr of a nested document) comes back as the document
    packed = items.field_attr("training_config", {"a": [1, 2.5, None], "b": {"c": "d"}})
    assert "B" in packed
    assert items.from_item({"training_config": packed}) == {"training_config": {"a": [1, 2.5, None], "b": {"c": "d"}}}
