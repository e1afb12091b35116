"""Request and response bodies of the HTTP API (docs/CONTRACTS.md), beside SubmitJobRequest and Job."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from schemas.configs import Priority, ResourceConfig, Strict, StrMap, hyperparameters_schema
from schemas.job import Job, JobName, StatusEvent
from schemas.status import JobStatus


class CancelRequest(Strict):
    reason: str = Field(default="", max_length=1024)


class PauseRequest(Strict):
    save_checkpoint: bool = True


class ResumeRequest(Strict):
    checkpoint_id: str = Field(default="", description="Empty resumes from the latest checkpoint.")


class RetryRequest(Strict):
    checkpoint_id: str = Field(default="", description="Empty retries from the latest checkpoint (or from scratch if none).")
    modify_resources: bool = False
    new_resource_config: ResourceConfig | None = None

    @model_validator(mode="after")
    def _resources_when_modified(self) -> RetryRequest:
        if self.modify_resources and self.new_resource_config is None:
            raise ValueError("new_resource_config is required when modify_resources is true")
        return self


class PatchJobRequest(Strict):
    """PATCH edits only PENDING, QUEUED or FAILED jobs; hyperparameters are merged key by key."""

    # minProperties: the document says what _something_to_change refuses (an empty body).
    model_config = ConfigDict(
        **Strict.model_config,
        json_schema_extra={"minProperties": 1, "examples": [{"priority": 7, "description": "rerun at a higher priority"}]},
    )

    name: JobName | None = None
    description: str | None = Field(default=None, max_length=4096)
    priority: Priority | None = None
    hyperparameters: Annotated[StrMap, Field(json_schema_extra=hyperparameters_schema)] | None = None
    resource_config: ResourceConfig | None = None

    @model_validator(mode="after")
    def _something_to_change(self) -> PatchJobRequest:
        if not self.model_fields_set:
            raise ValueError("nothing to change: give at least one of name, description, priority, hyperparameters, resource_config")
        return self


class JobList(BaseModel):
    model_config = ConfigDict(defer_build=True)
    jobs: list[Job]
    next_token: str | None = None


class EventList(BaseModel):
    model_config = ConfigDict(defer_build=True)
    events: list[StatusEvent]


class MetricsPoint(BaseModel):
    """One line of metrics.jsonl; extra metric names are kept."""

    model_config = {"extra": "allow", "defer_build": True}
    step: int
    epoch: float | None = None
    loss: float | None = None
    learning_rate: float | None = None
    grad_norm: float | None = None
    tokens_per_second: float | None = None
    eval_loss: float | None = None
    attempt: int | None = None


class MetricsResponse(BaseModel):
    """The job's metric points in step order; `total_points` is how many the job has: more than
    len(points) when `max_points` reduced them (min/max per bucket of loss and eval_loss)."""

    model_config = ConfigDict(defer_build=True)
    points: list[MetricsPoint]
    total_points: int | None = None


LogStream = Literal["stdout", "stderr"]


class LogLine(BaseModel):
    model_config = ConfigDict(defer_build=True)
    timestamp: float
    attempt: int
    message: str
    stream: LogStream | None = Field(
        default=None,
        description="The trainer's stream the line was printed on; null where the compute merges the two "
        "(SageMaker and EC2 ship stdout and stderr as one CloudWatch stream). Local runs know it.",
    )


class LogsResponse(BaseModel):
    """A page of log lines. `next_token` is set while this request left lines unread; `cursor` is always
    set where the reader can resume: passed back as next_token, it returns exactly the lines after the
    last one this page covered, even those written later (a follower's bookmark: nothing lost or repeated)."""

    model_config = ConfigDict(defer_build=True)
    lines: list[LogLine]
    next_token: str | None = None
    cursor: str | None = None


class Summary(BaseModel):
    """The dashboard's cards: counts by status plus the usual groupings."""

    model_config = ConfigDict(defer_build=True)

    counts: dict[JobStatus, int]
    total: int
    running: int
    queued: int
    completed: int
    failed: int
    paused: int


class FieldError(BaseModel):
    model_config = ConfigDict(defer_build=True)
    field: str
    message: str
    type: str | None = None


class ErrorResponse(BaseModel):
    model_config = ConfigDict(defer_build=True)
    message: str
    errors: list[FieldError] = Field(default_factory=list)


class AcceptedAction(BaseModel):
    """What a lifecycle verb returns: the job as it now stands and what was requested."""

    model_config = ConfigDict(defer_build=True)

    job: Job
    action: str
    detail: dict[str, Any] = Field(default_factory=dict)
