"""Every supported training type trains through the real entry point and its loss falls."""

from __future__ import annotations

from pathlib import Path

import pytest
from safetensors.torch import load_file

from schemas.trainer import ExitCode, TrainerEventKind, TrainerPhase
from tests.trainer.runs import make_spec, run_in_process

# type -> (hyperparameters, how much the loss must fall at least). DPO starts at log(2) = 0.693 and
# LoRA moves few parameters: their margins are smaller, but a non-learning run fails every one.
CASES = {
    "FULL_FINETUNE": ({"max_steps": "12", "learning_rate": "3e-3"}, 0.5),
    "CONTINUED_PRETRAIN": ({"max_steps": "12", "learning_rate": "3e-3"}, 0.5),
    "SFT": ({"max_steps": "12", "learning_rate": "3e-3"}, 0.5),
    "LORA": ({"max_steps": "12", "learning_rate": "3e-2", "lora_rank": "8", "lora_alpha": "32"}, 0.2),
    "DPO": ({"max_steps": "12", "learning_rate": "1e-2", "dpo_beta": "1.0"}, 0.1),
}


# type -> (hyperparameters, records, how much the loss must fall at least). DPO starts at exactly
# log(2) = 0.693 (policy == reference) and learns 8 pairs by heart; LoRA moves few parameters: their
# margins are smaller, but a run that does not learn fails every one.
CASES = {
    "FULL_FINETUNE": ({"max_steps": "12", "learning_rate": "3e-3"}, 24, 0.5),
    "CONTINUED_PRETRAIN": ({"max_steps": "12", "learning_rate": "3e-3"}, 24, 0.5),
    "SFT": ({"max_steps": "12", "learning_rate": "3e-3"}, 24, 0.5),
    "LORA": ({"max_steps": "12", "learning_rate": "3e-2", "lora_rank": "8", "lora_alpha": "32"}, 24, 0.2),
    "DPO": ({"max_steps": "12", "learning_rate": "3e-3", "dpo_beta": "0.5"}, 8, 0.2),
}


@pytest.mark.parametrize("training_type", list(CASES))
def test_each_training_type_trains_and_its_loss_falls(training_type: str, tmp_path: Path, monkeypatch, capsys) -> None:
    # Given a tiny job of this type, validated on its own training file
    hyper, records, margin = CASES[training_type]
    spec = make_spec(tmp_path, training_type, hyperparameters={**hyper, "logging_steps": "1"}, records=records)
    spec["data_config"]["sources"].append({"path": spec["data_config"]["sources"][0]["path"], "split": "validation"})

    # When the trainer runs it to the end
    outcome = run_in_process(tmp_path, spec, monkeypatch, capsys)

    # Then it exits 0 through every phase, and the loss at the end is clearly below the first
    assert outcome.code == ExitCode.COMPLETED, outcome.stdout[-3000:]
    phases = [e.data["phase"] for e in outcome.of_kind(TrainerEventKind.PHASE)]
    assert phases[0] == TrainerPhase.PREPARING and phases[-1] == TrainerPhase.EXPORTING
    assert TrainerPhase.TRAINING in phases
    losses = outcome.losses()
    assert sorted(losses) == list(range(1, 13))
    # the first step ran at the full learning rate (linear decay, no warmup)
    first_point = next(e.data for e in outcome.of_kind(TrainerEventKind.METRICS) if e.data["step"] == 1)
    assert first_point["learning_rate"] == pytest.approx(float(hyper["learning_rate"]))
    first, last = losses[1], sum(losses[s] for s in (10, 11, 12)) / 3
    assert last < first - margin, f"{training_type}: loss {first:.4f} -> {last:.4f}"
    # and the evaluation over the same records agrees
    evaluated = [e.data for e in outcome.of_kind(TrainerEventKind.METRICS) if "eval_loss" in e.data]
    assert len(evaluated) == 1 and evaluated[0]["eval_loss"] < first - margin
    if training_type == "DPO":
        assert evaluated[0]["eval_reward_accuracy"] >= 0.75
    # and the final checkpoint holds what the type trains (the adapter only, for LoRA)
    manifest = outcome.checkpoints()[-1]
    assert manifest.step == 12
    assert manifest.is_adapter == (training_type == "LORA")
    weights_file = "adapter_model.safetensors" if manifest.is_adapter else "model.safetensors"
    weights = load_file(str(tmp_path / "checkpoints" / "step-000012" / weights_file))
    assert all("lora_" in k for k in weights) == (training_type == "LORA")
    assert outcome.done.data == {"exit_code": 0, "stopped": False, "checkpoint_uri": str(tmp_path / "checkpoints" / "step-000012")}
