"""The pure rules of placement (docs/PLACEMENT.md): a job's candidates, their instance types and pools,
the global-batch adaptation of each, affinity labels and capabilities, and how long a pool is blocked.

No AWS call and no state: the submit check (functions/service/jobs.py), the placement service
(functions/service/placement.py), the launchers and the simulator (scripts/simulate_placement.py) read it.
Every refusal is an InvalidRequest naming the field, so the API answers 422 before a job queues.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from functions.catalog import pricing, resharding
from functions.catalog.instances import (
    CAPABILITIES,
    GPU_THROUGHPUT,
    INSTANCE_TYPES,
    InstanceChoice,
    InstanceSpec,
    Platform,
    parse_gpu_type,
    select_instance,
)
from functions.errors import InvalidRequest
from schemas.configs import DataConfig, FrameworkType, ResourceConfig, SchedulingConfig, TrainingConfig
from schemas.placement import PlacementCandidate, Purchase
from schemas.shapes import TrainingShapeProfile

FIELD = "resource_config.placement"

# How long a pool stays blocked. A preemption says the pool is short for a while (30 minutes, the
# figure users of spot quote); a capacity error may clear sooner, so it starts short and doubles with
# each repeat up to the preemption's length.
PREEMPTION_BLOCK_SECONDS = 30 * 60
CAPACITY_BLOCK_SECONDS = 5 * 60
MAX_BLOCK_SECONDS = 4 * 3600
# What a move to another pool costs before the first step: boot, image pull, checkpoint download.
RESTART_OVERHEAD_SECONDS = 10 * 60
# SageMaker's ResourceConfig.InstancePreferences takes at most 5 instance types.
MAX_INSTANCE_PREFERENCES = 5

# Pool labels node_affinity / node_anti_affinity speak: key=value.
LABEL_KEYS = ("zone", "family", "purchase", "platform", "gpu_type", "capacity_reservation")
_LABEL = re.compile(r"^(?P<key>[a-z_]+)=(?P<value>[A-Za-z0-9._-]{1,64})$")
_RESERVATION = re.compile(r"^cr-[0-9a-f]{8,17}$")
_ZONE = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d([a-z]|-[a-z0-9-]+)$")


def block_seconds(kind: str, repeats: int) -> int:
    """How long a pool is blocked after its `repeats`-th failure of `kind` ('preempted' or 'capacity')."""
    base = PREEMPTION_BLOCK_SECONDS if kind == "preempted" else CAPACITY_BLOCK_SECONDS
    return int(min(base * 2 ** max(repeats - 1, 0), MAX_BLOCK_SECONDS))


def pool_key(platform: str, instance_type: str, zone: str, purchase: Purchase | str) -> str:
    """platform/instance type/zone/purchase: the unit pool health is kept for ('any' zone = the region)."""
    return f"{platform}/{instance_type}/{zone}/{Purchase(purchase).value}"


@dataclass(frozen=True)
class Candidate:
    """A candidate made concrete: its index, what it asks for, the instance type it runs on."""

    index: int
    spec: PlacementCandidate
    choice: InstanceChoice

    @property
    def hourly_usd(self) -> float:
        """Price of the whole placement (every node) per hour."""
        platform = self.choice.platform
        one = (
            pricing.spot_hourly_estimate(self.choice.spec.name, platform)
            if self.spec.purchase == Purchase.SPOT
            else pricing.on_demand_hourly(self.choice.spec.name, platform)
        )
        return one * self.choice.instance_count

    def labels(self) -> dict[str, str]:
        return {
            "family": self.choice.spec.family,
            "purchase": self.spec.purchase.value,
            "platform": self.spec.platform,
            "gpu_type": self.choice.spec.gpu_type or "cpu",
        }


def declared_candidates(resources: ResourceConfig, scheduling: SchedulingConfig, compute: str) -> list[PlacementCandidate]:
    """resource_config.placement's candidates, or today's fields as the single-candidate form."""
    if resources.placement is not None:
        return list(resources.placement.candidates)
    platform = compute if compute in ("sagemaker", "ec2") else "ec2"
    purchase = Purchase.SPOT if scheduling.preemptible else Purchase.ON_DEMAND
    return [
        PlacementCandidate(
            gpu_type=resources.gpu_type or "any",
            gpus_per_node=max(resources.gpu_count, 1),
            nodes=resources.node_count,
            platform=platform,
            purchase=purchase,
        )
    ]


def first_candidate(resources: ResourceConfig) -> ResourceConfig:
    """resource_config with its GPU fields from candidate 0, so quotas, the capacity pool and the cost estimate
    count the job as its first choice. A GPU field given beside the candidates and different from candidate 0
    would be ignored: 422 naming it."""
    if resources.placement is None:
        return resources
    first = resources.placement.candidates[0]
    wanted = {"gpu_type": first.gpu_type, "gpu_count": first.gpus_per_node, "node_count": first.nodes}
    for name, value in wanted.items():
        given = getattr(resources, name)
        if name in resources.model_fields_set and given != value and not (name == "gpu_type" and given is None):
            raise InvalidRequest(
                f"resource_config.{name}",
                f"{given!r} differs from candidate 0's {value!r}: with resource_config.placement, give the GPUs in its candidates",
            )
    return resources.model_copy(update=wanted)


def candidate_resources(resources: ResourceConfig, candidate: PlacementCandidate) -> ResourceConfig:
    """The job's resource_config as it runs on `candidate` (the minimums other than the GPUs are kept)."""
    return resources.model_copy(
        update={"gpu_type": candidate.gpu_type, "gpu_count": candidate.gpus_per_node, "node_count": candidate.nodes, "placement": None}
    )


