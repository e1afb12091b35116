"""EventBridge: the sources and detail types the control plane listens to, and the retraining dispatcher's rules.

The cloud stack subscribes with these (infra/constructs/events.py, infra/constructs/retraining.py), local mode's
emulated compute and bus emit and route the same ones (localmode/deploy/), the handlers and services dispatch on
them (functions/handlers/events.py, functions/service/cloud_events.py, functions/service/retraining_*.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from functions import constants
from schemas.retraining import CUSTOM_EVENT_SOURCE

# The compute engines' state changes (functions/service/cloud_events.py)
SAGEMAKER_SOURCE = "aws.sagemaker"
EC2_SOURCE = "aws.ec2"
SAGEMAKER_STATE_CHANGE = "SageMaker Training Job State Change"
EC2_STATE_CHANGE = "EC2 Instance State-change Notification"
EC2_SPOT_WARNING = "EC2 Spot Instance Interruption Warning"
COMPUTE_DETAIL_TYPES = frozenset({SAGEMAKER_STATE_CHANGE, EC2_STATE_CHANGE, EC2_SPOT_WARNING})
# A schedule's event: the reconciler's sweep (functions/handlers/events.py), a retraining policy's schedule
SCHEDULED_EVENT = "Scheduled Event"
SCHEDULER_SOURCE = "aws.scheduler"
# What the retraining dispatcher's rules route
S3_SOURCE = "aws.s3"
OBJECT_CREATED = "Object Created"
ALARM_SOURCE = "aws.cloudwatch"
ALARM_STATE_CHANGE = "CloudWatch Alarm State Change"
# What each routed source can deliver (None: any detail-type). Mirrors the rules below.
ROUTED_DETAIL_TYPES: dict[str, frozenset[str] | None] = {
    S3_SOURCE: frozenset({OBJECT_CREATED}),
    ALARM_SOURCE: frozenset({ALARM_STATE_CHANGE}),
    CUSTOM_EVENT_SOURCE: None,
}


@dataclass(frozen=True)
class RuleSpec:
    description: str
    pattern: dict[str, Any]


def dispatcher_rules(artifacts_bucket: str) -> dict[str, RuleSpec]:
    """The rules on the default bus whose target is the dispatcher, by the CDK construct's ids."""
    created = {"source": [S3_SOURCE], "detail-type": [OBJECT_CREATED]}
    return {
        "DatasetsLanded": RuleSpec(
            "new training data under the artifacts bucket's datasets/ prefix",
            {**created, "detail": {"bucket": {"name": [artifacts_bucket]}, "object": {"key": [{"prefix": constants.DATASETS_PREFIX}]}}},
        ),
        "DataLanded": RuleSpec(
            "new objects in other buckets that send events to EventBridge",
            {**created, "detail": {"bucket": {"name": [{"anything-but": [artifacts_bucket]}]}}},
        ),
        "Alarms": RuleSpec(
            "CloudWatch alarms entering ALARM (e.g. a model-monitor drift alarm)",
            {"source": [ALARM_SOURCE], "detail-type": [ALARM_STATE_CHANGE], "detail": {"state": {"value": ["ALARM"]}}},
        ),
        "Custom": RuleSpec(f"custom retraining events (source {CUSTOM_EVENT_SOURCE})", {"source": [CUSTOM_EVENT_SOURCE]}),
    }
