"""The ports of the features built on the job lifecycle (retraining policies, sweeps, teams and Cognito groups,
training-shape records), declared on the services' side as functions/service/ports.py declares the core's: the
adapters implement them, tests use fakes, the composition roots wire them. A module of its own so the core's
ports (every Lambda imports them) do not import these features' models.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol

from schemas.retraining import FireOutcome, RetrainingPolicy
from schemas.sweeps import Sweep, Trial
from schemas.teams import Team

if TYPE_CHECKING:
    from schemas.budgets import ShapeRecord


# --- retraining: policies and their schedules ----------------------------------------------------


@dataclass(frozen=True)
class Route:
    """One place a policy waits on (functions/service/retraining/routes.py decides what an event there must satisfy)."""

    key: str  # "s3#<bucket>" or "event#<source>"
    policy_id: str
    owner: str
    match: Mapping[str, Any] = field(default_factory=dict)  # s3: {"prefix", "suffix"}; event: {"pattern"}


@dataclass(frozen=True)
class EventRecord:
    """What was decided for one (policy, event): `claimed` while its job is being submitted, then `done`."""

    policy_id: str
    event_id: str
    state: Literal["claimed", "done"]
    outcome: FireOutcome
    at: datetime
    job_id: str | None = None
    detail: str = ""


@dataclass(frozen=True)
class FireClaim:
    """The bookkeeping a fire writes on the policy, and what it was decided against."""

    event_id: str
    at: datetime
    seen_version: int
    seen_last_fired_at: datetime | None
    fired_day: str
    fired_today: int


class PolicyRepository(Protocol):
    """The port the retraining service programs against (DynamoPolicyRepository; an in-memory fake in tests)."""

    def create(self, policy: RetrainingPolicy, routes: list[Route]) -> None: ...

    def get(self, policy_id: str) -> RetrainingPolicy:
        """PolicyNotFound when there is none."""
        ...

    def list_policies(self, owner: str | None, limit: int, next_token: str | None) -> tuple[list[RetrainingPolicy], str | None]:
        """Newest first; owner None lists every principal's (admins)."""
        ...

    def all_policies(self) -> Iterator[RetrainingPolicy]: ...

    def update(self, policy: RetrainingPolicy, expected_version: int, old_routes: list[Route], new_routes: list[Route]) -> RetrainingPolicy:
        """Write `policy`'s configuration fields if the stored version is still `expected_version` (PolicyConflict)."""
        ...

    def delete(self, policy_id: str, expected_version: int, routes: list[Route]) -> None: ...

    def routes(self, key: str) -> list[Route]: ...

    def event_record(self, policy_id: str, event_id: str) -> EventRecord | None: ...

    def claim_fire(self, policy_id: str, claim: FireClaim) -> Literal["claimed", "duplicate", "changed"]:
        """Record the event as claimed and the fire on the policy, both or neither.

        "duplicate": the event already has a decision; "changed": the policy is not as it was read
        (disabled, edited, or another fire got there first): read it again and decide again.
        """
        ...

    def complete_fire(self, policy_id: str, event_id: str, job_id: str) -> bool:
        """Record the job of a claimed event; True when it is still the policy's newest fire (last_job_id set)."""
        ...

    def take_over(self, policy_id: str, event_id: str, seen_at: datetime, now: datetime) -> bool:
        """Renew a stale claim (its invocation died) if nobody else has: True when this caller now owns it."""
        ...

    def record_decision(self, policy_id: str, event_id: str, outcome: FireOutcome, at: datetime, detail: str = "") -> bool:
        """Record a decision that started nothing; False when the event already had one."""
        ...


class ScheduleManager(Protocol):
    def put(self, policy: RetrainingPolicy) -> None:
        """Create or replace the policy's schedule (State follows `enabled`)."""

    def delete(self, policy_id: str) -> None:
        """Remove the policy's schedule; nothing to remove is fine."""

    def policy_ids(self) -> list[str]:
        """The policies that have a schedule now (to find schedules whose policy is gone)."""


# --- sweeps ----------------------------------------------------------------------------------------


class SweepWaker(Protocol):
    def wake(self, sweep_id: str) -> None:
        """Ask the controller to decide for this sweep soon (at least once; duplicates are harmless)."""


