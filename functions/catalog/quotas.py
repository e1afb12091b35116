"""The grammar of the `gpu_quotas` setting (CDK context `gpu_quotas`): the scheduler reads it, the stack's
config checks it at synth; one parser for both."""

from __future__ import annotations

from functions.catalog.gpu_types import GPU_TYPES


def parse_quotas(spec: str) -> dict[tuple[str, str], int]:
    """'default:H100=8, research:*=4, *:cpu=32' -> {(queue, gpu type or '*' or 'cpu'): count}."""
    quotas: dict[tuple[str, str], int] = {}
    for raw in spec.split(","):
        item = raw.strip()
        if not item:
            continue
        try:
            key, count = item.split("=")
            queue, gpu_type = key.split(":")
            quotas[(queue.strip(), gpu_type.strip())] = int(count)
        except ValueError as exc:
            raise ValueError(f"gpu_quotas: {item!r} is not 'queue:gpu_type=count'") from exc
    return quotas


def parse_team_quotas(spec: str) -> dict[str, int]:
    """The default team's nominal quotas (setting `default_team_quotas`): 'H100=4, cpu=8' -> {type: count}."""
    return parse_type_counts(spec, "default_team_quotas", GPU_TYPES)


def parse_gpu_inventory(spec: str) -> dict[str, int]:
    """Local mode's emulated GPUs (setting `local_gpu_inventory`, `trainplane up --gpus`): 'H100=4,A100=8'."""
    return parse_type_counts(spec, "local_gpu_inventory", tuple(t for t in GPU_TYPES if t not in ("any", "cpu")))


def parse_type_counts(spec: str, setting: str, types: tuple[str, ...]) -> dict[str, int]:
    """'H100=4, cpu=8' -> {type: count}, each type one of `types`, each count >= 0."""
    counts: dict[str, int] = {}
    for raw in spec.split(","):
        item = raw.strip()
        if not item:
            continue
        try:
            name, count = (part.strip() for part in item.split("="))
            counts[name] = int(count)
        except ValueError as exc:
            raise ValueError(f"{setting}: {item!r} is not 'gpu_type=count'") from exc
        if name not in types or counts[name] < 0:
            raise ValueError(f"{setting}: {item!r}: a count >= 0 of one of {', '.join(types)}")
    return counts
