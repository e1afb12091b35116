"""The control plane's own events, by name: one home for the names (issue 23, docs/EVENTS.md).

Pure names, importing nothing: the outbox writers (functions/adapters/outbox.py), the publisher, the
CDK stack (bus, archive, schema registry) and local mode all read them here. Each kind has its
EventBridge detail-type, the short type webhooks will match with globs (`job.*`), and the name of its
pydantic model in schemas/events.py (whose generated JSON Schema is committed under schemas/events/).
"""

from __future__ import annotations

from dataclasses import dataclass

SOURCE = "trainplane"
# The schema registry the stack creates; schemas in it are named SCHEMA_PREFIX + the model name.
SCHEMA_REGISTRY = "trainplane-events"
SCHEMA_PREFIX = "trainplane@"


@dataclass(frozen=True)
class EventType:
    detail_type: str  # EventBridge's detail-type
    type: str  # the short name (webhooks: `type`, matched by `job.*`-style globs)
    model: str  # the class in schemas/events.py that describes `detail`


JOB_STATE_CHANGE = EventType("Trainplane Job State Change", "job.status_changed", "JobStateChange")
CHECKPOINT_SAVED = EventType("Trainplane Checkpoint Saved", "job.checkpoint_saved", "CheckpointSaved")
SWEEP_STATE_CHANGE = EventType("Trainplane Sweep State Change", "sweep.status_changed", "SweepStateChange")
POLICY_STATE_CHANGE = EventType("Trainplane Retraining Policy State Change", "policy.status_changed", "RetrainingPolicyStateChange")
WEBHOOK_DISABLED = EventType("Trainplane Webhook Disabled", "webhook.disabled", "WebhookDisabled")
JOB_RECLAIMED = EventType("Trainplane Job Reclaimed", "job.reclaimed", "JobReclaimed")
JOB_GPUS_IDLE = EventType("Trainplane Job GPUs Idle", "job.gpus_idle", "JobGpusIdle")
BUDGET_THRESHOLD = EventType("Trainplane Budget Threshold Crossed", "budget.threshold_crossed", "BudgetThresholdCrossed")
BUDGET_OVERRIDE = EventType("Trainplane Budget Override", "budget.override", "BudgetOverride")

ALL: tuple[EventType, ...] = (
    JOB_STATE_CHANGE,
    CHECKPOINT_SAVED,
    SWEEP_STATE_CHANGE,
    POLICY_STATE_CHANGE,
    WEBHOOK_DISABLED,
    JOB_RECLAIMED,
    JOB_GPUS_IDLE,
    BUDGET_THRESHOLD,
    BUDGET_OVERRIDE,
)
BY_DETAIL_TYPE: dict[str, EventType] = {t.detail_type: t for t in ALL}

# What an event is about: the `subject` attribute of outbox items and the event id's namespace.
SUBJECT_JOB = "job"
SUBJECT_SWEEP = "sweep"
SUBJECT_POLICY = "policy"
SUBJECT_WEBHOOK = "webhook"
SUBJECT_BUDGET = "budget"

# What `POST /webhooks/{id}/test` sends: delivered to that one webhook only, never put on the bus.
WEBHOOK_TEST_TYPE = "webhook.test"
# The short types a webhook's `event_types` globs may match.
WEBHOOK_TYPES: tuple[str, ...] = (*(t.type for t in ALL), WEBHOOK_TEST_TYPE)

# The outbox's items in the jobs table (functions/adapters/outbox.py): their partition and `entity`,
# which the stack's stream filter and the publisher's IAM condition (infra/constructs/event_bus.py) name.
OUTBOX_PK = "OUTBOX"
OUTBOX_ENTITY = "OUTBOX"
