"""The composition root's budget and forecast parts (issue 25): `Composition` (functions/composition.py) has
them as a base, so they are built, kept and handed out as every other part is; a module of their own only to
keep the root under ~600 lines."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from functions.adapters.aws import AwsClients
    from functions.service.budgets import BudgetGate, BudgetMeter, BudgetRepository, BudgetService
    from functions.service.forecast_learning import ForecastLearner
    from functions.service.jobs import JobService
    from functions.service.ports import JobRepository, Workflow
    from functions.service.teams import TeamDirectory
    from functions.settings import Settings

# Who resumes the jobs a budget paused (raised, deleted, or a new period): the control plane itself, as an admin.
BUDGETS_ACTOR = "trainplane:budgets"


class _Root(Protocol):
    """What the budget parts read of the root (functions/composition.py's Composition)."""

    _clock: Callable[[], datetime] | None

    @property
    def settings(self) -> Settings: ...
    @property
    def clients(self) -> AwsClients: ...
    @property
    def repository(self) -> JobRepository: ...
    @property
    def jobs(self) -> JobService: ...
    @property
    def workflow(self) -> Workflow | None: ...
    @property
    def team_directory(self) -> TeamDirectory: ...
    @property
    def budget_repository(self) -> BudgetRepository: ...
    @property
    def forecast_learner(self) -> ForecastLearner: ...
    def _once(self, name: str, build: Callable[[], Any]) -> Any: ...
    def _clock_kw(self) -> dict[str, Any]: ...


class BudgetParts:
    @property
    def budget_repository(self: _Root) -> BudgetRepository:
        def build() -> BudgetRepository:
            from functions.adapters.budgets import DynamoBudgetRepository

            return DynamoBudgetRepository(self.clients, self.settings.jobs_table)

        return self._once("_budget_repository", build)

    def _clock_kw(self: _Root) -> dict[str, Any]:
        return {"clock": self._clock} if self._clock is not None else {}

    @property
    def budget_gate(self: _Root) -> BudgetGate:
        """The scheduler's admission hold: a job's forecast reserved against the budgets covering it."""

        def build() -> BudgetGate:
            from functions.service.budgets import BudgetGate

            return BudgetGate(self.budget_repository, **self._clock_kw())

        return self._once("_budget_gate", build)

    @property
    def budgets(self: _Root) -> BudgetService:
        """/budgets (functions/service/budgets.py): raising a budget resumes the jobs it paused."""

        def build() -> BudgetService:
            from functions.service.budget_actions import resumer
            from functions.service.budgets import BudgetService
            from functions.service.principal import Principal

            system = Principal(arn=BUDGETS_ACTOR, is_admin=True)
            resume = resumer(self.repository, lambda job_id: self.jobs.resume(job_id, system))
            directory = self.team_directory
            team_of = lambda principal: directory.team_of(principal).name  # noqa: E731
            learned = self.forecast_learner.forecast
            return BudgetService(self.budget_repository, team_of, resume, jobs=self.repository, learned=learned, **self._clock_kw())

        return self._once("_budgets", build)

    @property
    def forecast_learner(self: _Root) -> ForecastLearner:
        """The forecast's per-shape records (functions/service/forecast_learning.py) in the jobs table."""

        def build() -> ForecastLearner:
            from functions.adapters.forecast_records import DynamoShapeRecords
            from functions.service.forecast_learning import ForecastLearner

            return ForecastLearner(DynamoShapeRecords(self.clients, self.settings.jobs_table))

        return self._once("_forecast_learner", build)

    @property
    def budget_meter(self: _Root) -> BudgetMeter:
        """The budgets' tick (the events function's schedule, local mode's reconciler loop)."""

        def build() -> BudgetMeter:
            from functions.service.budget_actions import resumer
            from functions.service.budgets import BudgetMeter
            from functions.service.principal import Principal
            from schemas.job import Actor, ErrorType

            system = Principal(arn=BUDGETS_ACTOR, is_admin=True)
            resume = resumer(self.repository, lambda job_id: self.jobs.resume(job_id, system))

            def cancel(job_id: str, reason: str) -> object:
                # A `cancel` threshold: the job's own cancel (stops its run, answers its execution's wait).
                return self.jobs.cancel(job_id, system, reason, actor=Actor.SYSTEM.value, error_type=ErrorType.BUDGET)

            return BudgetMeter(
                self.budget_repository,
                self.repository,
                self.workflow,
                dashboard_url=self.settings.dashboard_url,
                resume=resume,
                cancel=cancel,
                **self._clock_kw(),
            )

        return self._once("_budget_meter", build)
