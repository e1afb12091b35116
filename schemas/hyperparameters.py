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

import re
import types
from collections.abc import Iterable, Mapping
from typing import Any, Literal, Self, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from schemas.kinds import MAX_SEED, TrainingType

# transformers' SchedulerType values that need nothing beyond warmup and total steps (a trainer test checks
# each is one transformers.get_scheduler knows). reduce_lr_on_plateau, cosine_with_min_lr,
# cosine_warmup_with_min_lr, warmup_stable_decay and greedy need arguments we do not take: refused.
SchedulerName = Literal["linear", "cosine", "cosine_with_restarts", "polynomial", "constant", "constant_with_warmup", "inverse_sqrt"]
# Canonical optimizer names (transformers' OptimizerNames spellings) and the other spellings of each.
OptimName = Literal["adamw_torch", "adamw_torch_fused", "adam", "adafactor", "sgd"]
OPTIMIZER_SPELLINGS = {
    "adamw": "adamw_torch",
    "adamw_torch": "adamw_torch",
    "adamw_hf": "adamw_torch",
    "adamw_torch_fused": "adamw_torch_fused",
    "adam": "adam",
    "adafactor": "adafactor",
    "sgd": "sgd",
}
ADAPTER_TYPES = frozenset({TrainingType.LORA, TrainingType.QLORA})
# Hyperparameters an RLHF (GRPO) job refuses by name, and why (schemas/configs.py RLHFConfig holds GRPO's own settings).
_NO_RLHF_LORA = "RLHF trains the full model (LoRA adapters are not offered for RLHF yet)"
_NO_RLHF_EVAL = "RLHF has no evaluation pass (the reward is reported at every logging step)"
RLHF_REFUSED = {
    "packing": "prompts are generated from one by one",
    "label_smoothing_factor": "GRPO's loss is not a token cross-entropy",
    "neftune_noise_alpha": "not applied to generation-based training",
    "dpo_beta": "use training_config.rlhf.beta (the KL coefficient)",
    "lora_rank": _NO_RLHF_LORA,
    "lora_alpha": _NO_RLHF_LORA,
    "lora_dropout": _NO_RLHF_LORA,
    "lora_target_modules": _NO_RLHF_LORA,
    "eval_steps": _NO_RLHF_EVAL,
    "eval_strategy": _NO_RLHF_EVAL,
    "evaluation_strategy": _NO_RLHF_EVAL,
}
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


