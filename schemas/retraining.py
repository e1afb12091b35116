"""Retraining policies: start a job from a template when data lands, on a schedule, or on any event.

A policy is validated whole when it is created (its template is a full SubmitJobRequest, its mapping
targets must name real fields, its cron must parse), so it never fails for a reason known in advance
when it fires.
"""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from schemas.bounds import MAX_PATTERN_NODES, node_count
from schemas.configs import Strict, is_stored
from schemas.job import MAX_LABELS, JobName, SubmitJobRequest, reserved_label_problem

POLICY_LABEL = "retraining_policy"
EVENT_LABEL = "trigger_event_id"
# Events with this source on the default bus reach the dispatcher (put your own, e.g. a drift check's).
CUSTOM_EVENT_SOURCE = "trainplane.retraining"
RESERVED_LABELS = frozenset({POLICY_LABEL, EVENT_LABEL})
_LABEL_KEY = re.compile(r"^[A-Za-z0-9_.\-/]{1,63}$")


class S3Trigger(Strict):
    """New objects under a prefix (EventBridge 'Object Created' from S3)."""

    type: Literal["s3"]  # the union's discriminator: required (as the server has always required it)
    bucket: str | None = Field(
        default=None,
        pattern=r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$",
        description="Defaults to the control plane's artifacts bucket (where only datasets/ triggers).",
    )
    prefix: str = Field(default="", max_length=1024)
    suffix: str | None = Field(default=None, max_length=256)


class ScheduleTrigger(Strict):
    type: Literal["schedule"]  # the union's discriminator: required (as the server has always required it)
    expression: str = Field(description="EventBridge Scheduler syntax: cron(min hour dom month dow year) or rate(N unit).")
    timezone: str = Field(default="UTC", description="IANA time zone the cron fields are read in (ScheduleExpressionTimezone).")

    @field_validator("expression")
    @classmethod
    def _parses(cls, value: str) -> str:
        from schemas.schedule_expr import parse_schedule_expression  # on first use: not in the API's cold start

        parse_schedule_expression(value)  # raises ValueError with what is wrong
        return value

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"{value!r} is not an IANA time zone (e.g. UTC, Europe/Paris)") from exc
        return value


class EventPatternTrigger(Strict):
    """Any EventBridge event pattern, e.g. a model-monitor drift alarm's state change."""

    type: Literal["event"]  # the union's discriminator: required (as the server has always required it)
    # minProperties: the document says what _valid_pattern refuses (an empty pattern).
    pattern: Annotated[dict[str, Any], node_count(MAX_PATTERN_NODES)] = Field(json_schema_extra={"minProperties": 1})

    @field_validator("pattern")
    @classmethod
    def _valid_pattern(cls, value: dict[str, Any]) -> dict[str, Any]:
        from schemas.event_pattern import validate_pattern

        validate_pattern(value)
        return value


Trigger = Annotated[S3Trigger | ScheduleTrigger | EventPatternTrigger, Field(discriminator="type")]


class ConcurrencyPolicy(StrEnum):
    SKIP = "skip"  # do not start while one of the policy's jobs is still running
    QUEUE = "queue"  # start anyway: the new job waits in its queue
    CANCEL_RUNNING = "cancel_running"  # cancel the running job(s), then start the new one


# A mapping target is a dotted path into SubmitJobRequest; list items by [index]; maps (labels,
# hyperparameters, environment) take any key.
_TARGET = re.compile(r"^[a-z_]+(\.[A-Za-z0-9_\-/]+|\[\d+\])*$")
_FREE_KEY_MAPS = ("labels", "training_config.hyperparameters", "training_config.environment")


class InputMapping(Strict):
    source: str = Field(
        description="Dotted path into the event, e.g. 'detail.object.key'; or use `template` with {dotted.paths}.",
        default="",
    )
    template: str | None = Field(default=None, description="e.g. 's3://{detail.bucket.name}/{detail.object.key}'")
    target: str = Field(description="Dotted path into the job, e.g. 'data_config.sources[0].path' or 'labels.dataset'.")

    @model_validator(mode="after")
    def _one_source(self) -> InputMapping:
        if bool(self.source) == bool(self.template):
            raise ValueError("give exactly one of source or template")
        if not _TARGET.match(self.target):
            raise ValueError(f"target {self.target!r} is not a dotted path like data_config.sources[0].path")
        return self

    def source_paths(self) -> list[str]:
        if self.template is None:
            return [self.source]
        return re.findall(r"{([^{}]+)}", self.template)


