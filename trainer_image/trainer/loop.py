"""The training loop: plain PyTorch, so that the data position, the RNG and the stop point are ours.

Data order: epoch e visits the examples in torch.randperm(n, seed + e); micro-batch j of an epoch is
a fixed slice of that permutation (per rank). The data position is (epoch, next micro-batch), saved
in every checkpoint together with the RNG states, so a resumed run sees exactly the batches and the
dropout masks the uninterrupted run would have seen.

One optimizer step = gradient_accumulation_steps micro-batches (the epoch's last step may have fewer).
The step's loss is normalised by the loss tokens of ALL its micro-batches (losses.py), then AdamW,
the LR schedule and gradient clipping.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

from schemas.api import MetricsPoint
from schemas.configs import DType
from schemas.trainer import RunSpec, TrainerEventKind, TrainerPhase
from trainer import checkpoint as ckpt
from trainer.evaluate import evaluate
from trainer.events import Events, log
from trainer.failures import UserError
from trainer.hyper import Hyper
from trainer.losses import count_targets, count_tokens, loss_sum
from trainer.metrics import MetricsLog, Progress, report
from trainer.runtime import Runtime
from trainer.signals import StopRequest

Collate = Callable[[list[dict[str, Any]]], dict[str, Tensor]]


@dataclass
class TrainInputs:
    model: nn.Module
    is_adapter: bool
    train: list[dict[str, Any]]
    validation: list[dict[str, Any]]
    collate: Collate  # pad id already bound
    reference_model: nn.Module | None = None
    extra_files: dict[str, bytes] = field(default_factory=dict)  # written into every checkpoint (config.json...)


@dataclass
class TrainResult:
    stopped: bool
    step: int
    total_steps: int
    losses: dict[int, float]  # step -> loss at logging steps
    eval_metrics: dict[str, float]
    checkpoint_uri: str | None
    resumed_from: str | None
    checkpoint_stall_seconds: list[float] = field(default_factory=list)  # training time lost to each mid-run save


class DataOrder:
    """Which examples make micro-batch j of epoch e on this rank."""

    def __init__(self, n: int, batch_size: int, *, seed: int, rank: int = 0, world_size: int = 1) -> None:
        if n == 0:
            raise UserError("the training split is empty")
        self.n, self.batch_size, self.seed, self.rank, self.world_size = n, batch_size, seed, rank, world_size
        if world_size == 1:
            self.micro_per_epoch = math.ceil(n / batch_size)
        else:
            # Every rank must run the same number of forward passes: drop the ragged tail.
            self.micro_per_epoch = n // (batch_size * world_size)
            if self.micro_per_epoch == 0:
                raise UserError(f"{n} training examples cannot fill one batch of batch_size={batch_size} on each of {world_size} workers")
        self._cached: tuple[int, list[int]] | None = None

    def permutation(self, epoch: int) -> list[int]:
        if self._cached is None or self._cached[0] != epoch:
            generator = torch.Generator().manual_seed(self.seed + epoch)
            self._cached = (epoch, torch.randperm(self.n, generator=generator).tolist())
        return self._cached[1]

    def micro_batch(self, epoch: int, micro: int) -> list[int]:
        start = (micro * self.world_size + self.rank) * self.batch_size
        return self.permutation(epoch)[start : start + self.batch_size]


def warmup_steps_for(hyper: Hyper, total_steps: int) -> int:
    """TrainingArguments.get_warmup_steps: warmup_steps, else ceil(warmup_ratio * total)."""
    return hyper.warmup_steps if hyper.warmup_steps else math.ceil(hyper.warmup_ratio * total_steps)


def build_scheduler(optimizer: torch.optim.Optimizer, hyper: Hyper, total_steps: int) -> Any:
    """transformers' own schedulers, by lr_scheduler_type (the names schemas/hyperparameters.py accepts)."""
    from transformers import get_scheduler

    return get_scheduler(
        hyper.lr_scheduler_type,
        optimizer,
        num_warmup_steps=warmup_steps_for(hyper, total_steps),
        num_training_steps=total_steps,
    )


