"""Budgets (issue 25): a cap in USD over a scope's jobs, with thresholds that notify, hold or pause.

A budget covers a team's jobs (issue 24), a principal's, those with a label (`project=llama-ft`) or the
whole deployment. Its spend is metered from the jobs' billable seconds x their rate (docs/BUDGETS.md);
a job is admitted only when its forecast fits what is left (a reservation), and at 100% its running
jobs take the checkpointed pause (CHECKPOINTING -> PAUSED, reason BUDGET).
"""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from schemas.configs import Strict
from schemas.forecast import BudgetLeft as BudgetLeft
from schemas.forecast import Forecast as Forecast
from schemas.teams import TEAM_NAME_PATTERN

MIN_AMOUNT_USD = 0.01  # a cent: below it every ratio (percent used) loses its meaning
MAX_AMOUNT_USD = 10_000_000.0
_LABEL = re.compile(r"^[A-Za-z0-9_.:/-]{1,63}=[A-Za-z0-9_.:/@+-]{0,256}$")
_ARN = re.compile(r"^arn:aws[a-z-]*:(iam|sts)::\d{12}:\S{1,900}$")


class ScopeKind(StrEnum):
    TEAM = "team"
    PRINCIPAL = "principal"
    LABEL = "label"
    DEPLOYMENT = "deployment"


class ThresholdAction(StrEnum):
    NOTIFY = "notify"  # a budget.threshold_crossed event
    HOLD_NEW = "hold_new"  # queued jobs wait with reason BUDGET
    PAUSE_RUNNING = "pause_running"  # running jobs take the checkpointed pause (PAUSED, reason BUDGET)
    CANCEL = "cancel"  # only when asked for (never in the default ladder): running and waiting jobs are cancelled


class Period(StrEnum):
    LIFETIME = "lifetime"
    MONTHLY = "monthly"
    WEEKLY = "weekly"
    CUSTOM = "custom"


class BudgetScope(Strict):
    kind: ScopeKind
    value: str | None = Field(
        default=None,
        max_length=1024,
        description="team: the team's name; principal: its IAM ARN; label: `key=value`; deployment: none.",
    )

    @model_validator(mode="after")
    def _value(self) -> BudgetScope:
        if self.kind == ScopeKind.DEPLOYMENT:
            if self.value is not None:
                raise ValueError("a deployment budget names no value")
            return self
        if not self.value:
            raise ValueError(f"a {self.kind} budget names its {self.kind} in `value`")
        if self.kind == ScopeKind.TEAM and not re.match(TEAM_NAME_PATTERN, self.value):
            raise ValueError(f"not a team name (pattern {TEAM_NAME_PATTERN})")
        if self.kind == ScopeKind.PRINCIPAL and not _ARN.match(self.value):
            raise ValueError("not an IAM ARN (arn:aws:iam::<account>:... or arn:aws:sts::<account>:...)")
        if self.kind == ScopeKind.LABEL and not _LABEL.match(self.value):
            raise ValueError("a label selector is `key=value` (e.g. project=llama-ft)")
        return self

    def label(self) -> tuple[str, str]:
        key, _, value = (self.value or "").partition("=")
        return key, value


class Threshold(Strict):
    percent: float = Field(ge=1, le=1000, description="Of the budget's amount: 80 means at 80% of it (1 to 1000).")
    action: ThresholdAction


def default_thresholds() -> list[Threshold]:
    """The issue's default ladder: notify at 50% and 80%, hold new jobs and pause running ones at 100%."""
    return [
        Threshold(percent=50, action=ThresholdAction.NOTIFY),
        Threshold(percent=80, action=ThresholdAction.NOTIFY),
        Threshold(percent=100, action=ThresholdAction.HOLD_NEW),
        Threshold(percent=100, action=ThresholdAction.PAUSE_RUNNING),
    ]


def _checked_thresholds(value: list[Threshold]) -> list[Threshold]:
    seen = {(t.percent, t.action) for t in value}
    if len(seen) != len(value):
        raise ValueError("each (percent, action) may appear once")
    return sorted(value, key=lambda t: (t.percent, t.action))


class BudgetSpec(Strict):
    """POST /budgets: what to cap, how much, over which period, and what happens at each threshold."""

    model_config = ConfigDict(defer_build=True)

    name: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9 _.:-]*$")
    scope: BudgetScope
    amount_usd: float = Field(ge=MIN_AMOUNT_USD, le=MAX_AMOUNT_USD, description="USD, 0.01 to 10,000,000.")
    period: Period = Period.MONTHLY
    starts_at: datetime | None = Field(default=None, description="custom period only: its start (UTC)")
    ends_at: datetime | None = Field(default=None, description="custom period only: its end (UTC)")
    thresholds: list[Threshold] = Field(default_factory=default_thresholds, min_length=1, max_length=16)

    @field_validator("thresholds")
    @classmethod
    def _thresholds(cls, value: list[Threshold]) -> list[Threshold]:
        return _checked_thresholds(value)

    @model_validator(mode="after")
    def _period(self) -> BudgetSpec:
        if self.period == Period.CUSTOM:
            if self.starts_at is None or self.ends_at is None:
                raise ValueError("a custom period needs starts_at and ends_at")
            if self.starts_at.tzinfo is None or self.ends_at.tzinfo is None:
                raise ValueError("starts_at and ends_at need a time zone (e.g. 2026-01-01T00:00:00Z)")
            if self.ends_at <= self.starts_at:
                raise ValueError("ends_at must be after starts_at")
        elif self.starts_at is not None or self.ends_at is not None:
            raise ValueError("starts_at and ends_at are for a custom period only")
        return self


