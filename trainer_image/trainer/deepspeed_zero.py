"""framework.type DEEPSPEED with world_size > 1: DeepSpeed ZeRO (stage 1, 2 or 3) through accelerate.

accelerate's DeepSpeedPlugin builds the engine (`Accelerator.prepare` -> `deepspeed.initialize`) around
our own model, AdamW and LambdaLR; the loop stays ours (data order, RNG, stop point). Per step, every
micro-batch goes through accelerate's DeepSpeedEngineWrapper.backward: the engine is told whether this
micro-batch ends the step (gradient accumulation boundary), and on the last one it reduces the
gradients, clips them (`gradient_clipping` = max_grad_norm) and steps the optimizer. The DeepSpeed
config keeps gradient_accumulation_steps at 1 and lets the boundary decide, because an epoch's last
step may have fewer micro-batches than the others; our loss is already normalised over the whole step.

Checkpoints stay in our format (checkpoint.py), so manifest, retention and resume work as for DDP/FSDP:
  model.safetensors  the full weights (stage 3: gathered to rank 0, one layer at a time)
  optimizer.pt       {"zero_stage", "world_size", "engine": counters, "per_rank": [each rank's ZeRO
                     optimizer state_dict]}: the partitions are gathered to rank 0, which writes them;
                     resume hands each rank the whole list, as DeepSpeed's own load_checkpoint does.
A ZeRO partition depends on the world size and the stage: resuming needs the same of both.
Stage 3 resumes its weights from the fp32 partitions in optimizer.pt (the engine's own
load_from_fp32_weights path); model.safetensors is there for export, evaluation and other frameworks.

Start-up (`_import_deepspeed`): two costs of DeepSpeed that training never uses are skipped. Its CPU
communication backend JIT-compiles a C++ shared-memory all-reduce (deepspeed_shm_comm, with the host's
compiler, into ~/.cache/torch_extensions) that only tensor-parallel inference calls; ZeRO's collectives
go through torch.distributed. And `import deepspeed` imports its autotuner, which imports mlflow for the
`deepspeed --autotuning` launcher alone. docs/BENCHMARKS.md ("Trainer start-up") has the figures.
"""

from __future__ import annotations

import contextlib
import enum
import sys
from typing import Any

import torch
from torch import nn

from schemas.configs import FrameworkType
from trainer.checkpoint import to_cpu
from trainer.events import log
from trainer.failures import UserError
from trainer.runtime import ADAPTER_NAME_RE, DistributedRuntime
from trainer.worker_env import WorkerEnv

# Not tensors, so torch.load(weights_only=True) would refuse them. Both are safe to leave out: the loss
# scaler is the static 1.0 one (fp16, which needs a dynamic scaler, is refused), and the parameter
# slice mappings only serve DeepSpeed's "universal" checkpoint conversion.
_NOT_SAVED = ("loss_scaler", "param_slice_mappings")
_ENGINE_COUNTERS = ("global_steps", "global_samples", "micro_steps", "skipped_steps")


