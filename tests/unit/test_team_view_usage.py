"""GET /teams/{team}'s usage per GPU type (issue 24.4): each type's decayed, price-weighted unit-hours, the
finished runs' (recorded at release) plus the running jobs' so far; the types together make the team's usage."""

from __future__ import annotations

from datetime import timedelta

import pytest

from functions.catalog.gpu_types import unit_hourly_usd
from functions.service.principal import Principal
from functions.service.scheduler import LocalCapacity
from functions.service.teams import TeamService
from schemas.job import Job
from tests.helpers.teams import team
from tests.unit.test_scheduler_reclaim import _training
from tests.unit.test_scheduler_teams import A, TeamWorld


def _job(w: TeamWorld, gpu_type: str, gpus: int) -> Job:
    job = w.waiting(resource_config={"gpu_count": gpus, "gpu_type": gpu_type})
    return w.repo.update(job.job_id, job.version, {"team": "a"})


def test_the_team_view_gives_each_types_usage_finished_and_running() -> None:
    # Given team a with H100s and A100s; a 2-H100 job and a 4-A100 job start together
    w = TeamWorld(0, team("a", A, H100=4, A100=8), default_team_quotas="H100=0,A100=0")
    capacity = LocalCapacity(gpu_slots=0, inventory={"H100": 4, "A100": 8})
    w.scheduler = type(w.scheduler)(w.repo, w.ledger, capacity, w.rec, w.rec, teams=w.directory)
    h100, a100 = _job(w, "H100", 2), _job(w, "A100", 4)
    w.scheduler.run_pass()
    h100, a100 = _training(w, h100), _training(w, a100)
    # When the H100 job ends after an hour (its usage is recorded) and the A100 job runs on for another
    w.clock.now += timedelta(hours=1)
    assert w.scheduler.release(w.repo.get(h100.job_id))
    w.clock.now += timedelta(hours=1)
    view = TeamService(w.directory, w.ledger, w.repo).get("a", Principal(A))
    # Then each type shows its own usage, decayed over the half-life, the running job's so far included
    decay = 2 ** (-3600 / w.directory.half_life_seconds)
    rows = {r.gpu_type: r for r in view.types}
    assert rows["H100"].usage == pytest.approx(2 * 1 * unit_hourly_usd("H100") * decay)
    assert rows["A100"].usage == pytest.approx(4 * 2 * unit_hourly_usd("A100"))
    assert (rows["H100"].in_use, rows["A100"].in_use) == (0, 4)
    # And the types together are the team's usage (what fair share weighs): recorded plus running
    assert view.usage + rows["A100"].usage == pytest.approx(rows["H100"].usage + rows["A100"].usage)
