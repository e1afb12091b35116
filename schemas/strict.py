"""The base of every request model (`Strict`: unknown fields refused, JSON types kept, no NaN or Infinity) and the
validation helpers the configs share (schemas/configs.py names them too)."""

from __future__ import annotations

import json
import types
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError


def relocated(exc: ValidationError, prefix: tuple[str | int, ...], title: str) -> ValidationError:
    """`exc`'s errors under `prefix` (raised in a validator, pydantic prefixes them with the field's own location)."""
    details = [
        InitErrorDetails(type=err["type"], loc=(*prefix, *err["loc"]), input=err["input"], ctx=err.get("ctx", {}))
        if err["type"] not in _CUSTOM
        else InitErrorDetails(type=PydanticCustomError(err["type"], err["msg"]), loc=(*prefix, *err["loc"]), input=err["input"])
        for err in exc.errors()
    ]
    return ValidationError.from_exception_data(title, details)


_CUSTOM = frozenset({"unknown_hyperparameter", "invalid_hyperparameter", "invalid_config"})


# Validation context for records read back from storage: the rules added at submit since a record was
# written (trainer rules, schemas/hyperparameters.py...) are not applied again, so an older job or policy
# still reads (and a GET never fails on it); what is submitted, patched or fired is checked in full.
STORED = {"stored": True}


def is_stored(info: ValidationInfo) -> bool:
    return bool(info.context and info.context.get("stored"))


def s3_uri_problem(uri: str) -> str | None:
    """Why the trainer could not read `uri` as s3://bucket/key (trainer/sources.py), or None."""
    if not uri.startswith("s3://"):
        return f"not an s3:// URI: {uri!r}"
    if not uri[len("s3://") :].split("/", 1)[0]:
        return f"s3 URI has no bucket: {uri!r}"
    return None


def raise_at(loc: tuple[str | int, ...], message: str, value: object, title: str) -> None:
    """Raise a validation error located at `loc` under the model being validated (not at the model itself)."""
    raise ValidationError.from_exception_data(
        title, [InitErrorDetails(type=PydanticCustomError("invalid_config", message), loc=loc, input=value)]
    )


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, use_enum_values=False, defer_build=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _json_types_are_kept(cls, data: Any, info: ValidationInfo) -> Any:
        # openapi.json says integer / number / boolean; pydantic's lax mode would also take true and "5" for a
        # number, 0 and "yes" for a boolean (found by the fuzzer, tests/e2e/test_fuzz_api.py). Refused here,
        # once for every request model. A retraining policy's input mapping writes event text into a job
        # (LAX_NUMBERS): "5" stays a number there.
        if isinstance(data, dict) and not (info.context or {}).get(LAX_NUMBERS):
            numeric, boolean = _typed_fields(cls)
            errors = []
            for key, value in data.items():
                if key in numeric and isinstance(value, bool | str):
                    message = f"must be a number, not {json.dumps(value)}"
                elif key in boolean and value is not None and not isinstance(value, bool):
                    message = f"must be true or false, not {json.dumps(value, default=str)}"
                else:
                    continue
                # Located at the key (not at the model), so the 422 names the field itself.
                errors.append(InitErrorDetails(type=PydanticCustomError("json_type", message), loc=(key,), input=value))
            if errors:
                raise ValidationError.from_exception_data(cls.__name__, errors)
        return data


LAX_NUMBERS = "lax_numbers"  # validation context key: numbers may come as numeric strings (input mappings)
_TYPED_FIELDS: dict[type, tuple[frozenset[str], frozenset[str]]] = {}


def _is_a(annotation: Any, kinds: tuple[type, ...]) -> bool:
    """One of `kinds`, or an optional / annotated one (a union with anything else is not)."""
    if annotation in kinds:
        return True
    origin = get_origin(annotation)
    if origin is Annotated:
        return _is_a(get_args(annotation)[0], kinds)
    if origin in (Union, types.UnionType):
        members = [a for a in get_args(annotation) if a is not type(None)]
        return bool(members) and all(_is_a(a, kinds) for a in members)
    return False


def _typed_fields(model: type[BaseModel]) -> tuple[frozenset[str], frozenset[str]]:
    """(numeric, boolean) field names of `model`, aliases included."""
    found = _TYPED_FIELDS.get(model)
    if found is None:
        numeric: set[str] = set()
        boolean: set[str] = set()
        for name, info in model.model_fields.items():
            if _is_a(info.annotation, (bool,)):
                boolean.update({name, info.alias or name})
            elif _is_a(info.annotation, (int, float)):
                numeric.update({name, info.alias or name})
        found = _TYPED_FIELDS[model] = (frozenset(numeric), frozenset(boolean))
    return found
