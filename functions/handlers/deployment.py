"""GET /deployment: what the deployment says about itself, for `trainplane doctor` (a Router of the API).

Any signed caller may read it: it names the deployment's engine, instance types, trainer images and the
code it runs (nothing of anyone's jobs), and the caller's own identity and data area.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_lambda_powertools.event_handler.api_gateway import Router

from functions import composition
from functions.handlers.errors import caller_of, responses
from functions.handlers.models import LazyModels

if TYPE_CHECKING:
    from schemas import deployment as models
else:
    models = LazyModels("schemas.deployment")  # imported on the route's first request (functions/handlers/models.py)

router = Router()


@router.get(
    "/deployment",
    summary="The deployment's engine, instance types, trainer images and code fingerprint (trainplane doctor)",
    responses=responses(200, "What the deployment says about itself"),
    tags=["deployment"],
)
def get_deployment() -> models.DeploymentInfo:
    from functions.service.deployment import deployment_info  # on first use: the cold start does not pay for it

    caller = caller_of(router)
    service = composition.job_service()
    return deployment_info(composition.current().settings, service.shape_catalog().profiles(), caller)
