"""Training shapes through `trainplane up`: listed over signed HTTP and by the CLI, a job that names one
trains on it, records it with its version and shows it in `jobs get`; a conflicting field is a 422."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.e2e.conftest import LocalPlane
from tests.e2e.test_lifecycle_e2e import FAKE_TRAINER_ENV, fake_spec
from trainplane import Client
from trainplane.cli import app

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

CUSTOM = {"name": "cpu", "training_shape_version": 2, "accelerator_count": 0, "max_supported_context_length": 512, "description": "v2"}


@pytest.fixture(scope="module")
def plane(module_plane_factory: Callable[..., LocalPlane]) -> LocalPlane:
    return module_plane_factory(env={**FAKE_TRAINER_ENV, "TRAINPLANE_TRAINING_SHAPES": json.dumps([CUSTOM])})


def cli(plane: LocalPlane, *args: str) -> str:
    result = CliRunner().invoke(app, ["--state-dir", str(plane.state_dir), "--principal", "alice", *args], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    return result.stdout


def test_a_job_on_a_training_shape_trains_and_shows_its_profile(plane: LocalPlane, tmp_path: Path) -> None:
    client = Client(state_dir=plane.state_dir, principal="alice")
    # Given the deployment's shapes: the defaults plus its own cpu@2
    assert client.get_training_shape("cpu").training_shape_version == 2
    assert client.get_training_shape("cpu", 1).max_supported_context_length == 2048
    assert "cpu" in cli(plane, "shapes", "list") and "h100-8x" in cli(plane, "shapes", "list")
    # When a job names the shape instead of its resources
    spec = fake_spec("shaped", max_steps=4)
    del spec["resource_config"]
    spec["resource_config"] = {"training_shape": "cpu"}
    job = client.create_and_wait(spec, poll_interval_s=0.3, timeout_s=120)
    # Then it trains to the end on the shape's latest version, which is on the job and in `jobs get`
    assert job.status.value == "COMPLETED"
    assert job.training_shape is not None and job.training_shape.ref == "cpu@2"
    assert job.data_config.max_seq_length == 512 and job.resource_config.gpu_count == 0
    assert "cpu@2: CPU only x 1 node, context 512" in cli(plane, "jobs", "get", job.job_id)
    # And a job that sets a field the shape owns to another value is refused, naming it
    spec["resource_config"] = {"training_shape": "cpu@1", "gpu_count": 1}
    reply = plane.request("POST", "/jobs", json=spec)
    assert reply.status_code == 422 and reply.json()["errors"][0]["field"] == "resource_config.gpu_count"
    assert plane.request("GET", "/training-shapes/nope").status_code == 404
