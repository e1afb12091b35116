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
    quotas: dict[str, int] = {}
    for raw in spec.split(","):
        item = raw.strip()
        if not item:
            continue
        try:
            gpu_type, count = item.split("=")
            quotas[gpu_type.strip()] = int(count)
        except ValueError as exc:
            raise ValueError(f"default_team_quotas: {item!r} is not 'gpu_type=count'") from exc
        if gpu_type.strip() not in GPU_TYPES or quotas[gpu_type.strip()] < 0:
            raise ValueError(f"default_team_quotas: {item!r}: a count >= 0 of one of {', '.join(GPU_TYPES)}")
    return quotas
