"""Training shapes: resolving the one a job names (schemas/shapes.py) against the deployment's catalog
(functions/catalog/shapes.py).

Resolving at submit: the job's `resource_config.training_shape` ("name" = the latest version,
"name@N" = that one) must exist (else 422 naming it); every field the shape owns must be left unset
by the job, or set to the shape's own value (else 422 naming the field); the shape's values are filled in and the profile is recorded
on the job. A shape's `placement` candidates are the job's unless it gives its own (whose candidate 0 must be the
shape's GPUs); either list is then checked like any (functions/catalog/placement.py `validate`).
`data_config.max_seq_length` is bounded by max_supported_context_length (default: it), and a GPU shape
runs one process per GPU on each node (procs_per_node "gpu") unless the job sets world_size or
procs_per_node itself.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from functions.catalog import placement as placement_rules
from functions.catalog.placement import runs_on_shape
from functions.catalog.shapes import ShapeCatalog
from functions.errors import InvalidRequest, ShapeNotFound
from schemas.job import SubmitJobRequest
from schemas.shapes import TrainingShapeProfile, owned_by, parse_shape_ref

FIELD = "resource_config.training_shape"


# --- resolving a job's shape ---------------------------------------------------------------------


def apply_shape(
    request: SubmitJobRequest, catalog: ShapeCatalog, *, only_resources_are_the_users: bool = False
) -> tuple[SubmitJobRequest, TrainingShapeProfile | None]:
    """The request with its shape's values filled in, and the profile (None when it names no shape).

    `only_resources_are_the_users`: an edit (PATCH) brings new resources to a stored job, whose
    training_config was not written now: only the resources are checked for conflicts there, and the
    shape's training settings replace the stored ones."""
    ref = request.resource_config.training_shape
    if ref is None:
        return request, None
    try:
        name, version = parse_shape_ref(ref)
        profile = catalog.get(name, version)
    except ValueError as exc:
        raise InvalidRequest(FIELD, str(exc)) from exc
    except ShapeNotFound as exc:
        raise InvalidRequest(FIELD, f"{exc}; known shapes: {', '.join(catalog.names())}") from exc
    tc = request.training_config
    models: dict[str, BaseModel] = {"resources": request.resource_config, "framework": tc.framework, "base_model": tc.base_model}
    for owned in owned_by(profile):
        model = models[owned.model]
        if only_resources_are_the_users and owned.model != "resources":
            continue
        # The same value is no conflict: a retry's child (Job.submit_request) carries the values it got.
        if owned.attr in model.model_fields_set and getattr(model, owned.attr) != owned.value:
            raise InvalidRequest(
                owned.path,
                f"is set by training shape {profile.ref} (to {_show(owned.value)}); leave it out or drop resource_config.training_shape",
            )
    updates: dict[str, dict[str, Any]] = {"resources": {}, "framework": {}, "base_model": {}}
    for owned in owned_by(profile):
        updates[owned.model][owned.attr] = owned.value
    own = request.resource_config.placement
    if own is not None:
        # The job's own candidates replace the shape's; the shape still owns the GPUs: they are candidate 0.
        lead = own.candidates[0]
        if not runs_on_shape(profile, lead) or lead.nodes != profile.node_count:
            raise InvalidRequest(
                f"{placement_rules.FIELD}.candidates[0]",
                f"{lead.label()} is not training shape {profile.ref}'s own {profile.accelerator_count} x "
                f"{profile.accelerator_type or 'CPU'} on {profile.node_count} node(s): candidate 0 is the shape's GPUs, "
                "the others may differ",
            )
    elif profile.placement is not None:
        updates["resources"]["placement"] = profile.placement  # inherited: checked at submit like the job's own
    data = request.data_config
    limit = profile.max_supported_context_length
    if limit is not None:
        if "max_seq_length" in data.model_fields_set and data.max_seq_length > limit:
            raise InvalidRequest("data_config.max_seq_length", f"training shape {profile.ref} supports at most {limit}")
        if "max_seq_length" not in data.model_fields_set:
            data = _with(data, {"max_seq_length": limit})
    distributed = tc.framework.distributed
    if profile.accelerator_count > 0 and distributed.procs_per_node is None and "world_size" not in distributed.model_fields_set:
        # The shape's GPUs are used: one process per GPU on each node, unless the job says otherwise.
        updates["framework"]["distributed"] = _with(distributed, {"procs_per_node": "gpu"})
    framework = _with(tc.framework, updates["framework"])
    training = _with(tc, {"framework": framework, "base_model": _with(tc.base_model, updates["base_model"])})
    resources = _with(request.resource_config, {**updates["resources"], "training_shape": profile.ref})
    try:
        resolved = SubmitJobRequest.model_validate(
            {**_fields(request), "training_config": training, "data_config": data, "resource_config": resources}
        )
    except ValidationError as exc:
        # e.g. a DEEPSPEED shape with a float16 model: the combination the schema refuses, named.
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or FIELD
        raise InvalidRequest(
            where, f"with training shape {profile.ref}: {str(first.get('msg', exc)).removeprefix('Value error, ')}"
        ) from exc
    return resolved, profile


def _with(model: Any, updates: dict[str, Any]) -> Any:
    """A copy with `updates` applied AND counted as set (model_copy would not validate or mark them)."""
    if not updates:
        return model
    values = {name: getattr(model, name) for name in model.model_fields_set}
    return type(model).model_validate({**values, **updates})


def _fields(request: SubmitJobRequest) -> dict[str, Any]:
    return {name: getattr(request, name) for name in request.model_fields_set}


def _show(value: Any) -> str:
    return str(value.value) if hasattr(value, "value") else repr(value) if isinstance(value, dict | str) else str(value)
