"""`trainplane doctor --state-dir` against a real `trainplane up`: the checklist passes on a fresh plane,
names the jobs table once it is deleted from the emulated AWS, and `--smoke` trains a tiny CPU job to
COMPLETED and leaves nothing behind."""

from __future__ import annotations

import json

import pytest
from botocore.exceptions import ClientError
from typer.testing import CliRunner

from tests.e2e.conftest import LocalPlane, PlaneFactory
from trainplane.cli import app

pytestmark = pytest.mark.e2e


def doctor(plane: LocalPlane, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["doctor", "--state-dir", str(plane.state_dir), *args], catch_exceptions=False, terminal_width=400)
    return result.exit_code, result.output


def test_doctor_passes_on_a_fresh_plane_and_names_the_table_once_it_is_deleted(plane_factory: PlaneFactory) -> None:
    # Given a fresh `trainplane up` of its own (this test breaks it)
    plane = plane_factory()
    try:
        # When the doctor checks it  Then every check passes or does not apply, and it exits 0
        code, output = doctor(plane)
        assert code == 0, output
        passed = ("✓ stack outputs", "✓ API answers", "✓ jobs table: trainplane-jobs is ACTIVE", "✓ artifacts bucket", "✓ state machine")
        for line in passed:
            assert line in output, output
        assert "✓ Lambda code version: the API function runs the installed code" in output
        assert "✗" not in output and "all checks passed" in output

        # Given the jobs table deleted from the emulated AWS
        plane.client("dynamodb").delete_table(TableName="trainplane-jobs")
        # When the doctor checks again  Then it exits 1 on exactly that line, with the fix
        code, output = doctor(plane)
        assert code == 1, output
        assert "✗ jobs table: table trainplane-jobs does not exist" in output
        assert [line for line in output.splitlines() if line.startswith("✗")] == ["✗ jobs table: table trainplane-jobs does not exist"]
        assert "fix: restart local mode (`trainplane up`)" in output
        # And --json says the same to a script
        code, raw = doctor(plane, "--json")
        report = json.loads(raw)
        assert code == 1 and report["ok"] is False
        assert [(c["name"], c["detail"]) for c in report["checks"] if c["mark"] == "fail"] == [
            ("jobs table", "table trainplane-jobs does not exist")
        ]
    finally:
        plane.stop()


@pytest.mark.slow
def test_smoke_trains_a_tiny_cpu_job_to_completed_and_cleans_up(local_plane: LocalPlane) -> None:
    # When the doctor runs its smoke test on the shared plane
    code, raw = doctor(local_plane, "--smoke", "--json", "--smoke-timeout", "600")
    # Then every check passed and the smoke job COMPLETED on the CPU, with its cost said
    report = json.loads(raw)
    assert code == 0, raw
    smoke = report["smoke"]
    assert smoke["status"] == "COMPLETED" and smoke["cost_usd"] >= 0 and smoke["cleaned_up"] is True
    assert report["checks"][-1]["name"] == "smoke job" and report["checks"][-1]["mark"] == "pass"
    # And nothing is left: the job is gone, and so is the data it trained on
    assert local_plane.request("GET", f"/jobs/{smoke['job_id']}", principal="admin").status_code == 404
    bucket, _, key = smoke["data_uri"].removeprefix("s3://").partition("/")
    with pytest.raises(ClientError):
        local_plane.client("s3").head_object(Bucket=bucket, Key=key)