class Hyperparameters(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    max_steps: int | None = Field(default=None, ge=1)
    num_train_epochs: float = Field(default=1.0, gt=0)
    learning_rate: float = Field(default=5e-5, gt=0)
    weight_decay: float = Field(default=0.0, ge=0)
    warmup_steps: int = Field(default=0, ge=0)
    warmup_ratio: float = Field(default=0.0, ge=0, lt=1, description="Warmup as a fraction of the total steps (when warmup_steps is 0).")
    lr_scheduler_type: SchedulerName = Field(default="linear", description="transformers.get_scheduler's name.")
    max_grad_norm: float = Field(default=1.0, ge=0, description="0 disables clipping.")
    logging_steps: int = Field(default=1, ge=1)
    logging_strategy: Literal["steps", "epoch", "no"] = Field(default="steps", description="no: only the last step is reported.")
    eval_steps: int | None = Field(default=None, ge=1)
    eval_strategy: Literal["no", "steps", "epoch"] | None = Field(default=None, description="None: steps when eval_steps is set, else no.")
    evaluation_strategy: Literal["no", "steps", "epoch"] | None = Field(default=None, description="The older name of eval_strategy.")
    save_strategy: Literal["steps", "epoch"] | None = Field(default=None, description="Alias of output_config.checkpoint.save_strategy.")
    save_steps: int | None = Field(default=None, ge=1, description="Alias of output_config.checkpoint.save_steps.")
    per_device_train_batch_size: int | None = Field(default=None, ge=1, le=65_536, description="Alias of data_config.batch_size.")
    gradient_accumulation_steps: int | None = Field(default=None, ge=1, le=4096, description="Alias of data_config's field.")
    lora_rank: int = Field(default=8, ge=1)
    lora_alpha: int = Field(default=16, ge=1)
    lora_dropout: float = Field(default=0.0, ge=0, lt=1)
    lora_target_modules: list[str] | None = None
    dpo_beta: float = Field(default=0.1, gt=0)
    packing: bool | None = Field(default=None, description="None: true for CONTINUED_PRETRAIN, false otherwise.")
    gradient_checkpointing: bool = False
    optim: OptimName | None = Field(default=None, description="TrainingArguments' name; optimizer is the same setting.")
    optimizer: OptimName | None = None
    adam_beta1: float = Field(default=0.9, ge=0, lt=1)
    adam_beta2: float = Field(default=0.999, ge=0, lt=1)
    adam_epsilon: float = Field(default=1e-8, gt=0)
    bf16: bool = False
    fp16: bool = False
    torch_compile: bool = False
    neftune_noise_alpha: float | None = Field(default=None, gt=0)
    label_smoothing_factor: float = Field(default=0.0, ge=0, lt=1)
    async_checkpoint: bool = True
    seed: int | None = Field(default=None, ge=0, le=MAX_SEED, description="Model init / dropout seed; data_config.seed when None.")

    @field_validator("lora_target_modules", mode="before")
    @classmethod
    def _split_modules(cls, value: Any) -> Any:
        if isinstance(value, str):
            names = [part.strip() for part in value.split(",") if part.strip()]
            return names or None
        return value

    @field_validator("optim", "optimizer", mode="before")
    @classmethod
    def _optimizer_name(cls, value: Any) -> Any:
        # TrainingArguments' spellings and the dashboard's (AdamW, Adam, SGD) name the same optimizers.
        if isinstance(value, str):
            return OPTIMIZER_SPELLINGS.get(value.strip().lower(), value)
        return value

    @field_validator("packing", "gradient_checkpointing", "async_checkpoint", "bf16", "fp16", "torch_compile", mode="before")
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
        unknown = sorted(set(values) - set(cls.model_fields))
        errors = [unknown_error(key, list_known=i == 0) for i, key in enumerate(unknown)]
        data: dict[str, Any] = {key: value for key, value in values.items() if value is not None and key in cls.model_fields}
        if "learning_rate" not in data:
            # Adapters train a few million fresh parameters and want a much larger step than a full fine-tune.
            data["learning_rate"] = 2e-4 if training_type in ADAPTER_TYPES else 5e-5
        try:
            parsed = cls.model_validate(data)
        except ValidationError as exc:
            errors += [InitErrorDetails(type=e["type"], loc=e["loc"], input=e["input"], ctx=e.get("ctx", {})) for e in exc.errors()]
            refused = {e["loc"][0] for e in exc.errors() if e["loc"]}
            errors += [e for e in spelling_errors(values) if e["loc"][0] not in refused]
            raise ValidationError.from_exception_data(cls.__name__, errors) from None
        # What pydantic reads but the document does not spell so (a 61-digit max_steps, '1e+308'): refused too.
        errors += spelling_errors(values)
        if training_type == TrainingType.DPO and parsed.packing:
            errors.append(
                field_error("packing", "packing=true is not supported for DPO (each preference pair is its own example)", values["packing"])
            )
        errors += parsed._conflicts(values, training_type)
        if errors:
            raise ValidationError.from_exception_data(cls.__name__, errors)
        return parsed

    def _conflicts(self, values: Mapping[str, str | None], training_type: TrainingType) -> list[InitErrorDetails]:
        errors = []
        if self.optim is not None and self.optimizer is not None and self.optim != self.optimizer:
            errors.append(field_error("optim", f"optim={self.optim} and optimizer={self.optimizer} disagree: give one", values["optim"]))
        if self.warmup_ratio and self.warmup_steps:
            errors.append(field_error("warmup_ratio", "give warmup_steps or warmup_ratio, not both", values["warmup_ratio"]))
        if self.bf16 and self.fp16:
            errors.append(field_error("fp16", "bf16 and fp16 are both true: choose one", values["fp16"]))
        if self.eval_strategy is not None and self.evaluation_strategy is not None and self.eval_strategy != self.evaluation_strategy:
            errors.append(
                field_error(
                    "evaluation_strategy", "eval_strategy and evaluation_strategy disagree: give one", values["evaluation_strategy"]
                )
            )
        if self.evaluation_strategy_name() == "no" and self.eval_steps is not None:
            errors.append(field_error("eval_steps", "eval_steps is set but eval_strategy is no", values["eval_steps"]))
        if training_type == TrainingType.RLHF:
            for key in sorted(set(values) & set(RLHF_REFUSED)):
                if key in ("eval_strategy", "evaluation_strategy") and str(values[key]).strip() == "no":
                    continue
                errors.append(field_error(key, f"{key} is not supported for RLHF: {RLHF_REFUSED[key]}", values[key]))
        if self.label_smoothing_factor and training_type == TrainingType.DPO:
            errors.append(
                field_error(
                    "label_smoothing_factor",
                    "label_smoothing_factor applies to token cross-entropy, not to DPO's loss",
                    values["label_smoothing_factor"],
                )
            )
        return errors

    def optimizer_name(self) -> str:
        return self.optim or self.optimizer or "adamw_torch"

    def evaluation_strategy_name(self) -> str:
        chosen = self.eval_strategy or self.evaluation_strategy
        if chosen is not None:
            return chosen
        return "steps" if self.eval_steps is not None else "no"

    def evaluation_every(self) -> int | None:
        """Steps between evaluations under the steps strategy (transformers: eval_steps, else logging_steps)."""
        return self.eval_steps or self.logging_steps

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


# Digits bounded so that every spelling the document allows is a finite number (no "1e999").
_INT = r"^[0-9]{1,18}$"
_FLOAT = r"^[0-9]{1,18}(\.[0-9]{1,18})?([eE][+-]?[0-9]{1,2})?$"


def _any_case(word: str) -> str:
    """A pattern piece for `word` in any letter case (JSON Schema's regexes take no flags)."""
    return "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else re.escape(c) for c in word)


def _words(words: Iterable[str]) -> str:
    return "^(" + "|".join(_any_case(w) for w in sorted(words)) + ")$"


def _value_schema(name: str, annotation: Any) -> dict[str, Any]:
    """The spelling of one hyperparameter's string value: openapi.json states it, and parse() refuses any
    other spelling (also for a CUSTOM script's known keys), so the document and the server agree.
    Ranges are left to the server."""
    kinds = [a for a in get_args(annotation) if a is not type(None)] if get_origin(annotation) in (Union, types.UnionType) else [annotation]
    if len(kinds) != 1:
        return {"type": "string"}
    kind = kinds[0]
    if name == "torch_compile":
        return {"type": "string", "pattern": _words(_FALSE)}  # true is refused (not supported yet)
    if kind is bool:
        return {"type": "string", "pattern": _words(_TRUE | _FALSE)}  # any case, as _parse_bool reads them
    if kind is int:
        return {"type": "string", "pattern": _INT}
    if kind is float:
        return {"type": "string", "pattern": _FLOAT}
    if name in ("optim", "optimizer"):
        return {"type": "string", "pattern": _words(OPTIMIZER_SPELLINGS)}  # any case, as _optimizer_name reads them
    if get_origin(kind) is Literal:
        return {"type": "string", "enum": [str(v) for v in get_args(kind)]}
    return {"type": "string"}


_SPELLINGS = {name: _value_schema(name, info.annotation) for name, info in sorted(Hyperparameters.model_fields.items())}


def spelling_errors(values: Mapping[str, str | None]) -> list[InitErrorDetails]:
    """An error for each known key whose value is not spelt as openapi.json says (a 61-digit max_steps,
    learning_rate '1e+308', an empty max_steps)."""
    errors = []
    for key, value in values.items():
        rule = _SPELLINGS.get(key)
        if rule is None or value is None or _spelt(rule, value):
            continue
        errors.append(field_error(key, _misspelt(key, rule, value), value))
    return errors


def _spelt(rule: Mapping[str, Any], value: str) -> bool:
    if "pattern" in rule:
        return re.fullmatch(rule["pattern"], value) is not None
    return "enum" not in rule or value in rule["enum"]


def _misspelt(key: str, rule: Mapping[str, Any], value: str) -> str:
    shown = repr(value[:64])
    if key == "torch_compile" and value.strip().lower() in _TRUE:
        return "torch_compile=true is not supported yet (the trainer runs the eager model)"
    if rule.get("pattern") == _INT:
        return f"expected a whole number of 1 to 18 digits, got {shown}"
    if rule.get("pattern") == _FLOAT:
        return f"expected a number such as 0.001 or 1e-4 (up to 18 digits, a 1-2 digit exponent), got {shown}"
    if "enum" in rule:
        return f"expected one of {', '.join(rule['enum'])}, got {shown}"
    if rule.get("pattern") == _words(OPTIMIZER_SPELLINGS):
        return f"unknown optimizer {shown} (one of {', '.join(sorted(OPTIMIZER_SPELLINGS))})"
    return f"expected true or false, got {shown}"


def hyperparameters_json_schema(schema: dict[str, Any]) -> None:
    """openapi.json's hyperparameters: each known key's value spelt as it parses. Other keys are strings in
    the document: a CUSTOM script takes its own (as --key value); for our trainer the server refuses them
    (a rule across fields, framework.type, that the description states)."""
    schema["properties"] = dict(_SPELLINGS)
    schema["additionalProperties"] = {"type": "string"}
    schema.pop("propertyNames", None)


def known_hyperparameters() -> list[str]:
    return sorted(Hyperparameters.model_fields)


def unknown_error(key: str, *, list_known: bool = True) -> InitErrorDetails:
    """An unknown key's error; the known names are said once (at the first unknown key), never per key:
    5,000 unknown keys once made a 6.4 MB answer, over Lambda's 6 MB."""
    if not list_known:
        error = PydanticCustomError("unknown_hyperparameter", "unknown hyperparameter (the first unknown key's error lists the known ones)")
        return InitErrorDetails(type=error, loc=(key,), input=key)
    known = ", ".join(known_hyperparameters())
    return InitErrorDetails(
        type=PydanticCustomError("unknown_hyperparameter", "unknown hyperparameter (known: {known})", {"known": known}),
        loc=(key,),
        input=key,
    )


def field_error(key: str, message: str, value: Any) -> InitErrorDetails:
    return InitErrorDetails(type=PydanticCustomError("invalid_hyperparameter", message), loc=(key,), input=value)