class RetrainingPolicyRequest(Strict):
    name: JobName
    description: str | None = Field(default=None, max_length=4096)
    trigger: Trigger
    job_template: SubmitJobRequest
    input_mapping: list[InputMapping] = Field(default_factory=list, max_length=32)
    concurrency_policy: ConcurrencyPolicy = ConcurrencyPolicy.SKIP
    min_interval_seconds: int = Field(default=0, ge=0, le=30 * 24 * 3600)
    daily_cap: int | None = Field(default=None, ge=1, le=10_000)
    enabled: bool = True

    @field_validator("job_template")
    @classmethod
    def _no_reserved_labels(cls, template: SubmitJobRequest) -> SubmitJobRequest:
        reserved = sorted(set(template.labels) & RESERVED_LABELS)
        if reserved:
            raise ValueError(f"labels {', '.join(reserved)} are set by the policy on every job it starts")
        return template

    # A field validator (not a model validator) so that a bad target is reported at `input_mapping`,
    # the field to fix; job_template is declared before it, so it is in info.data once it is valid.
    @field_validator("input_mapping")
    @classmethod
    def _mapping_targets_exist(cls, mappings: list[InputMapping], info: ValidationInfo) -> list[InputMapping]:
        template_model = info.data.get("job_template")
        if is_stored(info):
            return mappings  # checked when created or patched, and the job it makes is checked when it fires
        if not isinstance(template_model, SubmitJobRequest):
            return mappings  # the template itself is invalid and reported on its own
        template = template_model.model_dump(mode="python")
        mapped_labels: set[str] = set()
        for i, mapping in enumerate(mappings):
            problem = target_problem(template, mapping.target)
            if problem:
                raise ValueError(f"input_mapping[{i}].target {mapping.target!r}: {problem}")
            if mapping.target.startswith("labels."):
                key = mapping.target.removeprefix("labels.")
                if key in RESERVED_LABELS:
                    raise ValueError(f"input_mapping[{i}].target {mapping.target!r}: the policy sets this label itself")
                if problem := reserved_label_problem(key):
                    raise ValueError(f"input_mapping[{i}].target {mapping.target!r}: {problem}")
                if not _LABEL_KEY.match(key):
                    raise ValueError(f"input_mapping[{i}].target {mapping.target!r}: not a label key (1-63 of A-Z a-z 0-9 _ . - /)")
                mapped_labels.add(key)
        total = len(set(template_model.labels) | mapped_labels) + len(RESERVED_LABELS)
        if total > MAX_LABELS:
            raise ValueError(
                f"jobs would carry {total} labels (template, mapped, and the policy's {len(RESERVED_LABELS)}); at most {MAX_LABELS}"
            )
        return mappings


class RetrainingPolicyPatch(Strict):
    """Only the fields given change; null clears description and daily_cap and leaves any other field as it is."""

    # minProperties: the document says what the service refuses (an empty body: nothing to change).
    model_config = ConfigDict(
        **Strict.model_config, json_schema_extra={"minProperties": 1, "examples": [{"enabled": False, "daily_cap": 3}]}
    )

    description: str | None = Field(default=None, max_length=4096)
    trigger: Trigger | None = None
    job_template: SubmitJobRequest | None = None
    input_mapping: list[InputMapping] | None = None
    concurrency_policy: ConcurrencyPolicy | None = None
    min_interval_seconds: int | None = Field(default=None, ge=0, le=30 * 24 * 3600)
    daily_cap: int | None = Field(default=None, ge=1, le=10_000)
    enabled: bool | None = None


class RetrainingPolicy(RetrainingPolicyRequest):
    model_config = ConfigDict(extra="ignore")
    policy_id: str
    owner: str
    created_at: datetime
    updated_at: datetime
    version: int = 1
    last_fired_at: datetime | None = None
    last_event_id: str | None = None
    last_job_id: str | None = None
    fired_today: int = 0
    fired_day: str | None = None


class PolicyList(BaseModel):
    model_config = ConfigDict(defer_build=True)
    policies: list[RetrainingPolicy]
    next_token: str | None = None


FireOutcome = Literal["started", "duplicate", "coalesced", "capped", "skipped_running", "disabled", "invalid"]


class FireResult(BaseModel):
    """What a dispatch did for one policy: started a job, or why not."""

    model_config = ConfigDict(defer_build=True)

    policy_id: str
    outcome: FireOutcome
    job_id: str | None = None
    detail: str = ""
    event_id: str = ""
    cancelled_job_ids: list[str] = Field(default_factory=list)  # cancel_running: the jobs the new one replaced


def _split_target(target: str) -> list[str | int]:
    parts: list[str | int] = []
    for piece in re.findall(r"[^.\[\]]+|\[\d+\]", target):
        parts.append(int(piece[1:-1]) if piece.startswith("[") else piece)
    return parts


def target_problem(document: dict[str, Any], target: str) -> str | None:
    """Why `target` does not name a settable field of `document` (None when it does)."""
    hyperparameters = "training_config.hyperparameters."
    if target.startswith(hyperparameters):
        from schemas.hyperparameters import known_hyperparameters

        key = target.removeprefix(hyperparameters)
        if key not in known_hyperparameters():
            return f"{key!r} is not a hyperparameter the trainer knows (known: {', '.join(known_hyperparameters())})"
        return None
    for free in _FREE_KEY_MAPS:
        if target.startswith(free + "."):
            return None
    node: Any = document
    for part in _split_target(target):
        if isinstance(part, int):
            if not isinstance(node, list) or part >= len(node):
                return f"index [{part}] does not exist in the job template"
            node = node[part]
        else:
            if not isinstance(node, dict) or part not in node:
                return f"no field {part!r} there in a SubmitJobRequest"
            node = node[part]
    if isinstance(node, dict | list):
        return "points at a whole object, not a field"
    return None


def set_target(document: dict[str, Any], target: str, value: Any) -> None:
    """Set `target` in a SubmitJobRequest-shaped dict (validated again as a whole afterwards)."""
    parts = _split_target(target)
    node: Any = document
    for part in parts[:-1]:
        node = node[part] if isinstance(part, int) else node.setdefault(part, {})
    last = parts[-1]
    node[last] = value
