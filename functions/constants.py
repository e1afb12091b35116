"""Names shared by the cloud stack (infra/), local mode and the tests: one place, no copies.

The DynamoDB key design these names serve is described in functions/adapters/TABLE_DESIGN.md.
"""

from __future__ import annotations

import re

SERVICE_NAME = "trainplane"
METRICS_NAMESPACE = "Trainplane"
# Every function's environment besides its settings (infra/constructs/function.py; scripts/bench_api.py imports the
# API handler under it). pydantic's plugin discovery is off: the bundle ships no pydantic plugin, and the
# discovery reads every installed distribution's entry points when the first model is built (Powertools builds
# one at import: a cold start paid it). https://docs.pydantic.dev/latest/concepts/plugins/
FUNCTION_RUNTIME_ENV = {"PYDANTIC_DISABLE_PLUGINS": "__all__"}

# Default resource names: local mode uses them as they are; the cloud stack prefixes them per stage.
JOBS_TABLE = "trainplane-jobs"
IDEMPOTENCY_TABLE = "trainplane-idempotency"
ARTIFACTS_BUCKET = "trainplane-artifacts"
STATE_MACHINE_NAME = "trainplane-lifecycle"
EVENT_BUS_NAME = "default"
# The deployment's own bus: the control plane's events (functions/catalog/own_events.py, docs/EVENTS.md).
TRAINPLANE_BUS_NAME = "trainplane-events"
EVENT_PUBLISHER_FUNCTION_NAME = "trainplane-event-publisher"  # local mode's name of the publisher
EVENTS_FUNCTION_NAME = "trainplane-events"  # local mode's name of the events Lambda
# The subscription filter that carries the trainer's reports (TRAINPLANE_EVENT lines, schemas/trainer.py)
# from the trainer's log group to the events Lambda, in the cloud stack and in local mode.
TRAINER_REPORTS_FILTER_NAME = "trainplane-trainer-reports"
TRAINER_REPORTS_FILTER_PATTERN = '"TRAINPLANE_EVENT"'
SAGEMAKER_TRAINING_LOG_GROUP = "/aws/sagemaker/TrainingJobs"
# The platforms the trainer image is built for (infra/constructs/compute.py): SageMaker's ml.* types and
# the EC2 GPU types of the instance table are all x86_64. `trainplane doctor` checks ECR holds them.
TRAINER_IMAGE_PLATFORMS = ("linux/amd64",)
# CloudFormation's name of the local deployment (local mode registers its resources under it, so that
# `trainplane doctor --state-dir` reads the same outputs as for a cloud stack).
LOCAL_STACK_NAME = "Trainplane-local"
LOCAL_REGION = "us-east-1"
LOCAL_ACCOUNT_ID = "123456789012"

# Jobs table: one table, generic key names (single-table design).
PK = "pk"
SK = "sk"
# GSI1: a principal's jobs, newest first.
GSI_OWNER = "by-owner"
GSI_OWNER_PK = "gsi1pk"
GSI_OWNER_SK = "gsi1sk"
# GSI2: every job, newest first (admins).
GSI_ALL = "by-created"
GSI_ALL_PK = "gsi2pk"
GSI_ALL_SK = "gsi2sk"
# GSI3: sparse, only QUEUED jobs: a queue's jobs by (priority desc, submitted asc).
GSI_QUEUE = "by-queue"
GSI_QUEUE_PK = "gsi3pk"
GSI_QUEUE_SK = "gsi3sk"
# GSI4: sparse, only QUEUED jobs: one team's jobs of one GPU type (any queue) by (priority desc, submitted asc),
# so that a scheduler pass sees every team's head however deep other teams' jobs make a queue (issue 24).
GSI_TEAM_QUEUE = "by-team-queue"
GSI_TEAM_QUEUE_PK = "gsi4pk"
GSI_TEAM_QUEUE_SK = "gsi4sk"

