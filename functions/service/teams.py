"""Teams (issue 24): admins define them; the server decides a caller's team from its identity.

A caller belongs to the first team (by name) one of whose member patterns (fnmatch, `*`) matches its ARN or
its role's ARN (principal.role_arn_of: every session of a role), or, for a dashboard user, that names one of
their Cognito user-pool groups (looked up in the pool by the UserGroups port, never read from a request);
a caller in no team belongs to `default`,
which the deployment's settings define (default_team_quotas, default_team_weight) until an admin PUTs
/teams/default. A submit above the team's max_priority, or to a queue it may not use, is a 422 naming the
field. Only admins PUT or DELETE teams (403); a non-admin sees only its own team, without its member list.
"""

from __future__ import annotations

import fnmatch
import threading
from collections.abc import Callable, Collection, Iterable
from datetime import UTC, datetime

from functions.catalog.gpu_types import GPU_TYPES, decayed, unit_hourly_usd
from functions.catalog.quotas import parse_team_quotas
from functions.errors import AdminOnly, InvalidRequest, TeamNotFound
from functions.service.fair_share import Ask, Cohort
from functions.service.feature_ports import CognitoUser, TeamRepository, UserGroups
from functions.service.ports import CapacityLedger, JobRepository
from functions.service.principal import Principal, cognito_identity_of, role_arn_of
from functions.settings import Settings
from schemas.job import Job, SubmitJobRequest
from schemas.teams import (
    DEFAULT_TEAM,
    UNLIMITED_UNITS,
    Team,
    TeamList,
    TeamMembers,
    TeamSpec,
    TeamView,
    TypeQuota,
    TypeUsage,
    usage_key,
)

_QUEUED_READ = 1000  # queued jobs a team view counts per queue


def _utcnow() -> datetime:
    return datetime.now(UTC)


def settings_default_team(settings: Settings) -> Team:
    """The default team as the settings define it: no limit of its own unless default_team_quotas says one."""
    given = parse_team_quotas(settings.default_team_quotas)
    unlimited = {t: UNLIMITED_UNITS for t in GPU_TYPES}
    quotas = {t: TypeQuota(nominal=n) for t, n in (given or unlimited).items()}
    return Team(name=DEFAULT_TEAM, quotas=quotas, weight=settings.default_team_weight, configured=False)


def is_member(arn: str, members: TeamMembers, groups: Collection[str] = ()) -> bool:
    """Does the caller `arn` (in the user-pool `groups`, for a dashboard user) belong to `members`?"""
    names = (arn, role_arn_of(arn))
    if any(fnmatch.fnmatchcase(name, pattern) for pattern in members.arns for name in names):
        return True
    return any(group in groups for group in members.cognito_groups)


# Who a team's membership is decided for: a principal (a request's caller, with a dashboard user's user-pool
# identity) or a stored owner ARN (a sweep's trials, a retraining policy's jobs, an admin acting for someone).
Member = Principal | str


