"""SIGTERM to the real entry point, as SageMaker's StopTrainingJob and the LocalLauncher send it."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from schemas.checkpoint import MANIFEST_NAME, CheckpointManifest
from schemas.trainer import ExitCode, TrainerEventKind
from tests.trainer.runs import make_spec, run_until_sigterm


@pytest.mark.slow
def test_sigterm_mid_run_leaves_a_complete_checkpoint_and_exits_75(tmp_path: Path) -> None:
    # Given a trainer process on a job far too long to finish
    spec = make_spec(
        tmp_path, hyperparameters={"max_steps": "100000", "learning_rate": "1e-3"}, output_config={"checkpoint": {"save_steps": 2}}
    )
    # When it has trained a few steps and gets SIGTERM
    stopped = run_until_sigterm(tmp_path, spec, after_step=3)
    events, err = stopped.events, stopped.stderr

    # Then it exits by itself, "stopped with checkpoint" (how soon is a benchmark's figure, not an assertion)
    assert stopped.returncode == ExitCode.STOPPED_WITH_CHECKPOINT, err[-3000:]
    done = [e for e in events if e.kind == TrainerEventKind.DONE]
    assert len(done) == 1 and done[0].data["stopped"] is True and done[0].data["exit_code"] == 75
    # and the checkpoint it names is the last step it trained, complete: every file matches the manifest
    last_step = max(e.data["step"] for e in events if e.kind == TrainerEventKind.PROGRESS)
    folder = Path(done[0].data["checkpoint_uri"])
    assert folder.name == f"step-{last_step:06d}"
    manifest = CheckpointManifest.model_validate_json((folder / MANIFEST_NAME).read_text())
    assert manifest.step == last_step
    names = {f.path for f in manifest.files}
    assert {"model.safetensors", "optimizer.pt", "scheduler.pt", "rng.pt", "trainer_state.json"} <= names
    for entry in manifest.files:
        data = (folder / entry.path).read_bytes()
        assert len(data) == entry.size and hashlib.sha256(data).hexdigest() == entry.sha256
    # and the checkpoint event came out before DONE, with the same manifest
    announced = [e for e in events if e.kind == TrainerEventKind.CHECKPOINT and e.data["step"] == last_step]
    assert announced and announced[-1].data["uri"] == str(folder)
    assert not (tmp_path / "output" / "failure").exists()
    # and its last phase is that stop's CHECKPOINTING: it does not report TRAINING as it exits (the job's
    # timeline reads TRAINING -> CHECKPOINTING -> PAUSED)
    phases = [e.data["phase"] for e in events if e.kind == TrainerEventKind.PHASE]
    assert phases[-1] == "CHECKPOINTING" and "TRAINING" in phases, phases
