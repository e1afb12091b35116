"""`trainplane shapes ...`: the deployment's training shapes (registered in trainplane/cli.py).

trainplane shapes list
trainplane shapes get a100-80gb-8x [--version 2]
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from schemas.shapes import TrainingShapeProfile
from trainplane.cli import _opts, _print_json, _print_mapping, _print_raw, _print_table, handles_api_errors

shapes_app = typer.Typer(no_args_is_help=True, help="Training shapes: named, versioned resource profiles a job can name.")


def shape_text(shape: TrainingShapeProfile) -> str:
    """'a100-80gb-8x@1: 8x A100-80GB x 1 node, FSDP, bfloat16, context 16384'."""
    gpus = "CPU only" if shape.accelerator_count == 0 else f"{shape.accelerator_count}x {shape.accelerator_type or 'GPU'}"
    parts = [f"{gpus} x {shape.node_count} node{'s' if shape.node_count > 1 else ''}"]
    if shape.framework:
        parts.append(shape.framework.value)
    if shape.base_model_weight_precision:
        parts.append(shape.base_model_weight_precision.value)
    if shape.max_supported_context_length:
        parts.append(f"context {shape.max_supported_context_length}")
    if shape.trainer_image_tag:
        parts.append(f"image tag {shape.trainer_image_tag}")
    return f"{shape.ref}: " + ", ".join(parts)


@shapes_app.command("list")
@handles_api_errors
def list_shapes(ctx: typer.Context) -> None:
    """Every training shape of the deployment, every version."""
    o = _opts(ctx)
    shapes = o.client().list_training_shapes()
    if o.json:
        _print_raw({"shapes": [s.model_dump(mode="json") for s in shapes]})
        return
    table = Table("SHAPE", "VERSION", "ACCELERATORS", "NODES", "FRAMEWORK", "CONTEXT", "SAGEMAKER", "EC2")
    for s in shapes:
        gpus = "cpu" if s.accelerator_count == 0 else f"{s.accelerator_count}x {s.accelerator_type or 'GPU'}"
        table.add_row(
            s.name,
            str(s.training_shape_version),
            gpus,
            str(s.node_count),
            s.framework.value if s.framework else "-",
            str(s.max_supported_context_length or "-"),
            s.instance_types.get("sagemaker", "-"),
            s.instance_types.get("ec2", "-"),
        )
    _print_table(table)


@shapes_app.command("get")
@handles_api_errors
def get_shape(
    ctx: typer.Context,
    name: str,
    version: Annotated[int | None, typer.Option(min=1, help="This version (default: the latest).")] = None,
) -> None:
    """One training shape: what a job that names it gets."""
    o = _opts(ctx)
    shape = o.client().get_training_shape(name, version)
    if o.json:
        _print_json(shape)
        return
    rows = {"shape": shape_text(shape), "description": shape.description or "-"}
    for compute, instance_type in sorted(shape.instance_types.items()):
        rows[f"{compute} instance"] = instance_type
    if shape.framework_config:
        rows["framework config"] = ", ".join(f"{k}={v}" for k, v in sorted(shape.framework_config.items()))
    _print_mapping(o, rows)
