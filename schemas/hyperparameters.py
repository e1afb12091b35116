"""Hyperparameters: training_config.hyperparameters is a dict of strings (the seed's API, and what
SageMaker's hyperparameters.json carries); this model is the one set of rules that parses them.

Shared by both ends: submit checks a job's hyperparameters with it (TrainingConfig's validator, so an
unknown or invalid key is a 422 naming `training_config.hyperparameters.<name>`), and the trainer
parses them with it (trainer/hyper.py), so what submit accepts the trainer accepts. Pure pydantic: no
torch, no transformers (the API Lambda imports it).

Unknown keys are refused: a misspelt `learning_rat` silently training at the default rate is worse
than a refusal with the key's name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from schemas.configs import MAX_SEED, TrainingType

ADAPTER_TYPES = frozenset({TrainingType.LORA, TrainingType.QLORA})
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


class Hyperparameters(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    max_steps: int | None = Field(default=None, ge=1)
    num_train_epochs: float = Field(default=1.0, gt=0)
    learning_rate: float = Field(default=5e-5, gt=0)
    weight_decay: float = Field(default=0.0, ge=0)
    warmup_steps: int = Field(default=0, ge=0)
    lr_scheduler_type: Literal["linear", "cosine", "constant"] = "linear"
    max_grad_norm: float = Field(default=1.0, ge=0, description="0 disables clipping.")
    logging_steps: int = Field(default=1, ge=1)
    eval_steps: int | None = Field(default=None, ge=1)
    lora_rank: int = Field(default=8, ge=1)
    lora_alpha: int = Field(default=16, ge=1)
    lora_dropout: float = Field(default=0.0, ge=0, lt=1)
    lora_target_modules: list[str] | None = None
    dpo_beta: float = Field(default=0.1, gt=0)
    packing: bool | None = Field(default=None, description="None: true for CONTINUED_PRETRAIN, false otherwise.")
    gradient_checkpointing: bool = False
    optimizer: Literal["adamw"] = "adamw"
    async_checkpoint: bool = True
    seed: int | None = Field(default=None, ge=0, le=MAX_SEED, description="Model init / dropout seed; data_config.seed when None.")

    @field_validator("lora_target_modules", mode="before")
    @classmethod
    def _split_modules(cls, value: Any) -> Any:
        if isinstance(value, str):
            names = [part.strip() for part in value.split(",") if part.strip()]
            return names or None
        return value

    @field_validator("packing", "gradient_checkpointing", "async_checkpoint", mode="before")
    @classmethod
    def _parse_bool(cls, value: Any) -> Any:
        # pydantic's own bool parsing accepts "t"/"y"/...; we document exactly these spellings.
        if isinstance(value, str):
            lowered = value.strip().lower()
            if lowered in _TRUE:
                return True
            if lowered in _FALSE:
                return False
            raise ValueError(f"expected true or false, got {value!r}")
        return value

    @classmethod
    def parse(cls, values: Mapping[str, str | None], training_type: TrainingType | str) -> Self:
        """Parse the string map for a job of `training_type`.

        Raises pydantic's ValidationError with one error per unknown or invalid key, located at the
        key (raised inside a validator of TrainingConfig, the location becomes
        training_config.hyperparameters.<key>).
        """
        training_type = TrainingType(training_type)
        errors = [unknown_error(key) for key in sorted(set(values) - set(cls.model_fields))]
        data: dict[str, Any] = {key: value for key, value in values.items() if value is not None and key in cls.model_fields}
        if "learning_rate" not in data:
            # Adapters train a few million fresh parameters and want a much larger step than a full fine-tune.
            data["learning_rate"] = 2e-4 if training_type in ADAPTER_TYPES else 5e-5
        try:
            parsed = cls.model_validate(data)
        except ValidationError as exc:
            errors += [InitErrorDetails(type=e["type"], loc=e["loc"], input=e["input"], ctx=e.get("ctx", {})) for e in exc.errors()]
            raise ValidationError.from_exception_data(cls.__name__, errors) from None
        if training_type == TrainingType.DPO and parsed.packing:
            errors.append(
                field_error("packing", "packing=true is not supported for DPO (each preference pair is its own example)", values["packing"])
            )
        if errors:
            raise ValidationError.from_exception_data(cls.__name__, errors)
        return parsed

    def packing_for(self, training_type: TrainingType | str) -> bool:
        if self.packing is not None:
            return self.packing
        return TrainingType(training_type) == TrainingType.CONTINUED_PRETRAIN

    def to_strings(self) -> dict[str, str]:
        """The inverse of parse, for checkpoints and hyperparameters.json round trips."""
        out: dict[str, str] = {}
        for key, value in self.model_dump().items():
            if value is None:
                continue
            if isinstance(value, bool):
                out[key] = "true" if value else "false"
            elif isinstance(value, list):
                out[key] = ",".join(value)
            else:
                out[key] = str(value)
        return out


def known_hyperparameters() -> list[str]:
    return sorted(Hyperparameters.model_fields)


def unknown_error(key: str) -> InitErrorDetails:
    known = ", ".join(known_hyperparameters())
    return InitErrorDetails(
        type=PydanticCustomError("unknown_hyperparameter", "unknown hyperparameter (known: {known})", {"known": known}),
        loc=(key,),
        input=key,
    )


def field_error(key: str, message: str, value: Any) -> InitErrorDetails:
    return InitErrorDetails(type=PydanticCustomError("invalid_hyperparameter", message), loc=(key,), input=value)
