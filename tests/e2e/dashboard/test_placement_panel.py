"""The job detail's "Placement" panel (docs/PLACEMENT.md): each placement tried with its pool and outcome, the
pools blocked and the recovery, on local mode's emulated EC2 with scripted capacity pools."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import pytest

from tests.e2e.dashboard.support import Dashboard
from tests.e2e.test_cloud_compute_e2e import FAKE_TRAINER, ended, fake_job, submit, wait_for
from tests.e2e.test_placement_e2e import CANDIDATES, POOLS, PoolsPlane

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def pools_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PoolsPlane]:
    root = tmp_path_factory.mktemp("placement-panel")
    pools = root / "pools.json"
    pools.write_text(json.dumps(POOLS))
    plane = PoolsPlane(root / "state", pools, FAKE_TRAINER).start()  # the panel's subject is the record, not the training
    yield plane
    plane.stop()


def test_the_detail_shows_every_placement_and_the_pools_blocked(pools_plane: PoolsPlane, open_dashboard: Callable[..., Dashboard]) -> None:
    # Given a job whose first attempt's EC2 Fleet found H100 spot out and landed on A100 spot (interrupted),
    # then A100 on-demand
    body = fake_job("placed-ui", pools_plane.bucket, max_steps="10", resources={"gpu_count": 8, "placement": {"candidates": CANDIDATES}})
    job_id = submit(pools_plane, body)
    wait_for(lambda: ended(pools_plane, job_id, "COMPLETED"), 240, "the placed job to complete", pools_plane)
    # When its detail is opened
    dash = open_dashboard(pools_plane)
    dash.go(f"#/jobs/{job_id}")
    page = dash.page
    page.wait_for_selector('[data-testid="placement-tries"]')
    # Then the panel lists every placement with its pool and outcome, and the pools blocked (H100 spot by the
    # fleet's error, A100 spot by its interruption)
    rows = page.locator('[data-testid="placement-tries"] tbody tr').all_inner_texts()
    assert len(rows) == 2
    assert "ec2/p4d.24xlarge/any/spot" in rows[0] and "preempted" in rows[0]
    assert "ec2/p4d.24xlarge/any/on_demand" in rows[1] and "completed" in rows[1]
    summary = page.locator('[data-testid="placement"]').inner_text()
    assert "ec2/p5.48xlarge/any/spot" in summary and "Recoveries" in summary
    # And a job without candidates has no such panel
    plain = submit(pools_plane, fake_job("plain-ui", pools_plane.bucket, max_steps="2", resources={"gpu_count": 1, "gpu_type": "T4"}))
    wait_for(lambda: ended(pools_plane, plain, "COMPLETED"), 120, "the plain job", pools_plane)
    dash.go(f"#/jobs/{plain}")
    page.wait_for_selector("#h-overview")
    assert page.locator('section[aria-labelledby="h-placement"]').is_hidden()
