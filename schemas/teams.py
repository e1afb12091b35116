"""Teams (issue 24): who may use how many GPUs of each type, at what priority, in which queues.

Admins define teams (PUT /teams/{team}); a caller's team is decided on the server from its identity (the
first team, by name, one of whose member patterns matches the caller's ARN or its role's), never from a
request body; a caller in no team belongs to the deployment's `default` team. A quota limit is a count of
units (GPUs; CPU slots for `cpu`) or a percentage of the type's nominal quota ("50%").
"""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from schemas.bounds import TEAM_NAME_PATTERN as TEAM_NAME_PATTERN
from schemas.configs import Priority, Strict

DEFAULT_TEAM = "default"
# The types a team quota names (functions/catalog/gpu_types.py prices them): resource_config.gpu_type's canonical
# names, `any` (a GPU job that named no type) and `cpu` (gpu_count 0).
GPU_TYPE_KEYS: tuple[str, ...] = ("H100", "A100-80GB", "A100", "L40S", "L4", "A10G", "T4", "any", "cpu")
UNLIMITED_UNITS = 1_000_000  # the default team without a limit of its own (functions/service/scheduler.py UNLIMITED)
_PERCENT = re.compile(r"^(\d{1,3})%$")

# A count of units, or a percentage of nominal up to 100% (the validator of TypeQuota says the same in words).
Limit = Annotated[int, Field(ge=0, le=100_000)] | Annotated[str, Field(pattern=r"^(100|[1-9]?[0-9])%$")]


def limit_units(limit: Limit, nominal: int) -> int:
    """A limit as units: a count as it is, "N%" as that share of `nominal` (rounded down)."""
    if isinstance(limit, int):
        return limit
    match = _PERCENT.match(limit)
    assert match is not None  # validated by TypeQuota
    return nominal * int(match.group(1)) // 100


class TypeQuota(Strict):
    """One GPU type's quota of a team."""

    model_config = ConfigDict(defer_build=True)  # built on first use, not in the API Lambda's cold start

    nominal: int = Field(ge=0, le=UNLIMITED_UNITS, description="Units the team is guaranteed (and may lend while idle).")
    borrow_limit: Limit = Field(default=0, description="Units (or % of nominal) the team may borrow beyond nominal from idle teams.")
    lend_limit: Limit = Field(default="100%", description="Units (or % of nominal) of its idle quota others may borrow.")

    @field_validator("borrow_limit", "lend_limit")
    @classmethod
    def _limit(cls, value: Limit) -> Limit:
        if isinstance(value, int):
            if not 0 <= value <= 100_000:
                raise ValueError("must be between 0 and 100000 units")
            return value
        match = _PERCENT.match(value)
        if match is None or int(match.group(1)) > 100:
            raise ValueError('must be a count of units or a percentage of nominal up to "100%" (e.g. "50%")')
        return value


# An IAM ARN or a pattern of them: what the validator below checks, stated in the document too.
ArnPattern = Annotated[str, Field(pattern=r"^arn:", max_length=2048)]


# A Cognito user-pool group name as Cognito allows it (1-128 letters, marks, symbols, digits, punctuation: no
# whitespace, no control characters; the pattern says the first in a form every JSON Schema regex reads).
CognitoGroup = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^\S+$")]


class TeamMembers(Strict):
    model_config = ConfigDict(defer_build=True)  # built on first use, not in the API Lambda's cold start
    arns: list[ArnPattern] = Field(
        default_factory=list,
        max_length=200,
        description=(
            "IAM ARNs or patterns with * (arn:aws:iam::123:role/Research matches every session of that role; "
            "arn:aws:sts::123:assumed-role/Dashboard/* every dashboard user)."
        ),
    )
    cognito_groups: list[CognitoGroup] = Field(
        default_factory=list,
        max_length=50,
        json_schema_extra={"uniqueItems": True},  # stated in the document, checked by _groups
        description=(
            "Dashboard users by the groups of the deployment's Cognito user pool (e.g. ml-research): the server looks "
            "a signed-in person's groups up in the pool, never reads them from the request."
        ),
    )

    @field_validator("arns")
    @classmethod
    def _arns(cls, values: list[str]) -> list[str]:
        for value in values:
            if not value.startswith("arn:") or len(value) > 2048:
                raise ValueError(f"{value!r} is not an ARN or ARN pattern (arn:...)")
        return values

    @field_validator("cognito_groups")
    @classmethod
    def _groups(cls, values: list[str]) -> list[str]:
        for value in values:
            if value.startswith("arn:"):
                raise ValueError(f"{value!r} is an ARN: name the user pool's group (e.g. ml-research); role ARNs go in members.arns")
            if any(c.isspace() or not c.isprintable() for c in value):
                raise ValueError(f"{value!r} is not a Cognito group name (no whitespace or control characters)")
        if len(set(values)) != len(values):
            raise ValueError("lists a group more than once")
        return values


