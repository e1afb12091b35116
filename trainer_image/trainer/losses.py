"""The training-type losses.

Causal LM (FULL_FINETUNE, CONTINUED_PRETRAIN, SFT, LORA, QLORA): next-token cross-entropy on the
positions whose label is not -100 (SFT masks the prompt). Losses are returned as a SUM with the count
it is over, so the loop can normalise by the tokens of the whole optimizer step (all micro-batches):
a step's loss is then the same whatever the micro-batch split, which exact resume and gradient
accumulation both need.

DPO: -log sigmoid(beta * ((log pi(chosen) - log ref(chosen)) - (log pi(rejected) - log ref(rejected)))),
with sequence log-probabilities summed over the completion tokens.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

IGNORE_INDEX = -100
DPO_KEYS = ("chosen_input_ids", "chosen_labels", "rejected_input_ids", "rejected_labels")


@dataclass
class LossSum:
    """Device tensors only: reading a number here would sync the GPU in the middle of a step. The
    denominators come from the batch on the host (count_targets, count_tokens) before it moves."""

    total: Tensor  # summed loss (carries the graph)
    extra: dict[str, Tensor] = field(default_factory=dict)  # e.g. DPO's reward_accuracy_sum


def is_dpo_batch(batch: dict[str, Tensor]) -> bool:
    return "chosen_input_ids" in batch


def count_targets(batch: dict[str, Tensor]) -> int:
    """Loss denominator of a (host) micro-batch: loss tokens, or pairs for DPO."""
    if is_dpo_batch(batch):
        return int(batch["chosen_input_ids"].shape[0])
    return int((batch["labels"][:, 1:] != IGNORE_INDEX).sum())


def count_tokens(batch: dict[str, Tensor]) -> int:
    """Input tokens a (host) micro-batch feeds the model, padding excluded: the tokens of tokens/s."""
    prefixes = ("chosen_", "rejected_") if is_dpo_batch(batch) else ("",)
    total = 0
    for prefix in prefixes:
        mask = batch.get(f"{prefix}attention_mask")
        total += int(mask.sum()) if mask is not None else batch[f"{prefix}input_ids"].numel()
    return total


def _logits(model: nn.Module, input_ids: Tensor, attention_mask: Tensor | None) -> Tensor:
    return model(input_ids=input_ids, attention_mask=attention_mask).logits


def causal_lm_sum(model: nn.Module, batch: dict[str, Tensor], label_smoothing: float = 0.0) -> LossSum:
    input_ids, labels = batch["input_ids"], batch["labels"]
    attention_mask = batch.get("attention_mask")
    logits = _logits(model, input_ids, attention_mask)
    shift_logits = logits[:, :-1, :].float()
    shift_labels = labels[:, 1:]
    total = F.cross_entropy(
        shift_logits.reshape(-1, shift_logits.size(-1)),
        shift_labels.reshape(-1),
        ignore_index=IGNORE_INDEX,
        reduction="sum",
        label_smoothing=label_smoothing,
    )
    return LossSum(total=total)


def sequence_logprob(model: nn.Module, input_ids: Tensor, labels: Tensor, attention_mask: Tensor | None) -> Tensor:
    """Sum of log p(label_t | <t) over the labelled positions, one value per row."""
    logits = _logits(model, input_ids, attention_mask)[:, :-1, :].float()
    targets = labels[:, 1:]
    mask = targets != IGNORE_INDEX
    safe = targets.masked_fill(~mask, 0)
    logps = torch.gather(F.log_softmax(logits, dim=-1), 2, safe.unsqueeze(-1)).squeeze(-1)
    return (logps * mask).sum(-1)


@contextlib.contextmanager
def reference_mode(model: nn.Module, reference_model: nn.Module | None) -> Iterator[nn.Module]:
    """The reference policy: a frozen copy, or the adapter model with its adapter switched off."""
    if reference_model is not None:
        yield reference_model
        return
    inner = getattr(model, "module", model)  # DDP wraps the peft model
    disable = getattr(inner, "disable_adapter", None)
    if disable is None:
        raise RuntimeError("DPO needs a reference model: the model loader returned none and the model has no adapter to disable")
    with disable():
        yield inner


def _pair_logprobs(model: nn.Module, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
    """log p(chosen), log p(rejected); one forward pass over both when collate padded them alike."""
    chosen = (batch["chosen_input_ids"], batch["chosen_labels"], batch.get("chosen_attention_mask"))
    rejected = (batch["rejected_input_ids"], batch["rejected_labels"], batch.get("rejected_attention_mask"))
    if chosen[0].shape == rejected[0].shape and (chosen[2] is None) == (rejected[2] is None):
        rows = chosen[0].shape[0]
        mask = None if chosen[2] is None else torch.cat([chosen[2], rejected[2]])
        both = sequence_logprob(model, torch.cat([chosen[0], rejected[0]]), torch.cat([chosen[1], rejected[1]]), mask)
        return both[:rows], both[rows:]
    return sequence_logprob(model, *chosen), sequence_logprob(model, *rejected)


def dpo_sum(model: nn.Module, reference_model: nn.Module | None, batch: dict[str, Tensor], beta: float) -> LossSum:
    policy_chosen, policy_rejected = _pair_logprobs(model, batch)
    with torch.no_grad(), reference_mode(model, reference_model) as ref:
        ref_chosen, ref_rejected = _pair_logprobs(ref, batch)
    chosen_reward = beta * (policy_chosen - ref_chosen)
    rejected_reward = beta * (policy_rejected - ref_rejected)
    losses = -F.logsigmoid(chosen_reward - rejected_reward)
    accuracy = (chosen_reward > rejected_reward).float().sum().detach()
    return LossSum(total=losses.sum(), extra={"reward_accuracy_sum": accuracy})


def loss_sum(
    model: nn.Module, reference_model: nn.Module | None, batch: dict[str, Tensor], *, dpo_beta: float, label_smoothing: float = 0.0
) -> LossSum:
    """label_smoothing: TrainingArguments' label_smoothing_factor (token cross-entropy only; submit refuses it for DPO)."""
    if is_dpo_batch(batch):
        return dpo_sum(model, reference_model, batch, dpo_beta)
    return causal_lm_sum(model, batch, label_smoothing)
