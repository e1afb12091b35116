"""Exact resume: a run stopped at step k and resumed ends with the same per-step losses (and weights)
as a run never interrupted; and resume skips a corrupt checkpoint for the previous good one."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
from safetensors.torch import load_file
from trainer.events import Events

from schemas.trainer import ExitCode, TrainerEventKind
from tests.trainer.runs import TINY_LLAMA, make_spec, metrics_points, run_in_process

STEPS = 10


def _spec(root: Path) -> dict[str, Any]:
    # Dropout on (the RNG state matters), gradient accumulation (the data position is mid-epoch
    # micro-batches), evaluation and async checkpoints in the middle of the run.
    spec = make_spec(
        root,
        "SFT",
        hyperparameters={
            "max_steps": str(STEPS),
            "learning_rate": "3e-3",
            "eval_steps": "4",
            "warmup_steps": "2",
            "lr_scheduler_type": "cosine",
        },
        records=20,
        data_config={"gradient_accumulation_steps": 2, "batch_size": 3, "validation_split": 0.2},
        output_config={"checkpoint": {"save_steps": 3, "save_total_limit": 5}},
        model_kwargs={**TINY_LLAMA, "attention_dropout": 0.2},
    )
    return spec


def _sigterm_at_step(monkeypatch: pytest.MonkeyPatch, step: int) -> None:
    """A real SIGTERM to this process when the trainer reports `step` (through the real handler)."""
    original = Events.emit

    def emit(self: Events, kind: TrainerEventKind, data: dict[str, Any] | None = None) -> Any:
        event = original(self, kind, data)
        if kind == TrainerEventKind.PROGRESS and data and data["step"] == step:
            os.kill(os.getpid(), signal.SIGTERM)
        return event

    monkeypatch.setattr(Events, "emit", emit)


@pytest.mark.slow
def test_a_run_stopped_and_resumed_matches_an_uninterrupted_run(tmp_path: Path, monkeypatch, capsys) -> None:
    # Given the same job twice
    straight, interrupted = tmp_path / "straight", tmp_path / "interrupted"

    # When one runs straight through
    reference = run_in_process(straight, _spec(straight), monkeypatch, capsys)
    assert reference.code == ExitCode.COMPLETED, reference.stdout[-2000:]

    # and the other gets SIGTERM at step 5 (exit 75 with a checkpoint at step 5), then runs again
    with monkeypatch.context() as patch:
        _sigterm_at_step(patch, 5)
        first = run_in_process(interrupted, _spec(interrupted), patch, capsys)
    assert first.code == ExitCode.STOPPED_WITH_CHECKPOINT
    assert first.done.data == {"exit_code": 75, "stopped": True, "checkpoint_uri": str(interrupted / "checkpoints" / "step-000005")}
    second = run_in_process(interrupted, {**_spec(interrupted), "attempt": 2}, monkeypatch, capsys)
    assert second.code == ExitCode.COMPLETED

    # Then every step's loss, the evaluations and the final weights are identical, not just close
    points = metrics_points(interrupted)
    assert {p.step for p in points if p.loss is not None and p.attempt == 1} == {1, 2, 3, 4, 5}
    assert {p.step for p in points if p.loss is not None and p.attempt == 2} == {6, 7, 8, 9, 10}
    assert second.losses() == reference.losses()
    assert len(reference.losses()) == STEPS
    evals = {p.step: p.eval_loss for p in metrics_points(straight) if p.eval_loss is not None}
    assert {p.step: p.eval_loss for p in points if p.eval_loss is not None} == evals
    final_a = load_file(str(straight / "checkpoints" / "step-000010" / "model.safetensors"))
    final_b = load_file(str(interrupted / "checkpoints" / "step-000010" / "model.safetensors"))
    assert final_a.keys() == final_b.keys()
    assert all(final_a[k].equal(final_b[k]) for k in final_a)
    # and the resumed attempt's checkpoints record where they came from
    assert second.checkpoints()[-1].resumed_from == "step-000005"


def test_resume_skips_a_corrupt_checkpoint_and_uses_the_previous_good_one(tmp_path: Path, monkeypatch, capsys) -> None:
    # Given a run that saved checkpoints at steps 3 and 6, and then the newest one was corrupted
    spec = make_spec(tmp_path, hyperparameters={"max_steps": "6", "learning_rate": "3e-3"}, output_config={"checkpoint": {"save_steps": 3}})
    assert run_in_process(tmp_path, spec, monkeypatch, capsys).code == ExitCode.COMPLETED
    weights = tmp_path / "checkpoints" / "step-000006" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))

    # When the job runs again with more steps
    spec["training_config"]["hyperparameters"]["max_steps"] = "8"
    again = run_in_process(tmp_path, {**spec, "attempt": 2}, monkeypatch, capsys)

    # Then it warned, resumed from step 3 (so steps 4..8 were trained again) and finished
    assert again.code == ExitCode.COMPLETED
    assert "skipping checkpoint" in again.stderr and "model.safetensors does not match its manifest" in again.stderr
    attempt2 = sorted(p.step for p in metrics_points(tmp_path) if p.attempt == 2 and p.loss is not None)
    assert attempt2 == [4, 5, 6, 7, 8]
    assert again.checkpoints()[-1].resumed_from == "step-000003"
