"""A pass sees every team's head (issue 24): fair share is decided over each team's first jobs, read from the
per-team index, not over the oldest 100 jobs of a queue (which may all be one team's)."""

from __future__ import annotations

from typing import Any

from functions.service.teams import TeamDirectory
from schemas.job import Job
from schemas.teams import WaitReason
from tests.helpers.teams import team
from tests.unit.test_scheduler_teams import A, B, TeamWorld


class CountingReads:
    """Wraps the store: counts the jobs a pass's queue reads hand out."""

    def __init__(self, repo: Any) -> None:
        self.repo = repo
        self.read = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.repo, name)

    def queued(self, queue: str, limit: int = 100) -> list[Job]:
        jobs: list[Job] = self.repo.queued(queue, limit)
        self.read += len(jobs)
        return jobs

    def queued_of_team(self, team: str, gpu_type: str, limit: int = 100) -> list[Job]:
        jobs: list[Job] = self.repo.queued_of_team(team, gpu_type, limit)
        self.read += len(jobs)
        return jobs


def test_a_teams_first_job_behind_150_of_another_teams_starts_in_one_pass() -> None:
    # Given team a at its nominal H100 (it may not borrow) with 150 more jobs queued, and a machine with room
    w = TeamWorld(4, team("a", A, H100=1), team("b", B, H100=2), default_team_quotas="H100=0")
    running = w.gpu_job(A)
    w.scheduler.run_pass()
    assert w.started() == [running.job_id]
    backlog = [w.gpu_job(A) for _ in range(150)]
    # And team b's first job submitted after all of them
    late = w.gpu_job(B)
    reads = CountingReads(w.repo)
    w.scheduler.repository = reads
    # When one pass runs
    w.scheduler.run_pass()
    # Then b's job starts (a's wait on QUOTA), and the pass read a few jobs of each team, not the whole queue
    assert w.started()[1:] == [late.job_id]
    assert reads.read < 20
    assert w.explain(backlog[0]) == WaitReason.QUOTA


def test_jobs_of_a_team_since_deleted_are_still_served_from_the_queues_head() -> None:
    # Given a queued job whose team was deleted after submit (the per-team reads only cover teams that exist)
    w = TeamWorld(2, team("a", A, H100=1), team("gone", B, H100=1), default_team_quotas="H100=1")
    orphan = w.gpu_job(B)
    w.teams.delete("gone")
    w.scheduler.teams = w.directory = TeamDirectory(w.teams, w.directory.settings, w.clock)
    # When its queue view is asked for and a pass runs
    assert w.explain(orphan) is not None  # it waits as the default team's job (no KeyError on the team)
    w.scheduler.run_pass()
    # Then the by-queue head finds it, and it runs as the default team's
    assert w.started() == [orphan.job_id]
