"""A DynamoDB client that checks each request as real DynamoDB would before moto runs it.

moto does not refuse an expression that uses a name or value placeholder the request does not define,
nor one that defines a placeholder no expression uses, nor an unknown function or enum value: real
DynamoDB refuses all of them (ValidationException). `CheckedClients` hands the repositories a client that
raises AssertionError on such a request, and records every call (operation, parameters) for assertions.
"""

from __future__ import annotations

import re
from typing import Any

from functions.adapters.aws import AwsClients

_EXPRESSIONS = ("UpdateExpression", "ConditionExpression", "KeyConditionExpression", "FilterExpression", "ProjectionExpression")
_FUNCTIONS = {
    "attribute_exists",
    "attribute_not_exists",
    "attribute_type",
    "begins_with",
    "contains",
    "size",
    "if_not_exists",
    "list_append",
}
_KEYWORDS = {"AND", "OR", "NOT", "IN", "BETWEEN"}  # case-insensitive, unlike the functions
_RETURN_VALUES = {"ALL_OLD", "NONE"}
_WRITES = {"Put", "Update", "Delete", "ConditionCheck"}


def check_request(request: dict[str, Any]) -> None:
    text = " ".join(request[k] for k in _EXPRESSIONS if k in request)
    for k in _EXPRESSIONS:
        if k in request:
            assert isinstance(request[k], str) and request[k].strip(), f"{k} is empty: {request!r}"
    names = request.get("ExpressionAttributeNames", {})
    values = request.get("ExpressionAttributeValues")
    used_names = set(re.findall(r"#\w+", text))
    assert used_names == set(names), f"names used {sorted(used_names)}, defined {sorted(names)}"
    assert all(isinstance(v, str) and v for v in names.values()), f"a name placeholder without an attribute name: {names!r}"
    if values is not None:
        assert values, "DynamoDB refuses an empty ExpressionAttributeValues"
    used = set(re.findall(r":\w+", text))
    assert used == set(values or {}), f"values used {sorted(used)}, defined {sorted(values or {})}"
    for function in re.findall(r"([A-Za-z_]\w*)\s*\(", text):
        if function.upper() in _KEYWORDS:
            continue
        assert function in _FUNCTIONS, f"{function} is not a DynamoDB function"
    if "ReturnValuesOnConditionCheckFailure" in request:
        assert request["ReturnValuesOnConditionCheckFailure"] in _RETURN_VALUES


class CheckedClient:
    def __init__(self, real: Any) -> None:
        self._real = real
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def _call(self, operation: str, request: dict[str, Any]) -> Any:
        if operation == "transact_write_items":
            for write in request["TransactItems"]:
                ((kind, inner),) = write.items()
                assert kind in _WRITES, f"{kind} is not a transaction write"
                check_request(inner)
        else:
            check_request(request)
        self.calls.append((operation, request))
        return getattr(self._real, operation)(**request)

    def writes(self) -> list[str]:
        return [op for op, _ in self.calls if op in {"put_item", "update_item", "delete_item", "transact_write_items", "batch_write_item"}]

    def get_item(self, **request: Any) -> Any:
        return self._call("get_item", request)

    def put_item(self, **request: Any) -> Any:
        return self._call("put_item", request)

    def update_item(self, **request: Any) -> Any:
        return self._call("update_item", request)

    def delete_item(self, **request: Any) -> Any:
        return self._call("delete_item", request)

    def query(self, **request: Any) -> Any:
        return self._call("query", request)

    def transact_write_items(self, **request: Any) -> Any:
        return self._call("transact_write_items", request)

    def batch_write_item(self, **request: Any) -> Any:
        self.calls.append(("batch_write_item", request))
        return self._real.batch_write_item(**request)


class CheckedClients(AwsClients):
    """The emulated clients, DynamoDB's checked (the other services as they are)."""

    def __init__(self, real: AwsClients) -> None:
        super().__init__(real.region, real.endpoint_url)
        self._inner = real
        self.ddb = CheckedClient(real.dynamodb())

    def client(self, service: str) -> Any:
        return self.ddb if service == "dynamodb" else self._inner.client(service)
