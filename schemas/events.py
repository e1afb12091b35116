"""The control plane's own events (issue 23): what `detail` holds on the deployment's EventBridge bus.

Each model is one kind of event (its detail-type and short type are named in functions/catalog/own_events.py);
its JSON Schema, generated from the model, is committed under schemas/event_schemas/ and registered in
the stack's EventBridge schema registry, so a change here that is not regenerated fails a test
(`python scripts/gen_event_schemas.py` rewrites them). docs/EVENTS.md is the reader's page.

Every event carries `event_id` (stable: a re-send carries the same id, so duplicates are visible),
`sequence` (gap-free per subject: a job's, a sweep's or a policy's events are numbered 1, 2, 3 ... in
commit order), `schema_version` and the subject's `owner` and `labels` (rules and webhooks filter on
them). Free text (reasons, error messages) is cut to a bound so an event stays a few KB.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from schemas.job import ErrorType
from schemas.status import JobStatus
from schemas.sweeps import SweepStatus

SCHEMA_VERSION = "1"
MAX_TEXT = 1024  # reasons and error messages, in characters: an event stays a few KB
SCHEMAS_DIR = Path(__file__).with_name("event_schemas")

PolicyState = Literal["ENABLED", "DISABLED", "DELETED"]


def clip(text: str | None) -> str | None:
    if text is None or len(text) <= MAX_TEXT:
        return text
    return text[: MAX_TEXT - 1] + "…"


def event_id(subject: str, subject_id: str, sequence: int) -> str:
    """The id of a subject's event `sequence`: derived, so the one event can never get two ids."""
    digest = hashlib.sha256(f"{subject}#{subject_id}#{sequence}".encode()).hexdigest()[:26]
    return f"evt_{digest}"


