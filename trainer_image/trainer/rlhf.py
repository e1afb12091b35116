"""RLHF: GRPO through trl's GRPOTrainer, under the trainer's contract (docs/TRAINER.md).

trl samples `num_generations` completions per prompt, scores them with the job's rewards (a reward model,
reward functions from the user's Python file, or both, weighted), and takes the group-relative
policy-gradient step, with a KL penalty against the frozen initial policy when `beta` > 0. What is ours:

- **Data order.** Prompts come from the job's data (`prompt`: text, or a list of {role, content} messages
  rendered with the chat template); every other column reaches the reward functions as a keyword argument.
  Epoch e visits the prompts in torch.randperm(n, seed + e), as the loop does for every other type, and
  trl reads them in that order (`shuffle_dataset` off): step s takes prompts [s*p, (s+1)*p) of that
  sequence, p = batch_size x gradient_accumulation_steps / num_generations. A resumed run gives trl the
  rest of the sequence.
- **Optimizer and schedule.** Ours (`build_optimizer`, `build_scheduler`: `optim`, `lr_scheduler_type`,
  warmup, weight decay), handed to trl, so a checkpoint restores them exactly.
- **Checkpoints, stop, metrics.** After each optimizer step (after trl's logging), the save cadence, SIGTERM
  and max_runtime_seconds are checked; checkpoints are the loop's (`CheckpointManager`: manifests, async
  writes, retention), with the RNG state, which the resumed run restores right before its first step, so
  the sampled completions and the per-step metrics are the same as an uninterrupted run's on the CPU.
  trl's log lines become our METRICS/PROGRESS events and metrics.jsonl points (loss, reward, reward_std,
  kl, grad_norm, learning_rate, tokens_per_second = prompt + completion tokens of the window / its time),
  and the experiment trackers' run (trainer/tracking/, driven through MetricsLog as the loop drives it).
"""

from __future__ import annotations

import functools
import importlib.util
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from schemas.api import MetricsPoint
from schemas.configs import DType, ModelSource, RLHFConfig
from schemas.trainer import RunSpec, TrainerPhase
from trainer import checkpoint as ckpt
from trainer import storage
from trainer.events import Events, log
from trainer.failures import DataError, UserError
from trainer.formatting import map_fields, origin
from trainer.hyper import Hyper
from trainer.loop import DataOrder, build_optimizer, build_scheduler
from trainer.metrics import MetricsLog, Progress, report
from trainer.runtime import Runtime
from trainer.signals import StopRequest

# trl's log keys -> MetricsPoint fields (the extra names are kept in metrics.jsonl as they are)
_LOGGED = {
    "loss": "loss",
    "grad_norm": "grad_norm",
    "learning_rate": "learning_rate",
    "reward": "reward",
    "reward_std": "reward_std",
    "kl": "kl",
    "entropy": "entropy",
    "completions/mean_length": "completion_length",
    "frac_reward_zero_std": "frac_reward_zero_std",
}


# --- rewards -------------------------------------------------------------------------------------


def load_reward_functions(rlhf: RLHFConfig, work: Path) -> list[Callable[..., Any]]:
    """The functions `reward_functions` names in `reward_script_path` (local or s3://), each wrapped so that
    its exception is the user's error, naming the function."""
    names = rlhf.function_names()
    if not names:
        return []
    ref = rlhf.reward_script_path or ""
    if storage.is_s3(ref):
        script = work / Path(storage.split_s3(ref)[1]).name
        storage.download_file(ref, script)
    else:
        script = storage.local_path(ref)
    if not script.is_file():
        raise UserError(f"training_config.rlhf.reward_script_path not found: {ref}")
    module_name = "trainplane_user_rewards"
    module_spec = importlib.util.spec_from_file_location(module_name, script)
    if module_spec is None or module_spec.loader is None:
        raise UserError(f"training_config.rlhf.reward_script_path: {ref} is not a Python file")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_name] = module  # dataclasses and pickling inside the script look themselves up here
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:
        raise UserError(f"training_config.rlhf.reward_script_path: importing {ref} failed: {type(exc).__name__}: {exc}") from exc
    functions = []
    for name in names:
        function = getattr(module, name, None)
        if not callable(function):
            raise UserError(f"training_config.rlhf.reward_functions: {ref} defines no function {name!r}")
        functions.append(_guarded(function, name))
    return functions


