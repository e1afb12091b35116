"""The five configs of a SubmitJobRequest (docs/seeds/000_*.txt), with their defaults and ranges.

Every model forbids unknown fields: a misspelt option is a 422 naming it, never silently dropped.
Every number has bounds a real job can use and storage can hold (a float like 1e40 does not fit a
DynamoDB number, a seed past 2**32-1 does not fit the samplers that take it), and no float may be NaN
or Infinity: JSON cannot carry them, and a stored null would read back as "no limit".
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    SecretStr,
    SerializationInfo,
    ValidationError,
    ValidationInfo,
    field_serializer,
    model_validator,
)

# The enums and bounds below everything else in schemas/ (schemas/hyperparameters.py needs them too).
from schemas.bounds import MAX_DATA_FILTERS, MAX_ENVIRONMENT, MAX_FRAMEWORK_CONFIG, MAX_HYPERPARAMETERS, MAX_MODEL_KWARGS, key_count
from schemas.kinds import MAX_SEED as MAX_SEED
from schemas.kinds import UNSUPPORTED_FRAMEWORKS as UNSUPPORTED_FRAMEWORKS
from schemas.kinds import UNSUPPORTED_TRAINING_TYPES as UNSUPPORTED_TRAINING_TYPES
from schemas.kinds import FrameworkType as FrameworkType
from schemas.kinds import TrainingType as TrainingType
from schemas.placement import PlacementConfig

# The base of every request model and its validation helpers (schemas/strict.py), named here as before.
from schemas.strict import LAX_NUMBERS as LAX_NUMBERS
from schemas.strict import STORED as STORED
from schemas.strict import Strict as Strict
from schemas.strict import is_stored as is_stored
from schemas.strict import raise_at as raise_at
from schemas.strict import relocated as relocated
from schemas.strict import s3_uri_problem as s3_uri_problem
from schemas.tracking import TrackingConfig

# The built-in byte-level tokenizer (trainer/tokenizer.py): 256 bytes + PAD, BOS, EOS.
BYTE_TOKENIZER_ID = "byte"
BYTE_VOCAB_SIZE = 259
Priority = Annotated[int, Field(ge=0, le=10, description="0 (lowest) to 10 (highest).")]
DEFAULT_PRIORITY = 5
Seed = Annotated[int, Field(ge=0, le=MAX_SEED, description="0 to 2**32-1.")]
StrMap = dict[str, str]


# framework.config keys a DEEPSPEED job may set. ZeRO-Offload is refused: DeepSpeed insists on its own
# CPU Adam (a compiled op) there, which our checkpoints and exact-resume tests do not cover.
DEEPSPEED_ZERO_STAGES = ("1", "2", "3")
DEEPSPEED_DEFAULT_ZERO_STAGE = 2
_DEEPSPEED_REFUSED_OPTIONS = {
    "offload_optimizer_device": "ZeRO-Offload is not supported (exact resume is only tested without offload)",
    "offload_param_device": "ZeRO-Offload is not supported (exact resume is only tested without offload)",
}


class ModelSource(StrEnum):
    HUB = "hub"
    S3 = "s3"
    LOCAL = "local"
    CONFIG = "config"


class DType(StrEnum):
    AUTO = "auto"
    FLOAT32 = "float32"
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"


class SaveStrategy(StrEnum):
    STEPS = "steps"
    EPOCH = "epoch"


class ExportFormat(StrEnum):
    SAFETENSORS = "safetensors"
    PYTORCH = "pytorch"


class BaseModelSpec(Strict):
    model_id: str = Field(min_length=1, max_length=1024, description="Hub id, s3:// prefix, local path, or a name when source is 'config'.")
    revision: str | None = None
    source: ModelSource | None = Field(default=None, description="Inferred from model_id when omitted.")
    tokenizer_id: str | None = Field(default=None, description="'byte' selects the built-in byte-level tokenizer.")
    dtype: DType = DType.AUTO
    trust_remote_code: bool = False
    model_kwargs: Annotated[dict[str, str | int | float | bool | list[str] | None], key_count(MAX_MODEL_KWARGS)] = Field(
        default_factory=dict, max_length=MAX_MODEL_KWARGS
    )

    def resolved_source(self) -> ModelSource:
        if self.source is not None:
            return self.source
        if self.model_id.startswith("s3://"):
            return ModelSource.S3
        if self.model_id.startswith(("/", "./", "../", "file://")):
            return ModelSource.LOCAL
        return ModelSource.HUB

    @model_validator(mode="after")
    def _config_needs_architecture(self, info: ValidationInfo) -> BaseModelSpec:
        if self.source == ModelSource.CONFIG and "architecture" not in self.model_kwargs:
            raise ValueError("model_kwargs.architecture is required when source is 'config' (e.g. 'llama')")
        if is_stored(info):
            return self
        if self.source == ModelSource.CONFIG:
            self._check_config_model()
        if self.resolved_source() == ModelSource.S3 and s3_uri_problem(self.model_id):
            raise_at(("model_id",), f"source is 's3': {s3_uri_problem(self.model_id)}", self.model_id, type(self).__name__)
        if self.tokenizer_id and self.tokenizer_id.startswith("s3:") and s3_uri_problem(self.tokenizer_id):
            raise_at(("tokenizer_id",), str(s3_uri_problem(self.tokenizer_id)), self.tokenizer_id, type(self).__name__)
        return self

    def _check_config_model(self) -> None:
        """What the trainer refuses about a model built from its config, without building it."""
        from schemas.model_architectures import model_type_of, unknown_architecture_message

        architecture = self.model_kwargs["architecture"]
        if not isinstance(architecture, str) or model_type_of(architecture) is None:
            raise_at(("model_kwargs", "architecture"), unknown_architecture_message(str(architecture)), architecture, type(self).__name__)
        vocab_size = self.model_kwargs.get("vocab_size")
        if vocab_size is not None and (isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 1):
            raise_at(("model_kwargs", "vocab_size"), "must be a positive integer", vocab_size, type(self).__name__)
        if self.tokenizer_id in (None, BYTE_TOKENIZER_ID) and isinstance(vocab_size, int) and vocab_size < BYTE_VOCAB_SIZE:
            # A config-built model without a tokenizer of its own gets the byte tokenizer (trainer/tokenizer.py).
            raise_at(
                ("model_kwargs", "vocab_size"),
                f"{vocab_size} does not cover the byte tokenizer's {BYTE_VOCAB_SIZE} tokens",
                vocab_size,
                type(self).__name__,
            )


class DistributedConfig(Strict):
    world_size: int = Field(default=1, ge=1, le=4096, description="Processes in all (nodes x processes per node).")
    procs_per_node: int | Literal["gpu"] | None = Field(
        default=None,
        description="OME's numProcPerNode: processes per node, or 'gpu' (one per GPU); sets world_size = node_count x it.",
    )
    backend: str = "nccl"
    strategy: str | None = None
    config: Annotated[StrMap, key_count(MAX_FRAMEWORK_CONFIG)] = Field(default_factory=dict, max_length=MAX_FRAMEWORK_CONFIG)


class FrameworkConfig(Strict):
    type: FrameworkType = FrameworkType.HF_TRAINER
    config: Annotated[StrMap, key_count(MAX_FRAMEWORK_CONFIG)] = Field(
        default_factory=dict,
        max_length=MAX_FRAMEWORK_CONFIG,
        description=(
            "Options of the framework named by `type`. DEEPSPEED takes only zero_stage ('1', '2' or '3'; default 2): "
            "other keys, ZeRO-Offload included, are refused (422), as is base_model.dtype float16 with world_size > 1."
        ),
    )
    distributed: DistributedConfig = Field(default_factory=DistributedConfig)
    custom_script_path: str | None = None
    command: list[Annotated[str, Field(min_length=1, max_length=4096)]] | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        description="CUSTOM: the command to run (OME's trainer.command), e.g. ['python', 'train.py'].",
    )
    args: list[Annotated[str, Field(max_length=4096)]] = Field(
        default_factory=list, max_length=1024, description="CUSTOM: arguments after the command or script (OME's trainer.args)."
    )

    @model_validator(mode="after")
    def _custom_needs_script(self) -> FrameworkConfig:
        if self.type == FrameworkType.CUSTOM and not (self.custom_script_path or self.command):
            raise ValueError("custom_script_path or command is required when framework.type is CUSTOM")
        if self.type == FrameworkType.CUSTOM and self.custom_script_path and self.command:
            raise ValueError("give custom_script_path or command, not both")
        if self.type != FrameworkType.CUSTOM and (self.command or self.args):
            raise ValueError("command and args are for framework.type CUSTOM")
        if self.type == FrameworkType.DEEPSPEED:
            self._check_deepspeed_options()
        return self

    def _check_deepspeed_options(self) -> None:
        for key in sorted(self.config):
            if key in _DEEPSPEED_REFUSED_OPTIONS:
                raise ValueError(f"framework.config.{key}: {_DEEPSPEED_REFUSED_OPTIONS[key]}")
            if key != "zero_stage":
                raise ValueError(f"framework.config.{key} is not a DEEPSPEED option (known: zero_stage)")
        stage = self.config.get("zero_stage")
        if stage is not None and stage.strip() not in DEEPSPEED_ZERO_STAGES:
            raise ValueError(f"framework.config.zero_stage must be 1, 2 or 3 (got {stage!r})")

    def zero_stage(self) -> int:
        """DEEPSPEED's ZeRO stage: framework.config zero_stage, default 2."""
        stage = self.config.get("zero_stage")
        return int(stage) if stage is not None else DEEPSPEED_DEFAULT_ZERO_STAGE


