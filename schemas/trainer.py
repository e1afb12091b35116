"""The contract between the control plane (launchers) and the trainer image.

The same contract holds in a SageMaker container, on an EC2 instance and for a LocalLauncher child
process: the run spec, the environment variables that override SageMaker's /opt/ml paths, the exit
codes, and the structured event lines the trainer prints on stdout.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from enum import IntEnum, StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from schemas.access import AccessSet
from schemas.configs import DataConfig, OutputConfig, ResourceConfig, TrainingConfig
from schemas.job import ErrorType
from schemas.shapes import TrainingShapeProfile
from schemas.tracking import TrackingPlan

# --- Environment (each overrides the SageMaker default path in brackets) -------------------------
ENV_RUN_SPEC = "TRAINPLANE_RUN_SPEC"  # path or s3:// URI of config/run-NNN.json [hyperparameters.json "run_spec"]
ENV_SM_HYPERPARAMETERS = "SM_HPS_FILE"  # [/opt/ml/input/config/hyperparameters.json]
ENV_MODEL_DIR = "SM_MODEL_DIR"  # [/opt/ml/model]
ENV_CHECKPOINT_DIR = "TRAINPLANE_CHECKPOINT_DIR"  # [/opt/ml/checkpoints]
ENV_OUTPUT_DATA_DIR = "SM_OUTPUT_DATA_DIR"  # [/opt/ml/output/data]
ENV_FAILURE_FILE = "TRAINPLANE_FAILURE_FILE"  # [/opt/ml/output/failure]
ENV_INPUT_CONFIG_DIR = "SM_INPUT_CONFIG_DIR"  # [/opt/ml/input/config] (resourceconfig.json: multi-node host list)
ENV_CHANNEL_PREFIX = "SM_CHANNEL_"  # SM_CHANNEL_<NAME> -> a local directory with that channel's data
ENV_JOB_ID = "TRAINPLANE_JOB_ID"
ENV_ATTEMPT = "TRAINPLANE_ATTEMPT"
ENV_S3_ENDPOINT = "AWS_ENDPOINT_URL_S3"  # local mode: the emulated S3
ENV_GRACE_SECONDS = "TRAINPLANE_STOP_GRACE_SECONDS"
# "1": the launcher sends its stop signals to the trainer's whole process group (the LocalLauncher), so a
# CUSTOM script in that group has a SIGTERM already and the trainer does not forward it a second one.
# Unset: they reach the trainer alone (SageMaker, `docker stop` on EC2) and the trainer forwards them.
ENV_STOP_SIGNALS_GROUP = "TRAINPLANE_STOP_SIGNALS_GROUP"

DEFAULT_STOP_GRACE_SECONDS = 120  # SageMaker's SIGTERM-to-SIGKILL grace on StopTrainingJob

# Lines on stdout that start with this prefix carry one JSON TrainerEvent; everything else is a log.
EVENT_PREFIX = "TRAINPLANE_EVENT "
_JSON = json.JSONDecoder()


class ExitCode(IntEnum):
    COMPLETED = 0
    USER_ERROR = 1
    DATA_ERROR = 65  # EX_DATAERR
    INTERNAL_ERROR = 70  # EX_SOFTWARE
    OUT_OF_MEMORY = 71
    STOPPED_WITH_CHECKPOINT = 75  # EX_TEMPFAIL: a graceful stop (SIGTERM) saved a checkpoint


class FailureReason(StrEnum):
    """First word of /opt/ml/output/failure, then ': ' and the message."""

    USER_ERROR = "UserError"
    DATA_ERROR = "DataError"
    OUT_OF_MEMORY = "OutOfMemory"
    PREEMPTED = "Preempted"
    INTERNAL = "InternalError"


# THE mapping between what a trainer says about a failure and the job's ErrorType (every launcher reads
# it, local mode's emulated compute writes it back): its exit code, and the first word of its failure file.
EXIT_CODE_ERRORS: dict[int, ErrorType] = {
    ExitCode.USER_ERROR: ErrorType.USER_ERROR,
    ExitCode.DATA_ERROR: ErrorType.DATA_ERROR,
    ExitCode.INTERNAL_ERROR: ErrorType.INTERNAL,
    ExitCode.OUT_OF_MEMORY: ErrorType.OUT_OF_MEMORY,
}
FAILURE_REASON_ERRORS: dict[str, ErrorType] = {
    FailureReason.USER_ERROR.value: ErrorType.USER_ERROR,
    FailureReason.DATA_ERROR.value: ErrorType.DATA_ERROR,
    FailureReason.OUT_OF_MEMORY.value: ErrorType.OUT_OF_MEMORY,
    FailureReason.INTERNAL.value: ErrorType.INTERNAL,
}
# The other way: what a trainer failing with an ErrorType exits with and writes.
ERROR_EXIT_CODES: dict[ErrorType, ExitCode] = {error: ExitCode(code) for code, error in EXIT_CODE_ERRORS.items()}
ERROR_FAILURE_REASONS: dict[ErrorType, str] = {error: word for word, error in FAILURE_REASON_ERRORS.items()}


class TrainerPhase(StrEnum):
    PREPARING = "PREPARING"
    TRAINING = "TRAINING"
    CHECKPOINTING = "CHECKPOINTING"
    EVALUATING = "EVALUATING"
    EXPORTING = "EXPORTING"


class TrainerEventKind(StrEnum):
    PHASE = "phase"  # data: {"phase": TrainerPhase}
    PROGRESS = "progress"  # data: {"step", "total_steps", "epoch", "percent", "eta_seconds", "loss", "tokens_per_second"}
    CHECKPOINT = "checkpoint"  # data: CheckpointManifest fields + {"uri"}
    METRICS = "metrics"  # data: a MetricsPoint
    FAILURE = "failure"  # data: {"reason": FailureReason, "message"}
    DONE = "done"  # data: {"exit_code", "stopped": bool}
    TRACKING = "tracking"  # data: a schemas.tracking.TrackingRecord (the tracker run this job logs to)
    SYSTEM = "system"  # data: a schemas.telemetry.SystemSample (one node's GPUs, NVML, every 10 s)


class TrainerEvent(BaseModel):
    """One report of a run: a phase change, progress, a checkpoint, metrics, a failure, the end.

    Reports travel at least once and in no guaranteed order (stdout reader, CloudWatch Logs
    subscription): `job_id` + `attempt` + `seq` identify one. `seq` is the emission time in
    microseconds, strictly increasing within the emitting process, so reports of one attempt sort
    in the order they were made even across processes (a supervisor and its rank-0 worker).
    Reports without them (an older trainer, a CUSTOM script) are applied without ordering checks.
    """

    model_config = ConfigDict(extra="forbid")
    kind: TrainerEventKind
    time: float
    data: dict[str, Any] = Field(default_factory=dict)
    job_id: str | None = None
    attempt: int | None = Field(default=None, ge=1)
    seq: int | None = Field(default=None, ge=0)

    def to_line(self) -> str:
        return EVENT_PREFIX + self.model_dump_json(exclude_none=True)

    @classmethod
    def from_line(cls, line: str) -> TrainerEvent | None:
        if not line.startswith(EVENT_PREFIX):
            return None
        return cls.model_validate_json(line[len(EVENT_PREFIX) :])

    @classmethod
    def find_in(cls, message: str) -> TrainerEvent | None:
        """The first report in one log message (all_in); None for a plain log line or a malformed report."""
        found = cls.all_in(message)
        return found[0] if found else None

    @classmethod
    def all_in(cls, text: str) -> list[TrainerEvent]:
        """Every report in one line of a trainer's output or one log message (CloudWatch Logs, where the
        prefix may follow a shipper's timestamp): each prefix and the one JSON object after it.

        Usually one per line. Two share a line when a report is written inside another's print: a CUSTOM
        script's SIGTERM handler that runs again (the signal reached it twice) while its first report's
        text is out but not yet its newline (print writes the two apart). Text around reports is log; a
        malformed report is skipped and the rest of the line still read.
        """
        found: list[TrainerEvent] = []
        start = text.find(EVENT_PREFIX)
        while start >= 0:
            begin = start + len(EVENT_PREFIX)
            while begin < len(text) and text[begin].isspace():
                begin += 1
            try:
                end = _JSON.raw_decode(text, begin)[1]  # where this report's object ends, strings and all
            except ValueError:
                start = text.find(EVENT_PREFIX, begin)
                continue
            with contextlib.suppress(ValueError):
                found.append(cls.model_validate_json(text[begin:end]))
            start = text.find(EVENT_PREFIX, end)
        return found


class ReportSequence:
    """`seq` for the reports of one process: microseconds since the epoch, strictly increasing."""

    def __init__(self) -> None:
        self._last = 0
        self._lock = threading.Lock()

    def next(self) -> int:
        with self._lock:
            self._last = max(self._last + 1, time.time_ns() // 1000)
            return self._last


class RunSpec(BaseModel):
    """config/run-NNN.json (NNN: the attempt, functions/constants.run_spec_key): everything one attempt needs, written by PREPARING."""

    model_config = ConfigDict(extra="forbid")
    job_id: str
    attempt: int = Field(ge=1)
    training_config: TrainingConfig
    data_config: DataConfig
    output_config: OutputConfig
    resource_config: ResourceConfig
    checkpoint_uri: str = Field(description="s3://bucket/jobs/<id>/checkpoints or a local directory")
    resume_from: str | None = Field(default=None, description="URI of the checkpoint directory to resume from")
    metrics_uri: str | None = None
    output_uri: str | None = None
    max_runtime_seconds: int | None = None
    training_shape: TrainingShapeProfile | None = Field(default=None, description="The job's training shape, when it names one.")
    # output_config.layout 'deepfinery': the run's root (checkpoint_uri is its checkpoints/), and whether
    # a first attempt resumes from the newest checkpoint there (resume_from_checkpoint 'latest').
    layout_uri: str | None = None
    resume_latest: bool = True
    tracking: TrackingPlan | None = Field(default=None, description="output_config.tracking with what keeps one tracker run per job.")
    access: AccessSet | None = Field(
        default=None,
        description="What this job may read and write (docs/SECURITY.md); the trainer refuses any other path. "
        "The control plane always sets it; None is a hand-made spec for a trainer run outside trainplane.",
    )


# --- Metric lines on stdout (SageMaker MetricDefinitions) ------------------------------------------
# The trainer prints `metric_line(...)` and the SageMaker launcher declares METRIC_DEFINITIONS: both
# come from this one table so the regexes can never drift from what is printed.
_NUMBER = r"([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"
METRIC_LINE_PREFIX = "trainplane_metrics"
METRIC_LINE_KEYS: dict[str, str] = {
    # key printed as `key=value` -> SageMaker metric name
    "train_loss": "train:loss",
    "eval_loss": "validation:loss",
    "learning_rate": "train:learning_rate",
    "grad_norm": "train:grad_norm",
    "tokens_per_second": "train:tokens_per_second",
    "epoch": "train:epoch",
    "reward": "train:reward",  # RLHF: mean reward of the step's completions
    "reward_std": "train:reward_std",
    "kl": "train:kl",  # RLHF with beta > 0: KL to the reference policy
}
METRIC_DEFINITIONS: list[dict[str, str]] = [{"Name": name, "Regex": rf" {key}={_NUMBER}"} for key, name in METRIC_LINE_KEYS.items()]


def metric_line(step: int, values: dict[str, float | None]) -> str:
    """`trainplane_metrics step=10 train_loss=1.2345 ...`: only keys of METRIC_LINE_KEYS, each after a space."""
    unknown = set(values) - set(METRIC_LINE_KEYS)
    if unknown:
        raise ValueError(f"not a declared metric: {sorted(unknown)}")
    parts = [f"{key}={value:.6g}" for key, value in values.items() if value is not None]
    return f"{METRIC_LINE_PREFIX} step={step} " + " ".join(parts)
