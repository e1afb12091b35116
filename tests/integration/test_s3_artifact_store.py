"""S3ArtifactStore on moto: the job prefix layout, manifests (written last), metrics lines, deletes."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from functions import constants
from functions.adapters import s3 as s3_module
from functions.adapters.aws import AwsClients
from functions.adapters.s3 import S3ArtifactStore
from schemas.checkpoint import CheckpointManifest, ManifestFile
from tests.helpers.aws import fresh_resources


@pytest.fixture
def store(aws: AwsClients) -> S3ArtifactStore:
    return S3ArtifactStore(aws, fresh_resources(aws).artifacts_bucket)


def manifest(step: int) -> CheckpointManifest:
    return CheckpointManifest(
        checkpoint_id=f"step-{step:06d}",
        job_id="job-1",
        step=step,
        metrics={"loss": 1.0 / step},
        files=[ManifestFile(path="model.safetensors", size=3, sha256="0" * 64)],
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
    )


def test_manifests_are_the_checkpoints_that_exist(store: S3ArtifactStore) -> None:
    # Given two complete checkpoints, one being written (no manifest yet) and one with a torn manifest
    prefix = constants.checkpoints_prefix("job-1")
    for step in (40, 20):
        store.put_json(f"{prefix}step-{step:06d}/manifest.json", manifest(step).model_dump(mode="json"))
    store._s3.put_object(Bucket=store.bucket, Key=f"{prefix}step-000060/model.safetensors", Body=b"abc")
    store._s3.put_object(Bucket=store.bucket, Key=f"{prefix}step-000080/manifest.json", Body=b'{"step": ')
    # When the manifests are listed
    found = store.list_manifests("job-1")
    # Then only the complete ones, by step; their URIs follow the layout
    assert [m.step for m in found] == [20, 40]
    assert store.checkpoint_uri("job-1", "step-000020") == f"s3://{store.bucket}/jobs/job-1/checkpoints/step-000020"


def test_put_json_read_lines_and_list_keys(store: S3ArtifactStore) -> None:
    uri = store.put_json(constants.run_spec_key("job-1", 1), {"job_id": "job-1", "at": datetime(2026, 1, 1, tzinfo=UTC)})
    assert uri == f"s3://{store.bucket}/jobs/job-1/config/run-001.json"
    [line] = list(store.read_lines(constants.run_spec_key("job-1", 1)))
    assert json.loads(line)["at"].startswith("2026-01-01")
    assert list(store.read_lines("jobs/job-1/none.jsonl")) == []
    assert store.list_keys("jobs/job-1/") == ["jobs/job-1/config/run-001.json"]


def test_delete_prefix_removes_exactly_the_jobs_objects(store: S3ArtifactStore, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given more than one DeleteObjects batch of one job's objects (batches of 2 here instead of
    # S3's 1000), and a job whose id extends the first one's
    monkeypatch.setattr(s3_module, "_DELETE_BATCH", 2)
    s3 = store._s3
    for i in range(5):
        s3.put_object(Bucket=store.bucket, Key=f"jobs/job-1/logs/part-{i:04d}", Body=b"x")
    s3.put_object(Bucket=store.bucket, Key="jobs/job-10/metrics.jsonl", Body=b"{}")
    # When the first job's prefix is deleted
    removed = store.delete_prefix(constants.job_prefix("job-1"))
    # Then all of its objects are gone, the other job's are not
    assert removed == 5
    assert store.list_keys("jobs/") == ["jobs/job-10/metrics.jsonl"]
    # And a prefix without its trailing slash is refused (it would match job-10 too)
    with pytest.raises(ValueError, match="must end with '/'"):
        store.delete_prefix("jobs/job-1")
