"""`client.placement(job_id)` (Client and AsyncClient) and `trainplane placement JOB_ID` against the stand-in API."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from botocore.credentials import Credentials

from schemas.placement import PlacementRecord
from tests.unit import test_client_standin
from tests.unit.test_cli import cli as cli  # the fixture
from tests.unit.test_client_standin import ACCESS_KEY, SECRET_KEY, StandInApi
from tests.unit.test_waits import run_async
from trainplane import AsyncClient, Client

standin = test_client_standin.standin  # the fixture
T0 = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
RECORD = PlacementRecord.model_validate(
    {
        "tries": [
            {"attempt": 1, "candidate": 0, "pool": "ec2/p5.48xlarge/any/spot", "instance_type": "p5.48xlarge", "purchase": "spot",
             "started_at": T0.isoformat(), "ended_at": T0.isoformat(), "outcome": "capacity", "reason": "InsufficientInstanceCapacity"},
            {"attempt": 2, "candidate": 1, "pool": "ec2/p4d.24xlarge/any/spot", "instance_type": "p4d.24xlarge", "purchase": "spot",
             "started_at": T0.isoformat(), "outcome": "preempted", "work_lost_steps": 3},
        ],
        "pools_blocked": ["ec2/p5.48xlarge/any/spot"],
        "recoveries": [{"preempted_at": T0.isoformat(), "training_at": T0.isoformat(), "seconds": 95.0}],
        "adaptations": [
            {"candidate": 0, "world_size": 8, "per_device_train_batch_size": 4, "gradient_accumulation_steps": 1, "global_batch_size": 32}
        ],
        "time_to_first_step_seconds": 42.0,
        "dollars_saved_usd": 12.5,
    }
)  # fmt: skip


def _placed(standin: StandInApi) -> str:
    job = standin.add_job()
    standin.set_status(job.job_id, job.status, placement=RECORD.model_dump(mode="json"))
    return job.job_id


def test_both_clients_return_the_placement_record(standin: StandInApi) -> None:
    job_id = _placed(standin)
    with Client(standin.url, credentials=Credentials(ACCESS_KEY, SECRET_KEY), region="us-east-1") as client:
        assert client.placement(job_id) == RECORD

    async def with_async() -> Any:
        async with AsyncClient(standin.url, credentials=Credentials(ACCESS_KEY, SECRET_KEY), region="us-east-1") as client:
            return await client.placement(job_id)

    assert run_async(with_async()) == RECORD


def test_a_job_without_candidates_has_no_record(standin: StandInApi) -> None:
    job = standin.add_job()
    with Client(standin.url, credentials=Credentials(ACCESS_KEY, SECRET_KEY), region="us-east-1") as client:
        assert client.placement(job.job_id) is None


def test_the_cli_shows_every_placement_the_recovery_time_and_the_savings(cli: Any, standin: StandInApi) -> None:
    job_id = _placed(standin)
    result = cli("placement", job_id)
    assert result.exit_code == 0, result.output
    for text in ("ec2/p5.48xlarge/any/spot", "ec2/p4d.24xlarge/any/spot", "capacity", "preempted", "95 s", "$12.50", "42 s"):
        assert text in result.stdout
    as_json = cli("placement", job_id, "--json")
    assert PlacementRecord.model_validate_json(as_json.stdout) == RECORD
