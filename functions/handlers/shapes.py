"""GET /training-shapes and /training-shapes/{name}: the deployment's training shapes (a Router of the API).

Any signed caller may read them (they describe the deployment, not anyone's jobs); a job names one in
resource_config.training_shape (functions/service/compat/shapes.py resolves it at submit).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, cast

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Path, Query

from functions import composition
from functions.handlers.errors import Forbidden, responses
from functions.service.principal import caller_arn
from schemas.shapes import TrainingShapeList, TrainingShapeProfile

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEvent

router = Router()

ShapeName = Annotated[str, Path(min_length=1, max_length=64, pattern=r"^[a-z0-9][a-z0-9._-]*$", description="The shape's name")]


def _signed() -> None:
    event = cast("APIGatewayProxyEvent", router.current_event)
    identity = event.request_context.identity
    if not caller_arn(identity.user_arn, identity.cognito_identity_id, identity.cognito_authentication_type):
        raise Forbidden("no IAM caller in the request context: the API requires AWS_IAM (SigV4) authorization")


def _reject_unknown_params(known: frozenset[str]) -> None:
    # A misspelt ?verison=2 would silently give the latest version; name it instead (as the other routes do).
    from functions.errors import InvalidRequest

    for name in router.current_event.query_string_parameters or {}:
        if name not in known:
            raise InvalidRequest(name, f"unknown query parameter; known: {', '.join(sorted(known))}")


@router.get(
    "/training-shapes",
    summary="The deployment's training shapes, every version",
    responses=responses(200, "Training shape profiles, by name then version"),
    tags=["shapes"],
)
def list_training_shapes() -> TrainingShapeList:
    _signed()
    return TrainingShapeList(shapes=composition.job_service().shape_catalog().profiles())


@router.get(
    "/training-shapes/<name>",
    summary="One training shape: its latest version, or the one given",
    responses=responses(200, "The training shape profile", 404, 422),
    tags=["shapes"],
)
def get_training_shape(name: ShapeName, version: Annotated[int | None, Query(ge=1, le=999_999)] = None) -> TrainingShapeProfile:
    _signed()
    _reject_unknown_params(frozenset({"version"}))
    return composition.job_service().shape_catalog().get(name, version)