GSIS: dict[str, tuple[str, str]] = {
    GSI_OWNER: (GSI_OWNER_PK, GSI_OWNER_SK),
    GSI_ALL: (GSI_ALL_PK, GSI_ALL_SK),
    GSI_QUEUE: (GSI_QUEUE_PK, GSI_QUEUE_SK),
    GSI_TEAM_QUEUE: (GSI_TEAM_QUEUE_PK, GSI_TEAM_QUEUE_SK),
}

# Idempotency table (Powertools' DynamoDBPersistenceLayer defaults).
IDEMPOTENCY_KEY_ATTR = "id"
IDEMPOTENCY_TTL_ATTR = "expiration"

# S3 layout under the artifacts bucket.
JOBS_PREFIX = "jobs"
# New training data. The artifacts bucket takes checkpoints, logs and metrics all day: only this prefix of
# it is a retraining trigger (functions/service/retraining/routes.py); the trainer roles may read it
# (infra/constructs/compute.py).
DATASETS_PREFIX = "datasets/"


def job_prefix(job_id: str) -> str:
    return f"{JOBS_PREFIX}/{job_id}/"


def checkpoints_prefix(job_id: str) -> str:
    return f"{JOBS_PREFIX}/{job_id}/checkpoints/"


def run_spec_key(job_id: str, attempt: int) -> str:
    return f"{JOBS_PREFIX}/{job_id}/config/run-{attempt:03d}.json"


def metrics_key(job_id: str) -> str:
    return f"{JOBS_PREFIX}/{job_id}/metrics.jsonl"


def logs_prefix(job_id: str) -> str:
    return f"{JOBS_PREFIX}/{job_id}/logs/"


def log_file_name(attempt: int) -> str:
    """One attempt's trainer log, as a file name (the run directory) and under logs_prefix (the bucket)."""
    return f"attempt-{attempt:03d}.log"


def log_key(job_id: str, attempt: int) -> str:
    return logs_prefix(job_id) + log_file_name(attempt)


# Which stream a line of a local run's log came from (the LocalLauncher reads the trainer's stdout and
# stderr on two pipes): a stderr line is stored as STDERR_TAG + line; a stdout line is stored as is,
# unless it begins with STREAM_MARK, when it gets STDOUT_TAG, so every line reads back exactly as printed.
# STREAM_MARK (STX) is no line boundary of str.splitlines, which the readers of log files use.
STREAM_MARK = "\x02"
STDOUT_TAG = "\x02O\x03"
STDERR_TAG = "\x02E\x03"


def tag_log_line(line: str, stream: str) -> str:
    """One line (no newline) as a local log file stores it."""
    if stream == "stderr":
        return STDERR_TAG + line
    return STDOUT_TAG + line if line.startswith(STREAM_MARK) else line


def untag_log_line(stored: str) -> tuple[str, str]:
    """A stored line -> (stream, the line as printed): tag_log_line's inverse."""
    if stored.startswith(STDERR_TAG):
        return "stderr", stored[len(STDERR_TAG) :]
    if stored.startswith(STDOUT_TAG):
        return "stdout", stored[len(STDOUT_TAG) :]
    return "stdout", stored


# A log_key, parsed back: job id and attempt.
LOG_KEY = re.compile(rf"^{JOBS_PREFIX}/(?P<job_id>.+)/logs/attempt-(?P<attempt>\d+)\.log$")

# Webhooks' items in the jobs table (functions/adapters/webhooks.py): the webhooks' partition, one per
# webhook (its held events and attempts), and the delivery queue's; the delivery function's IAM names them.
WEBHOOKS_PK = "WEBHOOKS"
WEBHOOK_PK_PREFIX = "WEBHOOK#"
WEBHOOK_QUEUE_PK = "WEBHOOK_QUEUE"
# The jobs table's TTL attribute (epoch seconds): only webhooks' held events and attempts carry it (30 days).
JOBS_TTL_ATTR = "expires_at_epoch"
