"""The submit request, the Job record and the job's sub-records (checkpoint refs, progress, history)."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, SerializationInfo, ValidationInfo, field_serializer, model_validator

from schemas.bounds import MAX_LABELS as MAX_LABELS
from schemas.bounds import key_count
from schemas.configs import (
    STORED,
    UNSUPPORTED_FRAMEWORKS,
    UNSUPPORTED_TRAINING_TYPES,
    DataConfig,
    FrameworkType,
    OutputConfig,
    ResourceConfig,
    SchedulingConfig,
    Strict,
    TrainingConfig,
    TrainingType,
    is_stored,
    raise_at,
)
from schemas.ome import OmeTrainer
from schemas.placement import PlacementRecord
from schemas.shapes import TrainingShapeProfile
from schemas.status import JobStatus
from schemas.tracking import TrackingRecord

LabelKey = Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9_.\-/]+$")]  # = LABEL_KEY_PATTERN
# Label values: any text but control characters (they would break list filters and log lines).
LabelValue = Annotated[str, Field(max_length=256, pattern=r"^[^\x00-\x1f\x7f]*$")]
JobName = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[^\x00-\x1f]+$")]
LABEL_KEY_PATTERN = r"^[A-Za-z0-9_.\-/]+$"
# Labels only the control plane sets: a sweep's trial jobs carry them, and the sweep's hooks and take-over
# trust them. No request may carry them (POST /jobs, a sweep's or a policy's template; PATCH edits no
# labels), and a retry does not inherit them: this is the one rule (docs/SECURITY.md).
SWEEP_LABEL = "sweep_id"
TRIAL_LABEL = "trial"
RESERVED_LABELS = (SWEEP_LABEL, TRIAL_LABEL)


def reserved_label_problem(key: str) -> str | None:
    """Why a request may not set label `key`, or None: the one check of the rule above."""
    return f"label {key!r} is reserved: a sweep sets it on its trials' jobs" if key in RESERVED_LABELS else None


def without_reserved_labels(labels: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in labels.items() if k not in RESERVED_LABELS}


def _label_keys_schema(schema: dict[str, Any]) -> None:
    # pydantic writes the key rule as patternProperties, which lets any other key through as an
    # additional property: say it as propertyNames, so the document allows no key the server refuses.
    values = schema.pop("patternProperties", {}).get(LABEL_KEY_PATTERN, {"type": "string"})
    schema["additionalProperties"] = values
    schema["propertyNames"] = {"minLength": 1, "maxLength": 63, "pattern": LABEL_KEY_PATTERN, "not": {"enum": list(RESERVED_LABELS)}}


Labels = Annotated[
    dict[LabelKey, LabelValue],
    key_count(MAX_LABELS),
    Field(
        max_length=MAX_LABELS,
        description=(
            f"At most {MAX_LABELS}; keys 1-63 of A-Z a-z 0-9 _ . - / (not {', '.join(RESERVED_LABELS)}: a sweep sets them on its "
            "trials), values up to 256 characters without control characters."
        ),
        json_schema_extra=_label_keys_schema,
    ),
]


class SubmitJobRequest(Strict):
    name: JobName
    description: str | None = Field(default=None, max_length=4096)
    labels: Labels = Field(default_factory=dict)
    training_config: TrainingConfig
    data_config: DataConfig
    resource_config: ResourceConfig = Field(default_factory=ResourceConfig)
    output_config: OutputConfig = Field(default_factory=OutputConfig)
    scheduling_config: SchedulingConfig = Field(default_factory=SchedulingConfig)
    trainer: OmeTrainer | None = Field(default=None, description="OME's trainer block (seeds/002), mapped onto the fields above at submit.")

    @model_validator(mode="after")
    def _supported_and_consistent(self, info: ValidationInfo) -> SubmitJobRequest:
        tc = self.training_config
        if tc.training_type in UNSUPPORTED_TRAINING_TYPES:
            raise ValueError(UNSUPPORTED_TRAINING_TYPES[tc.training_type])
        if tc.framework.type in UNSUPPORTED_FRAMEWORKS:
            raise ValueError(UNSUPPORTED_FRAMEWORKS[tc.framework.type])
        if tc.training_type == TrainingType.QLORA and self.resource_config.gpu_count == 0:
            raise ValueError("QLORA needs a GPU (4-bit kernels are CUDA-only): set resource_config.gpu_count >= 1")
        self._procs_per_node()
        if not is_stored(info):
            for key in self.labels:
                if problem := reserved_label_problem(key):
                    raise_at(("labels", key), problem, key, "SubmitJobRequest")
            self._check_distributed()
            self._check_hub_push()
            if tc.framework.type != FrameworkType.CUSTOM:  # a CUSTOM script's hyperparameters are its own
                self._check_trainer_arguments()
            elif self.output_config.tracking is not None:
                # The trainer's trackers follow its own loop; a CUSTOM script's run would log nothing.
                raise_at(
                    ("output_config", "tracking"),
                    "a CUSTOM script logs its own runs: tracking applies to the trainer's training types (docs/TRACKING.md)",
                    "tracking",
                    "SubmitJobRequest",
                )
            if tc.training_type == TrainingType.RLHF:
                self._check_rlhf()
        return self

    def _check_rlhf(self) -> None:
        """What the RLHF trainer (GRPO, trainer/rlhf.py) refuses and can tell without data or a model."""
        from schemas.hyperparameters import Hyperparameters

        tc, dc, title = self.training_config, self.data_config, "SubmitJobRequest"
        framework = tc.framework
        if framework.type != FrameworkType.HF_TRAINER:
            raise_at(
                ("training_config", "framework", "type"),
                f"RLHF runs on HF_TRAINER (one process); {framework.type.value} is not supported for RLHF",
                framework.type.value,
                title,
            )
        if framework.distributed.world_size > 1:
            raise_at(
                ("training_config", "framework", "distributed", "world_size"),
                "RLHF runs in one process (world_size 1): several workers are not supported for RLHF yet",
                framework.distributed.world_size,
                title,
            )
        for i, source in enumerate(dc.sources):
            if source.split == "validation":
                raise_at(("data_config", "sources", i, "split"), "RLHF has no evaluation pass: no validation sources", "validation", title)
        if dc.validation_split > 0:
            message = "RLHF has no evaluation pass: leave validation_split at 0"
            raise_at(("data_config", "validation_split"), message, dc.validation_split, title)
        metric = self.output_config.checkpoint.metric_for_best_model
        if metric is not None and metric.startswith("eval_"):
            raise_at(
                ("output_config", "checkpoint", "metric_for_best_model"),
                "RLHF has no evaluation pass: choose a training metric (loss, reward)",
                metric,
                title,
            )
        assert tc.rlhf is not None  # TrainingConfig requires the block for RLHF
        parsed = Hyperparameters.parse(tc.hyperparameters, tc.training_type)
        batch = parsed.per_device_train_batch_size or dc.batch_size
        accumulation = parsed.gradient_accumulation_steps or dc.gradient_accumulation_steps
        if (batch * accumulation) % tc.rlhf.num_generations:
            raise_at(
                ("training_config", "rlhf", "num_generations"),
                f"batch_size x gradient_accumulation_steps = {batch * accumulation} completions per step is not a multiple of "
                f"num_generations={tc.rlhf.num_generations} (each prompt's group of completions must fit in one step)",
                tc.rlhf.num_generations,
                title,
            )

    def _check_trainer_arguments(self) -> None:
        """TrainingArguments names that need a GPU, or that alias a field of another config."""
        from schemas.hyperparameters import Hyperparameters

        hp = self.training_config.hyperparameters
        parsed = Hyperparameters.parse(hp, self.training_config.training_type)  # already valid: TrainingConfig checked it
        here = ("training_config", "hyperparameters")
        for name in ("bf16", "fp16"):
            if getattr(parsed, name) and self.resource_config.gpu_count == 0:
                raise_at(
                    (*here, name),
                    f"{name}=true needs a GPU (mixed precision is CUDA-only here): set resource_config.gpu_count >= 1",
                    hp[name],
                    "SubmitJobRequest",
                )
        checkpoint = self.output_config.checkpoint
        aliases = (
            ("per_device_train_batch_size", self.data_config, "batch_size", "data_config.batch_size"),
            ("gradient_accumulation_steps", self.data_config, "gradient_accumulation_steps", "data_config.gradient_accumulation_steps"),
            ("save_strategy", checkpoint, "save_strategy", "output_config.checkpoint.save_strategy"),
            ("save_steps", checkpoint, "save_steps", "output_config.checkpoint.save_steps"),
        )
        for name, config, field, where in aliases:
            value = getattr(parsed, name)
            if value is None or field not in config.model_fields_set:
                continue
            current = getattr(config, field)
            if str(getattr(current, "value", current)) != str(value):
                raise_at(
                    (*here, name),
                    f"{name}={value} conflicts with {where}={getattr(current, 'value', current)}: give one",
                    hp[name],
                    "SubmitJobRequest",
                )

    def _check_distributed(self) -> None:
        """The trainer's validate_framework (trainer/distributed.py) refusals that need no host."""
        tc, rc = self.training_config, self.resource_config
        world, nodes, gpus = tc.framework.distributed.world_size, rc.node_count, rc.gpu_count
        here = ("training_config", "framework", "distributed", "world_size")
        if world % nodes:
            raise_at(here, f"world_size={world} is not a multiple of resource_config.node_count={nodes}", world, "SubmitJobRequest")
        if gpus > 0 and world > 1 and world // nodes > gpus:
            raise_at(
                here,
                f"world_size={world} over {nodes} node(s) needs {world // nodes} GPUs per node; resource_config.gpu_count={gpus}",
                world,
                "SubmitJobRequest",
            )
        if world > 1 and tc.training_type == TrainingType.QLORA and tc.framework.type in (FrameworkType.FSDP, FrameworkType.DEEPSPEED):
            why = (
                "4-bit weights cannot be sharded by FSDP2"
                if tc.framework.type == FrameworkType.FSDP
                else "ZeRO does not partition 4-bit weights"
            )
            raise_at(
                ("training_config", "framework", "type"),
                f"QLORA with {tc.framework.type.value} is not supported ({why}); use HF_TRAINER (DDP)",
                tc.framework.type.value,
                "SubmitJobRequest",
            )

    def _check_hub_push(self) -> None:
        out = self.output_config
        if out.push_to_hub and out.hub_token is None and not self.training_config.environment.get("HF_TOKEN"):
            raise_at(
                ("output_config", "hub_token"),
                "push_to_hub needs output_config.hub_token (or HF_TOKEN in training_config.environment)",
                None,
                "SubmitJobRequest",
            )

    def _procs_per_node(self) -> None:
        """OME's numNodes x numProcPerNode: world_size follows from procs_per_node when it is given."""
        distributed = self.training_config.framework.distributed
        per_node = distributed.procs_per_node
        if per_node is None:
            return
        if per_node == "gpu":
            if self.resource_config.gpu_count == 0:
                raise ValueError("training_config.framework.distributed.procs_per_node 'gpu' needs resource_config.gpu_count >= 1")
            per_node = self.resource_config.gpu_count
        elif per_node < 1:
            raise ValueError("training_config.framework.distributed.procs_per_node must be >= 1 or 'gpu'")
        world = per_node * self.resource_config.node_count
        if "world_size" in distributed.model_fields_set and distributed.world_size != world:
            raise ValueError(
                f"training_config.framework.distributed.world_size {distributed.world_size} contradicts "
                f"procs_per_node x node_count = {world}; give one of them"
            )
        distributed.world_size = world
        # Derived, not the submitter's: a later re-validation (a training shape's node_count) derives it again.
        distributed.__pydantic_fields_set__.discard("world_size")

    @property
    def effective_priority(self) -> int:
        """scheduling_config.priority rules; training_config.priority counts only when it alone was set."""
        sc, tc = self.scheduling_config, self.training_config
        if "priority" not in sc.model_fields_set and "priority" in tc.model_fields_set:
            return tc.priority
        return sc.priority


