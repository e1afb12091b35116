"""Retraining policies: create, read, list, edit, delete - and dispatch, which fires them (dispatch.py).

A policy is checked whole when it is created or edited: its template is a valid SubmitJobRequest, its
mapping targets real fields, its cron parses (schemas/retraining.py), and its events can reach the
dispatcher through the stack's rules (routes.py); so it never fails at fire time for a
reason known in advance. Policies are owned like jobs: another principal's policy is "not found".

Schedule-triggered policies get an EventBridge Scheduler schedule (functions/adapters/schedules.py),
written after the policy item and undone with it when Scheduler cannot be reached (503).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from functions.errors import InvalidRequest, PolicyNotFound
from functions.service.controls import WorkflowUnavailable
from functions.service.feature_ports import PolicyRepository, Route, ScheduleManager
from functions.service.jobs import JobService
from functions.service.principal import Principal
from functions.service.retraining.dispatch import Dispatcher
from functions.service.retraining.routes import check_routable, routes_for
from functions.settings import Settings
from schemas.retraining import (
    FireResult,
    PolicyList,
    RetrainingPolicy,
    RetrainingPolicyPatch,
    RetrainingPolicyRequest,
    ScheduleTrigger,
)

logger = logging.getLogger(__name__)

MAX_LIST_LIMIT = 200
_REQUEST_FIELDS = tuple(RetrainingPolicyRequest.model_fields)
# In a PATCH, null clears only a field a policy may hold as null (description, daily_cap); for the others
# (trigger, job_template, enabled, ...) openapi.json allows null too, and it means "leave it as it is".
_CLEARABLE_FIELDS = frozenset(n for n, f in RetrainingPolicyRequest.model_fields.items() if not f.is_required() and f.default is None)


class SchedulerUnavailable(WorkflowUnavailable):
    """EventBridge Scheduler could not be told about a policy's schedule; nothing was changed (503)."""


def new_policy_id() -> str:
    return f"pol-{uuid.uuid4().hex[:16]}"


