"""Hyperparameters: training_config.hyperparameters is a dict of strings (the seed's API, and what
SageMaker's hyperparameters.json carries); this module is the one place that parses them.

Unknown keys are refused: a misspelt `learning_rat` silently training at the default rate is worse
than a run that fails in PREPARING with the key's name.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from schemas.configs import TrainingType
from trainer.failures import UserError

_ADAPTER_TYPES = {TrainingType.LORA, TrainingType.QLORA}
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


class Hyper(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

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
    seed: int | None = Field(default=None, description="Model init / dropout seed; data_config.seed when None.")

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
    def from_strings(cls, values: dict[str, str], training_type: TrainingType | str) -> Hyper:
        """Parse the string map; raises UserError naming every unknown or invalid key."""
        training_type = TrainingType(training_type)
        unknown = sorted(set(values) - set(cls.model_fields))
        if unknown:
            known = ", ".join(sorted(cls.model_fields))
            raise UserError(f"unknown hyperparameter(s): {', '.join(unknown)} (known: {known})")
        data: dict[str, Any] = {key: value for key, value in values.items() if value is not None}
        if "learning_rate" not in data:
            # Adapters train a few million fresh parameters and want a much larger step than a full fine-tune.
            data["learning_rate"] = 2e-4 if training_type in _ADAPTER_TYPES else 5e-5
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(str(p) for p in err['loc']) or 'hyperparameters'}: {err['msg']}" for err in exc.errors())
            raise UserError(f"invalid hyperparameters: {problems}") from exc

    def packing_for(self, training_type: TrainingType | str) -> bool:
        if self.packing is not None:
            return self.packing
        return TrainingType(training_type) == TrainingType.CONTINUED_PRETRAIN

    def to_strings(self) -> dict[str, str]:
        """The inverse of from_strings, for checkpoints and hyperparameters.json round trips."""
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
