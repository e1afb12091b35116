"""The kinds of job and their bounds: the enums every other schema and the trainer's rules name.

Below schemas/configs.py and schemas/hyperparameters.py (both import it), so neither imports the other
back. schemas/configs.py re-exports these names, which is where the rest of the code imports them from.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

# numpy's and torch's samplers take a 32-bit unsigned seed: a larger one fails inside the run.
MAX_SEED = 2**32 - 1


class TrainingType(StrEnum):
    SFT = "SFT"
    LORA = "LORA"
    QLORA = "QLORA"
    DPO = "DPO"
    RLHF = "RLHF"
    CONTINUED_PRETRAIN = "CONTINUED_PRETRAIN"
    FULL_FINETUNE = "FULL_FINETUNE"

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return _offered_only(handler(core_schema), handler, UNSUPPORTED_TRAINING_TYPES)


class FrameworkType(StrEnum):
    HF_TRAINER = "HF_TRAINER"
    DEEPSPEED = "DEEPSPEED"
    FSDP = "FSDP"
    MEGATRON = "MEGATRON"
    CUSTOM = "CUSTOM"

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return _offered_only(handler(core_schema), handler, UNSUPPORTED_FRAMEWORKS)


def _offered_only(schema: JsonSchemaValue, handler: GetJsonSchemaHandler, refused: dict[Any, str]) -> JsonSchemaValue:
    """The enum's JSON schema (openapi.json) lists only what submit accepts; the refused values are named
    in its description (they stay in the Python enum: the seed's API has them, and submit answers 422)."""
    if not refused:
        return schema
    target = handler.resolve_ref_schema(schema)
    target["enum"] = [value for value in target.get("enum", []) if value not in {str(r) for r in refused}]
    target["description"] = "Refused at submit with a 422, not supported yet: " + "; ".join(refused.values()) + "."
    return schema


# Accepted in the schema (they are part of the seed's API) but refused at submit until the trainer
# really implements them: a feature we cannot offer is a clear 422, never a fake run.
UNSUPPORTED_TRAINING_TYPES: dict[TrainingType, str] = {}
UNSUPPORTED_FRAMEWORKS = {
    FrameworkType.MEGATRON: "the MEGATRON framework is not supported yet; use FSDP",
}
