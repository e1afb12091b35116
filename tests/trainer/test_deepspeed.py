"""DEEPSPEED (ZeRO through accelerate) with two gloo workers on the CPU: training, SIGTERM -> a complete
checkpoint and exit 75, and an exact resume of that checkpoint (the same per-step losses, evaluations
and final weights as a run never interrupted)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from schemas.checkpoint import MANIFEST_NAME, CheckpointManifest
from schemas.trainer import ExitCode, TrainerEventKind
from tests.trainer.runs import TINY_LLAMA, child_env, make_spec, metrics_points, run_until_sigterm, start_subprocess

STEPS = 24


def _spec(root: Path, zero_stage: int, *, steps: int = STEPS, attempt: int = 1) -> dict[str, Any]:
    # Dropout on (the RNG state matters), gradient accumulation with a short last step per epoch
    # (the boundary is ours, not DeepSpeed's counter), evaluation, warmup + cosine (our scheduler).
    return make_spec(
        root,
        "SFT",
        hyperparameters={
            "max_steps": str(steps),
            "learning_rate": "3e-3",
            "eval_steps": "8",
            "warmup_steps": "2",
            "lr_scheduler_type": "cosine",
        },
        records=40,
        data_config={"gradient_accumulation_steps": 2, "batch_size": 3, "validation_split": 0.2},
        output_config={"checkpoint": {"save_steps": 8, "save_total_limit": 2}},
        model_kwargs={**TINY_LLAMA, "attention_dropout": 0.2},
        framework={"type": "DEEPSPEED", "config": {"zero_stage": str(zero_stage)}, "distributed": {"world_size": 2}},
        attempt=attempt,
    )


def _run(root: Path, spec: dict[str, Any]) -> tuple[int, str, str]:
    proc = start_subprocess(root, spec)
    out, err = proc.communicate(timeout=300)
    return proc.returncode, out, err


def _losses(root: Path) -> dict[int, float]:
    return {p.step: p.loss for p in metrics_points(root) if p.loss is not None}


@pytest.mark.slow
@pytest.mark.parametrize("zero_stage", [1, 2, 3])
def test_zero_workers_stop_on_sigterm_with_a_checkpoint_and_resume_exactly(zero_stage: int, tmp_path: Path) -> None:
    straight, interrupted = tmp_path / "straight", tmp_path / "interrupted"

    # Given a DEEPSPEED job run straight through on two workers
    code, out, err = _run(straight, _spec(straight, zero_stage))
    assert code == ExitCode.COMPLETED, err[-4000:]
    assert f"(ZeRO stage {zero_stage}) on 2 workers" in err
    # (without compiling DeepSpeed's inference-only shared-memory all-reduce at start-up)
    assert "shm_comm" not in out + err
    reference = _losses(straight)
    assert sorted(reference) == list(range(1, STEPS + 1))
    # the loss falls (first 4 steps against the last 4)
    assert sum(reference[s] for s in range(STEPS - 3, STEPS + 1)) < 0.8 * sum(reference[s] for s in range(1, 5))

    # When the same job gets SIGTERM mid-run
    stopped = run_until_sigterm(interrupted, _spec(interrupted, zero_stage), after_step=3)
    events, err = stopped.events, stopped.stderr

    # Then it exits "stopped with checkpoint", naming a complete checkpoint of its last step
    assert stopped.returncode == ExitCode.STOPPED_WITH_CHECKPOINT, err[-4000:]
    done = [e for e in events if e.kind == TrainerEventKind.DONE]
    assert len(done) == 1 and done[0].data["stopped"] is True and done[0].data["exit_code"] == 75
    stopped_at = max(e.data["step"] for e in events if e.kind == TrainerEventKind.PROGRESS)
    assert stopped_at < STEPS, "the run finished before SIGTERM arrived: nothing was interrupted"
    folder = Path(done[0].data["checkpoint_uri"])
    assert folder.name == f"step-{stopped_at:06d}"
    manifest = CheckpointManifest.model_validate_json((folder / MANIFEST_NAME).read_text())
    assert manifest.step == stopped_at
    assert {"model.safetensors", "optimizer.pt", "scheduler.pt", "rng.pt", "trainer_state.json"} <= {f.path for f in manifest.files}
    for entry in manifest.files:
        data = (folder / entry.path).read_bytes()
        assert len(data) == entry.size and hashlib.sha256(data).hexdigest() == entry.sha256
    # and the optimizer file holds both ranks' ZeRO partitions, loadable without pickled objects
    optimizer = torch.load(folder / "optimizer.pt", weights_only=True)
    assert (optimizer["zero_stage"], optimizer["world_size"], len(optimizer["per_rank"])) == (zero_stage, 2, 2)

    # When it runs again (attempt 2) from that checkpoint
    code, _, err = _run(interrupted, _spec(interrupted, zero_stage, attempt=2))
    assert code == ExitCode.COMPLETED, err[-4000:]
    assert f"resumed from {folder}" in err

    # Then every step's loss, the evaluations and the final weights equal the uninterrupted run's
    points = metrics_points(interrupted)
    assert {p.step for p in points if p.loss is not None and p.attempt == 2} == set(range(stopped_at + 1, STEPS + 1))
    assert _losses(interrupted) == reference
    evals = {p.step: p.eval_loss for p in metrics_points(straight) if p.eval_loss is not None}
    assert evals and {p.step: p.eval_loss for p in points if p.eval_loss is not None} == evals
    final_a = load_file(str(straight / "checkpoints" / f"step-{STEPS:06d}" / "model.safetensors"))
    final_b = load_file(str(interrupted / "checkpoints" / f"step-{STEPS:06d}" / "model.safetensors"))
    assert final_a.keys() == final_b.keys() and all(final_a[k].equal(final_b[k]) for k in final_a)
    # and retention kept save_total_limit checkpoints plus the resumed-from one
    kept = sorted(p.name for p in (interrupted / "checkpoints").glob("step-*"))
    assert folder.name in kept and f"step-{STEPS:06d}" in kept
    assert (interrupted / "model" / "model.safetensors").exists()


# DeepSpeed imported as the trainer does, in a fresh interpreter (this pytest process may have imported
# DeepSpeed or mlflow already).
_IMPORT_AS_THE_TRAINER_DOES = """
import sys
from trainer.deepspeed_zero import _import_deepspeed
deepspeed = _import_deepspeed()
import deepspeed.autotuning.autotuner as autotuner
print("mlflow imported with deepspeed:", "mlflow" in sys.modules, autotuner.has_mlflow)
print("shm op buildable:", deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"])
import importlib.util
print("mlflow importable after:", "mlflow" not in sys.modules and importlib.util.find_spec("mlflow") is not None)
"""


def test_the_trainer_imports_deepspeed_without_mlflow_and_without_building_the_shm_op() -> None:
    done = subprocess.run([sys.executable, "-c", _IMPORT_AS_THE_TRAINER_DOES], env=child_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "mlflow imported with deepspeed: False False" in done.stdout
    assert "shm op buildable: False" in done.stdout
    # and a tracker that needs mlflow later still imports it
    assert "mlflow importable after: True" in done.stdout
