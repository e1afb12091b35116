"""Resume across shapes (issue 26): a checkpoint resumed at world size 2 (gloo workers on the CPU) and
the checkpoint that run writes resumed at world size 1, with gradient accumulation adjusted so the global
batch stays 16, train on exactly the steps the uninterrupted run trains: the same examples per step, the
same losses and the same final weights.

Not bit for bit across world sizes: two workers sum their gradients in a gloo all-reduce and average,
one process accumulates the same micro-batches' gradients in .grad one after another, so the float
additions happen in another order (an error of a few ulps per step). Within a world size the trainer's
resume is bit-exact (test_resume.py); here the tolerance is 1e-5 relative, far below what a different
batch, data position or optimizer state would give (the losses move by ~1e-1 per step).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from safetensors.torch import load_file

from schemas.trainer import ExitCode
from tests.trainer.runs import Outcome, make_spec, metrics_points, run_in_process, start_subprocess

# 64 records, 16 per step: 4 steps per epoch. A checkpoint every 3 steps: the world-size-2 run resumes at
# step 3 and crosses the epoch boundaries after steps 4 and 8; its own step-6 checkpoint resumes at world
# size 1 and crosses the one after step 8.
STEPS = 9
SAVED = 3
GLOBAL_BATCH = 16
PER_DEVICE = 8

CASES = {
    # DDP, a full fine-tune
    "full-ddp": ("FULL_FINETUNE", "HF_TRAINER", {}),
    # FSDP2 (parameters and optimizer state sharded over the workers), a LoRA adapter
    "lora-fsdp": ("LORA", "FSDP", {"lora_rank": "4", "lora_alpha": "16"}),
}


def _spec(root: Path, case: str, world: int, **fields: Any) -> dict[str, Any]:
    training_type, framework, extra = CASES[case]
    accumulation = GLOBAL_BATCH // (PER_DEVICE * world)
    return make_spec(
        root,
        training_type,
        hyperparameters={"max_steps": str(STEPS), "learning_rate": "1e-2", "warmup_steps": "2", "lr_scheduler_type": "cosine", **extra},
        records=64,
        data_config={"batch_size": PER_DEVICE, "gradient_accumulation_steps": accumulation},
        output_config={"checkpoint": {"save_steps": SAVED, "save_total_limit": 5}},
        framework={"type": framework, "distributed": {"world_size": world}},
        **fields,
    )


def _run(root: Path, spec: dict[str, Any], world: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    if world == 1:
        outcome: Outcome = run_in_process(root, spec, monkeypatch, capsys)
        assert outcome.code == ExitCode.COMPLETED, outcome.stderr[-3000:]
        return
    proc = start_subprocess(root, spec)
    _out, err = proc.communicate(timeout=400)
    assert proc.returncode == ExitCode.COMPLETED, err[-3000:]


def _losses(root: Path) -> dict[int, float]:
    return {p.step: p.loss for p in metrics_points(root) if p.loss is not None}


def _final_weights(root: Path) -> dict[str, Any]:
    folder = root / "checkpoints" / f"step-{STEPS:06d}"
    name = "adapter_model.safetensors" if (folder / "adapter_model.safetensors").exists() else "model.safetensors"
    return load_file(str(folder / name))


def _assert_same_run(resumed: Path, reference: Path, *, after: int) -> None:
    losses, expected = _losses(resumed), _losses(reference)
    assert sorted(losses) == list(range(after + 1, STEPS + 1))
    for step in losses:
        assert losses[step] == pytest.approx(expected[step], rel=1e-5, abs=0), step
    got, want = _final_weights(resumed), _final_weights(reference)
    assert got.keys() == want.keys()
    for key in want:
        assert got[key].allclose(want[key], rtol=1e-4, atol=1e-6), key


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_one_checkpoint_resumes_at_world_size_1_and_2_like_the_uninterrupted_run(case: str, tmp_path: Path, monkeypatch, capsys) -> None:
    # Given an uninterrupted run of the job at world size 1 (8 x 2 accumulation)
    one = tmp_path / "one"
    _run(one, _spec(one, case, 1), 1, monkeypatch, capsys)
    assert sorted(_losses(one)) == list(range(1, STEPS + 1))

    # When its step-3 checkpoint resumes on two workers (2 x 8 x 1), and the step-6 checkpoint those two
    # workers write resumes in one process again, each with the accumulation that keeps the global batch at 16
    up, down = tmp_path / "up", tmp_path / "down"
    _run(up, _spec(up, case, 2, resume_from=str(one / "checkpoints" / f"step-{SAVED:06d}"), attempt=2), 2, monkeypatch, capsys)
    written_by_two = up / "checkpoints" / f"step-{2 * SAVED:06d}"
    _run(down, _spec(down, case, 1, resume_from=str(written_by_two), attempt=3), 1, monkeypatch, capsys)

    # Then each resumed run trained the rest of the steps as the uninterrupted run did
    _assert_same_run(up, one, after=SAVED)
    _assert_same_run(down, one, after=2 * SAVED)


@pytest.mark.slow
def test_a_position_that_no_micro_batch_of_the_new_shape_reaches_is_refused(tmp_path: Path, monkeypatch, capsys) -> None:
    # Given a checkpoint at step 3 of batch 3 x accumulation 1 (9 examples into the epoch)
    first = tmp_path / "first"
    spec = make_spec(
        first,
        hyperparameters={"max_steps": "3", "learning_rate": "3e-3"},
        data_config={"batch_size": 3},
        output_config={"checkpoint": {"save_steps": 3}},
    )
    assert run_in_process(first, spec, monkeypatch, capsys).code == ExitCode.COMPLETED

    # When it resumes with per-device batch 2 (9 is not a whole number of micro-batches of 2)
    second = tmp_path / "second"
    resumed = make_spec(
        second,
        hyperparameters={"max_steps": "6", "learning_rate": "3e-3"},
        data_config={"batch_size": 2},
        resume_from=str(first / "checkpoints" / "step-000003"),
        attempt=2,
    )
    outcome = run_in_process(second, resumed, monkeypatch, capsys)

    # Then it is a user error naming the position and the batch, before any step
    assert outcome.code == ExitCode.USER_ERROR
    assert "stopped after 9 examples" in outcome.failure_text()
    assert "per_device_train_batch_size 2" in outcome.failure_text()