class ErrorType(StrEnum):
    USER_ERROR = "USER_ERROR"
    DATA_ERROR = "DATA_ERROR"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    PREEMPTED = "PREEMPTED"
    TIMEOUT = "TIMEOUT"
    CAPACITY = "CAPACITY"
    BUDGET = "BUDGET"
    INTERNAL = "INTERNAL"


class PendingAction(StrEnum):
    PAUSE = "pause"
    CANCEL = "cancel"
    PREEMPT = "preempt"  # paused by the scheduler for a higher-priority job: goes back to QUEUED


class Actor(StrEnum):
    USER = "user"
    SYSTEM = "system"
    SCHEDULER = "scheduler"
    TRAINER = "trainer"


class CheckpointRef(BaseModel):
    model_config = ConfigDict(extra="ignore", defer_build=True)
    checkpoint_id: str
    step: int
    epoch: float | None = None
    metrics: dict[str, float] = Field(default_factory=dict)
    uri: str
    attempt: int = 1
    created_at: datetime | None = None
    size_bytes: int | None = Field(default=None, description="The checkpoint's files together, as its manifest lists them.")


class Progress(BaseModel):
    model_config = ConfigDict(extra="ignore", defer_build=True)
    percent: float = Field(default=0.0, ge=0.0, le=100.0)
    step: int = 0
    total_steps: int | None = None
    epoch: float | None = None
    loss: float | None = None
    eta_seconds: float | None = None
    tokens_per_second: float | None = None
    updated_at: datetime | None = None
    attempt: int | None = None  # the attempt that reported it: progress only moves forward (supersedes)

    def supersedes(self, other: Progress) -> bool:
        """Whether this report is newer than `other`: a later attempt, a later step, or the same step
        further along (a completed run's 100 %). A duplicate or older report is not (at-least-once delivery)."""
        if self.attempt is None or other.attempt is None:
            return True
        return (self.attempt, self.step, self.percent) > (other.attempt, other.step, other.percent)