RewardFunctionName = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]


class RLHFConfig(Strict):
    """RLHF (training_type RLHF): GRPO through trl's GRPOTrainer (docs/TRAINER.md). The reward is a reward model,
    reward functions from a Python file the user ships, or both (their weighted sum)."""

    reward_model: str | None = Field(
        default=None,
        min_length=1,
        max_length=1024,
        description="A sequence-classification reward model (one score per completion): a Hub id, an s3:// prefix or a local path.",
    )
    reward_model_revision: str | None = Field(default=None, max_length=256, description="The Hub revision of reward_model.")
    reward_script_path: str | None = Field(
        default=None,
        min_length=1,
        max_length=4096,
        description="A Python file (local or s3://) defining the reward functions named by reward_functions.",
    )
    reward_functions: list[RewardFunctionName] | None = Field(
        default=None,
        min_length=1,
        max_length=16,
        description="Functions of reward_script_path, called as trl reward functions: f(prompts, completions, **columns) -> "
        "list[float]. Default: ['reward'].",
    )
    reward_weights: list[Annotated[float, Field(ge=-1e6, le=1e6)]] | None = Field(
        default=None,
        min_length=1,
        max_length=17,
        description="One weight per reward: the functions in order, then reward_model. Default: all 1.",
    )
    num_generations: int = Field(default=8, ge=2, le=1024, description="Completions sampled per prompt (the GRPO group).")
    max_completion_length: int = Field(default=512, ge=1, le=131_072, description="Tokens generated per completion at most.")
    temperature: float = Field(default=1.0, gt=0, le=100, description="Sampling temperature.")
    top_p: float = Field(default=1.0, gt=0, le=1, description="Nucleus sampling.")
    top_k: int = Field(default=0, ge=0, le=1_000_000, description="0: no top-k filter.")
    beta: float = Field(
        default=0.0,
        ge=0,
        le=1000,
        description="KL coefficient against the reference model (the initial policy, frozen); 0 (trl's default) loads no reference.",
    )

    def reward_model_source(self) -> ModelSource | None:
        """Where reward_model lives, read as base_model.model_id is (s3://, a local path, else a Hub id)."""
        if self.reward_model is None:
            return None
        return BaseModelSpec(model_id=self.reward_model).resolved_source()

    def function_names(self) -> list[str]:
        if self.reward_script_path is None:
            return []
        return list(self.reward_functions or ["reward"])

    def reward_count(self) -> int:
        return len(self.function_names()) + (1 if self.reward_model else 0)

    @model_validator(mode="after")
    def _some_reward(self, info: ValidationInfo) -> RLHFConfig:
        if is_stored(info):
            return self
        title = type(self).__name__
        if self.reward_model is None and self.reward_script_path is None:
            raise ValueError("give reward_model, reward_script_path or both: RLHF needs a reward")
        if self.reward_functions is not None and self.reward_script_path is None:
            raise_at(("reward_functions",), "reward_functions name functions of reward_script_path, which is not set", None, title)
        if self.reward_model_revision is not None and self.reward_model is None:
            raise_at(("reward_model_revision",), "reward_model_revision without reward_model", self.reward_model_revision, title)
        for name in ("reward_model", "reward_script_path"):
            value = getattr(self, name)
            if value is not None and value.startswith("s3:") and s3_uri_problem(value):
                raise_at((name,), str(s3_uri_problem(value)), value, title)
        if self.reward_functions is not None and len(set(self.reward_functions)) != len(self.reward_functions):
            raise_at(("reward_functions",), "a function is named twice", self.reward_functions, title)
        if self.reward_weights is not None and len(self.reward_weights) != self.reward_count():
            raise_at(
                ("reward_weights",),
                f"{len(self.reward_weights)} weight(s) for {self.reward_count()} reward(s) "
                "(the reward functions in order, then reward_model)",
                self.reward_weights,
                title,
            )
        return self


