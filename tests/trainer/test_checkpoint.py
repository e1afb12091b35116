"""CheckpointManager on its own: layout, manifest last, retention (best and resumed-from kept), verified
resume with fallback, S3 (moto), background saves."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
import torch
from trainer import checkpoint as ckpt
from trainer import storage

from schemas.checkpoint import MANIFEST_NAME, metric_direction
from schemas.configs import CheckpointConfig


@pytest.fixture
def s3(s3_bucket):
    storage.reset_client()
    yield s3_bucket
    storage.reset_client()


def _snapshot(step: int, metrics: dict[str, float] | None = None, *, is_adapter: bool = False) -> ckpt.Snapshot:
    torch.manual_seed(step)
    layer = torch.nn.Linear(4, 3)
    optimizer = torch.optim.AdamW(layer.parameters())
    layer(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    return ckpt.Snapshot(
        step=step,
        epoch=step / 10,
        model_tensors=ckpt.to_cpu(layer.state_dict()),
        is_adapter=is_adapter,
        optimizer=ckpt.to_cpu(optimizer.state_dict()),
        scheduler=scheduler.state_dict(),
        rng={"per_rank": [ckpt.capture_rng()]},
        trainer_state={"step": step},
        metrics=metrics or {},
        extra_files={"config.json": b"{}"},
    )


def _manager(uri: str, tmp_path: Path, **config) -> ckpt.CheckpointManager:
    return ckpt.CheckpointManager(
        uri, tmp_path / "staging", CheckpointConfig(**config), job_id="job-1", attempt=1, training_type="SFT", asynchronous=False
    )


def _ids(manager: ckpt.CheckpointManager) -> list[str]:
    return [m.checkpoint_id for m, _ in manager.manifests()]


def test_a_checkpoint_holds_every_state_file_with_sizes_and_checksums(tmp_path: Path) -> None:
    # Given a manager writing to a local directory
    manager = _manager(str(tmp_path / "ckpts"), tmp_path)

    # When it saves step 7
    manager.save(_snapshot(7, {"loss": 1.5}))

    # Then step-000007 holds weights, optimizer, scheduler, RNG, state and a manifest that lists them all
    folder = tmp_path / "ckpts" / "step-000007"
    manifest = ckpt.read_manifest(str(folder))
    assert manifest is not None and manifest.step == 7 and manifest.metrics == {"loss": 1.5}
    expected = {"model.safetensors", "optimizer.pt", "scheduler.pt", "rng.pt", "trainer_state.json", "config.json"}
    assert {f.path for f in manifest.files} == expected
    for entry in manifest.files:
        assert (folder / entry.path).stat().st_size == entry.size
        assert ckpt.sha256_of(folder / entry.path) == entry.sha256
    assert manifest.job_id == "job-1" and manifest.training_type == "SFT" and not manifest.is_adapter
    # and what was saved loads back
    loaded = manager.find_resume(None)
    assert loaded is not None and loaded.checkpoint_id == "step-000007"
    assert set(loaded.model_tensors()) == {"weight", "bias"}
    assert loaded.torch_file(ckpt.OPTIMIZER_FILE)["state"]


def test_a_directory_without_a_manifest_does_not_exist(tmp_path: Path) -> None:
    manager = _manager(str(tmp_path / "ckpts"), tmp_path)
    manager.save(_snapshot(1))
    manager.save(_snapshot(2))
    (tmp_path / "ckpts" / "step-000002" / MANIFEST_NAME).unlink()  # died while writing step 2
    assert _ids(manager) == ["step-000001"]
    loaded = manager.find_resume(None)
    assert loaded is not None and loaded.checkpoint_id == "step-000001"


def test_retention_keeps_the_newest_the_best_and_the_resumed_from(tmp_path: Path) -> None:
    # Given save_total_limit 2, best by eval_loss (lowest), a run resumed from step 1
    manager = _manager(str(tmp_path / "ckpts"), tmp_path, save_total_limit=2, metric_for_best_model="eval_loss")
    manager.save(_snapshot(1, {"eval_loss": 3.0}))
    manager.resumed_from = "step-000001"

    # When six checkpoints are saved, the best at step 2
    for step, loss in [(2, 0.5), (3, 2.0), (4, 1.0), (5, 0.9), (6, 0.8)]:
        manager.save(_snapshot(step, {"eval_loss": loss}))

    # Then the newest two, the best and the resumed-from one remain, and nothing else
    assert _ids(manager) == ["step-000001", "step-000002", "step-000005", "step-000006"]
    assert sorted(p.name for p in (tmp_path / "ckpts").iterdir()) == ["step-000001", "step-000002", "step-000005", "step-000006"]


def test_greater_is_better_and_the_eval_prefix_follow_hugging_face(tmp_path: Path) -> None:
    manager = _manager(str(tmp_path / "ckpts"), tmp_path, save_total_limit=1, metric_for_best_model="accuracy")
    for step, acc in [(1, 0.2), (2, 0.9), (3, 0.5), (4, 0.6)]:
        manager.save(_snapshot(step, {"eval_accuracy": acc}))
    assert _ids(manager) == ["step-000002", "step-000004"]
    assert metric_direction("eval_loss", None) is False and metric_direction("loss", True) is True


def test_resume_skips_bad_checksums_and_falls_back_to_the_previous_good_one(tmp_path: Path, capsys) -> None:
    # Given checkpoints 1, 2, 3 where 3's optimizer file was damaged after the manifest was written
    manager = _manager(str(tmp_path / "ckpts"), tmp_path, save_total_limit=None)
    for step in (1, 2, 3):
        manager.save(_snapshot(step))
    (tmp_path / "ckpts" / "step-000003" / "optimizer.pt").write_bytes(b"garbage")

    # When resuming from the latest, and from the named damaged one
    latest = manager.find_resume(None)
    named = manager.find_resume(str(tmp_path / "ckpts" / "step-000003"))

    # Then both use step 2, with a warning naming the bad file
    assert latest is not None and latest.checkpoint_id == "step-000002"
    assert named is not None and named.checkpoint_id == "step-000002"
    assert "optimizer.pt does not match its manifest" in capsys.readouterr().err


def test_resume_from_a_named_checkpoint_and_from_the_best(tmp_path: Path) -> None:
    manager = _manager(str(tmp_path / "ckpts"), tmp_path, save_total_limit=None, metric_for_best_model="eval_loss", resume_from_best=True)
    for step, loss in [(1, 2.0), (2, 1.0), (3, 1.5)]:
        manager.save(_snapshot(step, {"eval_loss": loss}))
    named = manager.find_resume(str(tmp_path / "ckpts" / "step-000001"))
    assert named is not None and named.checkpoint_id == "step-000001"
    best = manager.find_resume(None)
    assert best is not None and best.checkpoint_id == "step-000002"
    assert manager.resumed_from == "step-000002"
    # a checkpoint of another job (a retry's parent) is used but is not this job's to keep
    other = _manager(str(tmp_path / "child"), tmp_path / "child-staging")
    parent = other.find_resume(str(tmp_path / "ckpts" / "step-000003"))
    assert parent is not None and parent.checkpoint_id == "step-000003" and other.resumed_from is None
    assert manager.find_resume(str(tmp_path / "ckpts" / "step-000009")) is not None  # gone: the newest earlier one


def test_s3_upload_puts_the_manifest_last_and_resume_downloads_and_verifies(s3, tmp_path: Path, monkeypatch) -> None:
    client, bucket = s3
    uri = f"s3://{bucket}/jobs/job-1/checkpoints"
    order: list[str] = []
    real_upload = storage.upload_file

    def recording_upload(src: Path, target: str) -> None:
        order.append(target.rsplit("/", 1)[-1])
        real_upload(src, target)

    monkeypatch.setattr(storage, "upload_file", recording_upload)
    # Given two checkpoints saved to S3, staged on local disk
    manager = _manager(uri, tmp_path, save_total_limit=None)
    manager.save(_snapshot(1))
    manager.save(_snapshot(2))

    # Then every upload ended with its manifest
    assert order[-1] == MANIFEST_NAME and order.count(MANIFEST_NAME) == 2
    assert order.index(MANIFEST_NAME) == len(order) // 2 - 1
    keys = {o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix="jobs/job-1/checkpoints/")["Contents"]}
    assert "jobs/job-1/checkpoints/step-000002/manifest.json" in keys

    # When a new host (empty staging) resumes, and step 2's weights in S3 are damaged
    client.put_object(Bucket=bucket, Key="jobs/job-1/checkpoints/step-000002/model.safetensors", Body=b"broken")
    fresh = _manager(uri, tmp_path / "new-host", save_total_limit=None)
    loaded = fresh.find_resume(None)

    # Then it downloaded step 1, verified it, and skipped step 2
    assert loaded is not None and loaded.checkpoint_id == "step-000001"
    assert (tmp_path / "new-host" / "staging" / "step-000001" / "model.safetensors").exists()
    assert loaded.uri == f"{uri}/step-000001"


def test_s3_retention_deletes_the_manifest_first(s3, tmp_path: Path, monkeypatch) -> None:
    client, bucket = s3
    uri = f"s3://{bucket}/ck"
    manager = _manager(uri, tmp_path, save_total_limit=1)
    manager.save(_snapshot(1))
    deleted: list[str] = []
    real_delete = storage.delete_prefix

    def recording_delete(prefix: str, *, first: str | None = None) -> None:
        deleted.append(f"{prefix}:{first}")
        real_delete(prefix, first=first)

    monkeypatch.setattr(storage, "delete_prefix", recording_delete)
    manager.save(_snapshot(2))
    assert deleted == [f"{uri}/step-000001:{MANIFEST_NAME}"]
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix="ck/").get("Contents", [])]
    assert keys and all(k.startswith("ck/step-000002/") for k in keys)
    assert not (tmp_path / "staging" / "step-000001").exists()


def test_background_save_returns_at_once_and_reports_its_error_later(tmp_path: Path, monkeypatch) -> None:
    # Given an asynchronous manager whose write is held back
    manager = ckpt.CheckpointManager(
        str(tmp_path / "ckpts"), tmp_path / "staging", CheckpointConfig(), job_id="j", attempt=1, training_type="SFT", asynchronous=True
    )
    release = threading.Event()
    real_write = manager._write

    def slow_write(snapshot):
        release.wait(10)
        real_write(snapshot)

    monkeypatch.setattr(manager, "_write", slow_write)

    # When it saves
    manager.save(_snapshot(1))

    # Then training is not held up: save() has returned while the write is still held back (a synchronous
    # save could only return after it), and the write completes once released
    assert manager.busy
    release.set()
    manager.wait()
    assert _ids(manager) == ["step-000001"]

    # and a failing background write surfaces in the next wait()
    def failing_write(snapshot):
        raise OSError("disk full")

    monkeypatch.setattr(manager, "_write", failing_write)
    manager.save(_snapshot(2))
    with pytest.raises(OSError, match="disk full"):
        manager.wait()


def test_rng_state_round_trips_through_a_weights_only_load(tmp_path: Path) -> None:
    import random

    import numpy as np

    state = ckpt.capture_rng()
    expected = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    torch.save(state, tmp_path / "rng.pt")
    ckpt.restore_rng(torch.load(tmp_path / "rng.pt", weights_only=True))
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == expected


def test_trainer_state_is_json(tmp_path: Path) -> None:
    manager = _manager(str(tmp_path / "ckpts"), tmp_path)
    manager.save(_snapshot(3))
    assert json.loads((tmp_path / "ckpts" / "step-000003" / "trainer_state.json").read_text()) == {"step": 3}
