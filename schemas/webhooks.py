"""Signed webhooks (issue 23.3-23.6, docs/EVENTS.md): what a caller registers, and what the API answers.

A webhook receives the control plane's events (functions/catalog/own_events.py names their short types, which
`event_types` matches with globs such as `job.*`) that its owner may see, signed as Standard Webhooks
1.0 prescribes (functions/service/webhook_delivery.py).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from schemas.configs import Strict
from schemas.job import Labels

WebhookFormat = Literal["standard", "slack"]
DeliveryOutcome = Literal["delivered", "failed", "retrying", "gone", "dropped"]
MAX_URL = 2048
MAX_IDS = 100
_TYPE_GLOB = re.compile(r"^[a-z*?][a-z0-9_.*?]{0,63}$")


class WebhookRequest(Strict):
    """A webhook to create: where to send, which events, in which format."""

    model_config = ConfigDict(
        defer_build=True,
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"url": "https://hooks.example.com/trainplane", "event_types": ["job.*"], "labels": {"team": "nlp"}, "format": "standard"}
            ]
        },
    )

    url: str = Field(min_length=8, max_length=MAX_URL, description="HTTPS, resolving to a public address (local mode: loopback too).")
    event_types: list[Annotated[str, Field(min_length=1, max_length=64)]] = Field(
        default_factory=lambda: ["*"],
        min_length=1,
        max_length=32,
        description="Globs over event types: `job.*`, `sweep.status_changed`, `*`.",
    )
    labels: Labels = Field(default_factory=dict, description="Only events whose subject carries all these labels.")
    job_ids: list[Annotated[str, Field(min_length=1, max_length=128)]] = Field(default_factory=list, max_length=MAX_IDS)
    sweep_ids: list[Annotated[str, Field(min_length=1, max_length=128)]] = Field(default_factory=list, max_length=MAX_IDS)
    format: WebhookFormat = "standard"
    description: str = Field(default="", max_length=256)
    ordered: bool = Field(
        default=False,
        description="Deliver each job's events in order: a job's later event waits while an earlier one is queued or retrying.",
    )

    @field_validator("event_types")
    @classmethod
    def _globs(cls, globs: list[str]) -> list[str]:
        # (a glob that matches no event type at all is refused by the service, which knows the types)
        for glob in globs:
            if not _TYPE_GLOB.match(glob):
                raise ValueError(f"{glob!r} is not an event type glob (lowercase names, dots, * and ?)")
        return globs


class Webhook(BaseModel):
    """A webhook as stored (without its secrets)."""

    model_config = ConfigDict(defer_build=True)

    webhook_id: str
    owner: str
    url: str
    event_types: list[str]
    labels: dict[str, str] = Field(default_factory=dict)
    job_ids: list[str] = Field(default_factory=list)
    sweep_ids: list[str] = Field(default_factory=list)
    format: WebhookFormat = "standard"
    description: str = ""
    ordered: bool = False
    enabled: bool = True
    disabled_reason: str | None = None
    created_at: datetime
    failing_since: datetime | None = Field(default=None, description="The first failed attempt since the last success.")


class WebhookCreated(Webhook):
    """The created webhook and its signing secret: shown this once, never again."""

    secret: str = Field(description="`whsec_` + base64: the Standard Webhooks signing secret. Store it now.")


class SecretRotated(BaseModel):
    model_config = ConfigDict(defer_build=True)  # built on first use, not in the API Lambda's cold start
    webhook_id: str
    secret: str = Field(description="The new secret; the previous one keeps signing for 24 hours too.")
    previous_expires_at: datetime


class WebhookList(BaseModel):
    model_config = ConfigDict(defer_build=True)
    webhooks: list[Webhook]


class DeliveryAttempt(BaseModel):
    """One attempt to deliver one event to one webhook (kept 30 days)."""

    model_config = ConfigDict(defer_build=True)  # built on first use, not in the API Lambda's cold start

    event_id: str
    event_type: str
    attempt: int
    at: datetime
    outcome: DeliveryOutcome
    status_code: int | None = None
    latency_ms: int | None = None
    response: str = Field(default="", description="The first bytes of the receiver's answer, or the connection error.")
    next_attempt_at: datetime | None = None


class DeliveryList(BaseModel):
    model_config = ConfigDict(defer_build=True)
    deliveries: list[DeliveryAttempt]


class RedeliverRequest(Strict):
    """Send again one event (`event_id`) or every event in a time range, re-signed with a new timestamp."""

    model_config = ConfigDict(
        defer_build=True,
        extra="forbid",
        json_schema_extra={"examples": [{"since": "2026-01-01T00:00:00Z"}, {"event_id": "evt_0123456789abcdef0123456789"}]},
    )

    event_id: str | None = Field(default=None, min_length=1, max_length=64)
    since: datetime | None = None
    until: datetime | None = None

    @field_validator("since", "until")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        # A time without an offset is UTC; every time is compared in UTC (one far off the calendar is refused).
        if value is None:
            return None
        try:
            return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        except OverflowError as exc:
            raise ValueError("out of the range of dates") from exc

    @model_validator(mode="after")
    def _one_way(self) -> RedeliverRequest:
        if (self.event_id is None) == (self.since is None):
            raise ValueError("give either event_id or since (with an optional until)")
        if self.until is not None and self.since is None:
            raise ValueError("until needs since")
        return self


class Redelivered(BaseModel):
    model_config = ConfigDict(defer_build=True)  # built on first use, not in the API Lambda's cold start
    webhook_id: str
    event_ids: list[str]


class TestSent(BaseModel):
    model_config = ConfigDict(defer_build=True)  # built on first use, not in the API Lambda's cold start
    webhook_id: str
    event_id: str = Field(description="The test event's id: GET .../deliveries shows its attempts.")


# --- what the webhook service and its repository hand each other (functions/service/webhooks.py) ---
