"""Hyperparameter sweeps: OME's hyperParameterTuningConfig (seeds/002) over ordinary jobs.

The tuning config is accepted in OME's camelCase verbatim (`maxTrials`, `hyperParameterTuningConfig`) and
in snake_case (`max_trials`, `hyperparameter_tuning_config`). Everything that can be checked without
the deployment is checked here, naming the field; the service adds what needs the job template (targets
exist, every trial's job passes the same submit validation as POST /jobs).
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic.alias_generators import to_camel

from schemas.configs import is_stored
from schemas.job import MAX_LABELS, RESERVED_LABELS, JobName, SubmitJobRequest
from schemas.job import SWEEP_LABEL as SWEEP_LABEL  # the sweep's labels: reserved in schemas/job.py
from schemas.job import TRIAL_LABEL as TRIAL_LABEL

HYPERPARAMETERS = "training_config.hyperparameters"
MAX_TRIALS = 2000  # each decision rebuilds the study from every trial: see docs/BENCHMARKS.md
MAX_PARAMETERS = 32
MAX_GRID_STEPS = 10**9  # a step cutting a range finer than this is a mistake (and would not be listed)
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]{0,63}$")
_TARGET = re.compile(r"^[a-z_]+(\.[A-Za-z0-9_\-/]+|\[\d+\])*$")


class _Camel(BaseModel):
    """camelCase (OME) or snake_case on input; snake_case on output."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, validate_by_name=True, validate_by_alias=True, defer_build=True)


class SweepMethod(StrEnum):
    GRID = "grid"
    RANDOM = "random"
    BAYES = "bayes"


class Goal(StrEnum):
    MAXIMIZE = "maximize"
    MINIMIZE = "minimize"


class ParameterType(StrEnum):
    INT = "int"
    DOUBLE = "double"
    CATEGORICAL = "categorical"


class Scale(StrEnum):
    LINEAR = "linear"
    LOG = "log"


Scalar = str | int | float | bool


