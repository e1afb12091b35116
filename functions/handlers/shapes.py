"""GET /training-shapes and /training-shapes/{name}: the deployment's training shapes (a Router of the API).

Any signed caller may read them (they describe the deployment, not anyone's jobs); a job names one in
resource_config.training_shape (functions/service/shapes.py resolves it at submit).
"""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Path, Query

from functions import composition
from functions.handlers.errors import principal_of, reject_unknown_params, responses
from schemas.shapes import TrainingShapeList, TrainingShapeProfile

router = Router()

ShapeName = Annotated[str, Path(min_length=1, max_length=64, pattern=r"^[a-z0-9][a-z0-9._-]*$", description="The shape's name")]


_SHAPE_ERRORS = {404: "No such training shape (or no such version of it)"}


@router.get(
    "/training-shapes",
    summary="The deployment's training shapes, every version",
    responses=responses(200, "Training shape profiles, by name then version"),
    tags=["shapes"],
)
def list_training_shapes() -> TrainingShapeList:
    principal_of(router)  # any signed caller; 403 without one
    return TrainingShapeList(shapes=composition.job_service().shape_catalog().profiles())


@router.get(
    "/training-shapes/<name>",
    summary="One training shape: its latest version, or the one given",
    responses=responses(200, "The training shape profile", 404, 422, wording=_SHAPE_ERRORS),
    tags=["shapes"],
)
def get_training_shape(name: ShapeName, version: Annotated[int | None, Query(ge=1, le=999_999)] = None) -> TrainingShapeProfile:
    principal_of(router)
    # A misspelt ?verison=2 would silently give the latest version; name it instead.
    reject_unknown_params(router, frozenset({"version"}))
    return composition.job_service().shape_catalog().get(name, version)