class MemberCaps(Strict):
    model_config = ConfigDict(defer_build=True)  # built on first use, not in the API Lambda's cold start

    max_gpus: int | None = Field(default=None, ge=0, le=100_000, description="Units one member may hold at once (null: no cap).")
    max_running_jobs: int | None = Field(default=None, ge=0, le=10_000, description="Jobs one member may run at once (null: no cap).")


class TeamSpec(Strict):
    """PUT /teams/{team}: the whole team, replacing what was there."""

    model_config = ConfigDict(
        defer_build=True,
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "members": {"arns": ["arn:aws:iam::123456789012:role/Research"]},
                    "quotas": {"H100": {"nominal": 8, "borrow_limit": "50%", "lend_limit": 4}, "cpu": {"nominal": 16}},
                    "weight": 2.0,
                    "max_priority": 8,
                    "queues": ["default", "research"],
                    "member_caps": {"max_gpus": 8, "max_running_jobs": 4},
                }
            ]
        },
    )
    members: TeamMembers = Field(default_factory=TeamMembers)
    quotas: dict[str, TypeQuota] = Field(
        default_factory=dict,
        description=f"Per GPU type ({', '.join(GPU_TYPE_KEYS)}); a type not listed: nominal 0, no borrowing.",
        json_schema_extra={"propertyNames": {"enum": list(GPU_TYPE_KEYS)}},  # the document states the validator's rule
    )
    weight: float = Field(default=1.0, gt=0, le=1000, description="Fair-share weight: the team's share is weight / all weights.")
    max_priority: Priority = Field(default=10, description="The highest scheduling_config.priority the team's members may submit at.")
    queues: list[str] | None = Field(default=None, max_length=100, description="Queues the members may submit to (null: any).")
    member_caps: MemberCaps = Field(default_factory=MemberCaps)

    @field_validator("quotas")
    @classmethod
    def _types(cls, quotas: dict[str, TypeQuota]) -> dict[str, TypeQuota]:
        unknown = sorted(set(quotas) - set(GPU_TYPE_KEYS))
        if unknown:
            raise ValueError(f"unknown GPU type(s) {', '.join(unknown)}; known: {', '.join(GPU_TYPE_KEYS)}")
        return quotas


class Team(TeamSpec):
    model_config = ConfigDict(defer_build=True, extra="ignore")

    @model_validator(mode="before")
    @classmethod
    def _stored_role_patterns(cls, data: Any) -> Any:
        """A team stored before groups were looked up in the user pool held role ARN patterns in
        members.cognito_groups: they are ARN patterns, read as such (members.arns) so it still loads."""
        members = data.get("members") if isinstance(data, dict) else None
        if not isinstance(members, dict):
            return data
        groups = members.get("cognito_groups")
        if isinstance(groups, list) and any(isinstance(g, str) and g.startswith("arn:") for g in groups):
            arns = [g for g in groups if isinstance(g, str) and g.startswith("arn:")]
            kept = [g for g in groups if g not in arns]
            data = {**data, "members": {**members, "arns": [*members.get("arns", []), *arns], "cognito_groups": kept}}
        return data

    name: str = Field(pattern=TEAM_NAME_PATTERN)
    version: int = 1
    updated_at: datetime | None = None
    updated_by: str | None = None
    configured: bool = Field(default=True, description="False for the default team as the deployment's settings define it.")


class TeamList(BaseModel):
    model_config = ConfigDict(defer_build=True)  # built on first use, not in the API Lambda's cold start
    teams: list[Team]


class WaitReason(StrEnum):
    """Why a queued job waits (GET /jobs/{id}, GET /teams/{team})."""

    QUOTA = "QUOTA"  # its team (or the member) is at its quota and may not borrow
    BORROW_LIMIT = "BORROW_LIMIT"  # its team is borrowing as much as it may
    COHORT_FULL = "COHORT_FULL"  # no idle capacity to take, in the pool or from other teams
    PRIORITY = "PRIORITY"  # jobs of a higher priority class are served first
    BUDGET = "BUDGET"  # a budget covering it is past hold_new, or its forecast exceeds what is left (issue 25)


class TypeUsage(BaseModel):
    model_config = ConfigDict(defer_build=True)  # built on first use, not in the API Lambda's cold start
    gpu_type: str
    nominal: int
    in_use: int
    borrowed: int = Field(description="Units in use beyond nominal (taken from idle teams).")
    lent: int = Field(description="Units of the team's idle nominal other teams are using.")
    queued: int = Field(description="Units its queued jobs ask for.")
    usage: float = Field(
        default=0.0, description="This type's usage decayed over the half-life, in price-weighted unit-hours (USD), running jobs included."
    )


def usage_key(team: str, gpu_type: str) -> str:
    """Where a team's usage of one type is recorded beside its total (team names have no '#')."""
    return f"{team}#{gpu_type}"


class TeamView(BaseModel):
    model_config = ConfigDict(defer_build=True)  # built on first use, not in the API Lambda's cold start
    team: Team
    fair_share: float = Field(description="Slurm's factor 2^(-usage/share): 1 unused, 0.5 at its share, towards 0 above it.")
    usage: float = Field(description="Recorded usage decayed over the half-life, in price-weighted unit-hours (USD), all types together.")
    types: list[TypeUsage]