class TeamDirectory:
    """Teams as the scheduler and submit see them: stored teams and the default one, and who is in which."""

    def __init__(
        self,
        repository: TeamRepository,
        settings: Settings,
        clock: Callable[[], datetime] = _utcnow,
        groups: UserGroups | None = None,
    ) -> None:
        self.repository = repository
        self.settings = settings
        self.clock = clock
        self.groups = groups  # None: no user pool (Cognito groups match nobody)
        self._linked: dict[str, CognitoUser] = {}  # identity id -> user, as this process last stored it
        self._lock = threading.Lock()

    @property
    def half_life_seconds(self) -> float:
        return self.settings.fair_share_half_life_seconds

    def teams(self) -> dict[str, Team]:
        stored = {t.name: t for t in self.repository.list()}
        stored.setdefault(DEFAULT_TEAM, settings_default_team(self.settings))
        return dict(sorted(stored.items()))

    def active(self, teams: dict[str, Team]) -> bool:
        """Do teams change anything? Not while the default team, without limits, is the only one."""
        return len(teams) > 1 or teams[DEFAULT_TEAM].configured or bool(self.settings.default_team_quotas)

    def team_of(self, who: Member, teams: dict[str, Team] | None = None) -> Team:
        teams = self.teams() if teams is None else teams
        arn = who if isinstance(who, str) else who.arn
        named = [t for n, t in sorted(teams.items()) if n != DEFAULT_TEAM]
        self.remember(who)
        # The user pool is asked only when a team names a group (an IAM caller never has any).
        groups = self.cognito_groups(who) if any(t.members.cognito_groups for t in named) else frozenset()
        for team in named:
            if is_member(arn, team.members, groups):
                return team
        return teams[DEFAULT_TEAM]

    def cognito_groups(self, who: Member) -> frozenset[str]:
        """A dashboard user's user-pool groups; none for anyone else.

        A request's principal carries its user (API Gateway's cognitoAuthenticationProvider), which is
        remembered by identity id, so that a stored owner ARN (a sweep's trial, a policy's job) is looked up
        as the same person later. Only the deployment's own user pool counts (settings
        dashboard_user_pool_id): a user of any other pool has no groups here.
        """
        arn = who if isinstance(who, str) else who.arn
        identity = cognito_identity_of(arn)
        if identity is None or self.groups is None:
            return frozenset()
        user = who.cognito if isinstance(who, Principal) else None
        if user is None:
            user = self._linked.get(identity) or self._recall(identity)
        if user is None or user.user_pool_id != self.settings.dashboard_user_pool_id:
            return frozenset()
        return self.groups.groups_of(user)

    def remember(self, who: Member) -> None:
        """Keep a request's dashboard user by identity id (written once per process and person), whether or
        not a team names groups yet: what they start now (a sweep, a policy) may submit after one does."""
        if isinstance(who, str) or who.cognito is None or self.groups is None:
            return
        identity = cognito_identity_of(who.arn)
        if identity is None:
            return
        with self._lock:
            if self._linked.get(identity) == who.cognito:
                return
        self.repository.link_identity(identity, who.cognito)
        with self._lock:
            self._linked[identity] = who.cognito

    def _recall(self, identity: str) -> CognitoUser | None:
        user = self.repository.linked_user(identity)
        if user is not None:
            with self._lock:
                self._linked.setdefault(identity, user)
        return user

    def check_submit(self, request: SubmitJobRequest, owner: Member) -> str:
        """The team a job of `owner` is recorded under; 422 naming the field it may not use."""
        team = self.check_priority(owner, request.effective_priority, "scheduling_config.priority")
        queue = request.scheduling_config.queue
        if team.queues is not None and queue not in team.queues:
            allowed = ", ".join(team.queues) or "none"
            raise InvalidRequest("scheduling_config.queue", f"team {team.name!r} may not use queue {queue!r}; its queues: {allowed}")
        return team.name

    def check_priority(self, owner: Member, priority: int, field: str) -> Team:
        """`owner`'s team, if it may use `priority`; 422 naming `field` if the team's ceiling is lower."""
        team = self.team_of(owner)
        if priority > team.max_priority:
            raise InvalidRequest(field, f"team {team.name!r} may use priority {team.max_priority} at most, not {priority}")
        return team

    def usage(self, teams: Iterable[str], now: datetime) -> dict[str, float]:
        recorded = self.repository.usage()
        out = {}
        for name in teams:
            amount, at = recorded.get(name, (0.0, now))
            out[name] = decayed(amount, at, now, self.half_life_seconds)
        return out

    def record(self, job: Job, now: datetime) -> None:
        """Add a run's price-weighted unit-hours to its team's usage (when the job gives its capacity back)."""
        if job.run_started_at is None:
            return
        ask = Ask.of(job, DEFAULT_TEAM)
        hours = max((now - job.run_started_at).total_seconds(), 0.0) / 3600.0
        if hours > 0:
            amount = ask.units * hours * unit_hourly_usd(ask.gpu_type)
            self.repository.add_usage(ask.team, amount, now, self.half_life_seconds)
            self.repository.add_usage(usage_key(ask.team, ask.gpu_type), amount, now, self.half_life_seconds)

    def cohort(self, teams: dict[str, Team], ledger: CapacityLedger, repository: JobRepository, now: datetime) -> Cohort:
        """Every team's quotas, what its jobs hold now (the ledger's claims) and its usage (with running time)."""
        usage = self.usage(teams, now)
        cohort = Cohort(teams=teams, usage=usage)
        holding = [job_id for pool in ledger.pools() for job_id in ledger.holders(pool)]
        for job_id, job in repository.get_many(holding).items():  # a job gone since its claim holds nothing here
            ask = Ask.within(job, teams, DEFAULT_TEAM)
            cohort.hold(ask)
            cohort.holders[job_id] = (job, ask)
            if job.run_started_at is not None:
                hours = max((now - job.run_started_at).total_seconds(), 0.0) / 3600.0
                running = ask.units * hours * unit_hourly_usd(ask.gpu_type)
                usage[ask.team] = usage.get(ask.team, 0.0) + running
                cohort.running[(ask.team, ask.gpu_type)] += running
        return cohort