def build_optimizer(model: nn.Module, hyper: Hyper, device: torch.device) -> torch.optim.Optimizer:
    """The optimizer `optim` (or `optimizer`) names, built as transformers' Trainer builds it."""
    decay: list[nn.Parameter] = []
    no_decay: list[nn.Parameter] = []
    for _name, param in model.named_parameters():
        if param.requires_grad:
            # Biases and norm weights (1-D) are not decayed, as in every reference recipe.
            (decay if param.ndim >= 2 else no_decay).append(param)
    if not decay and not no_decay:
        raise UserError("the model has no trainable parameters")
    groups = [g for g in ({"params": decay, "weight_decay": hyper.weight_decay}, {"params": no_decay, "weight_decay": 0.0}) if g["params"]]
    name, lr = hyper.optimizer_name(), hyper.learning_rate
    adam: dict[str, Any] = {"lr": lr, "betas": (hyper.adam_beta1, hyper.adam_beta2), "eps": hyper.adam_epsilon}
    if name == "adamw_torch":
        fused = device.type == "cuda"  # one kernel per step on GPU; CPU keeps the default (foreach)
        return torch.optim.AdamW(groups, **adam, fused=fused or None)
    if name == "adamw_torch_fused":
        return torch.optim.AdamW(groups, **adam, fused=True)
    if name == "adam":
        return torch.optim.Adam(groups, **adam)
    if name == "sgd":
        return torch.optim.SGD(groups, lr=lr)
    if name == "adafactor":
        from transformers.optimization import Adafactor

        # TrainingArguments(optim="adafactor"): a fixed learning rate, driven by the scheduler.
        return Adafactor(groups, lr=lr, scale_parameter=False, relative_step=False, warmup_init=False)
    raise UserError(f"hyperparameter optim={name}: not an optimizer this trainer builds")


def autocast_factory(
    device: torch.device, dtype: DType, hyper: Hyper | None = None
) -> tuple[Callable[[], contextlib.AbstractContextManager[Any]], bool]:
    """(autocast context factory, needs a GradScaler). Mixed precision only on CUDA; bf16/fp16 choose it."""
    bf16, fp16 = (hyper.bf16, hyper.fp16) if hyper is not None else (False, False)
    if device.type != "cuda":
        if bf16 or fp16:
            raise UserError(f"hyperparameter {'bf16' if bf16 else 'fp16'}=true needs a GPU (mixed precision is CUDA-only here)")
        return contextlib.nullcontext, False
    if bf16:
        return partial(torch.autocast, "cuda", dtype=torch.bfloat16), False
    if fp16:
        return partial(torch.autocast, "cuda", dtype=torch.float16), True
    if dtype == DType.BFLOAT16 or (dtype == DType.AUTO and torch.cuda.is_bf16_supported()):
        return partial(torch.autocast, "cuda", dtype=torch.bfloat16), False
    if dtype == DType.FLOAT16:
        return partial(torch.autocast, "cuda", dtype=torch.float16), True
    return contextlib.nullcontext, False


def activate_neftune(model: nn.Module, alpha: float | None) -> Any:
    """transformers' NEFTune hook on the input embeddings (noise in train mode only); None when off."""
    if alpha is None:
        return None
    from transformers.integrations.neftune import neftune_post_forward_hook

    get_embeddings = getattr(model, "get_input_embeddings", None)
    embeddings = get_embeddings() if callable(get_embeddings) else None
    if not isinstance(embeddings, nn.Module):
        raise UserError("hyperparameter neftune_noise_alpha: this model has no input embeddings to add noise to")
    embeddings.neftune_noise_alpha = alpha  # type: ignore[assignment]
    return embeddings.register_forward_hook(neftune_post_forward_hook)