class EventDetail(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    event_id: str = Field(description="Stable across re-sends: a duplicate carries the id of the first.")
    schema_version: str = Field(default=SCHEMA_VERSION, description="Bumped when a field changes meaning or goes away.")
    sequence: int = Field(ge=1, description="1, 2, 3 ... per subject (job, sweep, policy), in commit order, no gaps.")
    at: datetime = Field(description="When the change was committed (UTC).")
    owner: str = Field(description="The IAM ARN of the subject's owner.")
    labels: dict[str, str] = Field(default_factory=dict)
    actor: str = Field(default="system", description="Who made the change: user, system, trainer ...")
    reason: str = ""
    dashboard_url: str | None = Field(default=None, description="The subject's page in the dashboard, when the deployment has one.")


class PlacementSummary(BaseModel):
    """A job's placement at the change (docs/PLACEMENT.md): the attempt's pool and how it ended, so far."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    candidate: int = Field(description="The attempt's candidate (index in resource_config.placement.candidates).")
    pool: str = Field(description="platform/instance type/zone/purchase")
    outcome: str | None = Field(default=None, description="running, completed, capacity, preempted, stopped, failed")
    work_lost_steps: int | None = None
    pools_blocked: list[str] = Field(default_factory=list)
    recoveries: int = 0
    last_recovery_seconds: float | None = Field(default=None, description="PREEMPTED -> TRAINING of the latest recovery.")
    dollars_saved_usd: float = 0.0


class JobStateChange(EventDetail):
    """A job's status changed (submitted, queued, a phase of its run, paused, resumed, ended)."""

    job_id: str
    job_name: str
    previous_state: JobStatus | None = Field(description="None for the job's first event (its submission).")
    state: JobStatus
    error_type: ErrorType | None = None
    error_message: str | None = None
    attempt: int = 0
    parent_job_id: str | None = None
    cost_usd: float = Field(default=0.0, description="Estimated cost so far, all attempts.")
    checkpoint_id: str | None = Field(default=None, description="The latest checkpoint at the change.")
    placement: PlacementSummary | None = Field(default=None, description="Where the attempt is placed, for a job with candidates.")


class CheckpointSaved(EventDetail):
    """A checkpoint of a job was saved (its manifest written) and recorded."""

    job_id: str
    job_name: str
    state: JobStatus
    checkpoint_id: str
    step: int
    attempt: int = 1
    uri: str
    metrics: dict[str, float] = Field(default_factory=dict)
    cost_usd: float = 0.0


class SweepStateChange(EventDetail):
    sweep_id: str
    sweep_name: str
    previous_state: SweepStatus | None
    state: SweepStatus
    trials_completed: int = 0
    trials_failed: int = 0
    best_trial_job_id: str | None = None


class RetrainingPolicyStateChange(EventDetail):
    policy_id: str
    policy_name: str
    previous_state: PolicyState | None
    state: PolicyState


class WebhookDisabled(EventDetail):
    """A webhook was disabled: its receiver answered 410 Gone, or every delivery failed for 5 days."""

    webhook_id: str
    url: str
    failing_since: datetime | None = None


class JobReclaimed(EventDetail):
    """A borrowing job is being paused through its checkpointed path so that the team that lent the GPUs
    gets them back (issue 24.3). Its status changes (CHECKPOINTING -> QUEUED) follow as their own events;
    this one says why: the victim, the beneficiary, the rule and the work lost."""

    job_id: str = Field(description="The victim: the borrowing job being paused.")
    job_name: str
    state: JobStatus = Field(description="The victim's status when it was picked.")
    attempt: int = 0
    team: str = Field(description="The victim's team (the borrower).")
    gpu_type: str
    gpus: int = Field(description="The GPUs the victim holds, on their way back.")
    beneficiary_job_id: str = Field(description="The waiting job the GPUs go to.")
    beneficiary_team: str = Field(description="The lender taking its nominal quota back.")
    rule: str = Field(
        description="Why this victim: `borrowed_beyond_nominal` (highest weighted share, then lowest priority, then least work lost)."
    )
    work_lost_gpu_seconds: float = Field(description="GPUs x seconds since the victim's last verified checkpoint.")
    checkpoint_id: str | None = Field(default=None, description="The checkpoint the victim resumes from unless it saves a newer one.")
    reclaims: int = Field(description="How many times this job has been reclaimed, this one included.")


class IdleDevice(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    index: int
    name: str | None = None
    utilization_pct: float | None = Field(description="At the sample that completed the idle period.")


class JobGpusIdle(EventDetail):
    """Every GPU of one node of a running job stayed under `threshold_pct` utilization for `idle_seconds`
    (NVML, sampled by the trainer every 10 s; issue 27.3). Once per idle period: the GPUs must get busy
    again (a sample at or above the threshold) before the same node's next period can raise another."""

    job_id: str
    job_name: str
    state: JobStatus
    attempt: int
    node: int = Field(description="The node (0 for a single-node job) whose GPUs were idle.")
    idle_since: datetime = Field(description="The first sample of the idle period (UTC).")
    idle_seconds: float = Field(description="How long the period had lasted at the sample that raised this event.")
    threshold_pct: float
    devices: list[IdleDevice]


class BudgetThresholdCrossed(EventDetail):
    """A budget's spend crossed one of its thresholds (issue 25; docs/BUDGETS.md): once per threshold and
    period. `action` says what the control plane does now (notify only, hold new jobs, pause running ones, or,
    where the budget asks for it, cancel its running and waiting jobs)."""

    budget_id: str
    budget_name: str
    scope: str = Field(description="`team:<name>`, `principal:<arn>`, `label:<key=value>` or `deployment`.")
    percent: float = Field(description="The threshold crossed, in % of the amount.")
    action: str = Field(description="notify, hold_new, pause_running or cancel.")
    amount_usd: float
    spent_usd: float
    paused_job_ids: list[str] = Field(default_factory=list, description="pause_running: the jobs asked to pause.")
    cancelled_job_ids: list[str] = Field(
        default_factory=list, description="cancel: the running and waiting jobs cancelled (each also has its job.status_changed)."
    )


class BudgetOverride(EventDetail):
    """An admin let one job run over a budget (issue 25.4): the job resumes (or is admitted) and that budget
    neither holds nor pauses it again this period. `reason` is the admin's; `actor` the admin's ARN."""

    budget_id: str
    budget_name: str
    job_id: str
    amount_usd: float
    spent_usd: float


MODELS: dict[str, type[EventDetail]] = {
    m.__name__: m
    for m in (
        JobStateChange,
        CheckpointSaved,
        SweepStateChange,
        RetrainingPolicyStateChange,
        WebhookDisabled,
        JobReclaimed,
        JobGpusIdle,
        BudgetThresholdCrossed,
        BudgetOverride,
    )
}


class OutboxRecord(BaseModel):
    """One event as the outbox holds it until the publisher has put it on the bus."""

    model_config = ConfigDict(frozen=True)

    key: str = Field(description="The outbox item's sort key (opaque to the publisher; removal names it).")
    event_id: str
    detail_type: str
    subject_id: str
    sequence: int
    detail: str = Field(description="The detail as compact JSON, exactly as it goes on the bus.")


def json_schema(model: type[EventDetail]) -> dict[str, Any]:
    """The model's JSON Schema as draft 4 (what EventBridge's schema registry takes: `JSONSchemaDraft4`)."""
    schema = model.model_json_schema(mode="serialization", ref_template="#/definitions/{model}")
    definitions = schema.pop("$defs", None)
    if definitions:
        schema["definitions"] = definitions
    return {"$schema": "http://json-schema.org/draft-04/schema#", **schema}


def render(model: type[EventDetail]) -> str:
    return json.dumps(json_schema(model), indent=2, sort_keys=True) + "\n"