def runs_on_shape(shape: TrainingShapeProfile, candidate: PlacementCandidate) -> bool:
    """Is `candidate` the shape's own GPUs (type and count per node), the ones its instance types carry?"""
    if candidate.gpus_per_node != shape.accelerator_count:
        return False
    try:
        return parse_gpu_type(candidate.gpu_type) == parse_gpu_type(shape.accelerator_type)
    except InvalidRequest:
        return False


def shape_for(shape: TrainingShapeProfile | None, candidate: PlacementCandidate) -> TrainingShapeProfile | None:
    """The shape as it applies on `candidate`: its instance types pin only its own GPUs; on another candidate
    the cheapest fitting type is chosen (its framework, precision and image tag still apply)."""
    if shape is None or not shape.instance_types or runs_on_shape(shape, candidate):
        return shape
    return shape.model_copy(update={"instance_types": {}})


def check_shape_candidates(shape: TrainingShapeProfile, compute: str | None = None) -> None:
    """A training shape's own candidate list, when the catalog is built: candidate 0 is the shape's GPUs, each
    candidate has an instance type on its platform (the deployment's `compute` when known) and the shape's
    framework can resume a checkpoint on each world size. ValueError naming the shape and the candidate; what
    depends on the job (its batch, its training type) is checked at submit (`validate`)."""
    placement = shape.placement
    if placement is None:
        return
    first = placement.candidates[0]
    where = f"training shape {shape.ref}: placement.candidates"
    if not runs_on_shape(shape, first) or first.nodes != shape.node_count:
        raise ValueError(f"{where}[0] ({first.label()}) is not the shape's own {shape.accelerator_count} x {shape.accelerator_type}")
    framework = shape.framework or FrameworkType.HF_TRAINER
    resources = ResourceConfig(gpu_type=first.gpu_type, gpu_count=first.gpus_per_node, node_count=first.nodes, placement=placement)
    for i, candidate in enumerate(placement.candidates):
        if compute in ("sagemaker", "ec2") and candidate.platform != compute:
            raise ValueError(f"{where}[{i}]: this deployment launches on {compute}; {candidate.platform!r} cannot run here")
        try:
            select_instance(candidate_resources(resources, candidate), candidate.platform, shape_for(shape, candidate))
        except InvalidRequest as exc:
            raise ValueError(f"{where}[{i}] ({candidate.label()}): {exc.message}") from None
        refused = resharding.world_size_refusal(framework, first.world_size, candidate.world_size)
        if refused is not None:
            raise ValueError(f"{where}[{i}] ({candidate.label()}) cannot resume a checkpoint of candidate 0: {refused}")