class BudgetPatch(Strict):
    """PATCH /budgets/{id}: a new amount (raising it resumes the budget's paused jobs) or thresholds."""

    model_config = ConfigDict(defer_build=True)

    amount_usd: float | None = Field(default=None, ge=MIN_AMOUNT_USD, le=MAX_AMOUNT_USD, description="USD, 0.01 to 10,000,000.")
    thresholds: list[Threshold] | None = Field(default=None, min_length=1, max_length=16)

    @field_validator("thresholds")
    @classmethod
    def _thresholds(cls, value: list[Threshold] | None) -> list[Threshold] | None:
        return None if value is None else _checked_thresholds(value)

    @model_validator(mode="after")
    def _something(self) -> BudgetPatch:
        if self.amount_usd is None and self.thresholds is None:
            raise ValueError("send amount_usd, thresholds or both")
        return self


class Budget(BaseModel):
    """A budget as stored, with its meter: `spent_usd` (this period), `reserved_usd` (admitted jobs'
    forecasts not yet spent) and `left_usd` = amount - spent - reserved."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    budget_id: str
    name: str
    scope: BudgetScope
    amount_usd: float
    period: Period
    starts_at: datetime | None = None
    ends_at: datetime | None = None
    thresholds: list[Threshold]
    created_by: str
    created_at: datetime
    updated_at: datetime
    version: int = 1
    period_start: datetime = Field(description="The start of the current period (lifetime: the budget's creation).")
    charges: dict[str, float] = Field(default_factory=dict, description="USD metered per job this period.")
    reservations: dict[str, float] = Field(default_factory=dict, description="Admitted jobs' forecast USD not yet metered.")
    crossed: list[float] = Field(default_factory=list, description="Threshold percents crossed this period (each fires once).")
    paused_jobs: list[str] = Field(default_factory=list, description="Jobs this budget paused, resumed when it is raised.")
    overrides: dict[str, str] = Field(default_factory=dict, description="Jobs an admin let run over this budget, with the reason.")
    metering: list[str] = Field(default_factory=list, description="The covered jobs that were running at the last tick.")
    metered_at: datetime | None = None
    event_seq: int = 0

    @property
    def spent_usd(self) -> float:
        return round(sum(self.charges.values()), 6)

    @property
    def reserved_usd(self) -> float:
        return round(sum(self.reservations.values()), 6)

    @property
    def left_usd(self) -> float:
        return round(self.amount_usd - self.spent_usd - self.reserved_usd, 6)


class BudgetView(BaseModel):
    """A budget as the API answers it."""

    budget_id: str
    name: str
    scope: BudgetScope
    amount_usd: float
    period: Period
    starts_at: datetime | None = None
    ends_at: datetime | None = None
    thresholds: list[Threshold]
    created_by: str
    created_at: datetime
    updated_at: datetime
    version: int
    period_start: datetime
    spent_usd: float
    reserved_usd: float
    left_usd: float
    percent_used: float
    crossed: list[float]
    paused_jobs: list[str]
    overrides: dict[str, str] = Field(default_factory=dict, description="Jobs an admin let run over this budget, with the reason.")
    metered_at: datetime | None = None

    @classmethod
    def of(cls, budget: Budget) -> BudgetView:
        data = budget.model_dump(exclude={"charges", "reservations", "event_seq", "metering"})
        used = 100.0 * budget.spent_usd / budget.amount_usd
        return cls(
            **data,
            spent_usd=budget.spent_usd,
            reserved_usd=budget.reserved_usd,
            left_usd=budget.left_usd,
            percent_used=round(used, 3),
        )


class OverrideRequest(Strict):
    """POST /budgets/{id}/resume (admins): let one job run over the budget, for a stated reason."""

    model_config = ConfigDict(defer_build=True)

    job_id: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    reason: str = Field(min_length=1, max_length=1024, description="Why it may run over budget (recorded in the event).")


class BudgetList(BaseModel):
    budgets: list[BudgetView]


class ShapeRecord(BaseModel):
    """What finished jobs of one forecast shape taught (functions/service/forecast_learning.py): stored as one
    item per shape, every write conditional on `version`. Bounded windows: the newest samples only."""

    model_config = ConfigDict(defer_build=True)

    shape: str
    count: int = Field(default=0, description="Completed jobs recorded.")
    seconds_per_step: list[float] = Field(default_factory=list, description="Newest completed jobs' run seconds / steps.")
    steps: list[int] = Field(default_factory=list, description="Those jobs' steps, pair by pair with seconds_per_step.")
    durations: list[float] = Field(default_factory=list, description="Newest completed jobs' run seconds.")
    tokens_per_second: list[float] = Field(default_factory=list, description="Newest reported throughputs (tokens/s).")
    errors_percent: list[float] = Field(default_factory=list, description="Newest |forecast - actual| / actual x 100.")
    job_ids: list[str] = Field(default_factory=list, description="Newest recorded job ids: a repeated completion counts once.")
    version: int = 0


class ShapeAccuracy(BaseModel):
    shape: str
    count: int = Field(description="Completed jobs recorded for the shape.")
    scored: int = Field(description="Of those, the ones whose forecast was scored (the window of the newest).")
    median_abs_error_percent: float | None = Field(description="Median |forecast - actual| / actual x 100; null before any.")
    seconds_per_step: float | None = Field(description="The shape's median measured seconds per step.")
    tokens_per_second: float | None = Field(description="The shape's median reported tokens/s, where the trainer reports it.")


class ForecastAccuracy(BaseModel):
    """GET /forecast-accuracy: how far the duration forecast was from what finished jobs took, per shape."""

    shapes: list[ShapeAccuracy]
