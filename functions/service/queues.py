"""The read side of the scheduler for the API: GET /queues, and a job's place in its queue.

Read at request time by Query on the sparse queue index (no write per scheduler pass, no Scan).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from schemas.job import Job
from schemas.status import JobStatus
from schemas.teams import WaitReason

if TYPE_CHECKING:  # annotations only: the queues route is imported at the API's cold start
    from functions.service.ports import CapacityLedger, CapacityModel, JobRepository
    from functions.service.scheduler import Admission
    from functions.service.teams import TeamDirectory


class PoolUsage(BaseModel):
    model_config = ConfigDict(defer_build=True)  # built on first use, not in the API Lambda's cold start
    pool: str
    capacity: int | None = Field(description="Units the pool has (GPUs, or CPU slots); null when only AWS's own quotas limit it.")
    in_use: int


class QueuedWait(BaseModel):
    model_config = ConfigDict(defer_build=True)  # built on first use, not in the API Lambda's cold start
    job_id: str
    position: int | None
    estimated_wait_seconds: float | None
    wait_reason: WaitReason | None


class QueueInfo(BaseModel):
    model_config = ConfigDict(defer_build=True)  # built on first use, not in the API Lambda's cold start
    queue: str
    queued: int = Field(description="Jobs waiting in the queue (counted up to `counted_up_to`).")
    counted_up_to: int
    head: list[str] = Field(default_factory=list, description="The caller's own jobs among the first waiting ones, in order.")
    waits: list[QueuedWait] = Field(default_factory=list, description="Why each of `head` waits, its position and estimated wait.")
    oldest_queued_at: datetime | None = None
    pools: list[PoolUsage] = Field(default_factory=list)
    estimated_wait_seconds: float | None = Field(default=None, description="For a job submitted now at default priority.")


class QueueList(BaseModel):
    model_config = ConfigDict(defer_build=True)  # built on first use, not in the API Lambda's cold start
    queues: list[QueueInfo]


class QueueView:
    """Read side of the scheduler for the API: GET /queues and a job's place in its queue."""

    COUNT_LIMIT = 1000

    def __init__(
        self,
        repository: JobRepository,
        ledger: CapacityLedger,
        capacity: CapacityModel,
        *,
        default_runtime_seconds: float = 3600.0,
        teams: TeamDirectory | None = None,
        admission: Admission | None = None,
    ) -> None:
        self.repository = repository
        self.admission = admission
        self.ledger = ledger
        self.capacity = capacity
        self.default_runtime_seconds = default_runtime_seconds
        self.teams = teams

    def with_position(self, job: Job) -> Job:
        return self.with_positions([job])[0]

    def with_positions(self, jobs: list[Job]) -> list[Job]:
        """Each QUEUED job of `jobs` with its queue_position, estimated_wait_seconds and wait_reason (GET
        /jobs/{id} and every page of GET /jobs), the others as they are; one read per queue, not per job."""
        waits = {wait.job_id: wait for wait in self._waits(jobs)}
        return [_placed(job, waits[job.job_id]) if job.job_id in waits else job for job in jobs]

    def _waits(self, jobs: list[Job]) -> list[QueuedWait]:
        if not any(job.status == JobStatus.QUEUED for job in jobs):
            return []  # no scheduler built (and nothing read) for a page without a queued job
        from functions.service.scheduler import Scheduler  # on first use: not in the API Lambda's cold start

        scheduler = Scheduler(
            self.repository, self.ledger, self.capacity, _NoTokens(), _NoStops(), teams=self.teams, admission=self.admission
        )
        explained = scheduler.explain_all(jobs, default_runtime_seconds=self.default_runtime_seconds)
        return [
            QueuedWait(job_id=job_id, position=position, estimated_wait_seconds=eta, wait_reason=reason)
            for job_id, (position, eta, reason) in explained.items()
        ]

    def list(self, can_see: Callable[[Job], bool]) -> QueueList:
        pools = {pool: self.ledger.holders(pool) for pool in self.ledger.pools()}
        infos = []
        for queue in self.ledger.queues():
            waiting = self.repository.queued(queue, limit=self.COUNT_LIMIT)
            related = sorted({p for p in pools if p.startswith(("local/", f"{queue}/"))})
            usage = [PoolUsage(pool=p, capacity=_shown(self.capacity.capacity(p)), in_use=sum(pools[p].values())) for p in related]
            slots = sum(u.capacity or 0 for u in usage) or 1
            runtimes = [float(j.scheduling_config.max_runtime_seconds or self.default_runtime_seconds) for j in waiting]
            eta = math.ceil(len(waiting) / slots) * (sum(runtimes) / len(runtimes)) if waiting else 0.0
            head = [j for j in waiting[:50] if can_see(j)]
            infos.append(
                QueueInfo(
                    queue=queue,
                    queued=len(waiting),
                    counted_up_to=self.COUNT_LIMIT,
                    head=[j.job_id for j in head],
                    waits=self._waits(head[:10]),
                    oldest_queued_at=min((j.created_at for j in waiting), default=None),
                    pools=usage,
                    estimated_wait_seconds=eta,
                )
            )
        return QueueList(queues=infos)


def _placed(job: Job, wait: QueuedWait) -> Job:
    return job.model_copy(
        update={"queue_position": wait.position, "estimated_wait_seconds": wait.estimated_wait_seconds, "wait_reason": wait.wait_reason}
    )


def _shown(capacity: int) -> int | None:
    from functions.service.scheduler import UNLIMITED

    return None if capacity >= UNLIMITED else capacity


class _NoTokens:
    def send_success(self, token: str, output: Mapping[str, Any]) -> bool:
        raise RuntimeError("the queue view never answers tokens")


class _NoStops:
    def stop_run(self, job: Job, *, graceful: bool, reason: str) -> None:
        raise RuntimeError("the queue view never stops runs")