def _guarded(function: Callable[..., Any], name: str) -> Callable[..., Any]:
    @functools.wraps(function)
    def reward(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except Exception as exc:
            raise UserError(f"reward function {name} raised {type(exc).__name__}: {exc}") from exc

    reward.__name__ = name  # trl names the reward's metrics (rewards/<name>/mean) after it
    return reward


def load_reward_model(rlhf: RLHFConfig, device: torch.device, *, trust_remote_code: bool) -> tuple[nn.Module, Any]:
    """reward_model as a sequence classifier with one output, and its tokenizer (pad token set)."""
    from transformers import AutoModelForSequenceClassification

    from trainer import models
    from trainer.sources import download_s3

    ref = rlhf.reward_model or ""
    source = rlhf.reward_model_source()
    revision = rlhf.reward_model_revision
    shown = "training_config.rlhf.reward_model"
    if source in (ModelSource.S3, ModelSource.LOCAL):
        local = download_s3(ref, "models") if source == ModelSource.S3 else Path(ref.removeprefix("file://")).expanduser()
        if not (local.is_dir() and (local / "config.json").is_file()):
            raise UserError(f"{shown} {ref!r}: not a Hugging Face model directory (no config.json)")
        location, revision = str(local), None
        try:
            model = AutoModelForSequenceClassification.from_pretrained(location, num_labels=1, trust_remote_code=trust_remote_code)
        except (OSError, ValueError) as exc:
            raise UserError(f"{shown} {ref!r}: cannot load a sequence-classification model: {exc}") from exc
    else:
        location = ref
        model = models._from_hub_or_cache(
            AutoModelForSequenceClassification, ref, revision, "reward model", num_labels=1, trust_remote_code=trust_remote_code
        )
    tokenizer = models._load_auto_tokenizer(location, revision, trust_remote_code)
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise UserError(f"{shown}: its tokenizer has neither a pad nor an eos token")
        tokenizer.pad_token = tokenizer.eos_token
    model.config.pad_token_id = tokenizer.pad_token_id
    model.eval()
    return model.to(device), tokenizer


# --- prompts -------------------------------------------------------------------------------------


def prompt_rows(records: list[dict[str, Any]], field_mapping: dict[str, str]) -> list[dict[str, Any]]:
    """Each record with preprocess.field_mapping applied: `prompt` for generation, the rest for the rewards."""
    return [{**dict(record), **map_fields(record, field_mapping)} for record in records]


def ordered_prompts(rows: list[dict[str, Any]], order: DataOrder, start: int, count: int) -> list[dict[str, Any]]:
    """Prompts start .. start+count-1 of the job's sequence: epoch e = rows in randperm(n, seed + e)."""
    n = len(rows)
    return [rows[order.permutation(p // n)[p % n]] for p in range(start, start + count)]


def to_dataset(rows: list[dict[str, Any]], records: list[dict[str, Any]]) -> Any:
    from datasets import Dataset

    try:
        return Dataset.from_list(rows)
    except Exception as exc:  # arrow refuses columns whose type changes from row to row
        source, _ = origin(records[0], 0) if records else ("<records>", 0)
        raise DataError(source, 0, f"the prompt records' columns do not have one type each ({type(exc).__name__}: {exc})") from exc


# --- the run -------------------------------------------------------------------------------------


@dataclass
class RLHFResult:
    stopped: bool
    step: int
    total_steps: int
    checkpoint_uri: str | None
    resumed_from: str | None
    model: nn.Module
    rewards: dict[int, float] = field(default_factory=dict)  # step -> mean reward at logging steps
    losses: dict[int, float] = field(default_factory=dict)


class RLHFRun:
    def __init__(
        self,
        spec: RunSpec,
        hyper: Hyper,
        *,
        model: nn.Module,
        tokenizer: Any,
        records: list[dict[str, Any]],
        runtime: Runtime,
        checkpoints: ckpt.CheckpointManager,
        events: Events,
        metrics: MetricsLog,
        stop: StopRequest,
        work_dir: Path,
        extra_files: dict[str, bytes],
        seed: int,
    ) -> None:
        if runtime.world_size > 1:
            raise UserError("RLHF runs in one process: framework.distributed.world_size must be 1")
        tc, dc = spec.training_config, spec.data_config
        if tc.rlhf is None:
            raise UserError("training_type RLHF needs training_config.rlhf (a reward_model and/or reward_script_path)")
        self.spec, self.hyper, self.rlhf = spec, hyper, tc.rlhf
        self.model, self.tokenizer, self.records = model, tokenizer, records
        self.runtime, self.checkpoints, self.events, self.metrics, self.stop = runtime, checkpoints, events, metrics, stop
        self.work_dir, self.extra_files, self.seed = work_dir, extra_files, seed
        self.batch_size = hyper.per_device_train_batch_size or dc.batch_size
        self.accum = hyper.gradient_accumulation_steps or dc.gradient_accumulation_steps
        completions = self.batch_size * self.accum
        if completions % self.rlhf.num_generations:
            raise UserError(
                f"batch_size x gradient_accumulation_steps = {completions} is not a multiple of "
                f"training_config.rlhf.num_generations={self.rlhf.num_generations}"
            )
        self.prompts_per_step = completions // self.rlhf.num_generations
        self.rows = prompt_rows(records, dc.preprocess.field_mapping)
        self.order = DataOrder(len(self.rows), 1, seed=seed)
        self.steps_per_epoch = math.ceil(len(self.rows) / self.prompts_per_step)
        epochs_steps = max(1, math.ceil(hyper.num_train_epochs * self.steps_per_epoch))
        self.total_steps = hyper.max_steps if hyper.max_steps is not None else epochs_steps
        self.step = 0
        self.tokens_seen = 0
        self.rewards: dict[int, float] = {}
        self.losses: dict[int, float] = {}
        self._copier = ckpt.HostCopier()

    # --- state ---------------------------------------------------------------------------------
    def _epoch(self, step: int) -> float:
        return step * self.prompts_per_step / len(self.rows)

    def _trainer_state(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "epoch_float": self._epoch(self.step),
            "prompts_consumed": self.step * self.prompts_per_step,
            "prompts_per_step": self.prompts_per_step,
            "data_seed": self.seed,
            "num_examples": len(self.rows),
            "world_size": 1,
            "total_steps": self.total_steps,
            "tokens_seen": self.tokens_seen,
            "training_type": self.spec.training_config.training_type.value,
            "is_adapter": False,
            "hyperparameters": self.hyper.to_strings(),
            "rlhf": self.rlhf.model_dump(mode="json"),
        }

    def _save(self, trainer: Any, metrics: dict[str, float], *, wait: bool) -> None:
        started = time.perf_counter()
        self.events.set_phase(TrainerPhase.CHECKPOINTING)
        self.checkpoints.wait()
        self.metrics.flush_tracker()  # every step up to this checkpoint is tracked before it exists
        tensors = self._copier(self.runtime.model_state(self.model, False), "model")
        optimizer_state = self._copier(self.optimizer.state_dict(), "optimizer")
        self._copier.finish()
        snapshot = ckpt.Snapshot(
            step=self.step,
            epoch=self._epoch(self.step),
            model_tensors=tensors,
            is_adapter=False,
            optimizer=optimizer_state,
            scheduler=ckpt.to_cpu(self.scheduler.state_dict()),
            rng={"per_rank": [ckpt.capture_rng()]},
            trainer_state=self._trainer_state(),
            metrics=metrics,
            extra_files=self.extra_files,
        )
        self.checkpoints.save(snapshot, wait=wait or not self.hyper.async_checkpoint)
        self.last_saved_step = self.step
        log(f"checkpoint step {self.step}: training stalled {time.perf_counter() - started:.3f}s")
        self.metrics.sync()
        if not self.stop.requested:  # a stop's checkpoint is the run's last act (loop.py's _save)
            self.events.set_phase(TrainerPhase.TRAINING)

    def _save_due(self) -> bool:
        config = self.spec.output_config.checkpoint
        strategy = self.hyper.save_strategy or config.save_strategy.value
        if strategy == "epoch":
            return self._epoch_ended(self.step)
        return self.step % (self.hyper.save_steps or config.save_steps) == 0

    def _epoch_ended(self, step: int) -> bool:
        """Step `step` took the last prompt of a pass over the prompts (an epoch)."""
        n = len(self.rows)
        return (step * self.prompts_per_step) // n > ((step - 1) * self.prompts_per_step) // n

    def _step_metrics(self) -> dict[str, float]:
        found: dict[str, float] = {}
        if self.step in self.losses:
            found["loss"] = self.losses[self.step]
        if self.step in self.rewards:
            found["reward"] = self.rewards[self.step]
        return found

    # --- trl's GRPOConfig ------------------------------------------------------------------------
    def grpo_config(self, remaining_steps: int) -> Any:
        from trl import GRPOConfig

        device = self.runtime.device
        hyper, rlhf = self.hyper, self.rlhf
        cuda = device.type == "cuda"
        dtype = self.spec.training_config.base_model.dtype
        fp16 = cuda and (hyper.fp16 or dtype == DType.FLOAT16)
        bf16 = cuda and not fp16 and (hyper.bf16 or dtype == DType.BFLOAT16 or (dtype == DType.AUTO and torch.cuda.is_bf16_supported()))
        return GRPOConfig(
            output_dir=str(self.work_dir / "trl"),
            use_cpu=not cuda,
            bf16=bf16,
            fp16=fp16,
            seed=self.seed,
            per_device_train_batch_size=self.batch_size,
            gradient_accumulation_steps=self.accum,
            max_steps=remaining_steps,
            learning_rate=hyper.learning_rate,
            weight_decay=hyper.weight_decay,
            max_grad_norm=hyper.max_grad_norm,
            # trl's "epoch" would be its one pass over the prompt sequence it is given: ours is decided per step
            logging_strategy="no" if hyper.logging_strategy == "epoch" else hyper.logging_strategy,
            logging_steps=hyper.logging_steps,
            save_strategy="no",
            report_to="none",
            disable_tqdm=True,
            gradient_checkpointing=hyper.gradient_checkpointing,
            dataloader_pin_memory=self.spec.data_config.pin_memory and cuda,
            shuffle_dataset=False,  # the order is ours (DataOrder), so a resumed run continues it
            num_generations=rlhf.num_generations,
            max_completion_length=rlhf.max_completion_length,
            temperature=rlhf.temperature,
            top_p=rlhf.top_p,
            top_k=rlhf.top_k,
            beta=rlhf.beta,
            reward_weights=rlhf.reward_weights,
            model_init_kwargs=self._reference_kwargs(),
        )

    def _reference_kwargs(self) -> dict[str, Any] | None:
        """trl builds the reference model (beta > 0) from the policy's config path: the same revision."""
        if self.rlhf.beta == 0:
            return None
        base = self.spec.training_config.base_model
        kwargs: dict[str, Any] = {"trust_remote_code": base.trust_remote_code}
        if base.revision and base.resolved_source() == ModelSource.HUB:
            kwargs["revision"] = base.revision
        return kwargs

    def _prepare_reference(self) -> None:
        """beta > 0: trl loads the frozen reference from the policy's config path. A model built from its
        config has none: its initial weights are written to the run's scratch directory first."""
        if self.rlhf.beta == 0:
            return
        config = getattr(self.model, "config", None)
        location = getattr(config, "_name_or_path", "") if config is not None else ""
        if self.spec.training_config.base_model.resolved_source() == ModelSource.CONFIG or not location:
            reference_dir = self.work_dir / "reference"
            self.model.save_pretrained(str(reference_dir))  # type: ignore[operator]
            if config is not None:
                config._name_or_path = str(reference_dir)

    # --- run -------------------------------------------------------------------------------------
    def run(self, resume_from: str | None) -> RLHFResult:
        from transformers import PrinterCallback, ProgressCallback, TrainerCallback
        from trl import GRPOTrainer

        self._prepare_reference()  # before a checkpoint's weights replace the initial policy's
        reward_funcs: list[Any] = list(load_reward_functions(self.rlhf, self.work_dir))
        reward_processing: list[Any] = [None] * len(reward_funcs)
        if self.rlhf.reward_model:
            reward_model, reward_tokenizer = load_reward_model(
                self.rlhf, self.runtime.device, trust_remote_code=self.spec.training_config.base_model.trust_remote_code
            )
            reward_funcs.append(reward_model)
            reward_processing.append(reward_tokenizer)
        if self.spec.data_config.preprocess.chat_template:
            self.tokenizer.chat_template = self.spec.data_config.preprocess.chat_template

        self.optimizer = build_optimizer(self.model, self.hyper, self.runtime.device)
        self.scheduler = build_scheduler(self.optimizer, self.hyper, self.total_steps)
        loaded = self.checkpoints.find_resume(resume_from)
        pending_rng: dict[str, Any] | None = None
        if loaded is not None:
            pending_rng = self._restore(loaded)
        start = self.step
        self.metrics.started_at(start, loaded.uri if loaded is not None else None)  # the trackers continue the job's run
        self.last_saved_step = start if loaded is not None else -1
        remaining = self.total_steps - start
        stopped = False
        if remaining > 0 and not self.stop.requested:
            rows = ordered_prompts(self.rows, self.order, start * self.prompts_per_step, remaining * self.prompts_per_step)
            run = self
            progress = Progress(self.total_steps, start_step=start)

            class Contract(TrainerCallback):
                """RNG at the first step of a resumed run; trl's log lines as our metrics."""

                def __init__(self) -> None:
                    self.window_start = time.perf_counter()
                    self.window_tokens = 0.0
                    self.step_start = time.perf_counter()

                def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
                    self.window_start = time.perf_counter()  # the first window is training, not trl's set-up

                def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
                    nonlocal pending_rng
                    if pending_rng is not None:
                        ckpt.restore_rng(pending_rng)
                        pending_rng = None
                    self.step_start = time.perf_counter()

                def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
                    progress.record(time.perf_counter() - self.step_start)
                    step = start + state.global_step
                    if step == run.total_steps or (run.hyper.logging_strategy == "epoch" and run._epoch_ended(step)):
                        control.should_log = True  # the last step is always reported

                def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
                    if not logs or "reward" not in logs:
                        return  # trl's end-of-training summary (train_runtime...)
                    step = start + state.global_step
                    elapsed = time.perf_counter() - self.window_start
                    tokens = float(logs.get("num_tokens") or 0.0) - self.window_tokens
                    self.window_start, self.window_tokens = time.perf_counter(), float(logs.get("num_tokens") or 0.0)
                    run.tokens_seen += int(tokens)
                    values = {ours: logs[theirs] for theirs, ours in _LOGGED.items() if logs.get(theirs) is not None}
                    point = MetricsPoint(
                        step=step,
                        epoch=round(run._epoch(step), 4),
                        tokens_per_second=round(tokens / elapsed, 2) if elapsed > 0 and tokens > 0 else None,
                        attempt=run.spec.attempt,
                        tokens_seen=run.tokens_seen,  # prompt + completion tokens so far, every attempt's
                        **{k: float(v) for k, v in values.items()},
                    )
                    if point.loss is not None:
                        run.losses[step] = point.loss
                    if "reward" in values:
                        run.rewards[step] = float(values["reward"])
                    report(run.events, run.metrics, point, progress)

            trainer_class = _contract_trainer(GRPOTrainer)
            trainer = trainer_class(
                model=self.model,
                reward_funcs=reward_funcs,
                args=self.grpo_config(remaining),
                train_dataset=to_dataset(rows, self.records),
                processing_class=self.tokenizer,
                reward_processing_classes=reward_processing,
                optimizers=(self.optimizer, self.scheduler),
                callbacks=[Contract()],
            )
            trainer.remove_callback(PrinterCallback)  # stdout carries only our events and metric lines
            trainer.remove_callback(ProgressCallback)

            def after_step(t: Any) -> None:
                nonlocal stopped
                step = start + t.state.global_step
                if step == self.step or step > self.total_steps:
                    return  # called again at an epoch's end for the same step
                self.step = step
                if self._save_due() and step < self.total_steps:
                    self._save(t, self._step_metrics(), wait=False)
                if not self.checkpoints.busy:
                    self.checkpoints.wait()  # a failed background write surfaces now
                if step < self.total_steps and self._should_stop(progress):
                    stopped = True
                    t.control.should_training_stop = True

            trainer.after_step = after_step
            self.events.set_phase(TrainerPhase.TRAINING)
            trainer.train()
        elif self.stop.requested:
            stopped = True
        if self.step > 0 and self.last_saved_step != self.step:
            self._save(None, self._step_metrics(), wait=True)
        elif stopped and self.step > start:
            self.events.set_phase(TrainerPhase.CHECKPOINTING)  # the stop's checkpoint is the one just saved (loop.py)
        self.checkpoints.wait()
        self.metrics.sync()
        last = self.checkpoints.last_saved_uri or (loaded.uri if loaded else None)
        return RLHFResult(
            # A stop after the last step still stops before the export (exit 75): the final checkpoint exists,
            # so the resumed attempt goes straight to exporting, as the loop does.
            stopped=stopped or self.stop.requested,
            step=self.step,
            total_steps=self.total_steps,
            checkpoint_uri=last,
            resumed_from=loaded.uri if loaded else None,
            model=self.model,
            rewards=self.rewards,
            losses=self.losses,
        )

    def _should_stop(self, progress: Progress) -> bool:
        budget = max(self.checkpoints.last_save_seconds, 2 * progress.step_seconds)
        return self.stop.should_stop(next_step_seconds=progress.step_seconds, checkpoint_seconds=budget)

    def _restore(self, loaded: ckpt.Loaded) -> dict[str, Any]:
        state = loaded.trainer_state()
        if loaded.manifest.is_adapter:
            raise UserError(f"checkpoint {loaded.uri} holds an adapter; RLHF trains full weights")
        if state.get("training_type") != "RLHF":
            kind = state.get("training_type")
            raise UserError(f"checkpoint {loaded.uri} is a {kind} checkpoint; an RLHF run resumes only RLHF checkpoints")
        self.runtime.load_model_state(self.model, loaded.model_tensors(), False)
        self.optimizer.load_state_dict(loaded.torch_file(ckpt.OPTIMIZER_FILE))
        self.scheduler.load_state_dict(loaded.torch_file(ckpt.SCHEDULER_FILE))
        self.step = int(state["step"])
        self.tokens_seen = int(state.get("tokens_seen", 0))
        if (
            state.get("num_examples") != len(self.rows)
            or state.get("data_seed") != self.seed
            or state.get("prompts_per_step") != self.prompts_per_step
        ):
            log("WARNING: the prompts (count, seed or prompts per step) differ from the checkpoint's run: resuming, but not exactly")
        log(f"resumed from {loaded.uri} at step {self.step}")
        return dict(loaded.torch_file(ckpt.RNG_FILE)["per_rank"][0])


def _contract_trainer(base: type) -> type:
    """GRPOTrainer with one hook after each optimizer step's logging: checkpoint cadence, stop."""

    class ContractGRPOTrainer(base):
        after_step: Callable[[Any], None] | None = None

        def _maybe_log_save_evaluate(self, *args: Any, **kwargs: Any) -> None:
            super()._maybe_log_save_evaluate(*args, **kwargs)
            if self.after_step is not None:
                self.after_step(self)

    return ContractGRPOTrainer