def hyperparameters_schema(schema: dict[str, Any]) -> None:
    # The document names the keys the trainer knows and how each value is spelt (schemas/hyperparameters.py),
    # as the server refuses other keys and spellings.
    from schemas.hyperparameters import hyperparameters_json_schema

    hyperparameters_json_schema(schema)


class TrainingConfig(Strict):
    training_type: TrainingType
    base_model: BaseModelSpec
    framework: FrameworkConfig = Field(default_factory=FrameworkConfig)
    hyperparameters: Annotated[StrMap, key_count(MAX_HYPERPARAMETERS)] = Field(
        default_factory=dict,
        max_length=MAX_HYPERPARAMETERS,
        description=(
            "Strings, parsed by the trainer (max_steps, learning_rate, lora_rank...): a key it does not know is refused (422),"
            " except for framework.type CUSTOM, whose script takes its own keys as --key value."
        ),
        json_schema_extra=hyperparameters_schema,
    )
    environment: Annotated[StrMap, key_count(MAX_ENVIRONMENT)] = Field(default_factory=dict, max_length=MAX_ENVIRONMENT)
    image: str | None = Field(
        default=None,
        min_length=1,
        max_length=512,
        description=(
            "A container image of your own (OME's trainer.image, /train's image) run instead of the deployment's trainer "
            "image, on SageMaker or EC2 only, from a registry/repository the deployment allows (custom_image_repositories); "
            "it must follow the trainer contract (docs/TRAINER.md, Custom images)."
        ),
    )
    resume_from_checkpoint: str | None = Field(
        default=None,
        description="A checkpoint id of this job, a checkpoint URI, or 'latest': the newest under the job's checkpoint location.",
    )
    max_retries: int = Field(default=0, ge=0, le=20, description="Retries for retryable user-code failures.")
    priority: Priority = DEFAULT_PRIORITY
    rlhf: RLHFConfig | None = Field(default=None, description="training_type RLHF only (required there): the reward and GRPO's sampling.")

    @model_validator(mode="after")
    def _rlhf_block(self, info: ValidationInfo) -> TrainingConfig:
        if is_stored(info):
            return self
        if self.training_type == TrainingType.RLHF and self.rlhf is None:
            message = "training_type RLHF needs the rlhf block (a reward_model and/or reward_script_path)"
            raise_at(("rlhf",), message, None, type(self).__name__)
        if self.training_type != TrainingType.RLHF and self.rlhf is not None:
            raise_at(("rlhf",), f"the rlhf block is for training_type RLHF, not {self.training_type.value}", None, type(self).__name__)
        return self

    @model_validator(mode="after")
    def _trainer_accepts_hyperparameters(self, info: ValidationInfo) -> TrainingConfig:
        # The trainer's own rules (schemas/hyperparameters.py), so a bad key fails at submit, not in
        # PREPARING; each error is located at training_config.hyperparameters.<key>.
        from schemas.hyperparameters import Hyperparameters, spelling_errors

        if is_stored(info):
            return self
        if self.framework.type == FrameworkType.CUSTOM:
            # A CUSTOM script's hyperparameters are its own arguments (--key value), not ours; a key our trainer
            # knows is still spelt as openapi.json says (`max_steps: ""` broke the job's own answers' schema).
            errors = spelling_errors(self.hyperparameters)
            if errors:
                exc = ValidationError.from_exception_data(type(self).__name__, errors)
                raise relocated(exc, ("hyperparameters",), type(self).__name__) from None
            return self
        try:
            Hyperparameters.parse(self.hyperparameters, self.training_type)
        except ValidationError as exc:
            raise relocated(exc, ("hyperparameters",), type(self).__name__) from None
        return self

    @model_validator(mode="after")
    def _deepspeed_precision(self) -> TrainingConfig:
        # float16 needs a dynamic loss scaler inside DeepSpeed's engine, whose state our checkpoints do
        # not carry; bfloat16 (autocast over fp32 weights, as for DDP/FSDP) needs none.
        distributed = self.framework.distributed.world_size > 1
        if self.framework.type == FrameworkType.DEEPSPEED and distributed and self.base_model.dtype == DType.FLOAT16:
            raise ValueError("base_model.dtype float16 is not supported with DEEPSPEED; use bfloat16 (or auto)")
        return self


