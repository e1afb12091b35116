"""The transformers TrainingArguments names a job may give as hyperparameters (issue 17 point 2): each one
changes what it should in the trainer. (The refusals at submit: tests/unit/test_submit_rules.py.)"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers
from torch import nn
from trainer.failures import UserError
from trainer.hyper import Hyper
from trainer.loop import activate_neftune, autocast_factory, build_optimizer, build_scheduler, warmup_steps_for
from trainer.losses import loss_sum

from schemas.configs import DType
from schemas.hyperparameters import SchedulerName
from tests.trainer.runs import FAST_HYPER, make_spec, run_in_process

CPU = torch.device("cpu")


def hyper(**values: str) -> Hyper:
    return Hyper.from_strings(values, "FULL_FINETUNE")


def tiny_llama() -> nn.Module:
    config = transformers.LlamaConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config)


def lrs(h: Hyper, total: int, steps: int) -> list[float]:
    optimizer = build_optimizer(nn.Linear(2, 2), h, CPU)
    scheduler = build_scheduler(optimizer, h, total)
    out = []
    for _ in range(steps):
        out.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return out


# --- optim / optimizer, adam_beta1/2, adam_epsilon ---------------------------------------------------


@pytest.mark.parametrize(
    ("values", "cls", "fused"),
    [
        ({}, torch.optim.AdamW, None),
        ({"optim": "adamw_torch"}, torch.optim.AdamW, None),
        ({"optim": "adamw_torch_fused"}, torch.optim.AdamW, True),
        ({"optim": "adafactor"}, transformers.optimization.Adafactor, None),
        ({"optim": "sgd"}, torch.optim.SGD, None),
        # the dashboard's create form: AdamW, Adam, SGD
        ({"optimizer": "AdamW"}, torch.optim.AdamW, None),
        ({"optimizer": "Adam"}, torch.optim.Adam, None),
        ({"optimizer": "SGD"}, torch.optim.SGD, None),
        ({"optimizer": "adamw"}, torch.optim.AdamW, None),
    ],
)
def test_optim_builds_the_optimizer_it_names(values: dict[str, str], cls: type, fused: bool | None) -> None:
    optimizer = build_optimizer(nn.Linear(4, 4), hyper(**values), CPU)
    assert type(optimizer) is cls
    if cls is torch.optim.AdamW:
        assert optimizer.defaults["fused"] is fused


def test_adam_betas_and_epsilon_reach_the_optimizer() -> None:
    for values in ({"optim": "adamw_torch"}, {"optimizer": "Adam"}):
        optimizer = build_optimizer(nn.Linear(4, 4), hyper(**values, adam_beta1="0.8", adam_beta2="0.95", adam_epsilon="1e-6"), CPU)
        assert optimizer.defaults["betas"] == (0.8, 0.95) and optimizer.defaults["eps"] == 1e-6


def test_every_optimizer_trains_a_step() -> None:
    for name in ("adamw_torch", "adamw_torch_fused", "adam", "adafactor", "sgd"):
        layer = nn.Linear(4, 4)
        before = layer.weight.detach().clone()
        optimizer = build_optimizer(layer, hyper(optim=name, learning_rate="0.1"), CPU)
        layer(torch.ones(2, 4)).sum().backward()
        optimizer.step()
        assert not torch.equal(before, layer.weight), name


# --- lr_scheduler_type, warmup_ratio -------------------------------------------------------------------


def test_every_accepted_scheduler_is_one_transformers_knows() -> None:
    for name in SchedulerName.__args__:  # type: ignore[attr-defined]
        assert transformers.SchedulerType(name).value == name
        assert lrs(hyper(lr_scheduler_type=name, learning_rate="1", warmup_steps="2"), total=10, steps=10)


def test_the_schedule_is_transformers_own() -> None:
    # cosine_with_restarts, polynomial, constant_with_warmup: the LR at each step is get_scheduler's
    for name in ("cosine_with_restarts", "polynomial", "constant_with_warmup", "linear", "cosine"):
        ours = lrs(hyper(lr_scheduler_type=name, learning_rate="1", warmup_steps="2"), total=8, steps=8)
        optimizer = torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=1.0)
        reference = transformers.get_scheduler(name, optimizer, num_warmup_steps=2, num_training_steps=8)
        expected = []
        for _ in range(8):
            expected.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            reference.step()
        assert ours == pytest.approx(expected), name
    assert lrs(hyper(lr_scheduler_type="constant_with_warmup", learning_rate="1", warmup_steps="2"), 8, 4) == [0.0, 0.5, 1.0, 1.0]
    assert lrs(hyper(lr_scheduler_type="linear", learning_rate="1"), 4, 4) == [1.0, 0.75, 0.5, 0.25]


def test_warmup_ratio_is_a_fraction_of_the_total_steps() -> None:
    assert warmup_steps_for(hyper(warmup_ratio="0.25"), 10) == 3  # ceil, as TrainingArguments.get_warmup_steps
    assert lrs(hyper(warmup_ratio="0.5", learning_rate="1", lr_scheduler_type="constant_with_warmup"), 4, 4) == [0.0, 0.5, 1.0, 1.0]


# --- label_smoothing_factor, neftune_noise_alpha --------------------------------------------------------


def test_label_smoothing_changes_the_loss_as_cross_entropys_own() -> None:
    model = tiny_llama()
    ids = torch.randint(0, 64, (2, 6), generator=torch.Generator().manual_seed(1))
    batch = {"input_ids": ids, "labels": ids.clone(), "attention_mask": torch.ones_like(ids)}
    plain = loss_sum(model, None, batch, dpo_beta=0.1).total
    smoothed = loss_sum(model, None, batch, dpo_beta=0.1, label_smoothing=0.2).total
    logits = model(input_ids=ids).logits[:, :-1].reshape(-1, 64)
    expected = nn.functional.cross_entropy(logits, ids[:, 1:].reshape(-1), reduction="sum", label_smoothing=0.2)
    assert not torch.allclose(plain, smoothed) and torch.allclose(smoothed, expected)


def test_neftune_adds_noise_to_the_embeddings_in_train_mode_only() -> None:
    model = tiny_llama()
    ids = torch.tensor([[1, 2, 3, 4]])
    clean = model.get_input_embeddings()(ids).detach()
    handle = activate_neftune(model, 5.0)
    assert handle is not None
    model.train()
    noisy = model.get_input_embeddings()(ids).detach()
    assert not torch.allclose(noisy, clean)
    # uniform noise bounded by alpha / sqrt(seq_len * hidden), as transformers' hook
    assert (noisy - clean).abs().max() <= 5.0 / math.sqrt(4 * 16) + 1e-6
    model.eval()
    assert torch.equal(model.get_input_embeddings()(ids), clean)
    assert activate_neftune(model, None) is None


# --- bf16 / fp16 ------------------------------------------------------------------------------------------


def test_bf16_and_fp16_choose_cuda_autocast_and_are_refused_on_cpu() -> None:
    cuda = torch.device("cuda")  # a device object only: nothing runs on it
    bf16, bf16_scaler = autocast_factory(cuda, DType.FLOAT32, hyper(bf16="true"))
    fp16, fp16_scaler = autocast_factory(cuda, DType.FLOAT32, hyper(fp16="true"))
    assert bf16.keywords["dtype"] is torch.bfloat16 and not bf16_scaler  # type: ignore[attr-defined]
    assert fp16.keywords["dtype"] is torch.float16 and fp16_scaler  # type: ignore[attr-defined]
    with pytest.raises(UserError, match="bf16=true needs a GPU"):
        autocast_factory(CPU, DType.FLOAT32, hyper(bf16="true"))


# --- the loop: batch size / accumulation aliases, strategies ------------------------------------------------


def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], extra: dict[str, str], **spec: Any) -> Any:
    outcome = run_in_process(tmp_path, make_spec(tmp_path, hyperparameters={**FAST_HYPER, **extra}, **spec), monkeypatch, capsys)
    assert outcome.code == 0, outcome.stdout[-2000:]
    return outcome


def test_batch_size_and_accumulation_aliases_and_the_strategies_drive_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given 24 examples, per_device_train_batch_size=3 and gradient_accumulation_steps=2 (data_config says 4 and 1):
    # 8 micro-batches = 4 optimizer steps per epoch
    extra = {
        "max_steps": "8",
        "per_device_train_batch_size": "3",
        "gradient_accumulation_steps": "2",
        "logging_strategy": "epoch",
        "save_strategy": "epoch",
        "eval_strategy": "epoch",
        "label_smoothing_factor": "0.1",
        "neftune_noise_alpha": "5",
        "optim": "sgd",
        "lr_scheduler_type": "cosine_with_restarts",
        "warmup_ratio": "0.25",
    }
    outcome = run(tmp_path, monkeypatch, capsys, extra, data_config={"validation_split": 0.25})
    # Then the loss is logged at each epoch's end (steps 3 and 6 of 18 examples / 6 per step) and the last step
    assert sorted(outcome.losses()) == [3, 6, 8]
    # and checkpoints are written at epoch ends (and the final one)
    assert [m.step for m in outcome.checkpoints()][-3:] == [3, 6, 8]
    from tests.trainer.runs import metrics_points

    assert sorted({p.step for p in metrics_points(tmp_path) if p.eval_loss is not None}) == [3, 6, 8]


def test_torch_compile_and_unknown_schedulers_are_refused_naming_them() -> None:
    with pytest.raises(UserError, match="torch_compile"):
        hyper(torch_compile="true")
    with pytest.raises(UserError, match="lr_scheduler_type"):
        hyper(lr_scheduler_type="reduce_lr_on_plateau")
    assert not hyper(torch_compile="false").torch_compile
