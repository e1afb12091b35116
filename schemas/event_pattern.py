"""EventBridge event patterns: structural validation and matching, in one place.

The dispatcher matches policies in code behind ONE EventBridge rule (rather than one rule per policy:
a bus holds 300 rules by default, and each policy would also need its own target and permissions), so
the matcher must agree with EventBridge's on the operators it accepts. Supported: exact values,
prefix, suffix, anything-but (values or prefix), numeric, exists, equals-ignore-case, wildcard.
Anything else is refused when the policy is created.
"""

from __future__ import annotations

import fnmatch
import operator
from collections.abc import Callable
from typing import Any

_NUMERIC_OPS: dict[str, Callable[[float, float], bool]] = {
    "=": operator.eq,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
_OPERATORS = {"prefix", "suffix", "anything-but", "numeric", "exists", "equals-ignore-case", "wildcard"}


def validate_pattern(pattern: Any, path: str = "") -> None:
    if not isinstance(pattern, dict) or not pattern:
        raise ValueError(f"event pattern{' at ' + path if path else ''} must be a non-empty object")
    for key, value in pattern.items():
        where = f"{path}.{key}" if path else key
        if isinstance(value, dict):
            validate_pattern(value, where)
        elif isinstance(value, list):
            if not value:
                raise ValueError(f"event pattern {where}: an empty list matches nothing")
            for item in value:
                if isinstance(item, dict):
                    _validate_operator(item, where)
                elif not isinstance(item, str | int | float | bool) and item is not None:
                    raise ValueError(f"event pattern {where}: {item!r} is not a value or an operator")
        else:
            raise ValueError(f"event pattern {where}: values must be in a list, e.g. [{value!r}]")


def _validate_operator(item: dict[str, Any], where: str) -> None:
    if len(item) != 1 or next(iter(item)) not in _OPERATORS:
        raise ValueError(f"event pattern {where}: unsupported operator {item!r} (supported: {', '.join(sorted(_OPERATORS))})")
    name, arg = next(iter(item.items()))
    if name == "numeric":
        if (
            not isinstance(arg, list)
            or len(arg) % 2
            or not all(op in _NUMERIC_OPS and isinstance(num, int | float) for op, num in zip(arg[::2], arg[1::2], strict=True))
        ):
            raise ValueError(f"event pattern {where}: numeric takes pairs like ['>', 0, '<=', 5]")
    elif name == "exists" and not isinstance(arg, bool):
        raise ValueError(f"event pattern {where}: exists takes true or false")
    elif name == "prefix" and not (isinstance(arg, str) or _is_ignore_case(arg)):
        raise ValueError(f"event pattern {where}: prefix takes a string, or {{'equals-ignore-case': string}}")
    elif name in {"suffix", "equals-ignore-case", "wildcard"} and not isinstance(arg, str):
        raise ValueError(f"event pattern {where}: {name} takes a string")
    elif name == "anything-but":
        values = arg if isinstance(arg, list) else [arg]
        if isinstance(arg, dict):
            if set(arg) != {"prefix"} or not isinstance(arg["prefix"], str):
                raise ValueError(f"event pattern {where}: anything-but takes values, or {{'prefix': string}}")
        elif not values or not all(isinstance(v, str | int | float | bool) for v in values):
            raise ValueError(f"event pattern {where}: anything-but takes values, or {{'prefix': string}}")


def _is_ignore_case(arg: Any) -> bool:
    return isinstance(arg, dict) and set(arg) == {"equals-ignore-case"} and isinstance(arg["equals-ignore-case"], str)


def _matches_value(rule: Any, value: Any, present: bool) -> bool:
    if not isinstance(rule, dict):
        return present and (rule == value or (isinstance(value, list) and rule in value))
    name, arg = next(iter(rule.items()))
    if name == "exists":
        return present == arg
    if not present:
        return False  # as in EventBridge, only `exists: false` matches a missing field
    values = value if isinstance(value, list) else [value]
    return any(_operator(name, arg, v) for v in values)


def _operator(name: str, arg: Any, value: Any) -> bool:
    if name == "prefix":
        return isinstance(value, str) and value.startswith(arg if isinstance(arg, str) else arg.get("equals-ignore-case", ""))
    if name == "suffix":
        return isinstance(value, str) and value.endswith(arg)
    if name == "equals-ignore-case":
        return isinstance(value, str) and value.lower() == str(arg).lower()
    if name == "wildcard":
        return isinstance(value, str) and fnmatch.fnmatchcase(value, arg)
    if name == "numeric":
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        return all(_NUMERIC_OPS[op](value, num) for op, num in zip(arg[::2], arg[1::2], strict=True))
    if name == "anything-but":
        if isinstance(arg, dict) and "prefix" in arg:
            return not (isinstance(value, str) and value.startswith(arg["prefix"]))
        excluded = arg if isinstance(arg, list) else [arg]
        return value not in excluded
    return False


def matches(pattern: dict[str, Any], event: dict[str, Any]) -> bool:
    """True when `event` matches `pattern` the way an EventBridge rule would."""
    for key, rule in pattern.items():
        present = isinstance(event, dict) and key in event
        value = event.get(key) if isinstance(event, dict) else None
        if isinstance(rule, dict):
            if not present or not isinstance(value, dict) or not matches(rule, value):
                return False
        elif not any(_matches_value(item, value, present) for item in rule):
            return False
    return True
