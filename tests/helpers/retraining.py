"""Retraining test helpers: an in-memory PolicyRepository held to DynamoPolicyRepository's contract
(tests/integration/test_policies_repository.py runs the same tests on both), a recording
ScheduleManager, and policy request builders."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import datetime
from typing import Any, Literal

from functions.adapters.policies import CONFIG_FIELDS
from functions.errors import InvalidRequest, PolicyConflict, PolicyNotFound
from functions.service.feature_ports import EventRecord, FireClaim, Route
from schemas.retraining import FireOutcome, RetrainingPolicy
from tests.helpers.jobs import request_body

DATASETS = "datasets/fresh/"


def policy_body(**overrides: Any) -> dict[str, Any]:
    """A RetrainingPolicyRequest as JSON: new .jsonl objects under datasets/fresh/ of the artifacts bucket."""
    body: dict[str, Any] = {
        "name": "nightly-refresh",
        "trigger": {"type": "s3", "prefix": DATASETS, "suffix": ".jsonl"},
        "job_template": request_body(name="refresh"),
        "input_mapping": [
            {"template": "s3://{detail.bucket.name}/{detail.object.key}", "target": "data_config.sources[0].path"},
            {"source": "detail.object.size", "target": "labels.rows"},
        ],
    }
    body.update(overrides)
    return body


def s3_event(
    key: str = DATASETS + "part-1.jsonl", *, event_id: str = "evt-1", bucket: str = "trainplane-artifacts", size: int = 120
) -> dict:
    """An EventBridge 'Object Created' event as S3 sends it."""
    return {
        "version": "0",
        "id": event_id,
        "detail-type": "Object Created",
        "source": "aws.s3",
        "account": "123456789012",
        "time": "2026-01-01T00:00:00Z",
        "region": "us-east-1",
        "resources": [f"arn:aws:s3:::{bucket}"],
        "detail": {"version": "0", "bucket": {"name": bucket}, "object": {"key": key, "size": size, "etag": "abc"}, "reason": "PutObject"},
    }


def custom_event(detail: dict | None = None, *, event_id: str = "evt-c1", detail_type: str = "Drift detected") -> dict:
    return {
        "version": "0",
        "id": event_id,
        "detail-type": detail_type,
        "source": "trainplane.retraining",
        "account": "123456789012",
        "time": "2026-01-01T00:00:00Z",
        "region": "us-east-1",
        "resources": [],
        "detail": detail if detail is not None else {"model": "support-bot", "score": 0.42},
    }


class InMemoryPolicyRepository:
    """PolicyRepository in dicts, one lock: each method is atomic like one DynamoDB call or transaction."""

    def __init__(self) -> None:
        self.policies: dict[str, RetrainingPolicy] = {}
        self.route_items: dict[tuple[str, str], Route] = {}
        self.events: dict[tuple[str, str], EventRecord] = {}
        self._lock = threading.RLock()

    def create(self, policy: RetrainingPolicy, routes: list[Route]) -> None:
        with self._lock:
            if policy.policy_id in self.policies:
                raise PolicyConflict(policy.policy_id, "a policy with this id already exists")
            self.policies[policy.policy_id] = policy.model_copy(deep=True)
            for r in routes:
                self.route_items[(r.key, r.policy_id)] = r

    def get(self, policy_id: str) -> RetrainingPolicy:
        with self._lock:
            if policy_id not in self.policies:
                raise PolicyNotFound(policy_id)
            return self.policies[policy_id].model_copy(deep=True)

    def list_policies(self, owner: str | None, limit: int, next_token: str | None) -> tuple[list[RetrainingPolicy], str | None]:
        if not 1 <= limit <= 1000:
            raise InvalidRequest("limit", "must be between 1 and 1000")
        with self._lock:
            mine = [p for p in self.policies.values() if owner is None or p.owner == owner]
        mine.sort(key=lambda p: (p.created_at, p.policy_id), reverse=True)
        scope = owner or "*"
        start = 0
        if next_token:
            token_scope, _, offset = next_token.rpartition("|")
            if token_scope != scope or not offset.isdigit():
                raise InvalidRequest("next_token", "belongs to another listing (another caller or scope)")
            start = int(offset)
        page = mine[start : start + limit]
        more = start + limit < len(mine)
        return [p.model_copy(deep=True) for p in page], f"{scope}|{start + limit}" if more else None

    def all_policies(self) -> Iterator[RetrainingPolicy]:
        with self._lock:
            return iter([p.model_copy(deep=True) for p in self.policies.values()])

    def update(self, policy: RetrainingPolicy, expected_version: int, old_routes: list[Route], new_routes: list[Route]) -> RetrainingPolicy:
        with self._lock:
            current = self.get(policy.policy_id)
            if current.version != expected_version:
                raise PolicyConflict(policy.policy_id, "changed while being edited")
            changes = {name: getattr(policy, name) for name in (*CONFIG_FIELDS, "version", "updated_at")}
            self.policies[policy.policy_id] = current.model_copy(update=changes, deep=True)
            for r in old_routes:
                self.route_items.pop((r.key, r.policy_id), None)
            for r in new_routes:
                self.route_items[(r.key, r.policy_id)] = r
            return self.get(policy.policy_id)

    def delete(self, policy_id: str, expected_version: int, routes: list[Route]) -> None:
        with self._lock:
            current = self.get(policy_id)
            if current.version != expected_version:
                raise PolicyConflict(policy_id, "changed while being deleted")
            del self.policies[policy_id]
            for r in routes:
                self.route_items.pop((r.key, r.policy_id), None)
            for key in [k for k in self.events if k[0] == policy_id]:
                del self.events[key]

    def routes(self, key: str) -> list[Route]:
        with self._lock:
            return [r for (k, _), r in sorted(self.route_items.items()) if k == key]

    def event_record(self, policy_id: str, event_id: str) -> EventRecord | None:
        with self._lock:
            return self.events.get((policy_id, event_id))

    def claim_fire(self, policy_id: str, claim: FireClaim) -> Literal["claimed", "duplicate", "changed"]:
        with self._lock:
            if (policy_id, claim.event_id) in self.events:
                return "duplicate"
            current = self.policies.get(policy_id)
            if (
                current is None
                or not current.enabled
                or current.version != claim.seen_version
                or current.last_fired_at != claim.seen_last_fired_at
            ):
                return "changed"
            self.events[(policy_id, claim.event_id)] = EventRecord(policy_id, claim.event_id, "claimed", "started", claim.at)
            self.policies[policy_id] = current.model_copy(
                update={
                    "last_fired_at": claim.at,
                    "last_event_id": claim.event_id,
                    "fired_day": claim.fired_day,
                    "fired_today": claim.fired_today,
                }
            )
            return "claimed"

    def complete_fire(self, policy_id: str, event_id: str, job_id: str) -> bool:
        with self._lock:
            record = self.events[(policy_id, event_id)]
            self.events[(policy_id, event_id)] = EventRecord(policy_id, event_id, "done", record.outcome, record.at, job_id, record.detail)
            current = self.policies.get(policy_id)
            if current is None or current.last_event_id != event_id:
                return False
            self.policies[policy_id] = current.model_copy(update={"last_job_id": job_id})
            return True

    def take_over(self, policy_id: str, event_id: str, seen_at: datetime, now: datetime) -> bool:
        with self._lock:
            record = self.events.get((policy_id, event_id))
            if record is None or record.state != "claimed" or record.at != seen_at:
                return False
            self.events[(policy_id, event_id)] = EventRecord(policy_id, event_id, "claimed", record.outcome, now)
            return True

    def record_decision(self, policy_id: str, event_id: str, outcome: FireOutcome, at: datetime, detail: str = "") -> bool:
        with self._lock:
            if (policy_id, event_id) in self.events:
                return False
            self.events[(policy_id, event_id)] = EventRecord(policy_id, event_id, "done", outcome, at, None, detail)
            return True


class RecordingSchedules:
    """A ScheduleManager that keeps schedules in a dict; `fail` makes every call raise (Scheduler down)."""

    def __init__(self) -> None:
        self.schedules: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, str]] = []
        self.fail = False

    def put(self, policy: RetrainingPolicy) -> None:
        self.calls.append(("put", policy.policy_id))
        if self.fail:
            raise RuntimeError("scheduler unavailable (test)")
        trigger = policy.trigger
        self.schedules[policy.policy_id] = {"expression": getattr(trigger, "expression", None), "enabled": policy.enabled}

    def delete(self, policy_id: str) -> None:
        self.calls.append(("delete", policy_id))
        if self.fail:
            raise RuntimeError("scheduler unavailable (test)")
        self.schedules.pop(policy_id, None)

    def policy_ids(self) -> list[str]:
        return sorted(self.schedules)