class Sampling(Strict):
    fraction: float = Field(default=1.0, gt=0.0, le=1.0)
    max_samples: int | None = Field(default=None, ge=1, le=2**53 - 1)  # JSON's safe integers
    seed: Seed | None = None


class DataSource(Strict):
    path: str = Field(min_length=1, max_length=4096, description="s3://bucket/key, a local path, or a directory of *.jsonl[.gz].")
    type: Literal["jsonl"] = "jsonl"
    split: Literal["train", "validation"] = "train"
    format: Literal["jsonl", "jsonl.gz", "auto"] = "auto"
    compression: Literal["gzip", "none"] | None = Field(
        default=None, description="OME's dataset compression parameter; gzip = format jsonl.gz."
    )
    columns: list[str] | None = Field(default=None, description="Column projection: only these fields are read.")
    filters: Annotated[dict[str, str | int | float | bool], key_count(MAX_DATA_FILTERS)] = Field(
        default_factory=dict, max_length=MAX_DATA_FILTERS, description="Keep rows whose fields equal these values."
    )
    sampling: Sampling | None = None

    @model_validator(mode="after")
    def _readable_uri(self, info: ValidationInfo) -> DataSource:
        if not is_stored(info) and self.path.startswith("s3:") and s3_uri_problem(self.path):
            raise_at(("path",), str(s3_uri_problem(self.path)), self.path, type(self).__name__)
        return self

    @model_validator(mode="after")
    def _compression_is_a_format(self) -> DataSource:
        if self.compression is None:
            return self
        # OME says {format: jsonl, compression: gzip} for what our format calls jsonl.gz.
        if self.compression == "none" and self.format == "jsonl.gz":
            raise ValueError(f"format {self.format!r} contradicts compression {self.compression!r}")
        self.format = "jsonl.gz" if self.compression == "gzip" else "jsonl"
        return self