class AttemptCost(BaseModel):
    """One attempt's share of the job's cost (functions/service/costs.py); recorded once per attempt."""

    model_config = ConfigDict(extra="ignore", defer_build=True)
    attempt: int
    instance_type: str | None = None
    instance_count: int = 1
    spot: bool = False
    run_seconds: float = 0.0
    billable_seconds: float = 0.0  # instance-seconds billed (per-instance billable time x instance count)
    gpu_hours: float = 0.0
    estimated_cost_usd: float = 0.0
    spot_savings_usd: float = 0.0


class Cost(BaseModel):
    """Totals over the job's attempts (pause/resume, preemption, retries within the job)."""

    model_config = ConfigDict(extra="ignore", defer_build=True)
    gpu_hours: float = 0.0
    billable_seconds: float = 0.0
    estimated_cost_usd: float = 0.0
    spot_savings_usd: float = 0.0
    instance_type: str | None = None
    attempts: list[AttemptCost] = Field(default_factory=list)


class StatusEvent(BaseModel):
    """One entry of a job's history: {"at", "from", "to", "reason", "actor"}."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore", serialize_by_alias=True, defer_build=True)
    at: datetime
    from_status: JobStatus | None = Field(default=None, alias="from")
    to_status: JobStatus = Field(alias="to")
    reason: str = ""
    actor: str = Actor.SYSTEM.value


class Job(BaseModel):
    """The job as stored and as returned by the API (hub_token masked on JSON output)."""

    model_config = ConfigDict(extra="ignore", defer_build=True)
    job_id: str
    owner: str
    name: str
    description: str | None = None
    status: JobStatus
    labels: dict[str, str] = Field(default_factory=dict)
    training_config: TrainingConfig
    data_config: DataConfig
    resource_config: ResourceConfig
    output_config: OutputConfig
    scheduling_config: SchedulingConfig
    parent_job_id: str | None = None
    created_at: datetime
    updated_at: datetime
    error_type: ErrorType | None = None
    error_message: str | None = None
    checkpoints: list[CheckpointRef] = Field(default_factory=list)
    latest_checkpoint_id: str | None = None
    best_checkpoint_id: str | None = None
    progress: Progress = Field(default_factory=Progress)
    cost: Cost = Field(default_factory=Cost)
    # The training shape resource_config.training_shape resolved to at submit, with its version.
    training_shape: TrainingShapeProfile | None = None
    # Control-plane bookkeeping
    version: int = 1
    attempt: int = 0
    retries_used: int = 0
    preemptions: int = 0
    reclaims: int = 0  # times the scheduler took borrowed GPUs back from it (docs/TEAMS.md)
    pending_action: PendingAction | None = None
    pending_reason: str | None = None
    resume_checkpoint_id: str | None = None
    # The team the owner belonged to at submit (schemas/teams.py); None for jobs from before teams.
    team: str | None = None
    queue_position: int | None = None
    estimated_wait_seconds: float | None = None
    wait_reason: str | None = Field(
        default=None, description="Why a QUEUED job waits: QUOTA, BORROW_LIMIT, COHORT_FULL, PRIORITY or BUDGET."
    )
    execution_arn: str | None = None
    run_handle: dict[str, str] | None = None
    # Lifecycle engine bookkeeping (additive): the Step Functions task token the job's execution waits
    # on now and what for ("capacity" | "run" | "resume"); the capacity pool the job holds a claim in;
    # when the current run started; and the outcome on_run_finished decided for the current attempt
    # (the WaitForRun task answers itself with it when the run ended before its token was stored).
    task_token: str | None = None
    task_token_kind: str | None = None
    capacity_pool: str | None = None
    run_started_at: datetime | None = None
    run_outcome: str | None = None
    # The seq (schemas.trainer.TrainerEvent) of the last trainer phase report applied for the current
    # attempt: an older or repeated phase report changes nothing. Cleared when a new attempt starts.
    report_seq: int | None = None
    # The tracker run the trainer reported (output_config.tracking), continued by every attempt.
    tracking: TrackingRecord | None = None
    placement: PlacementRecord | None = Field(default=None, description="Placements tried, pools blocked, recoveries (docs/PLACEMENT.md).")

    @field_serializer("task_token", when_used="json")
    def _hide_task_token(self, value: str | None, info: SerializationInfo) -> str | None:
        # A Step Functions task token is the engine's, not the API's: kept in storage (context
        # reveal_secrets, as for hub_token), never shown in responses or logs.
        return value if info.context and info.context.get("reveal_secrets") else None

    @property
    def priority(self) -> int:
        return self.scheduling_config.priority

    @property
    def queue(self) -> str:
        return self.scheduling_config.queue

    def submit_request(self) -> SubmitJobRequest:
        """The request this job was made from, as stored (a retry or PATCH validates what it makes of it in full);
        a job on a training shape names the exact version it resolved to, so a retry runs on the same profile."""
        resource_config = self.resource_config
        if self.training_shape is not None:
            resource_config = resource_config.model_copy(update={"training_shape": self.training_shape.ref})
        fields = {
            "name": self.name,
            "description": self.description,
            "labels": self.labels,
            "training_config": self.training_config,
            "data_config": self.data_config,
            "resource_config": resource_config,
            "output_config": self.output_config,
            "scheduling_config": self.scheduling_config,
        }
        return SubmitJobRequest.model_validate(fields, context=STORED)
