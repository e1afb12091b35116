"""/teams: a Router of the API Lambda (functions/handlers/api.py includes it); docs/TEAMS.md.

Admins define teams (PUT replaces the whole team, DELETE removes it: 403 for anyone else); GET /teams lists
every team for admins and the caller's own team (without its member list) for anyone else; GET
/teams/{team} is the team's live view per GPU type, 404 for a non-admin's other teams.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Annotated

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Path

from functions import composition
from functions.handlers.errors import BODY_ERRORS, no_content, principal_of, reject_unknown_params, responses
from functions.handlers.models import LazyModels
from schemas.bounds import TEAM_NAME_PATTERN

if TYPE_CHECKING:
    from schemas import teams as models
else:
    models = LazyModels("schemas.teams")  # imported on a route's first request (functions/handlers/models.py)

router = Router()
TeamName = Annotated[
    str,
    Path(min_length=1, max_length=63, pattern=TEAM_NAME_PATTERN, description="The team's name (default: the deployment's default team)"),
]
TAGS = ["teams"]
NO_PARAMS: frozenset[str] = frozenset()

_responses = partial(
    responses,
    wording={
        403: "Not signed, or not one of the deployment's admins (only admins define teams)",
        404: "No such team (or, for a non-admin, not the caller's team)",
        409: "Another request changed the team first; retry",
        503: "The user pool that decides a dashboard user's team did not answer; retry later",
    },
)


@router.get(
    "/teams",
    summary="List teams (every team for admins; the caller's own for anyone else)",
    responses=_responses(200, "Teams", 422, 503),
    tags=TAGS,
)
def list_teams() -> models.TeamList:
    principal = principal_of(router)
    reject_unknown_params(router, NO_PARAMS)
    return composition.team_service().list(principal)


@router.get(
    "/teams/<team>",
    summary="A team's quotas and live use per GPU type: nominal, in use, borrowed, lent, queued, fair share",
    responses=_responses(200, "The team's view", 404, 422, 503),
    tags=TAGS,
)
def get_team(team: TeamName) -> models.TeamView:
    principal = principal_of(router)
    reject_unknown_params(router, NO_PARAMS)
    return composition.team_service().get(team, principal)


@router.put(
    "/teams/<team>",
    summary="Define a team (admins): members, quotas per GPU type, weight, priority ceiling, queues, member caps",
    responses=_responses(200, "The team, as stored", *BODY_ERRORS, 404, 409, 422),
    tags=TAGS,
)
def put_team(team: TeamName, body: Annotated[models.TeamSpec, Body()]) -> models.Team:
    principal = principal_of(router)
    reject_unknown_params(router, NO_PARAMS)
    return composition.team_service().put(team, body, principal)


@router.delete(
    "/teams/<team>",
    status_code=204,
    summary="Delete a team (admins); its members fall back to the default team",
    responses=_responses(204, "Deleted", 404, 422, content=False),
    tags=TAGS,
)
def delete_team(team: TeamName):  # no return annotation: a 204 has no body
    principal = principal_of(router)
    reject_unknown_params(router, NO_PARAMS)
    composition.team_service().delete(team, principal)
    return no_content()