class PreprocessConfig(Strict):
    tokenizer: str | None = None
    add_bos: bool = True
    add_eos: bool = True
    padding: Literal["longest", "max_length"] = "longest"
    truncation: bool = True
    chat_template: str | None = None
    field_mapping: StrMap = Field(default_factory=dict, description="Our field name -> the data's field name, e.g. {'prompt': 'question'}.")


class DataConfig(Strict):
    sources: list[DataSource] = Field(min_length=1, max_length=64)
    preprocess: PreprocessConfig = Field(default_factory=PreprocessConfig)
    max_seq_length: int = Field(default=2048, ge=8, le=1_048_576)
    batch_size: int = Field(default=8, ge=1, le=65_536)
    gradient_accumulation_steps: int = Field(default=1, ge=1, le=4096)
    num_workers: int = Field(default=0, ge=0, le=128)
    pin_memory: bool = True
    validation_split: float = Field(default=0.0, ge=0.0, le=1.0)
    seed: Seed = 42

    @model_validator(mode="after")
    def _something_to_train_on(self, info: ValidationInfo) -> DataConfig:
        if not is_stored(info) and all(source.split == "validation" for source in self.sources):
            raise_at(("sources",), "no source with split 'train' (every source is a validation source)", None, type(self).__name__)
        return self


