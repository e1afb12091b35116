"""In-memory fakes of the ports (functions/service/ports.py) for unit tests, shared by the whole team.

They keep the contracts of the real adapters, not just their shapes: conditional transitions on
(status, version) checked against TRANSITIONS, history appended with each change, counters, the
queue order (priority desc, submitted asc), filters ANDed, opaque paging tokens, and a lock so that
racing threads see exactly one winner. tests/integration/test_dynamodb_repository.py runs the same
contract tests against InMemoryJobRepository and against DynamoJobRepository on moto.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from functions import constants
from functions.catalog.gpu_types import gpu_type_of
from functions.errors import ConcurrentModification, IllegalTransition, InvalidRequest, JobNotFound, NameTaken
from functions.service.ports import GpuIdle, JobQuery, NameClaim, Reclaim, Transition
from schemas.checkpoint import CHECKPOINT_PREFIX, MANIFEST_NAME, CheckpointManifest
from schemas.job import CheckpointRef, Job, Progress, StatusEvent
from schemas.status import TRANSITIONS, JobStatus, sources_of
from schemas.teams import DEFAULT_TEAM

_PROTECTED = frozenset({"job_id", "owner", "status", "version", "created_at", "updated_at"})


def _now() -> datetime:
    return datetime.now(UTC)


def _apply(job: Job, changes: Mapping[str, Any]) -> Job:
    unknown = set(changes) - set(Job.model_fields)
    if unknown:
        raise ValueError(f"not fields of a Job: {sorted(unknown)}")
    document = job.model_dump()
    document.update(changes)
    return Job.model_validate(document)


def _check(changes: Mapping[str, Any]) -> None:
    protected = set(changes) & _PROTECTED
    if protected:
        raise ValueError(f"cannot be changed this way: {sorted(protected)}")
    unknown = set(changes) - set(Job.model_fields)
    if unknown:
        raise ValueError(f"not fields of a Job: {sorted(unknown)}")


class InMemoryJobRepository:
    """JobRepository in a dict, guarded by one lock (every method is atomic, like one DynamoDB call)."""

    def __init__(self, clock: Callable[[], datetime] = _now) -> None:
        self.jobs: dict[str, Job] = {}
        self.events: dict[str, list[StatusEvent]] = {}
        self.reclaims: list[tuple[str, Reclaim]] = []  # each update that carried a Trainplane Job Reclaimed event
        self.gpu_idle: list[tuple[str, GpuIdle]] = []  # each Trainplane Job GPUs Idle event written
        self._gpu_idle_marks: dict[str, str] = {}
        self._counts: dict[str, dict[JobStatus, int]] = {}
        self.claims: dict[str, str] = {}  # NameClaim key -> the job holding it
        self._clock = clock
        self._lock = threading.RLock()
        self.writes = 0  # conditional writes that succeeded (for tests that count them)

    # reads
    def get(self, job_id: str) -> Job:
        with self._lock:
            if job_id not in self.jobs:
                raise JobNotFound(job_id)
            return self.jobs[job_id].model_copy(deep=True)

    def history(self, job_id: str) -> list[StatusEvent]:
        with self._lock:
            return sorted(self.events.get(job_id, []), key=lambda e: e.at)

    def queued(self, queue: str, limit: int = 100) -> list[Job]:
        with self._lock:
            waiting = [j for j in self.jobs.values() if j.status == JobStatus.QUEUED and j.queue == queue]
        waiting.sort(key=lambda j: (-j.priority, j.created_at, j.job_id))
        return [j.model_copy(deep=True) for j in waiting[:limit]]

    def get_many(self, job_ids: Iterable[str]) -> dict[str, Job]:
        with self._lock:
            return {i: self.jobs[i].model_copy(deep=True) for i in dict.fromkeys(job_ids) if i in self.jobs}

    def queued_of_team(self, team: str, gpu_type: str, limit: int = 100) -> list[Job]:
        with self._lock:
            waiting = [
                j
                for j in self.jobs.values()
                if j.status == JobStatus.QUEUED and (j.team or DEFAULT_TEAM) == team and gpu_type_of(j.resource_config) == gpu_type
            ]
        waiting.sort(key=lambda j: (-j.priority, j.created_at, j.job_id))
        return [j.model_copy(deep=True) for j in waiting[:limit]]

    def counts(self, owner: str | None) -> dict[JobStatus, int]:
        with self._lock:
            return dict(self._counts.get(owner if owner is not None else "*", dict.fromkeys(JobStatus, 0)))

    def list_jobs(self, query: JobQuery) -> tuple[list[Job], str | None]:
        if not 1 <= query.limit <= 1000:
            raise InvalidRequest("limit", "must be between 1 and 1000")
        with self._lock:
            jobs = [j for j in self.jobs.values() if query.owner is None or j.owner == query.owner]
        jobs.sort(key=lambda j: (j.created_at, j.job_id), reverse=True)
        scope = query.owner or "*"
        if query.next_token:
            try:
                token = json.loads(base64.urlsafe_b64decode(query.next_token.encode()))
                after = (datetime.fromisoformat(token["at"]), token["id"])
            except (ValueError, KeyError, TypeError) as exc:
                raise InvalidRequest("next_token", "is not a token this API returned") from exc
            if token.get("scope") != scope:
                raise InvalidRequest("next_token", "belongs to another listing (another caller or scope)")
            jobs = [j for j in jobs if (j.created_at, j.job_id) < after]

        def matches(j: Job) -> bool:
            return (
                (query.status is None or j.status == query.status)
                and (not query.queue or j.queue == query.queue)
                and all(j.labels.get(k) == v for k, v in query.labels.items())
                and (not query.name_contains or query.name_contains in j.name)
                and (query.priority_min is None or j.priority >= query.priority_min)
                and (query.priority_max is None or j.priority <= query.priority_max)
            )

        selected = [j for j in jobs if matches(j)]
        page = selected[: query.limit]
        token_out = None
        if len(selected) > query.limit:
            last = page[-1]
            raw = json.dumps({"at": last.created_at.isoformat(), "id": last.job_id, "scope": scope}).encode()
            token_out = base64.urlsafe_b64encode(raw).decode()
        return [j.model_copy(deep=True) for j in page], token_out

    # writes
    def name_holder(self, key: str) -> str | None:
        with self._lock:
            return self.claims.get(key)

    def create(self, job: Job, first_event: StatusEvent, claim: NameClaim | None = None) -> None:
        with self._lock:
            if job.job_id in self.jobs:
                raise ConcurrentModification(job.job_id, "a job with this id already exists")
            if claim is not None:
                if self.claims.get(claim.key) != claim.previous_job_id:
                    raise NameTaken(claim.key, self.claims.get(claim.key))
                self.claims[claim.key] = job.job_id
            self.jobs[job.job_id] = job.model_copy(deep=True)
            self.events[job.job_id] = [first_event]
            self._count(job.owner, add=job.status)
            self.writes += 1

    def transition(self, t: Transition) -> Job:
        if t.to_status not in TRANSITIONS[t.from_status]:
            raise IllegalTransition(t.job_id, t.from_status, f"move to {t.to_status}", sources_of(t.to_status))
        _check(t.changes)
        with self._lock:
            current = self.get(t.job_id)
            if current.status != t.from_status or current.version != t.expected_version:
                if t.to_status not in TRANSITIONS[current.status]:
                    raise IllegalTransition(t.job_id, current.status, f"move to {t.to_status}", sources_of(t.to_status))
                raise ConcurrentModification(t.job_id, f"expected version {t.expected_version}, found {current.version}")
            now = self._clock()
            new = _apply(current, {**t.changes, "status": t.to_status, "version": current.version + 1, "updated_at": now})
            self.jobs[t.job_id] = new
            event = StatusEvent(at=now, from_status=t.from_status, to_status=t.to_status, reason=t.reason, actor=t.actor)
            self.events[t.job_id].append(event)
            self._count(current.owner, add=t.to_status, remove=t.from_status)
            self.writes += 1
            return new.model_copy(deep=True)

    def update(
        self,
        job_id: str,
        expected_version: int,
        changes: Mapping[str, Any],
        allowed: frozenset[JobStatus] | None = None,
        *,
        event: StatusEvent | None = None,
        action: str = "update",
        reclaim: Reclaim | None = None,
    ) -> Job:
        _check(changes)
        with self._lock:
            current = self.get(job_id)
            if allowed is not None and current.status not in allowed:
                raise IllegalTransition(job_id, current.status, action, allowed)
            if current.version != expected_version:
                raise ConcurrentModification(job_id, f"expected version {expected_version}, found {current.version}")
            new = _apply(current, {**changes, "version": current.version + 1, "updated_at": self._clock()})
            self.jobs[job_id] = new
            if event is not None:
                self.events[job_id].append(event)
            if reclaim is not None:
                self.reclaims.append((job_id, reclaim))
            self.writes += 1
            return new.model_copy(deep=True)

    def annotate(self, job_id: str, changes: Mapping[str, Any]) -> None:
        _check(changes)
        with self._lock:
            self.jobs[job_id] = _apply(self.get(job_id), changes)

    def append_event(self, job_id: str, event: StatusEvent) -> None:
        with self._lock:
            self.events.setdefault(job_id, []).append(event)

    def record_progress(self, job_id: str, progress: Progress) -> bool:
        with self._lock:
            current = self.get(job_id)
            if not progress.supersedes(current.progress):
                return False
            self.jobs[job_id] = _apply(current, {"progress": progress})
            return True

    def report_gpus_idle(self, job_id: str, idle: GpuIdle) -> bool:
        with self._lock:
            self.get(job_id)
            if self._gpu_idle_marks.get(job_id) == idle.mark:
                return False
            self._gpu_idle_marks[job_id] = idle.mark
            self.gpu_idle.append((job_id, idle))
            return True

    def add_checkpoint(
        self, job_id: str, ref: CheckpointRef, *, best_checkpoint_id: str | None = None, keep: list[str] | None = None
    ) -> Job:
        with self._lock:
            current = self.get(job_id)
            refs = [r for r in current.checkpoints if r.checkpoint_id != ref.checkpoint_id and (keep is None or r.checkpoint_id in keep)]
            refs.append(ref)
            refs.sort(key=lambda r: r.step)  # in step order, whatever order the reports came in
            best = best_checkpoint_id or current.best_checkpoint_id
            if best is not None and best not in {r.checkpoint_id for r in refs}:
                best = None
            latest = max(refs, key=lambda r: r.step).checkpoint_id
            new = _apply(current, {"checkpoints": refs, "latest_checkpoint_id": latest, "best_checkpoint_id": best})
            self.jobs[job_id] = new
            return new.model_copy(deep=True)

    def delete(self, job_id: str, expected_version: int | None = None) -> None:
        with self._lock:
            current = self.get(job_id)
            if expected_version is not None and current.version != expected_version:
                raise ConcurrentModification(job_id, f"expected version {expected_version}, found {current.version}")
            del self.jobs[job_id]
            self.events.pop(job_id, None)
            self._count(current.owner, remove=current.status)

    def _count(self, owner: str, *, add: JobStatus | None = None, remove: JobStatus | None = None) -> None:
        for scope in (owner, "*"):
            counts = self._counts.setdefault(scope, dict.fromkeys(JobStatus, 0))
            if add is not None:
                counts[add] += 1
            if remove is not None:
                counts[remove] -= 1


class InMemoryArtifactStore:
    """ArtifactStore over a dict of key -> bytes, laid out like the artifacts bucket."""

    def __init__(self, bucket: str = constants.ARTIFACTS_BUCKET) -> None:
        self.bucket = bucket
        self.objects: dict[str, bytes] = {}

    def put_bytes(self, key: str, data: bytes) -> None:
        self.objects[key] = data

    def put_text(self, key: str, text: str) -> None:
        self.objects[key] = text.encode()

    def delete_prefix(self, prefix: str) -> int:
        doomed = [k for k in self.objects if k.startswith(prefix)]
        for key in doomed:
            del self.objects[key]
        return len(doomed)

    def list_manifests(self, job_id: str) -> list[CheckpointManifest]:
        prefix = constants.checkpoints_prefix(job_id)
        found = [
            CheckpointManifest.model_validate_json(data)
            for key, data in self.objects.items()
            if key.startswith(prefix) and key.endswith("/" + MANIFEST_NAME)
        ]
        return sorted(found, key=lambda m: m.step)

    def checkpoint_uri(self, job_id: str, checkpoint_id: str) -> str:
        return f"s3://{self.bucket}/{constants.JOBS_PREFIX}/{job_id}/{CHECKPOINT_PREFIX}/{checkpoint_id}"

    def put_json(self, key: str, document: Mapping[str, Any]) -> str:
        self.objects[key] = json.dumps(document).encode()
        return f"s3://{self.bucket}/{key}"

    def read_lines(self, key: str) -> Iterator[str]:
        data = self.objects.get(key)
        if data is None:
            return iter(())
        return iter(data.decode().splitlines())

    def list_keys(self, prefix: str) -> list[str]:
        return sorted(k for k in self.objects if k.startswith(prefix))

    def first_keys(self, prefix: str, limit: int) -> list[str]:
        return self.list_keys(prefix)[:limit]


@dataclass
class WorkflowCall:
    method: str  # "start" | "stop_run" | "answer_wait"
    job_id: str
    status: JobStatus
    kwargs: dict[str, Any] = field(default_factory=dict)


class RecordingWorkflow:
    """A Workflow that records each call; `fail_on` makes a method raise, to test failure paths."""

    def __init__(self, fail_on: set[str] | None = None) -> None:
        self.calls: list[WorkflowCall] = []
        self.fail_on = set(fail_on or ())
        self._lock = threading.Lock()

    def _record(self, method: str, job: Job, **kwargs: Any) -> None:
        with self._lock:
            self.calls.append(WorkflowCall(method, job.job_id, job.status, kwargs))
        if method in self.fail_on:
            raise RuntimeError(f"workflow.{method} failed (test)")

    def start(self, job: Job) -> str:
        self._record("start", job)
        region, account = constants.LOCAL_REGION, constants.LOCAL_ACCOUNT_ID
        return f"arn:aws:states:{region}:{account}:execution:{constants.STATE_MACHINE_NAME}:{job.job_id}-1"

    def stop_run(self, job: Job, *, graceful: bool, reason: str) -> None:
        self._record("stop_run", job, graceful=graceful, reason=reason)

    def answer_wait(self, job: Job, decision: str, detail: Mapping[str, Any] | None = None) -> None:
        self._record("answer_wait", job, decision=decision, detail=dict(detail or {}))

    def methods(self) -> list[str]:
        return [call.method for call in self.calls]
