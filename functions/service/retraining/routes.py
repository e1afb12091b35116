"""Which events reach the retraining dispatcher, and how an event finds its policies without reading them all.

ONE set of EventBridge rules feeds ONE dispatcher, whatever the number of policies (docs/RETRAINING.md
says why: a bus holds 300 rules by default and each rule 5 targets, policies come and go at run time):
the cloud stack declares them in infra/constructs/retraining.py, local mode puts the very same
patterns on the emulated bus from `dispatcher_rules()` (functions/catalog/events.py). A policy whose events could never pass these
rules is refused when it is created, naming the field, instead of waiting forever.

Matching in the dispatcher is by route items (functions/adapters/policies.py): each policy writes
one small item per place an event can come from - `s3#<bucket>` for an S3 trigger, `event#<source>`
for each source of an event pattern - so an event reads only the routes of its own bucket or source.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from functions import constants
from functions.catalog.events import ALARM_SOURCE, ALARM_STATE_CHANGE, OBJECT_CREATED, ROUTED_DETAIL_TYPES, S3_SOURCE
from functions.errors import InvalidRequest
from functions.service.feature_ports import Route
from schemas.event_pattern import matches
from schemas.retraining import CUSTOM_EVENT_SOURCE, EventPatternTrigger, RetrainingPolicyRequest, S3Trigger

MAX_PATTERN_SOURCES = 10  # each source is one route item, written in the policy's own transaction


def accepts(route: Route, event: Mapping[str, Any]) -> bool:
    """Whether an event found at `route` concerns its policy (its prefix/suffix, or its whole pattern)."""
    if route.key.startswith("s3#"):
        key = _object_key(event)
        suffix = route.match.get("suffix")
        return (
            event.get("detail-type") == OBJECT_CREATED
            and key is not None
            and key.startswith(str(route.match.get("prefix", "")))
            and (not suffix or key.endswith(str(suffix)))
        )
    pattern = route.match.get("pattern")
    return isinstance(pattern, dict) and matches(pattern, dict(event))


def s3_bucket(trigger: S3Trigger, artifacts_bucket: str) -> str:
    return trigger.bucket or artifacts_bucket


def routes_for(policy_id: str, owner: str, request: RetrainingPolicyRequest, artifacts_bucket: str) -> list[Route]:
    """The route items of a policy (none for a schedule: its schedule names the policy itself)."""
    trigger = request.trigger
    if isinstance(trigger, S3Trigger):
        match = {"prefix": trigger.prefix, "suffix": trigger.suffix or ""}
        return [Route(f"s3#{s3_bucket(trigger, artifacts_bucket)}", policy_id, owner, match)]
    if isinstance(trigger, EventPatternTrigger):
        sources = trigger.pattern.get("source", [])
        return [Route(f"event#{source}", policy_id, owner, {"pattern": trigger.pattern}) for source in dict.fromkeys(sources)]
    return []


def route_keys_of(event: Mapping[str, Any]) -> list[str]:
    """Where the policies an event may concern are found: its source, and its bucket for S3 objects."""
    source = event.get("source")
    keys = [f"event#{source}"] if isinstance(source, str) and source else []
    bucket = _bucket(event)
    if source == S3_SOURCE and event.get("detail-type") == OBJECT_CREATED and bucket:
        keys.append(f"s3#{bucket}")
    return keys


def check_routable(request: RetrainingPolicyRequest, artifacts_bucket: str) -> None:
    """InvalidRequest naming the field when the policy's events could never reach the dispatcher."""
    trigger = request.trigger
    if isinstance(trigger, S3Trigger):
        if s3_bucket(trigger, artifacts_bucket) == artifacts_bucket and not trigger.prefix.startswith(constants.DATASETS_PREFIX):
            raise InvalidRequest(
                "trigger.prefix",
                f"in the artifacts bucket {artifacts_bucket} only objects under {constants.DATASETS_PREFIX} start jobs (checkpoints and "
                f"logs are written there all day): use a prefix such as {constants.DATASETS_PREFIX}<dataset>/, or name another bucket",
            )
        return
    if not isinstance(trigger, EventPatternTrigger):
        return
    sources = trigger.pattern.get("source")
    routed = ", ".join(sorted(ROUTED_DETAIL_TYPES))
    if not isinstance(sources, list) or not sources or not all(isinstance(s, str) for s in sources):
        raise InvalidRequest("trigger.pattern.source", f"name the event source(s) as exact values, one or more of: {routed}")
    if len(set(sources)) > MAX_PATTERN_SOURCES:
        raise InvalidRequest("trigger.pattern.source", f"at most {MAX_PATTERN_SOURCES} sources")
    unrouted = sorted(s for s in sources if s not in ROUTED_DETAIL_TYPES)
    if unrouted:
        raise InvalidRequest(
            "trigger.pattern.source",
            f"events from {', '.join(unrouted)} never reach the dispatcher: its rules forward {routed} "
            f"(send your own events with source {CUSTOM_EVENT_SOURCE})",
        )
    detail_types = trigger.pattern.get("detail-type")
    if isinstance(detail_types, list) and all(isinstance(d, str) for d in detail_types):
        deliverable = set()
        for source in sources:
            allowed = ROUTED_DETAIL_TYPES[source]
            deliverable |= set(detail_types) if allowed is None else set(detail_types) & allowed
        if not deliverable:
            raise InvalidRequest(
                "trigger.pattern.detail-type",
                f"no event of these detail-types reaches the dispatcher from {', '.join(sources)} "
                f"({S3_SOURCE}: {OBJECT_CREATED}; {ALARM_SOURCE}: {ALARM_STATE_CHANGE} into ALARM; {CUSTOM_EVENT_SOURCE}: any)",
            )


def _detail(event: Mapping[str, Any]) -> Mapping[str, Any]:
    detail = event.get("detail")
    return detail if isinstance(detail, Mapping) else {}


def _bucket(event: Mapping[str, Any]) -> str | None:
    bucket = _detail(event).get("bucket")
    name = bucket.get("name") if isinstance(bucket, Mapping) else None
    return name if isinstance(name, str) else None


def _object_key(event: Mapping[str, Any]) -> str | None:
    obj = _detail(event).get("object")
    key = obj.get("key") if isinstance(obj, Mapping) else None
    return key if isinstance(key, str) else None
