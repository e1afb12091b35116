"""Pydantic models shared by the API, the lifecycle tasks, the trainer and the client."""

from schemas.api import (
    AcceptedAction,
    CancelRequest,
    ErrorResponse,
    EventList,
    FieldError,
    JobList,
    LogsResponse,
    MetricsPoint,
    MetricsResponse,
    PatchJobRequest,
    PauseRequest,
    ResumeRequest,
    RetryRequest,
    Summary,
)
from schemas.checkpoint import CheckpointManifest, ManifestFile
from schemas.configs import (
    CheckpointConfig,
    DataConfig,
    DataSource,
    FrameworkType,
    OutputConfig,
    ResourceConfig,
    SchedulingConfig,
    TrainingConfig,
    TrainingType,
)
from schemas.job import Actor, CheckpointRef, ErrorType, Job, PendingAction, Progress, StatusEvent, SubmitJobRequest
from schemas.status import TERMINAL, TRANSITIONS, JobStatus, can_transition

__all__ = [
    "AcceptedAction", "Actor", "CancelRequest", "CheckpointConfig", "CheckpointManifest", "CheckpointRef",
    "DataConfig", "DataSource", "ErrorResponse", "ErrorType", "EventList", "FieldError", "FrameworkType", "Job",
    "JobList", "JobStatus", "LogsResponse", "ManifestFile", "MetricsPoint", "MetricsResponse", "OutputConfig",
    "PatchJobRequest", "PauseRequest", "PendingAction", "Progress", "ResourceConfig", "ResumeRequest",
    "RetryRequest", "SchedulingConfig", "StatusEvent", "SubmitJobRequest", "Summary", "TERMINAL", "TRANSITIONS",
    "TrainingConfig", "TrainingType", "can_transition",
]