class RetrainingService:
    def __init__(
        self,
        policies: PolicyRepository,
        jobs: JobService,
        settings: Settings,
        schedules: ScheduleManager | None = None,
        *,
        clock: Callable[[], datetime] | None = None,
        ids: Callable[[], str] = new_policy_id,
    ) -> None:
        self.policies = policies
        self.jobs = jobs
        self.settings = settings
        self.schedules = schedules
        self.clock = clock or jobs.clock
        self.ids = ids
        self.dispatcher = Dispatcher(policies, jobs, self.clock)

    def principal(self, arn: str) -> Principal:
        return self.jobs.principal(arn)

    # --- CRUD ------------------------------------------------------------------------------------

    def create(self, request: RetrainingPolicyRequest, principal: Principal) -> RetrainingPolicy:
        request = self._checked(request, principal, principal.arn)
        now = self.clock()
        policy = RetrainingPolicy.model_validate(
            {**_fields(request), "policy_id": self.ids(), "owner": principal.arn, "created_at": now, "updated_at": now}
        )
        routes = self._routes(policy)
        self.policies.create(policy, routes)
        if isinstance(policy.trigger, ScheduleTrigger):
            try:
                self._scheduler().put(policy)
            except Exception as exc:
                logger.exception("could not create the schedule of policy %s; removing it", policy.policy_id)
                self.policies.delete(policy.policy_id, policy.version, routes)
                raise SchedulerUnavailable("EventBridge Scheduler could not be reached: the policy was not created; retry") from exc
        return policy

    def get(self, policy_id: str, principal: Principal) -> RetrainingPolicy:
        policy = self.policies.get(policy_id)
        if not (principal.is_admin or policy.owner == principal.arn):
            raise PolicyNotFound(policy_id)  # never 403: another principal's ids are not disclosed
        return policy

    def list_policies(self, principal: Principal, *, limit: int = 50, next_token: str | None = None) -> PolicyList:
        if not 1 <= limit <= MAX_LIST_LIMIT:
            raise InvalidRequest("limit", f"must be between 1 and {MAX_LIST_LIMIT}")
        policies, token = self.policies.list_policies(principal.owner_scope, limit, next_token or None)
        return PolicyList(policies=policies, next_token=token)

    def patch(self, policy_id: str, principal: Principal, patch: RetrainingPolicyPatch) -> RetrainingPolicy:
        current = self.get(policy_id, principal)
        given = patch.model_fields_set
        if not given:
            raise InvalidRequest("body", "nothing to change")
        changes = {name: getattr(patch, name) for name in given if getattr(patch, name) is not None or name in _CLEARABLE_FIELDS}
        if not changes:
            return current  # only nulls of fields a policy cannot clear: nothing changes
        merged = {**_fields(current), **changes}
        try:
            request = RetrainingPolicyRequest.model_validate(merged)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first.get("loc", ())) or "body"
            raise InvalidRequest(field, str(first.get("msg", "invalid")).removeprefix("Value error, ")) from exc
        request = self._checked(request, principal, current.owner)
        edited = current.model_copy(update={**_fields(request), "version": current.version + 1, "updated_at": self.clock()})
        stored = self.policies.update(edited, current.version, self._routes(current), self._routes(edited))
        try:
            if isinstance(stored.trigger, ScheduleTrigger):
                self._scheduler().put(stored)
            elif isinstance(current.trigger, ScheduleTrigger):
                self._scheduler().delete(policy_id)
        except Exception as exc:
            logger.exception("could not update the schedule of policy %s; restoring the policy", policy_id)
            restore = current.model_copy(update={"version": stored.version + 1, "updated_at": self.clock()})
            self.policies.update(restore, stored.version, self._routes(stored), self._routes(current))
            raise SchedulerUnavailable("EventBridge Scheduler could not be reached: the policy was not changed; retry") from exc
        return stored

    def delete(self, policy_id: str, principal: Principal) -> None:
        current = self.get(policy_id, principal)
        self.policies.delete(policy_id, current.version, self._routes(current))
        if isinstance(current.trigger, ScheduleTrigger):
            try:
                self._scheduler().delete(policy_id)
            except Exception:
                # The policy is gone, which is what the caller asked; a tick of the orphaned schedule
                # finds no policy and starts nothing, and sync_schedules() removes it.
                logger.exception("policy %s deleted but its schedule was not; sync_schedules will remove it", policy_id)

    # --- firing ----------------------------------------------------------------------------------

    def dispatch(self, event: Mapping[str, Any]) -> list[FireResult]:
        """An EventBridge event (S3 object created, an alarm, a custom event): fire every policy it matches."""
        return self.dispatcher.dispatch(event)

    def fire_scheduled(self, policy_id: str, scheduled_time: datetime | None = None, execution_id: str | None = None) -> list[FireResult]:
        """An EventBridge Scheduler invocation {"policy_id", "scheduled_time", "execution_id"}."""
        return self.dispatcher.fire_scheduled(policy_id, scheduled_time, execution_id)

    def sync_schedules(self) -> dict[str, int]:
        """Make the schedules match the policies: every schedule policy has one, no other schedule exists.

        Local mode runs it at start-up (the emulated Scheduler keeps nothing across restarts); in AWS it
        repairs what a failed delete left behind.
        """
        if self.schedules is None:
            return {"put": 0, "deleted": 0}
        wanted = {p.policy_id: p for p in self.policies.all_policies() if isinstance(p.trigger, ScheduleTrigger)}
        for policy in wanted.values():
            self.schedules.put(policy)
        extra = [pid for pid in self.schedules.policy_ids() if pid not in wanted]
        for policy_id in extra:
            self.schedules.delete(policy_id)
        return {"put": len(wanted), "deleted": len(extra)}

    # --- helpers ---------------------------------------------------------------------------------

    def _checked(self, request: RetrainingPolicyRequest, principal: Principal, owner: str) -> RetrainingPolicyRequest:
        """Rules that need the deployment: routable events, a Scheduler for schedules, the template's paths
        (the same submit check a job gets, as the policy's owner); priority made explicit."""
        check_routable(request, self.settings.artifacts_bucket)
        try:
            self.jobs.check_paths(request.job_template, principal, owner=owner)
        except InvalidRequest as exc:
            raise InvalidRequest(f"job_template.{exc.field}", exc.message) from exc
        if isinstance(request.trigger, ScheduleTrigger) and self.schedules is None:
            raise InvalidRequest(
                "trigger.type",
                "schedule triggers need EventBridge Scheduler, which this deployment does not configure "
                "(settings retraining_schedule_group, retraining_scheduler_role_arn, retraining_function_arn)",
            )
        # The stored template is dumped whole, which would lose "only training_config.priority was
        # set" (SubmitJobRequest.effective_priority): write the effective priority into both places.
        template = request.job_template
        priority = template.effective_priority
        template = template.model_copy(
            update={
                "training_config": template.training_config.model_copy(update={"priority": priority}),
                "scheduling_config": template.scheduling_config.model_copy(update={"priority": priority}),
            }
        )
        return request.model_copy(update={"job_template": template})

    def _routes(self, policy: RetrainingPolicy) -> list[Route]:
        return routes_for(policy.policy_id, policy.owner, policy, self.settings.artifacts_bucket)

    def _scheduler(self) -> ScheduleManager:
        if self.schedules is None:  # _checked refuses schedule triggers first; this guards the invariant
            raise SchedulerUnavailable("no EventBridge Scheduler is configured for retraining schedules")
        return self.schedules


def _fields(policy: RetrainingPolicyRequest) -> dict[str, Any]:
    """The request fields of a policy, as models (secrets kept: they are compared and stored, not shown)."""
    return {name: getattr(policy, name) for name in _REQUEST_FIELDS}