class DeepSpeedRuntime(DistributedRuntime):
    def __init__(self, worker: WorkerEnv, backend: str, zero_stage: int) -> None:
        super().__init__(worker, FrameworkType.DEEPSPEED, backend)
        self.zero_stage = zero_stage
        self.accelerator: Any = None
        self._engine: Any = None

    @property
    def collective_state(self) -> bool:
        return True  # the optimizer partitions (and, in stage 3, the weights) are gathered from every rank

    @property
    def shards_parameters(self) -> bool:
        return self.zero_stage == 3

    def wrap(self, model: nn.Module) -> nn.Module:
        return model  # the engine is built in prepare, around the optimizer

    def prepare(self, model: nn.Module, optimizer: torch.optim.Optimizer, *, max_grad_norm: float, micro_batch_size: int) -> nn.Module:
        _import_deepspeed()
        from accelerate import Accelerator
        from accelerate.utils import DeepSpeedPlugin, InitProcessGroupKwargs

        config = {
            "train_micro_batch_size_per_gpu": micro_batch_size,
            "gradient_accumulation_steps": 1,
            "gradient_clipping": max_grad_norm,  # 0: no clipping, as in Hyper
            "zero_optimization": {"stage": self.zero_stage, "stage3_gather_16bit_weights_on_model_save": True},
            "steps_per_print": 2**31 - 1,
        }
        # accelerate (1.15) picks the CPU backend only for Accelerator(cpu=True), and then never turns
        # DeepSpeed on: naming the process group's backend is what makes it count every process on a
        # CPU host (without it each worker believes it is rank 0 of 1).
        handlers = [InitProcessGroupKwargs(backend=self.dist.get_backend())]
        self.accelerator = Accelerator(deepspeed_plugin=DeepSpeedPlugin(hf_ds_config=config), kwargs_handlers=handlers)
        if (self.accelerator.num_processes, self.accelerator.process_index) != (self.world_size, self.rank):
            raise RuntimeError(
                f"accelerate sees rank {self.accelerator.process_index} of {self.accelerator.num_processes}, "
                f"the process group rank {self.rank} of {self.world_size}"
            )
        engine, _ = self.accelerator.prepare(model, optimizer)
        self._engine = engine
        if self.is_main:
            stage = engine.zero_optimization_stage()
            log(f"DEEPSPEED: {type(engine.optimizer).__name__} (ZeRO stage {stage}) on {self.world_size} workers")
        return engine

    def after_training(self) -> None:
        # With ZeRO-3 configured, transformers builds every new model inside deepspeed.zero.Init, a
        # collective: rank 0 alone building the export copy would wait for the other ranks forever.
        from transformers.integrations.deepspeed import unset_hf_deepspeed_config

        unset_hf_deepspeed_config()

    def no_sync(self, model: nn.Module) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()  # the accumulation boundary passed to backward decides

    def backward(self, model: nn.Module, loss: torch.Tensor, *, last: bool) -> None:
        self.accelerator.deepspeed_engine_wrapped.backward(loss, sync_gradients=last)

    def optimizer_step(self, model: nn.Module, optimizer: torch.optim.Optimizer, max_grad_norm: float, scaler: Any) -> torch.Tensor:
        # The engine already clipped and stepped in the last micro-batch's backward, and zeroed the gradients.
        norm = self._engine.get_global_grad_norm()
        return torch.as_tensor(0.0 if norm is None else float(norm))

    # --- checkpoint state ---------------------------------------------------------------------
    def model_state(self, model: nn.Module, is_adapter: bool) -> dict[str, torch.Tensor]:
        if self.zero_stage < 3:
            # Every rank holds the full weights; only rank 0 writes them.
            return super().model_state(model, is_adapter) if self.is_main else {}
        full = self._engine._zero3_consolidated_16bit_state_dict()  # collective; None except on rank 0
        if full is None:
            return {}
        if is_adapter:
            full = {ADAPTER_NAME_RE.sub("", k): v for k, v in full.items() if "lora_" in k}
        return {k: v.detach() for k, v in full.items()}

    def load_model_state(self, model: nn.Module, tensors: dict[str, torch.Tensor], is_adapter: bool) -> None:
        if self.zero_stage < 3:
            super().load_model_state(model, tensors, is_adapter)
        # Stage 3: the weights come back from the optimizer's fp32 partitions (load_optimizer_state).

    def optimizer_state(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        mine = {k: _plain(v) for k, v in self._engine.optimizer.state_dict().items() if k not in _NOT_SAVED}
        gathered: list[Any] | None = [None] * self.world_size if self.is_main else None
        self.dist.gather_object(to_cpu(mine), gathered, dst=0)
        if not self.is_main:
            return {}
        return {
            "zero_stage": self.zero_stage,
            "world_size": self.world_size,
            "engine": {name: int(getattr(self._engine, name)) for name in _ENGINE_COUNTERS},
            "per_rank": gathered,
        }

    def load_optimizer_state(self, model: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
        saved = (state.get("zero_stage"), state.get("world_size"))
        if saved != (self.zero_stage, self.world_size):
            written = f"ZeRO stage {saved[0]} with world_size {saved[1]}" if saved[0] is not None else "another framework (DDP/FSDP)"
            raise UserError(
                f"this checkpoint's optimizer state was written by {written}; a DEEPSPEED run with ZeRO stage "
                f"{self.zero_stage} and world_size {self.world_size} resumes exactly only from a checkpoint of the same setup"
            )
        engine = self._engine
        per_rank = [{**sd, "loss_scaler": engine.optimizer.loss_scaler} for sd in state["per_rank"]]
        engine.optimizer.load_state_dict(per_rank, load_optimizer_states=True, load_from_fp32_weights=True)
        for name, value in state["engine"].items():
            setattr(engine, name, int(value))


# The op DeepSpeed's TorchBackend builds at start-up (deepspeed.comm.torch.build_shm_op) when the
# accelerator has it and deepspeed.ops.__compatible_ops__ says it can be built.
SHM_COMM_OP = "ShareMemCommBuilder"


def _import_deepspeed() -> Any:
    """Import DeepSpeed for training: without its autotuner's mlflow import (when nothing imported mlflow
    yet; the autotuner is never run here), and with the inference-only shm all-reduce op marked as
    unavailable, so that TorchBackend does not compile it (it only serves inference_all_reduce)."""
    if "deepspeed" not in sys.modules and "mlflow" not in sys.modules:
        sys.modules["mlflow"] = None  # type: ignore[assignment]  # `import mlflow` raises ImportError meanwhile
        try:
            import deepspeed
        finally:
            del sys.modules["mlflow"]
    import deepspeed
    import deepspeed.ops
    from deepspeed.accelerator import get_accelerator

    builder = get_accelerator().create_op_builder(SHM_COMM_OP)
    if builder is not None:
        deepspeed.ops.__compatible_ops__[builder.NAME] = False
    return deepspeed


def _plain(value: Any) -> Any:
    """DeepSpeed's IntEnums (zero_stage) as ints: checkpoints load back with torch.load(weights_only=True)."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_plain(v) for v in value)
    return value