def resolve(resources: ResourceConfig, shape: TrainingShapeProfile | None = None) -> list[Candidate]:
    """Every candidate of resource_config.placement with its instance type: 422 naming the candidate that none fits."""
    if resources.placement is None:
        return []
    found = []
    for i, spec in enumerate(resources.placement.candidates):
        try:
            choice = select_instance(candidate_resources(resources, spec), spec.platform, shape_for(shape, spec))
        except InvalidRequest as exc:
            raise InvalidRequest(f"{FIELD}.candidates[{i}]", f"{spec.label()}: {exc.message}") from exc
        found.append(Candidate(i, spec, choice))
    return found


def throughput(candidate: PlacementCandidate) -> float:
    """The candidate's relative training throughput: its GPUs' (instances.GPU_THROUGHPUT, A100 = 1.0) times
    its world size. Work measured on one candidate takes `throughput(a) / throughput(b)` times as long on b."""
    try:
        gpu = parse_gpu_type(candidate.gpu_type).gpu_type
    except InvalidRequest:
        gpu = None
    return GPU_THROUGHPUT.get(gpu or "", 0.0) * world_size(candidate.gpus_per_node, candidate.nodes)


def work_on(seconds: float, measured_on: PlacementCandidate, runs_on: PlacementCandidate) -> float:
    """`seconds` of training measured on one candidate, as seconds on another (its relative throughput)."""
    have, want = throughput(measured_on), throughput(runs_on)
    return seconds * have / want if have and want else seconds


def first_on_demand(candidates: Sequence[PlacementCandidate]) -> int | None:
    """The index of the candidate the deadline policy falls back to: the first on-demand one."""
    return next((i for i, c in enumerate(candidates) if c.purchase == Purchase.ON_DEMAND), None)


def world_size(gpus_per_node: int, nodes: int) -> int:
    return max(gpus_per_node, 1) * nodes


def batch_of(training: TrainingConfig, data: DataConfig) -> tuple[int, int]:
    """The job's own per-device batch and gradient accumulation (a hyperparameter alias wins, as in the trainer)."""
    from schemas.hyperparameters import Hyperparameters

    parsed = Hyperparameters.parse(training.hyperparameters, training.training_type)
    return (
        parsed.per_device_train_batch_size or data.batch_size,
        parsed.gradient_accumulation_steps or data.gradient_accumulation_steps,
    )


def adaptations(resources: ResourceConfig, training: TrainingConfig, data: DataConfig) -> list[tuple[int, int, int, int]]:
    """Per candidate: (world size, per-device batch, accumulation, global batch), the global batch being
    the first candidate's with the job's own batch settings. The one rule of a resume on another shape
    (functions/catalog/resharding.py, which the trainer's resume follows) decides each candidate; a 422 names
    the candidate it refuses (a batch that does not split, a DEEPSPEED or CUSTOM checkpoint on another world
    size, RLHF on more than one worker)."""
    if resources.placement is None:
        return []
    per_device, accumulation = batch_of(training, data)
    first = resources.placement.candidates[0]
    first_world = world_size(first.gpus_per_node, first.nodes)
    rows = []
    for i, candidate in enumerate(resources.placement.candidates):
        world = world_size(candidate.gpus_per_node, candidate.nodes)
        plan = resharding.plan_resume(
            resharding.ShapeChange(
                training_type=training.training_type,
                framework=training.framework.type,
                from_world_size=first_world,
                to_world_size=world,
                per_device_batch_size=per_device,
                gradient_accumulation_steps=accumulation,
            )
        )
        if not plan.possible or plan.per_device_batch_size is None or plan.gradient_accumulation_steps is None:
            raise InvalidRequest(
                f"{FIELD}.candidates[{i}]",
                f"{candidate.label()} has {world} devices and cannot resume a checkpoint of candidate 0 "
                f"({first_world} devices): {plan.reason}",
            )
        rows.append((world, plan.per_device_batch_size, plan.gradient_accumulation_steps, plan.global_batch_size))
    return rows


