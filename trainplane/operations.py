"""The job API's paths and bodies, and the job operations the waits use, written once as steps
(trainplane/transport.py) for Client and AsyncClient."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from pydantic import BaseModel

from schemas.job import Job, SubmitJobRequest
from schemas.placement import PlacementRecord
from schemas.teams import Team, TeamList, TeamSpec, TeamView
from trainplane.transport import IDEMPOTENCY_HEADER, Requester, Steps

JobRequest = SubmitJobRequest | Mapping[str, Any]
TeamRequest = TeamSpec | Mapping[str, Any]


def submit_job(api: Requester, request: JobRequest, idempotency_key: str | None = None) -> Steps[Job]:
    headers = {IDEMPOTENCY_HEADER: idempotency_key} if idempotency_key else None
    return Job.model_validate((yield from api._request("POST", "/jobs", body=request_body(request), headers=headers)))


def get_job(api: Requester, job_id: str) -> Steps[Job]:
    return Job.model_validate((yield from api._request("GET", job_path(job_id))))


def get_placement(api: Requester, job_id: str) -> Steps[PlacementRecord | None]:
    """What happened to the job's placement (docs/PLACEMENT.md): None for a job without candidates."""
    return (yield from get_job(api, job_id)).placement


def resume_job(api: Requester, job_id: str, checkpoint_id: str = "") -> Steps[Job]:
    return job_of((yield from api._request("POST", job_path(job_id, "resume"), body={"checkpoint_id": checkpoint_id})))


def retry_job(api: Requester, job_id: str, checkpoint_id: str = "", new_resource_config: Any = None) -> Steps[Job]:
    """A child job (parent_job_id = job_id) from the checkpoint, on new resources if given."""
    resources = new_resource_config.model_dump(mode="json") if isinstance(new_resource_config, BaseModel) else new_resource_config
    body = {"checkpoint_id": checkpoint_id, "modify_resources": resources is not None, "new_resource_config": resources}
    return job_of((yield from api._request("POST", job_path(job_id, "retry"), body=body)))


def existing_child(api: Requester, parent: Job) -> Steps[Job | None]:
    """A child job (retry) of `parent` made since it last changed, if there is one."""
    body = yield from api._request("GET", "/jobs", params={"name": parent.name, "limit": 50})
    jobs = [Job.model_validate(j) for j in body.get("jobs", [])]
    return next((j for j in jobs if j.parent_job_id == parent.job_id and j.created_at >= parent.updated_at), None)


def list_teams(api: Requester) -> Steps[list[Team]]:
    """Every team for admins; the caller's own (without its member list) for anyone else."""
    return TeamList.model_validate((yield from api._request("GET", "/teams"))).teams


def get_team(api: Requester, name: str) -> Steps[TeamView]:
    """The team's quotas and live use per GPU type (nominal, in use, borrowed, lent, queued) and fair share."""
    return TeamView.model_validate((yield from api._request("GET", team_path(name))))


def put_team(api: Requester, name: str, spec: TeamRequest) -> Steps[Team]:
    """Define or replace a team (admins only)."""
    body = spec.model_dump(mode="json", exclude_unset=True) if isinstance(spec, TeamSpec) else dict(spec)
    return Team.model_validate((yield from api._request("PUT", team_path(name), body=body)))


def delete_team(api: Requester, name: str) -> Steps[None]:
    """Delete a team (admins only); its members fall back to the default team."""
    yield from api._request("DELETE", team_path(name))


def team_path(name: str) -> str:
    if not name or "/" in name:
        raise ValueError(f"not a team name: {name!r}")
    return f"/teams/{quote(name, safe='')}"


def job_path(job_id: str, action: str = "") -> str:
    if not job_id or "/" in job_id:
        raise ValueError(f"not a job id: {job_id!r}")
    return f"/jobs/{quote(job_id, safe='')}" + (f"/{action}" if action else "")


def shape_path(name: str) -> str:
    if not name or "/" in name:
        raise ValueError(f"not a training shape name: {name!r}")
    return f"/training-shapes/{quote(name, safe='')}"


def job_of(body: Mapping[str, Any]) -> Job:
    """Lifecycle verbs may answer with the job itself or with {"job": ..., "action": ...}."""
    if "job_id" not in body and isinstance(body.get("job"), Mapping):
        return Job.model_validate(body["job"])
    return Job.model_validate(body)


def request_body(request: JobRequest) -> dict[str, Any]:
    if isinstance(request, SubmitJobRequest):
        # exclude_unset keeps "which priority did the user set" intact; reveal_secrets sends hub_token
        # itself rather than its mask (the model masks it on every other JSON dump).
        return request.model_dump(mode="json", exclude_unset=True, context={"reveal_secrets": True})
    return dict(request)