class ParameterSpec(_Camel):
    """One searched parameter: int(min, max, step), double(min, max, scale), categorical(values).

    int and double also accept an explicit `values` list (OME's `batch_size: {type: int, values: [8, 16, 32]}`).
    """

    type: ParameterType
    min: float | None = None
    max: float | None = None
    step: float | None = Field(default=None, gt=0)
    scale: Scale = Scale.LINEAR
    values: list[Scalar] | None = Field(default=None, min_length=1, max_length=1000)
    target: str | None = Field(
        default=None,
        max_length=256,
        description="Dotted path into the job (as retraining input_mapping targets); default training_config.hyperparameters.<name>.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> ParameterSpec:
        if self.target is not None and not _TARGET.match(self.target):
            raise ValueError(f"target {self.target!r} is not a dotted path like training_config.hyperparameters.lr")
        if self.type == ParameterType.CATEGORICAL or self.values is not None:
            return self._checked_values()
        if self.min is None or self.max is None:
            raise ValueError(f"a {self.type.value} parameter needs min and max (or values)")
        if self.min > self.max:
            raise ValueError(f"min ({self.min:g}) is greater than max ({self.max:g})")
        if self.scale == Scale.LOG and self.min <= 0:
            raise ValueError(f"scale log needs min > 0, got min {self.min:g}")
        if self.type == ParameterType.INT:
            for name in ("min", "max", "step"):
                value = getattr(self, name)
                if value is not None and value != int(value):
                    raise ValueError(f"{name} of an int parameter must be a whole number, got {value:g}")
            if self.scale == Scale.LOG and self.step not in (None, 1):
                raise ValueError("an int parameter on scale log takes no step (it is 1)")
        if not math.isfinite(self.max - self.min):
            raise ValueError("min and max must be finite numbers with a finite range")
        if self.step is not None:
            count = (self.max - self.min) / self.step
            if not math.isfinite(count) or count > MAX_GRID_STEPS:
                raise ValueError(f"step {self.step:g} cuts {self.min:g}..{self.max:g} into more than {MAX_GRID_STEPS:,} steps")
            if abs(count - round(count)) > 1e-9 * max(1.0, abs(count)):
                raise ValueError(f"step {self.step:g} does not divide the range {self.min:g}..{self.max:g}")
            if self.max > self.min and round(count) == 0:
                raise ValueError(f"step {self.step:g} rounds the range {self.min:g}..{self.max:g} to nothing: use a smaller step")
            listed = self.grid_values() if round(count) < MAX_TRIALS else None
            if listed is not None and len(set(listed)) != len(listed):
                raise ValueError(f"step {self.step:g} is finer than 12 decimals: values of {self.min:g}..{self.max:g} round together")
            if self.scale == Scale.LOG:
                raise ValueError("a double parameter on scale log takes no step")
        return self

    def _checked_values(self) -> ParameterSpec:
        if not self.values:
            raise ValueError(f"a {self.type.value} parameter given as a list needs values")
        if self.min is not None or self.max is not None or self.step is not None:
            raise ValueError("give either values or min/max/step, not both")
        if self.type == ParameterType.INT and not all(isinstance(v, int) and not isinstance(v, bool) for v in self.values):
            raise ValueError("values of an int parameter must be whole numbers")
        if self.type == ParameterType.DOUBLE and not all(isinstance(v, int | float) and not isinstance(v, bool) for v in self.values):
            raise ValueError("values of a double parameter must be numbers")
        if len({repr(v) for v in self.values}) != len(self.values):
            raise ValueError("values must be distinct")
        return self

    def grid_size(self) -> int | None:
        """How many values grid_values() lists, computed without listing them (None: continuous)."""
        if self.values is not None:
            return len(self.values)
        assert self.min is not None and self.max is not None
        if self.type == ParameterType.INT:
            step = 1 if self.scale == Scale.LOG and self.step is None else int(self.step or 1)
            return (int(self.max) - int(self.min)) // step + 1
        if self.step is None:
            return None
        return round((self.max - self.min) / self.step) + 1

    def grid_values(self) -> list[Scalar] | None:
        """Every value of this parameter, or None when it is continuous (a double without step or values)."""
        if self.values is not None:
            return list(self.values)
        assert self.min is not None and self.max is not None
        if self.type == ParameterType.INT:
            if self.scale == Scale.LOG and self.step is None:
                return list(range(int(self.min), int(self.max) + 1))
            step = int(self.step or 1)
            return list(range(int(self.min), int(self.max) + 1, step))
        if self.step is None:
            return None
        count = round((self.max - self.min) / self.step)
        return [round(self.min + i * self.step, 12) for i in range(count + 1)]


class Metric(_Camel):
    name: str = Field(min_length=1, max_length=128, description="A metric the trial reports (a metrics or progress event field).")
    goal: Goal


class EarlyStoppingType(StrEnum):
    NONE = "none"
    MEDIAN = "median"
    ASHA = "asha"
    HYPERBAND = "hyperband"


_STOPPING_FIELDS = {
    EarlyStoppingType.NONE: frozenset(),
    EarlyStoppingType.MEDIAN: frozenset({"startup_trials", "warmup_steps"}),
    EarlyStoppingType.ASHA: frozenset({"min_resource", "reduction_factor"}),
    EarlyStoppingType.HYPERBAND: frozenset({"min_resource", "max_resource", "reduction_factor", "bootstrap_count"}),
}


class EarlyStopping(_Camel):
    """Stop losing trials over the metric's intermediate values (median: Optuna MedianPruner; asha:
    SuccessiveHalvingPruner; hyperband: HyperbandPruner). A setting of another rule is refused."""

    type: EarlyStoppingType = EarlyStoppingType.NONE
    startup_trials: int = Field(default=1, ge=0, le=100, description="median: trials that must finish before any is pruned")
    warmup_steps: int = Field(default=0, ge=0, description="median: steps a trial runs before it can be pruned")
    min_resource: int | None = Field(
        default=None, ge=1, le=10**9, description="asha, hyperband: steps before the first rung (asha: auto when unset; hyperband: 1)"
    )
    max_resource: int | None = Field(
        default=None,
        ge=1,
        le=10**9,
        description="hyperband: the steps a trial runs (unset: the last step + 1 of the first trial that completes)",
    )
    reduction_factor: int = Field(default=3, ge=2, le=10, description="asha, hyperband: 1/reduction_factor of trials go on at each rung")
    bootstrap_count: int = Field(
        default=0, ge=0, le=100, description="hyperband: trials a rung needs before any trial is promoted (needs maxResource)"
    )

    @field_validator("startup_trials", "warmup_steps", "min_resource", "max_resource", "reduction_factor", "bootstrap_count")
    @classmethod
    def _fields_of_its_rule(cls, value: Any, info: ValidationInfo) -> Any:
        # Runs for the fields given (defaults are not validated): each is refused under another rule,
        # unless it holds its default (a sweep read back echoes every field).
        kind = info.data.get("type")
        if kind is None or is_stored(info):
            return value
        name = info.field_name or ""
        if name not in _STOPPING_FIELDS[kind] and value != cls.model_fields[name].default:
            raise ValueError(f"not a setting of early stopping {kind.value!r} (it takes: {_settings(kind)})")
        if name == "max_resource" and value is not None and value < (info.data.get("min_resource") or 1):
            raise ValueError(f"maxResource ({value}) is smaller than minResource ({info.data.get('min_resource') or 1})")
        if name == "bootstrap_count" and value and info.data.get("max_resource") is None:
            raise ValueError("bootstrapCount needs maxResource (Optuna refuses it with an automatic maxResource)")
        return value


def _settings(kind: EarlyStoppingType) -> str:
    return ", ".join(sorted(to_camel(f) for f in _STOPPING_FIELDS[kind])) or "nothing"


class CompletionCriteria(_Camel):
    target_value: float | None = Field(default=None, description="Complete as soon as a finished trial reaches it.")
    no_improvement_trials: int | None = Field(
        default=None, ge=1, le=MAX_TRIALS, description="Complete when N finished trials in a row did not beat the best."
    )


class TuningConfig(_Camel):
    method: SweepMethod
    max_trials: int = Field(ge=1, le=MAX_TRIALS)
    metric: Metric
    parameters: dict[str, ParameterSpec] = Field(min_length=1, max_length=MAX_PARAMETERS)
    max_parallel_trials: int = Field(default=1, ge=1, le=100)
    seed: int | None = Field(default=None, ge=0, le=2**31 - 1, description="Unset: one is drawn at create and kept (GET shows it).")
    early_stopping: EarlyStopping = Field(default_factory=EarlyStopping)
    completion_criteria: CompletionCriteria = Field(default_factory=CompletionCriteria)
    max_failed_trials: int | None = Field(
        default=None, ge=1, le=MAX_TRIALS, description="The sweep FAILS once this many trials failed (unset: only if every trial failed)."
    )

    @field_validator("early_stopping", mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        return {"type": value} if isinstance(value, str) else value

    @field_validator("parameters")
    @classmethod
    def _names(cls, parameters: dict[str, ParameterSpec]) -> dict[str, ParameterSpec]:
        for name in parameters:
            if not _NAME.match(name):
                raise ValueError(f"parameter name {name!r}: 1-64 of A-Z a-z 0-9 _ . -, not starting with a digit")
        targets = [target_of(name, spec) for name, spec in parameters.items()]
        if len(set(targets)) != len(targets):
            raise ValueError("two parameters set the same target")
        return parameters

    @model_validator(mode="after")
    def _grid(self) -> TuningConfig:
        if self.method != SweepMethod.GRID:
            return self
        size = 1
        for name, spec in self.parameters.items():
            count = spec.grid_size()
            if count is None:
                raise ValueError(f"parameters.{name}: a grid needs every parameter enumerable (a double needs step or values)")
            size *= count  # exact integers: a huge product is still compared, never listed
        if size > self.max_trials:
            raise ValueError(
                f"maxTrials: the grid has {size} points, more than maxTrials={self.max_trials}; "
                "a grid visits every point once, so raise maxTrials or narrow the grid (it is never silently cut)"
            )
        return self

    def grid_size(self) -> int | None:
        if self.method != SweepMethod.GRID:
            return None
        return math.prod(spec.grid_size() or 0 for spec in self.parameters.values())

    def effective_max_trials(self) -> int:
        """maxTrials, or the grid's size when the grid is smaller: a grid point is never visited twice."""
        size = self.grid_size()
        return min(self.max_trials, size) if size is not None else self.max_trials


def target_of(name: str, spec: ParameterSpec) -> str:
    return spec.target or f"{HYPERPARAMETERS}.{name}"


class SweepRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_by_name=True, validate_by_alias=True, defer_build=True)

    name: JobName
    description: str | None = Field(default=None, max_length=4096)
    job_template: SubmitJobRequest
    hyperparameter_tuning_config: TuningConfig = Field(
        validation_alias=AliasChoices("hyperParameterTuningConfig", "hyperparameter_tuning_config"),
        description="OME's hyperParameterTuningConfig (camelCase) or hyperparameter_tuning_config (snake_case).",
    )

    @field_validator("job_template")
    @classmethod
    def _room_for_the_sweeps_labels(cls, template: SubmitJobRequest) -> SubmitJobRequest:
        # The template refuses the reserved labels themselves (SubmitJobRequest, the one rule).
        if len(template.labels) + len(RESERVED_LABELS) > MAX_LABELS:
            raise ValueError(f"trials carry the template's labels and {len(RESERVED_LABELS)} of the sweep's: at most {MAX_LABELS - 2} here")
        return template


class SweepStatus(StrEnum):
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


SWEEP_TERMINAL = frozenset({SweepStatus.COMPLETED, SweepStatus.FAILED, SweepStatus.CANCELLED})


class TrialState(StrEnum):
    SUBMITTING = "SUBMITTING"  # claimed by a decision, its job not yet recorded
    RUNNING = "RUNNING"  # its job is not terminal (queued, running, paused, preempted and resuming)
    COMPLETE = "COMPLETE"
    PRUNED = "PRUNED"
    FAIL = "FAIL"


TRIAL_ENDED = frozenset({TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL})


class Trial(BaseModel):
    model_config = ConfigDict(extra="ignore", defer_build=True)

    number: int
    state: TrialState
    params: dict[str, Scalar]
    job_id: str | None = None
    job_status: str | None = None
    value: float | None = Field(default=None, description="The metric's final value (its last report)")
    intermediate_values: dict[int, float] = Field(default_factory=dict, description="step -> the metric reported at that step")
    reason: str | None = None
    created_at: datetime
    ended_at: datetime | None = None
    system_attrs: dict[str, Any] = Field(default_factory=dict, exclude=True)
    prune_requested: bool = Field(default=False, exclude=True)
    version: int = Field(default=1, exclude=True)


class BestTrial(BaseModel):
    model_config = ConfigDict(defer_build=True)

    number: int
    value: float
    params: dict[str, Scalar]
    job_id: str | None = None
    best_checkpoint_id: str | None = None
    best_checkpoint_uri: str | None = None


class SweepCounts(BaseModel):
    model_config = ConfigDict(defer_build=True)

    total: int = 0
    running: int = 0
    completed: int = 0
    pruned: int = 0
    failed: int = 0


class Sweep(BaseModel):
    model_config = ConfigDict(extra="ignore", defer_build=True)

    sweep_id: str
    owner: str
    name: str
    description: str | None = None
    job_template: SubmitJobRequest
    # Shown as OME spells it (the API answers in aliases: the config's fields are camelCase too).
    hyperparameter_tuning_config: TuningConfig = Field(
        validation_alias=AliasChoices("hyperParameterTuningConfig", "hyperparameter_tuning_config"),
        serialization_alias="hyperParameterTuningConfig",
    )
    status: SweepStatus
    status_reason: str | None = None
    created_at: datetime
    updated_at: datetime
    ended_at: datetime | None = None
    version: int = 1
    counts: SweepCounts = Field(default_factory=SweepCounts)
    best_trial: BestTrial | None = None
    trials: list[Trial] = Field(default_factory=list, description="Filled by GET /sweeps/{id}; empty in listings")


class SweepList(BaseModel):
    model_config = ConfigDict(defer_build=True)
    sweeps: list[Sweep]
    next_token: str | None = None


class SweepAction(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)
    reason: str | None = Field(default=None, max_length=1024)