class TeamService:
    """PUT/GET/DELETE /teams/{team}, GET /teams."""

    def __init__(self, directory: TeamDirectory, ledger: CapacityLedger, jobs: JobRepository) -> None:
        self.directory = directory
        self.ledger = ledger
        self.jobs = jobs

    @property
    def repository(self) -> TeamRepository:
        return self.directory.repository

    def put(self, name: str, spec: TeamSpec, principal: Principal) -> Team:
        _admin(principal, "define teams")
        try:
            version: int | None = self.repository.get(name).version
        except TeamNotFound:
            version = None
        team = Team(name=name, **spec.model_dump(), updated_at=self.directory.clock(), updated_by=principal.arn)
        return self.repository.put(team, version)

    def delete(self, name: str, principal: Principal) -> None:
        _admin(principal, "delete teams")
        if not self.repository.delete(name):
            raise TeamNotFound(name)

    def list(self, principal: Principal) -> TeamList:
        teams = self.directory.teams()
        if principal.is_admin:
            return TeamList(teams=list(teams.values()))
        return TeamList(teams=[_redacted(self.directory.team_of(principal, teams))])

    def get(self, name: str, principal: Principal) -> TeamView:
        teams = self.directory.teams()
        if name not in teams or not (principal.is_admin or self.directory.team_of(principal, teams).name == name):
            raise TeamNotFound(name)
        now = self.directory.clock()
        cohort = self.directory.cohort(teams, self.ledger, self.jobs, now)
        queued: dict[str, int] = {}
        for queue in self.ledger.queues():
            for job in self.jobs.queued(queue, limit=_QUEUED_READ):
                ask = Ask.of(job, DEFAULT_TEAM)
                if ask.team == name:
                    queued[ask.gpu_type] = queued.get(ask.gpu_type, 0) + ask.units
        team = teams[name]
        types = sorted(set(team.quotas) | {t for (n, t) in cohort.in_use if n == name} | set(queued), key=GPU_TYPES.index)
        recorded = self.directory.usage([name], now)[name]
        by_type = self.directory.usage([usage_key(name, t) for t in types], now)
        rows = [
            TypeUsage(
                gpu_type=t,
                nominal=cohort.nominal(name, t),
                in_use=cohort.in_use[(name, t)],
                borrowed=cohort.borrowed(name, t),
                lent=cohort.lent(name, t),
                queued=queued.get(t, 0),
                usage=by_type[usage_key(name, t)] + cohort.running[(name, t)],
            )
            for t in types
        ]
        return TeamView(
            team=team if principal.is_admin else _redacted(team),
            fair_share=cohort.factors()[name],
            usage=recorded,
            types=rows,
        )


def _admin(principal: Principal, what: str) -> None:
    if not principal.is_admin:
        raise AdminOnly(f"only the deployment's admins may {what} (settings admin_arns)")


def _redacted(team: Team) -> Team:
    """A team as a member sees it: its rules, not who else is in it."""
    return team.model_copy(update={"members": TeamMembers(), "updated_by": None})
