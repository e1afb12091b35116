"""Firing retraining policies: an event (or a schedule's tick) -> the policies it concerns -> at most one job each.

For one (policy, event) the decision is, in order: a disabled policy fires nothing; an event that
already has a decision is a duplicate; within min_interval_seconds of the last fire it is coalesced;
past the daily cap (UTC day) it is capped; a mapping the event cannot fill is invalid; under `skip`
a non-terminal job of the policy skips it. Otherwise ONE transaction records the event as claimed and
the fire on the policy, conditional on the policy being exactly as all of that was decided on
(enabled, same version, no other fire since), so two deliveries of one event, or a burst of events,
start one job; a lost race decides again from what won. Then `cancel_running` cancels the running
jobs through the same cancel as the API, and the job is submitted through the same JobService.submit,
owned by the policy's owner, labelled retraining_policy and trigger_event_id.

Decisions that start nothing are recorded too, so a redelivery gets the same answer. A claim whose
invocation died before the job was submitted (the Lambda timed out) is taken over by a redelivery
once it is older than CLAIM_LEASE.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import ValidationError

from functions.catalog.events import SCHEDULED_EVENT, SCHEDULER_SOURCE
from functions.errors import (
    ConcurrentModification,
    IllegalTransition,
    InvalidRequest,
    JobNotFound,
    PolicyConflict,
    PolicyNotFound,
)
from functions.service.feature_ports import EventRecord, FireClaim, PolicyRepository
from functions.service.jobs import JobService
from functions.service.ports import JobQuery
from functions.service.retraining.routes import accepts, route_keys_of
from schemas.configs import LAX_NUMBERS
from schemas.job import Job, SubmitJobRequest
from schemas.retraining import (
    EVENT_LABEL,
    POLICY_LABEL,
    ConcurrencyPolicy,
    FireOutcome,
    FireResult,
    InputMapping,
    RetrainingPolicy,
    ScheduleTrigger,
    set_target,
)
from schemas.status import TERMINAL

logger = logging.getLogger(__name__)

# Longer than the dispatcher Lambda's 60 s timeout: a claim this old belongs to an invocation that is gone.
CLAIM_LEASE = timedelta(seconds=90)
MAX_EVENT_ID_LENGTH = 256  # it becomes a label value (256) and part of a sort key
_DECIDE_ATTEMPTS = 8
_CANCEL_ATTEMPTS = 3
_LIST_PAGE = 200
_FREE_MAPS = ("labels.", "training_config.hyperparameters.", "training_config.environment.")
_PATH_PART = re.compile(r"[^.\[\]]+|\[\d+\]")


class MappingFailed(Exception):
    """The event cannot be turned into a valid job by the policy's input mapping."""


