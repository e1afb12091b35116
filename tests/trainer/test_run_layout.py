"""seeds/004's run layout kept by the trainer (trainer/run_layout.py), on local paths: config/run.json and
logs/, an entry beside each checkpoint that exists, no entry for one retention deleted, and a run not
asked to resume refusing to start over an earlier run's checkpoints."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from trainer import storage
from trainer.failures import UserError
from trainer.run_layout import RunLayout

from schemas.checkpoint import MANIFEST_NAME, CheckpointManifest
from schemas.configs import DataConfig, DataSource, OutputConfig, ResourceConfig, TrainingConfig
from schemas.trainer import RunSpec


def spec_for(root: Path, *, resume_latest: bool) -> RunSpec:
    training = TrainingConfig.model_validate(
        {
            "training_type": "CONTINUED_PRETRAIN",
            "base_model": {"model_id": "tiny", "source": "config", "model_kwargs": {"architecture": "llama"}},
        }
    )
    return RunSpec(
        job_id="job-1",
        attempt=1,
        training_config=training,
        data_config=DataConfig(sources=[DataSource(path="/data/x.jsonl")]),
        output_config=OutputConfig(output_path=str(root), layout="deepfinery"),
        resource_config=ResourceConfig(gpu_count=0),
        checkpoint_uri=str(root / "checkpoints"),
        layout_uri=str(root),
        resume_latest=resume_latest,
    )


def save(root: Path, step: int) -> CheckpointManifest:
    checkpoint_id = f"step-{step:06d}"
    directory = root / "checkpoints" / checkpoint_id
    directory.mkdir(parents=True)
    manifest = CheckpointManifest(
        checkpoint_id=checkpoint_id, job_id="job-1", step=step, metrics={"loss": 1.0 / step}, files=[], created_at=datetime.now(UTC)
    )
    (directory / MANIFEST_NAME).write_text(manifest.model_dump_json())
    return manifest


def test_the_layout_is_written_and_each_entry_names_a_checkpoint_that_exists(tmp_path: Path) -> None:
    root = tmp_path / "runs" / "aml_ruleset_v4" / "framework=hf"
    layout = RunLayout(spec_for(root, resume_latest=False))
    # Given a fresh run  When it prepares, saves three checkpoints, and retention deletes the first
    layout.prepare()
    for step in (2, 4, 6):
        manifest = save(root, step)
        layout.on_saved(manifest, str(root / "checkpoints" / manifest.checkpoint_id))
    storage.delete_prefix(str(root / "checkpoints" / "step-000002"), first=MANIFEST_NAME)
    layout.finish(None)
    # Then config/run.json and logs/ are there, and the entries are exactly the checkpoints left
    assert json.loads((root / "config" / "run.json").read_text())["job_id"] == "job-1"
    assert (root / "logs" / ".keep").exists()
    entries = sorted(p.name for p in (root / "checkpoints").glob("step-*.json"))
    assert entries == ["step-000004.json", "step-000006.json"]
    entry = json.loads((root / "checkpoints" / "step-000006.json").read_text())
    assert entry["step"] == 6 and entry["uri"].endswith("checkpoints/step-000006") and entry["framework"] == "hf"
    assert layout.saved_steps() == [4, 6]


def test_a_run_not_asked_to_resume_refuses_an_earlier_runs_checkpoints(tmp_path: Path) -> None:
    root = tmp_path / "run"
    save(root, 8)
    with pytest.raises(UserError, match="already holds checkpoints up to step 8"):
        RunLayout(spec_for(root, resume_latest=False)).prepare()
    # Asked to resume, it prepares (the trainer then resumes from the newest under checkpoints/)
    RunLayout(spec_for(root, resume_latest=True)).prepare()
    assert (root / "config" / "run.json").exists()


def test_only_layout_jobs_have_one(tmp_path: Path) -> None:
    spec = spec_for(tmp_path, resume_latest=True).model_copy(update={"layout_uri": None})
    assert RunLayout.of(spec) is None