class ResourceConfig(Strict):
    gpu_count: int = Field(default=1, ge=0, le=1024, description="GPUs per node; 0 is a CPU-only job.")
    gpu_type: str | None = Field(default=None, description="e.g. H100, A100-80GB, L4, A10G, T4.")
    # Upper bounds past the largest machines there are (a 24 TiB instance, a 64 TiB EBS volume).
    gpu_memory_min_mb: int | None = Field(default=None, ge=1, le=1_048_576)
    cpu_cores: int | None = Field(default=None, ge=1, le=4096)
    ram_min_mb: int | None = Field(default=None, ge=1, le=33_554_432)
    storage_min_mb: int | None = Field(default=None, ge=1, le=67_108_864)
    node_count: int = Field(default=1, ge=1, le=256, description="Nodes (instances) for multi-node training.")
    node_affinity: list[str] = Field(
        default_factory=list,
        max_length=32,
        description="Pool labels to prefer: zone=us-east-1a, family=p5, purchase=spot|on_demand, platform=ec2, "
        "capacity_reservation=cr-... (docs/PLACEMENT.md).",
    )
    node_anti_affinity: list[str] = Field(
        default_factory=list, max_length=32, description="Pool labels to avoid (node_affinity's grammar)."
    )
    placement: PlacementConfig | None = Field(
        default=None, description="Up to 10 ordered candidates, a deadline or longest wait, allowed zones (docs/PLACEMENT.md)."
    )
    training_shape: str | None = Field(
        default=None,
        max_length=72,
        pattern=r"^[a-z0-9][a-z0-9._-]{0,63}(@[1-9][0-9]{0,5})?$",
        description="A training shape (GET /training-shapes) instead of gpu_count/gpu_type/node_count: 'name' (latest) or 'name@version'.",
    )


class CheckpointConfig(Strict):
    save_strategy: SaveStrategy = SaveStrategy.STEPS
    save_steps: int = Field(default=500, ge=1, le=100_000_000)
    save_total_limit: int | None = Field(default=3, ge=1, le=1000)
    metric_for_best_model: str | None = None
    greater_is_better: bool | None = None
    save_on_each_node: bool = False
    resume_from_best: bool = False