class SweepRepository(Protocol):
    """Sweeps and their trials (functions/adapters/sweeps.py: DynamoSweepRepository, in the jobs table).

    Every write that decides something is conditional: a stale version returns False (or "taken"), and
    the caller reads again and decides again."""

    def create(self, sweep: Sweep) -> None:
        """Put a new sweep; TooLarge when its stored form passes the item limit."""

    def get(self, sweep_id: str) -> Sweep:
        """The sweep (consistent read); SweepNotFound when there is none."""

    def load(self, sweep_id: str) -> tuple[Sweep, list[Trial]]:
        """The sweep and all its trials, numbered 0..n-1, read consistently."""

    def list_sweeps(self, owner: str | None, limit: int, next_token: str | None) -> tuple[list[Sweep], str | None]:
        """Newest first; owner None lists every principal's (admins); an opaque token for the next page."""

    def active_sweep_ids(self) -> Iterator[str]:
        """Every sweep not yet ended (RUNNING or PAUSED): what the reconciler wakes."""

    def update(self, sweep: Sweep, expected_version: int) -> bool:
        """Write `sweep` (its version + 1) if the stored one is still `expected_version`; False if not."""

    def delete(self, sweep_id: str, expected_version: int) -> bool:
        """Remove the sweep and its trials if the stored one is still `expected_version`; False if not."""

    def claim_trial(self, sweep_id: str, trial: Trial) -> Literal["claimed", "taken", "not_running"]:
        """Create trial N while the sweep is RUNNING, in one transaction: "taken" when another decision
        created it first, "not_running" when the sweep was paused or ended meanwhile."""

    def update_trial(self, sweep_id: str, trial: Trial, expected_version: int) -> bool:
        """Write the trial (never its reported values) if its version is still `expected_version`."""

    def end_trial(self, sweep_id: str, trial: Trial, expected_version: int) -> bool:
        """Move an ended trial into its block if its version is still `expected_version` and it holds
        exactly the steps `trial` holds; False when either condition failed."""

    def record_value(self, sweep_id: str, number: int, job_id: str, step: int, value: float) -> bool:
        """The metric at `step` of trial `number`, reported by `job_id` (overwrites: a resumed attempt reporting it
        again counts once). False, and nothing written, unless `job_id` is the trial's recorded job: a condition of
        the write, never a read before it."""


class TeamRepository(Protocol):
    """Teams and their decayed usage (functions/adapters/teams.py, in the jobs table)."""

    def get(self, name: str) -> Team:
        """The stored team; TeamNotFound when there is none."""

    def list(self) -> list[Team]:
        """Every stored team, by name."""

    def put(self, team: Team, expected_version: int | None) -> Team:
        """Store `team` as version expected_version + 1 (1 when None: it must not exist yet);
        ConcurrentModification when the stored version is another."""

    def delete(self, name: str) -> bool:
        """Remove the team; False if there was none."""

    def usage(self) -> dict[str, tuple[float, datetime]]:
        """Each team's recorded usage and when it was last decayed to."""

    def add_usage(self, name: str, amount: float, now: datetime, half_life_seconds: float) -> None:
        """Decay the team's usage to `now` and add `amount` (a conditional write, retried on a race)."""

    def link_identity(self, identity_id: str, user: CognitoUser) -> None:
        """Remember which user-pool user a dashboard identity is (as a signed request showed it)."""

    def linked_user(self, identity_id: str) -> CognitoUser | None:
        """The user-pool user a dashboard identity was last seen as; None if never."""


@dataclass(frozen=True)
class CognitoUser:
    """A person of the dashboard's Cognito user pool, as API Gateway names them: the pool and the user's sub."""

    user_pool_id: str
    sub: str


class UserGroups(Protocol):
    """The Cognito user-pool groups of a dashboard user (functions/adapters/cognito_groups.py), what team
    membership by `members.cognito_groups` reads; a user the pool does not know has none. functions.errors
    GroupsUnavailable when the pool does not answer and no earlier answer is kept."""

    def groups_of(self, user: CognitoUser) -> frozenset[str]: ...


class ShapeRecords(Protocol):
    """What finished jobs taught the forecast, one record per shape (functions/service/forecast_learning.py)."""

    def get(self, shape: str) -> ShapeRecord | None: ...

    def put(self, record: ShapeRecord, expected_version: int) -> None:
        """Store `record` as version expected_version + 1 if the stored one is still expected_version (0: none yet);
        raises ConcurrentModification otherwise."""
        ...

    def list(self) -> list[ShapeRecord]: ...