class TrainingLoop:
    def __init__(
        self,
        spec: RunSpec,
        hyper: Hyper,
        inputs: TrainInputs,
        *,
        runtime: Runtime,
        checkpoints: ckpt.CheckpointManager,
        events: Events,
        metrics: MetricsLog,
        stop: StopRequest,
    ) -> None:
        self.spec, self.hyper, self.inputs = spec, hyper, inputs
        self.runtime, self.checkpoints, self.events, self.metrics, self.stop = runtime, checkpoints, events, metrics, stop
        dc = spec.data_config
        self.training_type = spec.training_config.training_type
        self.seed = hyper.seed if hyper.seed is not None else dc.seed
        # per_device_train_batch_size / gradient_accumulation_steps: TrainingArguments' names of the data_config
        # fields (submit refuses a disagreement with a value data_config sets).
        self.batch_size = hyper.per_device_train_batch_size or dc.batch_size
        self.order = DataOrder(len(inputs.train), self.batch_size, seed=self.seed, rank=runtime.rank, world_size=runtime.world_size)
        self.accum = hyper.gradient_accumulation_steps or dc.gradient_accumulation_steps
        self.steps_per_epoch = math.ceil(self.order.micro_per_epoch / self.accum)
        if hyper.max_steps is not None:
            self.total_steps = hyper.max_steps
        else:
            self.total_steps = max(1, math.ceil(hyper.num_train_epochs * self.steps_per_epoch))
        self.autocast, needs_scaler = autocast_factory(runtime.device, spec.training_config.base_model.dtype, hyper)
        trainable = [p for p in inputs.model.parameters() if p.requires_grad]
        # GradScaler cannot unscale fp16 gradients of fp16 weights; it is for fp32 weights under fp16 autocast.
        self.scaler = torch.amp.GradScaler("cuda") if needs_scaler and all(p.dtype == torch.float32 for p in trainable) else None
        self.step = 0
        self.epoch = 0
        self.micro = 0
        self.tokens_seen = 0
        self.losses: dict[int, float] = {}
        self.eval_metrics: dict[str, float] = {}
        self.checkpoint_stalls: list[float] = []
        self._copier = ckpt.HostCopier()

    # --- state -----------------------------------------------------------------------------
    def _epoch_float(self) -> float:
        return self.epoch + self.micro / self.order.micro_per_epoch

    def _trainer_state(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "epoch": self.epoch,
            "micro_batch": self.micro,
            "epoch_float": self._epoch_float(),
            "data_seed": self.seed,
            "num_examples": self.order.n,
            "world_size": self.runtime.world_size,
            # The shape of a step: another world size resumes at the same example (functions/catalog/resharding.py).
            "per_device_batch_size": self.batch_size,
            "gradient_accumulation_steps": self.accum,
            "total_steps": self.total_steps,
            "tokens_seen": self.tokens_seen,
            "training_type": self.training_type.value,
            "is_adapter": self.inputs.is_adapter,
            "hyperparameters": self.hyper.to_strings(),
        }

    def _snapshot(self, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any, metrics: dict[str, float]) -> ckpt.Snapshot:
        # Collective under FSDP and DeepSpeed: every rank gathers, only rank 0 keeps the tensors and
        # writes. Under DDP every rank holds the same state: only rank 0 copies it.
        tensors: dict[str, Tensor] = {}
        optim_state: dict[str, Any] = {}
        if self.runtime.is_main or self.runtime.collective_state:
            tensors = self._copier(self.runtime.model_state(model, self.inputs.is_adapter), "model")
            optim_state = self._copier(self.runtime.optimizer_state(model, optimizer), "optimizer")
            self._copier.finish()
        rng = self.runtime.gather_object(ckpt.capture_rng())
        return ckpt.Snapshot(
            step=self.step,
            epoch=self._epoch_float(),
            model_tensors=tensors,
            is_adapter=self.inputs.is_adapter,
            optimizer=optim_state,
            scheduler=ckpt.to_cpu(scheduler.state_dict()),
            rng={"per_rank": rng},
            trainer_state=self._trainer_state(),
            metrics=metrics,
            extra_files=self.inputs.extra_files,
        )

    def _restore(self, loaded: ckpt.Loaded, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any) -> None:
        state = loaded.trainer_state()
        if loaded.manifest.is_adapter != self.inputs.is_adapter:
            kind = "an adapter" if loaded.manifest.is_adapter else "full weights"
            raise UserError(f"checkpoint {loaded.uri} holds {kind}; this run's training type {self.training_type.value} needs the other")
        self.runtime.load_model_state(model, loaded.model_tensors(), self.inputs.is_adapter)
        self.runtime.load_optimizer_state(model, optimizer, loaded.torch_file(ckpt.OPTIMIZER_FILE))
        scheduler.load_state_dict(loaded.torch_file(ckpt.SCHEDULER_FILE))
        per_rank = loaded.torch_file(ckpt.RNG_FILE)["per_rank"]
        ckpt.restore_rng(per_rank[self.runtime.rank] if len(per_rank) == self.runtime.world_size else per_rank[0])
        self.step, self.epoch = int(state["step"]), int(state["epoch"])
        self.micro = self._micro_in_this_shape(state, loaded.uri)
        self.tokens_seen = int(state.get("tokens_seen", 0))
        if state.get("num_examples") != self.order.n or state.get("data_seed") != self.seed:
            log("WARNING: the data (size or seed) differs from the checkpoint's run: resuming, but not exactly")
        if self.micro >= self.order.micro_per_epoch:
            self.epoch, self.micro = self.epoch + 1, 0
        log(f"resumed from {loaded.uri} at step {self.step} (epoch {self.epoch}, micro-batch {self.micro})")

    def _micro_in_this_shape(self, state: dict[str, Any], uri: str) -> int:
        """The saved data position (a micro-batch index of the saved shape) as a micro-batch of this run.

        A micro-batch index counts world_size x per-device batch examples of the epoch's permutation, so
        a checkpoint of another shape (world size 1 -> 2, other per-device batch) resumes at the same
        example when that count divides the examples done. With the same global batch (per-device batch
        x accumulation x world size) it always does at a step boundary, and every later step sees the
        examples the uninterrupted run's step saw.
        """
        micro = int(state["micro_batch"])
        saved_world = int(state.get("world_size", self.runtime.world_size))
        saved_batch = int(state.get("per_device_batch_size", self.batch_size))  # older checkpoints: this run's
        saved_global = saved_world * saved_batch * int(state.get("gradient_accumulation_steps", self.accum))
        global_batch = self.runtime.world_size * self.batch_size * self.accum
        if saved_global != global_batch:
            log(
                f"WARNING: the checkpoint's global batch was {saved_global} examples, this run's is {global_batch} "
                "(world_size x per_device_train_batch_size x gradient_accumulation_steps): resuming, but not exactly"
            )
        examples_done = micro * saved_world * saved_batch
        per_micro = self.runtime.world_size * self.batch_size
        if examples_done % per_micro:
            raise UserError(
                f"checkpoint {uri} stopped after {examples_done} examples of epoch {state['epoch']}, not a whole number of "
                f"micro-batches of {per_micro} (world_size {self.runtime.world_size} x per_device_train_batch_size "
                f"{self.batch_size}): resume with a per-device batch that divides it"
            )
        return examples_done // per_micro

    # --- one step ----------------------------------------------------------------------------
    def _next_micro_batches(self) -> tuple[list[list[int]], bool]:
        """The micro-batches of the next step, advancing the position; True when the step ends an epoch."""
        batches: list[list[int]] = []
        while len(batches) < self.accum:
            batches.append(self.order.micro_batch(self.epoch, self.micro))
            self.micro += 1
            if self.micro >= self.order.micro_per_epoch:
                self.epoch, self.micro = self.epoch + 1, 0
                return batches, True
        return batches, False

    def _train_step(self, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any) -> tuple[Tensor, Tensor, int, bool]:
        micro_batches, ended_epoch = self._next_micro_batches()
        device = self.runtime.device
        batches = [self.inputs.collate([self.inputs.train[i] for i in idx]) for idx in micro_batches]
        # Counted on the host, before the batches move: no GPU sync inside the step.
        denominator: float = max(1, sum(count_targets(b) for b in batches))
        if self.runtime.world_size > 1:
            # Normalise by the loss tokens of the whole global batch (what transformers' Trainer gathers as
            # num_items_in_batch), times world_size because gradient sync averages over ranks: the step is the
            # same whatever the world size, so a run resumes on another shape where it left off.
            local = sum(count_targets(b) for b in batches)
            denominator = max(1.0, self.runtime.all_reduce_sum([float(local)])[0]) / self.runtime.world_size
        tokens = sum(count_tokens(b) for b in batches)
        step_loss = torch.zeros((), device=device)
        for k, batch in enumerate(batches):
            batch = {name: self._to_device(t) for name, t in batch.items()}
            last = k == len(batches) - 1
            with contextlib.nullcontext() if last else self.runtime.no_sync(model), self.autocast():
                result = loss_sum(
                    model,
                    self.inputs.reference_model,
                    batch,
                    dpo_beta=self.hyper.dpo_beta,
                    label_smoothing=self.hyper.label_smoothing_factor,
                )
                loss = result.total / denominator
            self.runtime.backward(model, self.scaler.scale(loss) if self.scaler else loss, last=last)
            step_loss += loss.detach()
        grad_norm = self.runtime.optimizer_step(model, optimizer, self.hyper.max_grad_norm, self.scaler)
        scheduler.step()
        return step_loss, grad_norm, tokens, ended_epoch

    def _to_device(self, tensor: Tensor) -> Tensor:
        if self.runtime.device.type != "cuda":
            return tensor
        # Pinned host memory makes the copy asynchronous: the next micro-batch is collated meanwhile.
        source = tensor.pin_memory() if self.spec.data_config.pin_memory else tensor
        return source.to(self.runtime.device, non_blocking=True)

    # --- the run -----------------------------------------------------------------------------
    def run(self, resume_from: str | None) -> TrainResult:
        runtime, hyper = self.runtime, self.hyper
        activate_neftune(self.inputs.model, hyper.neftune_noise_alpha)  # before wrapping: on the model's own embeddings
        model = runtime.wrap(self.inputs.model)
        # hyper.gradient_checkpointing is applied by the model loader (trainer.models), before any wrapping.
        optimizer = build_optimizer(model, hyper, runtime.device)
        model = runtime.prepare(model, optimizer, max_grad_norm=hyper.max_grad_norm, micro_batch_size=self.batch_size)
        scheduler = build_scheduler(optimizer, hyper, self.total_steps)

        loaded = self._find_resume(resume_from)
        if loaded is not None:
            self._restore(loaded, model, optimizer, scheduler)
        resumed_at = self.step
        self.metrics.started_at(resumed_at, loaded.uri if loaded is not None else None)
        progress = Progress(self.total_steps, start_step=self.step)
        self.events.set_phase(TrainerPhase.TRAINING)
        model.train()
        window_start, window_tokens, window_steps = time.perf_counter(), 0, 0
        last_saved_step = resumed_at if loaded is not None else -1
        stopped = False
        best_needs_eval = (self.spec.output_config.checkpoint.metric_for_best_model or "").startswith("eval_")

        while self.step < self.total_steps:
            if self._should_stop(progress):
                stopped = True
                break
            step_start = time.perf_counter()
            step_lr = optimizer.param_groups[0]["lr"]  # the rate this step uses (the scheduler moves on after it)
            step_loss, grad_norm, tokens, ended_epoch = self._train_step(model, optimizer, scheduler)
            self.step += 1
            window_tokens += tokens
            window_steps += 1
            progress.record(time.perf_counter() - step_start)
            if self._log_due(ended_epoch):
                loss_value, grad_value, tokens_all = self._reduce_for_logging(step_loss, grad_norm, window_tokens)
                elapsed = time.perf_counter() - window_start
                self.tokens_seen += int(tokens_all)
                self.losses[self.step] = loss_value
                point = MetricsPoint(
                    step=self.step,
                    epoch=round(self._epoch_float(), 4),
                    loss=loss_value,
                    learning_rate=step_lr,
                    grad_norm=grad_value,
                    tokens_per_second=round(tokens_all / elapsed, 2) if elapsed > 0 else None,
                    attempt=self.spec.attempt,
                )
                report(self.events, self.metrics, point, progress)
                window_start, window_tokens, window_steps = time.perf_counter(), 0, 0
            metrics_now: dict[str, float] = {"loss": self.losses[self.step]} if self.step in self.losses else {}
            if self._eval_due(ended_epoch):
                metrics_now.update(self._evaluate(model, during_training=True))
            if self._save_due(ended_epoch):
                if best_needs_eval and "eval_loss" not in metrics_now:
                    metrics_now.update(self._evaluate(model, during_training=True))
                self._save(model, optimizer, scheduler, metrics_now, wait=False)
                last_saved_step = self.step
            # A checkpoint written in the background may have failed: surface it now, not at the end.
            if not self.checkpoints.busy:
                self._wait_for_checkpoint()

        if last_saved_step != self.step and self.step > 0:
            # The final (or the stop) checkpoint, waited for: after it the run may be killed any time.
            self._save(model, optimizer, scheduler, {"loss": self.losses[self.step]} if self.step in self.losses else {}, wait=True)
        elif stopped and self.step > resumed_at:
            # The stop's checkpoint is the one just saved (perhaps still being written): a stop always reads
            # CHECKPOINTING as its last phase, whichever save it was.
            self.events.set_phase(TrainerPhase.CHECKPOINTING)
        self._wait_for_checkpoint()
        self.metrics.sync()
        if not stopped:
            stopped = runtime.broadcast_flag(self.stop.requested)
        if not stopped:
            self.eval_metrics = self._evaluate(model, during_training=False)
            stopped = runtime.broadcast_flag(self.stop.requested)
        self.final_model = model  # wrapped (DDP/FSDP) as trained; export reads it
        last = self.checkpoints.last_saved_uri or (loaded.uri if loaded else None)
        return TrainResult(
            stopped=stopped,
            step=self.step,
            total_steps=self.total_steps,
            losses=self.losses,
            eval_metrics=self.eval_metrics,
            checkpoint_uri=last,
            resumed_from=loaded.uri if loaded else None,
            checkpoint_stall_seconds=self.checkpoint_stalls,
        )

    def _find_resume(self, resume_from: str | None) -> ckpt.Loaded | None:
        # One process per node downloads and verifies; the others wait, then read the same local copy.
        loaded = self.checkpoints.find_resume(resume_from) if self.runtime.local_rank == 0 else None
        if self.runtime.world_size == 1:
            return loaded
        self.runtime.barrier()
        chosen = self.runtime.gather_object((loaded.checkpoint_id, loaded.uri, str(loaded.local_dir)) if loaded else None)[0]
        if chosen is None:
            return None
        if loaded is None:
            checkpoint_id, uri, local_dir = chosen
            manifest = ckpt.CheckpointManifest.model_validate_json((ckpt.Path(local_dir) / ckpt.MANIFEST_NAME).read_text(encoding="utf-8"))
            loaded = ckpt.Loaded(checkpoint_id=checkpoint_id, uri=uri, local_dir=ckpt.Path(local_dir), manifest=manifest)
        return loaded

    def _should_stop(self, progress: Progress) -> bool:
        budget = max(self.checkpoints.last_save_seconds, 2 * progress.step_seconds)
        return self.runtime.broadcast_flag(self.stop.should_stop(next_step_seconds=progress.step_seconds, checkpoint_seconds=budget))

    def _reduce_for_logging(self, step_loss: Tensor, grad_norm: Tensor, tokens: int) -> tuple[float, float, float]:
        loss, grad, tokens_all = (
            float(step_loss),
            float(grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm),
            float(tokens),
        )
        if self.runtime.world_size > 1:
            loss_sum_all, tokens_all = self.runtime.all_reduce_sum([loss, tokens_all])
            loss = loss_sum_all / self.runtime.world_size
        return loss, grad, tokens_all

    def _log_due(self, ended_epoch: bool) -> bool:
        strategy = self.hyper.logging_strategy
        if self.step == self.total_steps:
            return True  # the last step is always reported (the job's final loss)
        if strategy == "epoch":
            return ended_epoch
        return strategy == "steps" and self.step % self.hyper.logging_steps == 0

    def _eval_due(self, ended_epoch: bool) -> bool:
        strategy = self.hyper.evaluation_strategy_name()
        if strategy == "epoch":
            return ended_epoch
        return strategy == "steps" and self.step % (self.hyper.evaluation_every() or 1) == 0

    def _save_due(self, ended_epoch: bool) -> bool:
        # save_strategy / save_steps hyperparameters: TrainingArguments' names of the checkpoint config's fields.
        config = self.spec.output_config.checkpoint
        strategy = self.hyper.save_strategy or config.save_strategy.value
        if strategy == "epoch":
            return ended_epoch
        return self.step % (self.hyper.save_steps or config.save_steps) == 0

    def _save(self, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any, metrics: dict[str, float], *, wait: bool) -> None:
        started = time.perf_counter()
        self.events.set_phase(TrainerPhase.CHECKPOINTING)
        # The stall is the copy off the accelerator (snapshot) plus, without async, the whole write; and,
        # when checkpoints come faster than they are written, waiting for the previous one.
        self._wait_for_checkpoint()
        self.metrics.flush_tracker()  # every step up to this checkpoint is tracked before it exists
        snapshot = self._snapshot(model, optimizer, scheduler, metrics)
        if self.runtime.is_main:
            self.checkpoints.save(snapshot, wait=wait or not self.hyper.async_checkpoint)
        stall = time.perf_counter() - started
        if not wait:
            self.checkpoint_stalls.append(stall)
        log(f"checkpoint step {self.step}: training stalled {stall:.3f}s")
        self.metrics.sync()
        if not self.stop.requested:
            # After a stop's checkpoint the run exits (exit 75): it does not train again, so it does not say so
            # (the job's timeline reads CHECKPOINTING -> PAUSED / QUEUED, docs/TRAINER.md).
            self.events.set_phase(TrainerPhase.TRAINING)

    def _wait_for_checkpoint(self) -> None:
        if self.runtime.is_main:
            self.checkpoints.wait()

    def _evaluate(self, model: nn.Module, *, during_training: bool) -> dict[str, float]:
        if not self.inputs.validation:
            return {}
        if not during_training:
            self.events.set_phase(TrainerPhase.EVALUATING)
        shard = not self.runtime.shards_parameters
        metrics = evaluate(
            model if not shard else self.runtime.unwrap(model),
            self.inputs.reference_model,
            self.inputs.validation,
            self.inputs.collate,
            batch_size=self.batch_size,
            runtime=self.runtime,
            dpo_beta=self.hyper.dpo_beta,
            autocast=self.autocast,
            shard=shard,
            # Only a sharded (DDP) evaluation may stop early: its ranks agree through the final all-reduce,
            # while FSDP / ZeRO-3 ranks would wait for each other's forward passes forever.
            should_stop=(lambda: self.stop.requested and not during_training) if shard else (lambda: False),
        )
        if metrics:
            point = MetricsPoint(step=self.step, epoch=round(self._epoch_float(), 4), attempt=self.spec.attempt, **metrics)
            report(self.events, self.metrics, point, None)
        return metrics


def emit_checkpoint_event(events: Events) -> Callable[[ckpt.CheckpointManifest, str], None]:
    def on_saved(manifest: ckpt.CheckpointManifest, uri: str) -> None:
        events.emit(TrainerEventKind.CHECKPOINT, {**manifest.model_dump(mode="json"), "uri": uri})

    return on_saved