@dataclass(frozen=True)
class Label:
    key: str
    value: str

    def matches(self, labels: dict[str, str], zone: str | None) -> bool:
        if self.key == "zone":
            return zone == self.value
        return labels.get(self.key) == self.value


def parse_labels(raw: Sequence[str], field: str, zones: Sequence[str]) -> list[Label]:
    """node_affinity / node_anti_affinity entries as labels: 422 naming the entry that is not a known label."""
    families = {spec.family for spec in INSTANCE_TYPES}
    gpu_types = {spec.gpu_type for spec in INSTANCE_TYPES if spec.gpu_type}
    known: dict[str, tuple[set[str] | None, str]] = {
        "family": (families, "an instance family of the table, e.g. p5, p4d, g6e"),
        "purchase": ({p.value for p in Purchase}, "spot or on_demand"),
        "platform": ({"sagemaker", "ec2"}, "sagemaker or ec2"),
        "gpu_type": (gpu_types, f"one of {', '.join(sorted(gpu_types))}"),
    }
    labels = []
    for i, entry in enumerate(raw):
        where = f"{field}[{i}]"
        match = _LABEL.match(entry)
        if match is None or match.group("key") not in LABEL_KEYS:
            raise InvalidRequest(where, f"{entry!r} is not a pool label; use key=value with key one of {', '.join(LABEL_KEYS)}")
        key, value = match.group("key"), match.group("value")
        if key == "zone":
            if not _ZONE.match(value):
                raise InvalidRequest(where, f"{value!r} is not an availability zone name (e.g. us-east-1a)")
            if zones and value not in zones:
                raise InvalidRequest(where, f"zone {value!r} is not one of resource_config.placement.availability_zones")
        elif key == "capacity_reservation":
            if not _RESERVATION.match(value):
                raise InvalidRequest(where, f"{value!r} is not a capacity reservation id (cr- and hex digits)")
            # Accepting it would ignore it: no launcher targets a reservation yet.
            raise InvalidRequest(where, "capacity reservations are not targeted yet (docs/PLACEMENT.md)")
        else:
            values, what = known[key]
            if values is not None and value not in values:
                raise InvalidRequest(where, f"unknown {key} {value!r}: {what}")
        labels.append(Label(key, value))
    return labels


def check_capabilities(required: Sequence[str], specs: Sequence[InstanceSpec]) -> list[int]:
    """Indexes of `specs` that have every capability in `required`; 422 naming the field when one is unknown."""
    field = "scheduling_config.required_capabilities"
    for i, name in enumerate(required):
        if name not in CAPABILITIES:
            raise InvalidRequest(f"{field}[{i}]", f"unknown capability {name!r}; known: {', '.join(CAPABILITIES)}")
    return [i for i, spec in enumerate(specs) if set(required) <= spec.capabilities]


def order(
    candidates: Sequence[Candidate], affinity: Sequence[Label], anti: Sequence[Label], zones: Sequence[str]
) -> list[tuple[Candidate, str]]:
    """(candidate, zone) pairs in the order placement tries them: pools an anti-affinity label matches are
    dropped; pools matching more affinity labels go first; otherwise the declared order."""
    pairs = []
    for candidate in candidates:
        labels = candidate.labels()
        # SageMaker picks the zone itself: its pools are the region's ("any").
        for zone in (zones if candidate.spec.platform == "ec2" else None) or ["any"]:
            where = None if zone == "any" else zone
            if any(label.matches(labels, where) for label in anti):
                continue
            score = sum(label.matches(labels, where) for label in affinity)
            pairs.append((score, candidate, zone))
    pairs.sort(key=lambda row: -row[0])  # stable: the declared order within a score
    return [(candidate, zone) for _, candidate, zone in pairs]


def platform_of(value: str) -> Platform:
    return "sagemaker" if value == "sagemaker" else "ec2"


