"""Names shared by the cloud stack (infra/), local mode and the tests: one place, no copies.

The DynamoDB key design these names serve is described in functions/adapters/TABLE_DESIGN.md.
"""

from __future__ import annotations

SERVICE_NAME = "trainplane"
METRICS_NAMESPACE = "Trainplane"

# Default resource names: local mode uses them as they are; the cloud stack prefixes them per stage.
JOBS_TABLE = "trainplane-jobs"
IDEMPOTENCY_TABLE = "trainplane-idempotency"
ARTIFACTS_BUCKET = "trainplane-artifacts"
STATE_MACHINE_NAME = "trainplane-lifecycle"
EVENT_BUS_NAME = "default"
EVENTS_FUNCTION_NAME = "trainplane-events"  # local mode's name of the events Lambda
# The subscription filter that carries the trainer's reports (TRAINPLANE_EVENT lines, schemas/trainer.py)
# from the trainer's log group to the events Lambda, in the cloud stack and in local mode.
TRAINER_REPORTS_FILTER_NAME = "trainplane-trainer-reports"
TRAINER_REPORTS_FILTER_PATTERN = '"TRAINPLANE_EVENT"'
SAGEMAKER_TRAINING_LOG_GROUP = "/aws/sagemaker/TrainingJobs"
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

GSIS: dict[str, tuple[str, str]] = {
    GSI_OWNER: (GSI_OWNER_PK, GSI_OWNER_SK),
    GSI_ALL: (GSI_ALL_PK, GSI_ALL_SK),
    GSI_QUEUE: (GSI_QUEUE_PK, GSI_QUEUE_SK),
}

# Idempotency table (Powertools' DynamoDBPersistenceLayer defaults).
IDEMPOTENCY_KEY_ATTR = "id"
IDEMPOTENCY_TTL_ATTR = "expiration"

# S3 layout under the artifacts bucket.
JOBS_PREFIX = "jobs"


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
