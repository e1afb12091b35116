"""Resume across shapes (issue 26): can a checkpoint written at one world size resume at another, and
with which per-device batch and gradient accumulation does the global batch stay the same?

A pure table of rules, for the control plane (placement refuses a candidate list at submit with a 422
naming the candidate that cannot be reached) and for anyone computing a candidate's hyperparameters.
What the rules follow from is the trainer (docs/TRAINER.md, "Resume across shapes"):

- HF_TRAINER (one process or DDP) and FSDP save full states (FSDP gathers them), and the data position is
  converted to the new shape's micro-batches: any world size resumes any checkpoint, LoRA or full, as
  long as the global batch (per-device batch x accumulation x world size) divides by the new world size.
- DEEPSPEED saves each rank's ZeRO partition of the optimizer state: only the same world size (and ZeRO
  stage) resumes it; another GPU type with the same count of workers is fine.
- CUSTOM: the user's script writes its own checkpoints, which we cannot reshard: the same world size only.
- RLHF runs in one process (the trainer refuses world_size > 1).
"""

from __future__ import annotations

from dataclasses import dataclass

from schemas.configs import FrameworkType, TrainingType

# schemas/configs.py DataConfig.gradient_accumulation_steps' bound: a plan never proposes more.
MAX_GRADIENT_ACCUMULATION = 4096

# The hyperparameter names (TrainingArguments') the trainer reads before data_config's fields.
BATCH_SIZE_HYPERPARAMETER = "per_device_train_batch_size"
ACCUMULATION_HYPERPARAMETER = "gradient_accumulation_steps"


@dataclass(frozen=True)
class ShapeChange:
    """One resume: from the world size that wrote the checkpoint to the one that reads it."""

    training_type: TrainingType
    framework: FrameworkType
    from_world_size: int
    to_world_size: int
    per_device_batch_size: int  # at from_world_size
    gradient_accumulation_steps: int  # at from_world_size
    # The largest per-device batch the target's GPUs take (memory); None: no larger than today's.
    max_per_device_batch_size: int | None = None

    def __post_init__(self) -> None:
        for name in ("from_world_size", "to_world_size", "per_device_batch_size", "gradient_accumulation_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.max_per_device_batch_size is not None and self.max_per_device_batch_size < 1:
            raise ValueError("max_per_device_batch_size must be at least 1")

    @property
    def global_batch_size(self) -> int:
        return self.per_device_batch_size * self.gradient_accumulation_steps * self.from_world_size


@dataclass(frozen=True)
class ResumePlan:
    """possible, and if so the target's per-device batch and accumulation; else why not (a 422's words)."""

    possible: bool
    world_size: int
    global_batch_size: int
    per_device_batch_size: int | None = None
    gradient_accumulation_steps: int | None = None
    reason: str | None = None

    def hyperparameters(self) -> dict[str, str]:
        """The run spec's hyperparameters for the target (strings, as every hyperparameter travels)."""
        if not self.possible or self.per_device_batch_size is None or self.gradient_accumulation_steps is None:
            raise ValueError(f"no resume at world size {self.world_size}: {self.reason}")
        return {
            BATCH_SIZE_HYPERPARAMETER: str(self.per_device_batch_size),
            ACCUMULATION_HYPERPARAMETER: str(self.gradient_accumulation_steps),
        }


def world_size_of(nodes: int, gpus_per_node: int) -> int:
    """One worker per GPU (the trainer's default); a CPU-only node runs one."""
    return max(1, nodes) * max(1, gpus_per_node)


def plan_resume(change: ShapeChange) -> ResumePlan:
    """Whether `change` keeps the run exact, and the target's batch shape when it does."""
    same_size = change.from_world_size == change.to_world_size
    refused = _refusal(change, same_size)
    if refused is not None:
        return ResumePlan(possible=False, world_size=change.to_world_size, global_batch_size=change.global_batch_size, reason=refused)
    global_batch, world = change.global_batch_size, change.to_world_size
    per_worker = global_batch // world
    cap = min(change.per_device_batch_size, change.max_per_device_batch_size or change.per_device_batch_size)
    # The largest per-device batch within the cap that divides the worker's share: the fewest micro-batches.
    batch = max(b for b in range(1, min(cap, per_worker) + 1) if per_worker % b == 0)
    accumulation = per_worker // batch
    if accumulation > MAX_GRADIENT_ACCUMULATION:
        return ResumePlan(
            possible=False,
            world_size=world,
            global_batch_size=global_batch,
            reason=f"keeping the global batch of {global_batch} on {world} workers with a per-device batch of at most {cap} "
            f"needs gradient_accumulation_steps {accumulation} (at most {MAX_GRADIENT_ACCUMULATION})",
        )
    return ResumePlan(
        possible=True,
        world_size=world,
        global_batch_size=global_batch,
        per_device_batch_size=batch,
        gradient_accumulation_steps=accumulation,
    )


def _refusal(change: ShapeChange, same_size: bool) -> str | None:
    if change.training_type == TrainingType.RLHF and change.to_world_size > 1:
        return f"RLHF runs in one process: world size {change.to_world_size} cannot run it"
    if same_size:
        return None
    refused = world_size_refusal(change.framework, change.from_world_size, change.to_world_size)
    if refused is not None:
        return refused
    if change.global_batch_size % change.to_world_size:
        return (
            f"the global batch of {change.global_batch_size} (per-device batch {change.per_device_batch_size} x accumulation "
            f"{change.gradient_accumulation_steps} x {change.from_world_size} workers) does not divide among {change.to_world_size} workers"
        )
    return None


def world_size_refusal(framework: FrameworkType, from_world_size: int, to_world_size: int) -> str | None:
    """Why a `framework` checkpoint cannot move between these world sizes whatever the batch, or None.
    A training shape's candidate list is checked with it when the catalog is built (functions/catalog/shapes.py)."""
    if from_world_size == to_world_size:
        return None
    if framework == FrameworkType.DEEPSPEED:
        return (
            f"a DEEPSPEED checkpoint holds each of its {from_world_size} workers' ZeRO partitions: "
            f"only {from_world_size} workers resume it, not {to_world_size}"
        )
    if framework == FrameworkType.CUSTOM:
        return (
            "a CUSTOM script writes its own checkpoints, which the trainer cannot reshard "
            f"from {from_world_size} to {to_world_size} workers"
        )
    if framework not in (FrameworkType.HF_TRAINER, FrameworkType.FSDP):
        return f"framework {framework.value} does not resume on another world size"
    return None
