"""functions/catalog/resharding.py: which resumes across shapes are possible, and the batch shape that
keeps the global batch (the trainer side is proven by tests/trainer/test_resume_shapes.py)."""

from __future__ import annotations

import pytest

from functions.catalog.resharding import ResumePlan, ShapeChange, plan_resume, world_size_of
from schemas.configs import FrameworkType, TrainingType

F, T = FrameworkType, TrainingType


def _change(
    framework: FrameworkType = F.FSDP, training: TrainingType = T.LORA, *, frm: int, to: int, batch: int = 8, accum: int = 2, **kw
) -> ShapeChange:
    return ShapeChange(
        training_type=training,
        framework=framework,
        from_world_size=frm,
        to_world_size=to,
        per_device_batch_size=batch,
        gradient_accumulation_steps=accum,
        **kw,
    )


@pytest.mark.parametrize("framework", [F.HF_TRAINER, F.FSDP])
@pytest.mark.parametrize("training", [T.LORA, T.FULL_FINETUNE, T.SFT, T.DPO])
def test_ddp_and_fsdp_resume_on_any_world_size_that_divides_the_global_batch(framework, training) -> None:
    # 1 -> 2: the per-device batch stays, the accumulation halves (what test_resume_shapes runs)
    up = plan_resume(_change(framework, training, frm=1, to=2, batch=8, accum=2))
    assert (up.possible, up.per_device_batch_size, up.gradient_accumulation_steps, up.global_batch_size) == (True, 8, 1, 16)
    assert up.hyperparameters() == {"per_device_train_batch_size": "8", "gradient_accumulation_steps": "1"}
    # 2 -> 1: the accumulation doubles
    down = plan_resume(_change(framework, training, frm=2, to=1, batch=8, accum=1))
    assert (down.per_device_batch_size, down.gradient_accumulation_steps) == (8, 2)
    # 8 -> 4 x 8 GPUs: a worker's share (1) is smaller than today's per-device batch
    wide = plan_resume(_change(framework, training, frm=8, to=32, batch=4, accum=1))
    assert (wide.possible, wide.per_device_batch_size, wide.gradient_accumulation_steps) == (True, 1, 1)


def test_the_global_batch_is_kept_for_every_divisible_target() -> None:
    for frm in (1, 2, 3, 4, 8):
        for to in (1, 2, 3, 4, 6, 8, 16):
            for batch, accum in ((1, 1), (4, 3), (8, 2), (6, 5)):
                change = _change(frm=frm, to=to, batch=batch, accum=accum)
                plan = plan_resume(change)
                assert plan.possible == (change.global_batch_size % to == 0), (frm, to, batch, accum)
                if plan.possible:
                    assert plan.per_device_batch_size is not None and plan.gradient_accumulation_steps is not None
                    assert plan.per_device_batch_size * plan.gradient_accumulation_steps * to == change.global_batch_size
                    assert plan.per_device_batch_size <= batch


def test_a_smaller_gpu_gets_a_smaller_per_device_batch_and_more_accumulation() -> None:
    plan = plan_resume(_change(frm=2, to=2, batch=8, accum=1, max_per_device_batch_size=3))
    # the largest batch <= 3 that divides the worker's 8 examples
    assert (plan.per_device_batch_size, plan.gradient_accumulation_steps) == (2, 4)


def test_an_indivisible_global_batch_is_refused_with_the_numbers() -> None:
    plan = plan_resume(_change(frm=2, to=3, batch=4, accum=1))
    assert not plan.possible and plan.per_device_batch_size is None
    assert plan.reason == "the global batch of 8 (per-device batch 4 x accumulation 1 x 2 workers) does not divide among 3 workers"
    with pytest.raises(ValueError, match="no resume at world size 3"):
        plan.hyperparameters()


@pytest.mark.parametrize(
    ("framework", "training", "words"),
    [
        (F.DEEPSPEED, T.FULL_FINETUNE, "ZeRO partitions: only 2 workers resume it, not 4"),
        (F.CUSTOM, T.SFT, "CUSTOM script writes its own checkpoints"),
        (F.MEGATRON, T.SFT, "framework MEGATRON does not resume"),
    ],
)
def test_states_the_trainer_cannot_reshard_are_refused_on_another_world_size(framework, training, words) -> None:
    plan = plan_resume(_change(framework, training, frm=2, to=4))
    assert not plan.possible and plan.reason is not None and words in plan.reason
    # the same world size (another GPU type) keeps the batch as it is
    same = plan_resume(_change(framework, training, frm=2, to=2, batch=8, accum=2))
    assert (same.possible, same.per_device_batch_size, same.gradient_accumulation_steps) == (True, 8, 2)


def test_rlhf_resumes_only_in_one_process() -> None:
    assert plan_resume(_change(F.HF_TRAINER, T.RLHF, frm=1, to=1)).possible
    refused = plan_resume(_change(F.HF_TRAINER, T.RLHF, frm=1, to=2))
    assert refused.reason == "RLHF runs in one process: world size 2 cannot run it"


def test_more_accumulation_than_the_api_accepts_is_refused() -> None:
    plan = plan_resume(_change(frm=64, to=1, batch=256, accum=1, max_per_device_batch_size=1))
    assert not plan.possible and plan.reason is not None and "gradient_accumulation_steps 16384" in plan.reason


def test_bad_inputs_are_programming_errors_and_world_sizes_count_gpus() -> None:
    with pytest.raises(ValueError, match="to_world_size must be at least 1"):
        _change(frm=1, to=0)
    with pytest.raises(ValueError, match="max_per_device_batch_size"):
        _change(frm=1, to=1, max_per_device_batch_size=0)
    assert (world_size_of(2, 8), world_size_of(1, 0)) == (16, 1)
    assert isinstance(plan_resume(_change(frm=1, to=1)), ResumePlan)
