"""DeepFinery's training API (seeds/004), a Router of the API: POST /train and GET /train/{run_id}.

Same IAM (SigV4) authorization as every other route: DeepFinery's X-TRAINER-TOKEN header is neither
needed nor read. functions/service/compat/deepfinery.py maps the payload onto an ordinary job.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Path

from functions import composition
from functions.handlers.errors import BODY_ERRORS, principal_of, responses
from functions.handlers.models import LazyModels

if TYPE_CHECKING:
    from schemas import train as models
else:
    models = LazyModels("schemas.train")  # imported on a route's first request (functions/handlers/models.py)

if TYPE_CHECKING:
    from functions.service.compat.deepfinery import TrainApi

router = Router()

RunIdPath = Annotated[str, Path(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", description="The run's run_id")]


_RUN_ERRORS = {
    404: "No such run (or it belongs to another principal)",
    409: "The run's newest job has not finished yet: one job per run at a time",
}


def _train_api() -> TrainApi:
    from functions.service.compat.deepfinery import TrainApi

    return TrainApi(composition.job_service())


@router.post(
    "/train",
    status_code=201,
    summary="Submit a training run with DeepFinery's unified payload (seeds/004)",
    description="Becomes an ordinary job (validated as POST /jobs validates) named after run_id; IAM auth, no X-TRAINER-TOKEN.",
    responses=responses(201, "The run, submitted (status and the job's id)", *BODY_ERRORS, 409, 422, 503, wording=_RUN_ERRORS),
    tags=["train"],
)
def submit_train(body: Annotated[models.TrainRequest, Body()]) -> models.TrainStatus:
    return _train_api().submit(body, principal_of(router))


@router.get(
    "/train/<run_id>",
    summary="The status of a /train run: submitted, running, failed or succeeded",
    responses=responses(200, "The newest job of the run, in the seed's words", 404, 422, wording=_RUN_ERRORS),
    tags=["train"],
)
def train_status(run_id: RunIdPath) -> models.TrainStatus:
    return _train_api().status(run_id, principal_of(router))