def validate(
    resources: ResourceConfig,
    scheduling: SchedulingConfig,
    training: TrainingConfig,
    data: DataConfig,
    compute: str,
    now_epoch: float,
    shape: TrainingShapeProfile | None = None,
) -> None:
    """Submit-time check of everything placement reads: 422 naming the field, never a silent ignore."""
    placement = resources.placement
    zones = list(placement.availability_zones) if placement else []
    if placement is not None:
        if compute in ("sagemaker", "ec2"):
            for i, spec in enumerate(placement.candidates):
                if spec.platform != compute:
                    raise InvalidRequest(
                        f"{FIELD}.candidates[{i}].platform", f"this deployment launches on {compute}; {spec.platform!r} cannot run here"
                    )
        if resources.gpu_count == 0:
            raise InvalidRequest("resource_config.gpu_count", "placement candidates are GPU placements: gpu_count 0 cannot have them")
        resolved = resolve(resources, shape)
        adaptations(resources, training, data)
        check_deadline(resolved, placement.deadline.timestamp() if placement.deadline else None, placement.expected_work_seconds, now_epoch)
    else:
        if not (scheduling.required_capabilities or resources.node_affinity or resources.node_anti_affinity):
            return
        if resources.gpu_count == 0 and (scheduling.required_capabilities or resources.node_affinity or resources.node_anti_affinity):
            _refuse_cpu(resources, scheduling)
        platform = platform_of(compute)
        resolved = [Candidate(0, declared_candidates(resources, scheduling, compute)[0], select_instance(resources, platform, shape))]
    affinity = parse_labels(resources.node_affinity, "resource_config.node_affinity", zones)
    anti = parse_labels(resources.node_anti_affinity, "resource_config.node_anti_affinity", zones)
    able = check_capabilities(scheduling.required_capabilities, [c.choice.spec for c in resolved])
    if not able:
        missing = ", ".join(scheduling.required_capabilities)
        types = ", ".join(sorted({c.choice.instance_type for c in resolved}))
        raise InvalidRequest("scheduling_config.required_capabilities", f"no candidate has {missing} (candidates run on {types})")
    pairs = order([resolved[i] for i in able], affinity, anti, zones)
    if not pairs:
        raise InvalidRequest("resource_config.node_anti_affinity", "it rules out every pool of every candidate")
    for i, label in enumerate(affinity):
        # A preference no pool can satisfy would be silently ignored: refused instead.
        if not any(label.matches(c.labels(), None if zone == "any" else zone) for c, zone in pairs):
            hint = " (zones need resource_config.placement.availability_zones)" if label.key == "zone" and placement is None else ""
            raise InvalidRequest(
                f"resource_config.node_affinity[{i}]", f"{label.key}={label.value} matches no pool of the job's candidates{hint}"
            )


def _refuse_cpu(resources: ResourceConfig, scheduling: SchedulingConfig) -> None:
    field = (
        "scheduling_config.required_capabilities"
        if scheduling.required_capabilities
        else ("resource_config.node_affinity" if resources.node_affinity else "resource_config.node_anti_affinity")
    )
    raise InvalidRequest(field, "a CPU-only job (gpu_count 0) has no GPU pools to place by; drop it or ask for GPUs")


def check_deadline(candidates: Sequence[Candidate], deadline: float | None, work: int | None, now: float) -> None:
    """A deadline in the past, one no candidate can meet with `work` seconds of training, or one without an
    on-demand fallback: 422 naming the field."""
    if deadline is None:
        return
    if deadline <= now:
        raise InvalidRequest(f"{FIELD}.deadline", "is in the past")
    fallback = first_on_demand([c.spec for c in candidates])
    if fallback is None:
        raise InvalidRequest(
            f"{FIELD}.candidates", "a deadline needs an on_demand candidate to fall back to when spot leaves no slack (docs/PLACEMENT.md)"
        )
    if work is not None:
        # The guarantee is the on-demand fallback's: it must finish the work (candidate 0's seconds, at its own speed).
        needed = work_on(work, candidates[0].spec, candidates[fallback].spec)
        if now + needed + RESTART_OVERHEAD_SECONDS > deadline:
            hours = (deadline - now) / 3600
            raise InvalidRequest(
                f"{FIELD}.deadline",
                f"the on-demand fallback (candidate {fallback}, {candidates[fallback].spec.label()}) cannot finish {work} s of "
                f"candidate 0's training ({needed:.0f} s at its speed) plus {RESTART_OVERHEAD_SECONDS} s of start-up in the "
                f"{hours:.2f} h left",
            )
