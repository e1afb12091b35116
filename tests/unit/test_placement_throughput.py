"""Work between placement candidates of different speed (issue 26; functions/catalog/instances.py GPU_THROUGHPUT):
the deadline is checked and kept on the on-demand fallback's speed, not candidate 0's."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from functions.catalog import placement as rules
from functions.catalog.instances import GPU_ALIASES, GPU_THROUGHPUT, INSTANCE_TYPES
from functions.errors import InvalidRequest
from functions.service.placement import PlacementService, placement_fields, remaining_on_fallback
from schemas.job import Job, Progress
from schemas.placement import PlacementCandidate
from tests.lifecycle_support import make_job, make_request
from tests.placement_support import InMemoryPoolHealth

T0 = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
H100 = {"gpu_type": "H100", "gpus_per_node": 8, "purchase": "spot"}
A100_OD = {"gpu_type": "A100", "gpus_per_node": 8, "purchase": "on_demand"}


def test_every_gpu_of_the_instance_table_has_a_throughput_and_a100_is_the_unit() -> None:
    assert set(GPU_ALIASES.values()) <= set(GPU_THROUGHPUT)
    assert all(spec.gpu_throughput > 0 for spec in INSTANCE_TYPES if spec.gpus)
    assert GPU_THROUGHPUT["A100"] == 1.0 and GPU_THROUGHPUT["H100"] > 1.0 > GPU_THROUGHPUT["L40S"]


def test_a_candidates_throughput_is_its_gpus_times_its_world_size() -> None:
    h100 = PlacementCandidate.model_validate(H100)
    a100 = PlacementCandidate.model_validate(A100_OD)
    four_l40s = PlacementCandidate.model_validate({"gpu_type": "L40S", "gpus_per_node": 4, "nodes": 2})
    assert rules.throughput(h100) == 8 * GPU_THROUGHPUT["H100"]
    assert rules.throughput(four_l40s) == 8 * GPU_THROUGHPUT["L40S"]
    # An hour of H100 x8 work is 2.5 hours on A100 x8, and back
    assert rules.work_on(3600, h100, a100) == pytest.approx(3600 * GPU_THROUGHPUT["H100"])
    assert rules.work_on(3600 * GPU_THROUGHPUT["H100"], a100, h100) == pytest.approx(3600)


def _request(work: int, hours: float) -> Any:
    placement = {"candidates": [H100, A100_OD], "deadline": (T0 + timedelta(hours=hours)).isoformat(), "expected_work_seconds": work}
    return make_request(resource_config={"gpu_count": 8, "placement": placement})


def test_submit_refuses_a_deadline_the_slower_on_demand_fallback_cannot_meet() -> None:
    # Given 2 h of H100 work: 5 h on the A100 on-demand fallback
    rc = _request(7200, 5.0).resource_config
    candidates = rules.resolve(rc)
    # Then a 5 h deadline (5 h of work plus a restart does not fit) is a 422 naming the deadline and the fallback
    with pytest.raises(InvalidRequest) as caught:
        rules.check_deadline(candidates, (T0 + timedelta(hours=5)).timestamp(), 7200, T0.timestamp())
    assert caught.value.field == "resource_config.placement.deadline"
    assert "candidate 1" in caught.value.message and "18000 s at its speed" in caught.value.message
    # And 5.5 h is enough
    rules.check_deadline(candidates, (T0 + timedelta(hours=5.5)).timestamp(), 7200, T0.timestamp())


def _running_on_h100(hours_to_deadline: float, eta_seconds: float) -> tuple[PlacementService, Job]:
    request = _request(3600, hours_to_deadline)
    service = PlacementService(InMemoryPoolHealth(), lambda: T0)
    job = make_job(request, created_at=T0).model_copy(update={"attempt": 1})
    job = job.model_copy(update=placement_fields(service.choose(job, 1)))
    job = job.model_copy(update={"progress": Progress(step=10, total_steps=20, eta_seconds=eta_seconds)})
    return service, job


def test_the_deadline_policy_counts_the_work_left_at_the_fallbacks_speed() -> None:
    # Given an H100 spot run whose trainer measures 1 h left (2.5 h on the A100 fallback) and 2 h 45 to the deadline
    service, job = _running_on_h100(2.75, 3600)
    assert remaining_on_fallback(job) == pytest.approx(3600 * GPU_THROUGHPUT["H100"])
    # Then it leaves spot: 15 min of slack is under a restart (10 min) plus the work between checkpoints (12 min);
    # counted at candidate 0's speed, 1 h 45 of slack would have kept it on spot

    assert service.should_leave_spot(job)
    # And with 4 h to the deadline (1.5 h of slack) it stays
    service, job = _running_on_h100(4.0, 3600)
    assert not service.should_leave_spot(job)