class Dispatcher:
    def __init__(self, policies: PolicyRepository, jobs: JobService, clock: Callable[[], datetime]) -> None:
        self.policies = policies
        self.jobs = jobs
        self.clock = clock

    # --- entry points ----------------------------------------------------------------------------

    def dispatch(self, event: Mapping[str, Any]) -> list[FireResult]:
        """Every policy whose trigger the event matches, fired once (by route items, never a Scan)."""
        event_id = event_id_of(event)
        results: list[FireResult] = []
        seen: set[str] = set()
        for key in route_keys_of(event):
            for route in self.policies.routes(key):
                if route.policy_id in seen or not accepts(route, event):
                    continue
                seen.add(route.policy_id)
                results.append(self.fire(route.policy_id, event, event_id))
        return results

    def fire_scheduled(self, policy_id: str, scheduled_time: datetime | None, execution_id: str | None = None) -> list[FireResult]:
        """A schedule's tick; the scheduled time is the event id, so a retried tick starts one job."""
        try:
            policy = self.policies.get(policy_id)
        except PolicyNotFound:
            logger.warning("schedule of deleted policy %s fired; ignored (its schedule is removed with the policy)", policy_id)
            return []
        if not isinstance(policy.trigger, ScheduleTrigger):
            logger.warning("policy %s is no longer schedule-triggered; a late tick is ignored", policy_id)
            return []
        at = (scheduled_time or self.clock().replace(second=0, microsecond=0)).astimezone(UTC)
        stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
        event_id = f"schedule:{stamp}"
        event = {
            "version": "0",
            "id": event_id,
            "source": SCHEDULER_SOURCE,
            "detail-type": SCHEDULED_EVENT,
            "time": stamp,
            "resources": [],
            "detail": {"policy_id": policy_id, "scheduled_time": stamp, "execution_id": execution_id or ""},
        }
        return [self.fire(policy_id, event, event_id)]

    # --- one policy, one event -------------------------------------------------------------------

    def fire(self, policy_id: str, event: Mapping[str, Any], event_id: str) -> FireResult:
        for _attempt in range(_DECIDE_ATTEMPTS):
            try:
                policy = self.policies.get(policy_id)
            except PolicyNotFound:
                return FireResult(policy_id=policy_id, outcome="disabled", event_id=event_id, detail="the policy was deleted")
            if not policy.enabled:
                return FireResult(policy_id=policy_id, outcome="disabled", event_id=event_id, detail="the policy is disabled")
            record = self.policies.event_record(policy_id, event_id)
            if record is not None:
                return self._already_decided(policy, record, event)
            result = self._decide(policy, event, event_id)
            if result is not None:
                return result
        raise PolicyConflict(policy_id, "kept changing while an event was being dispatched")

    def _decide(self, policy: RetrainingPolicy, event: Mapping[str, Any], event_id: str) -> FireResult | None:
        """The decision for a fresh event; None when the policy changed under it (decide again)."""
        now = self.clock()
        last = policy.last_fired_at
        if last is not None and policy.min_interval_seconds and now - last < timedelta(seconds=policy.min_interval_seconds):
            detail = f"within min_interval_seconds={policy.min_interval_seconds} of the fire at {last:%Y-%m-%dT%H:%M:%SZ}"
            return self._record(policy, event_id, "coalesced", now, detail + f" (event {policy.last_event_id})")
        day = now.astimezone(UTC).date().isoformat()
        fired_today = policy.fired_today if policy.fired_day == day else 0
        if policy.daily_cap is not None and fired_today >= policy.daily_cap:
            return self._record(policy, event_id, "capped", now, f"daily_cap={policy.daily_cap} reached for {day} (UTC)")
        try:
            request = build_request(policy, event, event_id)
        except MappingFailed as exc:
            return self._record(policy, event_id, "invalid", now, str(exc))
        refused = self._refused_paths(policy, request)
        if refused is not None:
            return self._record(policy, event_id, "invalid", now, refused)
        running = [] if policy.concurrency_policy == ConcurrencyPolicy.QUEUE else self._running(policy)
        if policy.concurrency_policy == ConcurrencyPolicy.SKIP:
            pending = self._starting(policy, now)
            if running or pending:
                busy = [j.job_id for j in running] + ([f"the job of event {pending}"] if pending else [])
                return self._record(policy, event_id, "skipped_running", now, "still running: " + ", ".join(busy))
        claim = FireClaim(event_id, now, policy.version, last, day, fired_today + 1)
        claimed = self.policies.claim_fire(policy.policy_id, claim)
        if claimed == "changed":
            return None
        if claimed == "duplicate":
            record = self.policies.event_record(policy.policy_id, event_id)
            return self._duplicate(policy.policy_id, event_id, record)
        return self._start(policy, request, event_id, running)

    def _refused_paths(self, policy: RetrainingPolicy, request: SubmitJobRequest) -> str | None:
        """Why the fired job may not be created: a path its owner may no longer use (settings changed, or
        the event mapped a path in). Checked before the fire is claimed, with submit's own check."""
        try:
            self.jobs.check_paths(request, self.jobs.principal(policy.owner))
        except InvalidRequest as exc:
            return f"path refused: {exc}"
        return None

    def _start(self, policy: RetrainingPolicy, request: SubmitJobRequest, event_id: str, running: list[Job]) -> FireResult:
        cancelled = self._cancel(policy, running, event_id) if policy.concurrency_policy == ConcurrencyPolicy.CANCEL_RUNNING else []
        principal = self.jobs.principal(policy.owner)
        reason = f"started by retraining policy {policy.name} ({policy.policy_id}) for event {event_id}"
        job = self.jobs.submit(request, principal, owner=policy.owner, reason=reason)
        latest = self.policies.complete_fire(policy.policy_id, event_id, job.job_id)
        logger.info("retraining policy %s started %s for event %s", policy.policy_id, job.job_id, event_id)
        detail = ""
        if not latest and policy.concurrency_policy == ConcurrencyPolicy.CANCEL_RUNNING:
            # A newer fire claimed the policy while this job was being submitted; it could not see this
            # job to cancel it, so this job gives way itself: one run of the newest data remains.
            self._cancel(policy, [job], "a newer event", superseded=True)
            detail = "a newer event fired the policy meanwhile: this job was cancelled in its favour"
        return FireResult(
            policy_id=policy.policy_id, outcome="started", job_id=job.job_id, event_id=event_id, cancelled_job_ids=cancelled, detail=detail
        )

    def _already_decided(self, policy: RetrainingPolicy, record: EventRecord, event: Mapping[str, Any]) -> FireResult:
        now = self.clock()
        if (
            record.state == "claimed"
            and now - record.at > CLAIM_LEASE
            and self.policies.take_over(policy.policy_id, record.event_id, record.at, now)
        ):
            # The invocation that claimed this event died before submitting its job: the fire was
            # already counted (interval, cap), so only the job is still owed.
            logger.warning("policy %s: taking over the stale claim of event %s", policy.policy_id, record.event_id)
            try:
                request = build_request(policy, event, record.event_id)
            except MappingFailed as exc:
                return FireResult(policy_id=policy.policy_id, outcome="invalid", event_id=record.event_id, detail=str(exc))
            refused = self._refused_paths(policy, request)
            if refused is not None:
                return FireResult(policy_id=policy.policy_id, outcome="invalid", event_id=record.event_id, detail=refused)
            running = [] if policy.concurrency_policy == ConcurrencyPolicy.QUEUE else self._running(policy)
            return self._start(policy, request, record.event_id, running)
        return self._duplicate(policy.policy_id, record.event_id, record)

    @staticmethod
    def _duplicate(policy_id: str, event_id: str, record: EventRecord | None) -> FireResult:
        if record is None or record.state == "claimed":
            detail = "another delivery of this event is starting its job"
        else:
            detail = f"this event was already handled: {record.outcome}" + (f" ({record.detail})" if record.detail else "")
        return FireResult(
            policy_id=policy_id, outcome="duplicate", event_id=event_id, job_id=record.job_id if record else None, detail=detail
        )

    def _record(self, policy: RetrainingPolicy, event_id: str, outcome: FireOutcome, at: datetime, detail: str) -> FireResult | None:
        if not self.policies.record_decision(policy.policy_id, event_id, outcome, at, detail):
            return None  # decided meanwhile by another delivery: read that decision
        logger.info("retraining policy %s: event %s %s: %s", policy.policy_id, event_id, outcome, detail)
        return FireResult(policy_id=policy.policy_id, outcome=outcome, event_id=event_id, detail=detail)

    # --- the policy's jobs -----------------------------------------------------------------------

    def _running(self, policy: RetrainingPolicy) -> list[Job]:
        """The policy's non-terminal jobs: by label (Query on the owner's index, no Scan), plus its last
        job read consistently - the index lags, and the job this policy started a moment ago counts."""
        found: dict[str, Job] = {}
        if policy.last_job_id:
            try:
                last = self.jobs.repo.get(policy.last_job_id)
                if last.status not in TERMINAL:
                    found[last.job_id] = last
            except JobNotFound:
                pass
        token: str | None = None
        while True:
            query = JobQuery(owner=policy.owner, labels={POLICY_LABEL: policy.policy_id}, limit=_LIST_PAGE, next_token=token)
            jobs, token = self.jobs.repo.list_jobs(query)
            found.update({j.job_id: j for j in jobs if j.status not in TERMINAL and j.job_id not in found})
            if not token:
                return list(found.values())

    def _starting(self, policy: RetrainingPolicy, now: datetime) -> str | None:
        """The event whose job is being submitted right now (claimed, no job yet), if any: under `skip`
        it counts as running, or a second event in that window would start a second job."""
        if not policy.last_event_id:
            return None
        record = self.policies.event_record(policy.policy_id, policy.last_event_id)
        if record is not None and record.state == "claimed" and now - record.at <= CLAIM_LEASE:
            return record.event_id
        return None

    def _cancel(self, policy: RetrainingPolicy, running: list[Job], event_id: str, *, superseded: bool = False) -> list[str]:
        principal = self.jobs.principal(policy.owner)
        reason = f"replaced by a new run of retraining policy {policy.name} ({policy.policy_id}) for event {event_id}"
        if superseded:
            reason = f"superseded at once by a newer run of retraining policy {policy.name} ({policy.policy_id})"
        cancelled = []
        for job in running:
            for _attempt in range(_CANCEL_ATTEMPTS):
                try:
                    self.jobs.cancel(job.job_id, principal, reason)
                    cancelled.append(job.job_id)
                    break
                except (IllegalTransition, JobNotFound):
                    break  # it ended (or was deleted) on its own meanwhile
                except ConcurrentModification:
                    continue  # the engine moved it on; cancel reads it again
        return cancelled


