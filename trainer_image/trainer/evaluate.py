"""Evaluation on the validation split: eval_loss (token-weighted, the same loss as training) and,
for DPO, eval_reward_accuracy (how often the policy prefers the chosen answer more than the
reference does).

Evaluation draws no random numbers (model.eval() switches dropout off), so evaluating in the middle
of a run does not change the training that follows: exact resume holds with or without eval_steps.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from trainer.losses import count_targets, loss_sum
from trainer.runtime import Runtime


def evaluate(
    model: nn.Module,
    reference_model: nn.Module | None,
    examples: list[dict[str, Any]],
    collate: Callable[[list[dict[str, Any]]], dict[str, Tensor]],
    *,
    batch_size: int,
    runtime: Runtime,
    dpo_beta: float,
    autocast: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext,
    shard: bool = True,
    should_stop: Callable[[], bool] = lambda: False,
) -> dict[str, float]:
    """Returns {} when there is nothing to evaluate (no validation split) or the run is stopping.

    shard: each rank evaluates every world_size-th example (DDP); FSDP needs every rank in every
    forward pass, so there all ranks evaluate everything.
    """
    if not examples:
        return {}
    mine = examples[runtime.rank :: runtime.world_size] if shard else examples
    was_training = model.training
    model.eval()
    total = count = accuracy = 0.0
    stopped = False
    try:
        with torch.no_grad():
            for start in range(0, len(mine), batch_size):
                if should_stop():
                    stopped = True
                    break
                host_batch = collate(mine[start : start + batch_size])
                count += count_targets(host_batch)
                batch = {k: v.to(runtime.device) for k, v in host_batch.items()}
                with autocast():
                    result = loss_sum(model, reference_model, batch, dpo_beta=dpo_beta)
                total += float(result.total)
                if "reward_accuracy_sum" in result.extra:
                    accuracy += float(result.extra["reward_accuracy_sum"])
    finally:
        model.train(was_training)
    if shard and runtime.world_size > 1:
        total, count, accuracy, any_stopped = runtime.all_reduce_sum([total, count, accuracy, float(stopped)])
        stopped = any_stopped > 0
    if stopped or count == 0:
        return {}
    metrics = {"eval_loss": total / count}
    if "chosen_input_ids" in examples[0]:
        metrics["eval_reward_accuracy"] = accuracy / count
    return metrics