class OutputConfig(Strict):
    output_model_name: str | None = None
    output_path: str | None = None
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    push_to_hub: bool = False
    hub_repo_id: str | None = None
    hub_token: SecretStr | None = Field(default=None, description="Write-only: never returned by the API.")
    export_format: ExportFormat = ExportFormat.SAFETENSORS
    merge_lora: bool = False
    tracking: TrackingConfig | None = Field(default=None, description="Experiment trackers the trainer logs to (docs/TRACKING.md).")
    layout: Literal["trainplane", "deepfinery"] = Field(
        default="trainplane",
        description=(
            "'deepfinery': output_path is a run's root as seeds/004 lays it out: checkpoints/ (ours, each with a "
            "step-XXXXXX.json entry beside it), logs/, config/run.json, and the exported model under model/."
        ),
    )

    @field_serializer("hub_token", when_used="json")
    def _mask_token(self, value: SecretStr | None, info: SerializationInfo) -> str | None:
        # Storage dumps with context={"reveal_secrets": True}; everything else (API, logs) is masked.
        if value is None:
            return None
        if info.context and info.context.get("reveal_secrets"):
            return value.get_secret_value()
        return "**********"

    @model_validator(mode="after")
    def _hub_needs_repo(self) -> OutputConfig:
        if self.push_to_hub and not self.hub_repo_id:
            raise ValueError("hub_repo_id is required when push_to_hub is true")
        if self.layout == "deepfinery" and not self.output_path:
            raise ValueError("output_path (the run's root) is required when layout is 'deepfinery'")
        return self


# scheduling_config.on_exceed's former name (docs/BUDGETS.md): accepted as an alias, never written.
DEPRECATED_ON_EXCEED = "max_cost_on_exceed"


def _former_on_exceed_schema(schema: dict[str, Any]) -> None:
    """openapi.json lists the former name too (the object takes no other keys), marked deprecated."""
    properties = schema.get("properties", {})
    if "on_exceed" in properties:
        former = {k: v for k, v in properties["on_exceed"].items() if k not in {"description", "title", "default"}}
        properties[DEPRECATED_ON_EXCEED] = {**former, "deprecated": True, "description": "Deprecated: the former name of on_exceed."}


class SchedulingConfig(Strict):
    model_config = ConfigDict(**Strict.model_config, json_schema_extra=_former_on_exceed_schema)
    queue: str = Field(default="default", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    priority: Priority = DEFAULT_PRIORITY
    preemptible: bool = False
    reclaimable: bool = Field(
        default=True,
        description=(
            "May the job borrow idle GPUs of other teams, to be paused with a checkpoint when they are reclaimed? "
            "False: it runs only within its team's nominal quota (docs/TEAMS.md)."
        ),
    )
    max_runtime_seconds: int | None = Field(default=None, ge=1, le=28 * 24 * 3600)
    required_capabilities: list[str] = Field(
        default_factory=list,
        max_length=16,
        description="Instance features the job needs: efa, nvlink, local-nvme, fp8.",
    )
    max_cost_usd: float | None = Field(
        default=None,
        ge=0.01,
        le=1_000_000,
        description="Stop (with a checkpoint) before the estimated cost passes this (0.01 to 1,000,000).",
    )
    on_exceed: Literal["pause", "fail"] = Field(
        default="pause",
        description=(
            "What max_cost_usd does when the cost would pass it: `pause` (the checkpointed pause: PAUSED, reason BUDGET; "
            "raise max_cost_usd and resume) or `fail` (FAILED with error_type BUDGET, after the checkpoint). "
            f"`{DEPRECATED_ON_EXCEED}`, its former name, is still accepted (deprecated)."
        ),
    )

    @model_validator(mode="before")
    @classmethod
    def _former_on_exceed(cls, data: Any) -> Any:
        # The field was first named max_cost_on_exceed: requests (and stored jobs) that say so still mean it.
        if not isinstance(data, dict) or DEPRECATED_ON_EXCEED not in data:
            return data
        if "on_exceed" in data:
            message = f"send on_exceed only ({DEPRECATED_ON_EXCEED} is its deprecated former name)"
            raise_at((DEPRECATED_ON_EXCEED,), message, data[DEPRECATED_ON_EXCEED], cls.__name__)
        return {("on_exceed" if key == DEPRECATED_ON_EXCEED else key): value for key, value in data.items()}