# --- the job an event maps to --------------------------------------------------------------------


def event_id_of(event: Mapping[str, Any]) -> str:
    event_id = event.get("id")
    if not isinstance(event_id, str) or not event_id or len(event_id) > MAX_EVENT_ID_LENGTH:
        raise ValueError(f"an event needs an id of 1-{MAX_EVENT_ID_LENGTH} characters, got {event_id!r}")
    return event_id


def build_request(policy: RetrainingPolicy, event: Mapping[str, Any], event_id: str) -> SubmitJobRequest:
    """The policy's template with the event mapped in and the two labels set, validated again as a whole."""
    document = policy.job_template.model_dump(mode="json", context={"reveal_secrets": True})
    for i, mapping in enumerate(policy.input_mapping):
        value = _mapped_value(mapping, event, i)
        if mapping.target.startswith(_FREE_MAPS) and not isinstance(value, str):
            value = json.dumps(value)  # labels, hyperparameters and environment are string maps
        set_target(document, mapping.target, value)
    document["labels"] = {**document.get("labels", {}), POLICY_LABEL: policy.policy_id, EVENT_LABEL: event_id}
    try:
        # Event values arrive as text through templates: "5" mapped into a number stays a number.
        return SubmitJobRequest.model_validate(document, context={LAX_NUMBERS: True})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "job"
        message = str(first.get("msg", "invalid")).removeprefix("Value error, ")
        raise MappingFailed(f"the job this event maps to is invalid: {where}: {message}") from exc


def _mapped_value(mapping: InputMapping, event: Mapping[str, Any], index: int) -> Any:
    if mapping.template is None:
        return _lookup(event, mapping.source, index)

    def text(match: re.Match[str]) -> str:
        value = _lookup(event, match.group(1), index)
        return value if isinstance(value, str) else json.dumps(value)

    return re.sub(r"{([^{}]+)}", text, mapping.template)


def _lookup(event: Mapping[str, Any], path: str, index: int) -> Any:
    node: Any = event
    for part in _PATH_PART.findall(path):
        if part.startswith("["):
            position = int(part[1:-1])
            if not isinstance(node, list) or position >= len(node):
                raise MappingFailed(f"input_mapping[{index}]: the event has no {path}")
            node = node[position]
        elif isinstance(node, Mapping) and part in node:
            node = node[part]
        else:
            raise MappingFailed(f"input_mapping[{index}]: the event has no {path}")
    if node is None:
        raise MappingFailed(f"input_mapping[{index}]: {path} is null in the event")
    return node
