"""What the training loop calls: the single-process Runtime and the torch.distributed one (DDP, FSDP2).

The base that every distributed runtime builds on (trainer/deepspeed_zero.py's DeepSpeedRuntime too);
trainer/distributed.py starts the workers and picks the runtime (`make_runtime`).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any, cast

import torch
from torch import nn

from schemas.configs import FrameworkType
from trainer.events import log
from trainer.failures import UserError
from trainer.worker_env import WorkerEnv

# peft names adapter weights "...lora_A.default.weight" in the module tree and "...lora_A.weight" in
# get_peft_model_state_dict; checkpoints always use the latter.
ADAPTER_NAME_RE = re.compile(r"\.default(?=\.)")


class Runtime:
    """Single process: plain PyTorch. Subclasses add the process group and the model wrapping."""

    rank = 0
    world_size = 1
    local_rank = 0

    def __init__(self, device: torch.device) -> None:
        self.device = device

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def collective_state(self) -> bool:
        """Every rank must take part in model_state/optimizer_state (sharded state is gathered)."""
        return False

    @property
    def shards_parameters(self) -> bool:
        """No rank holds the whole model: evaluation runs every example on every rank, export gathers."""
        return False

    def wrap(self, model: nn.Module) -> nn.Module:
        return model

    def prepare(self, model: nn.Module, optimizer: torch.optim.Optimizer, *, max_grad_norm: float, micro_batch_size: int) -> nn.Module:
        """After the optimizer is built: the model to train (DeepSpeed wraps both in its engine here)."""
        return model

    def unwrap(self, model: nn.Module) -> nn.Module:
        return getattr(model, "module", model)

    def after_training(self) -> None:
        """Training is over; rank 0 may build plain models again (export)."""
        return None

    def no_sync(self, model: nn.Module) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def backward(self, model: nn.Module, loss: torch.Tensor, *, last: bool) -> None:
        """One micro-batch's backward; `last`: it ends the optimizer step."""
        loss.backward()

    def optimizer_step(self, model: nn.Module, optimizer: torch.optim.Optimizer, max_grad_norm: float, scaler: Any) -> torch.Tensor:
        """Clip, step, zero the gradients; returns the gradient norm before clipping."""
        if scaler is not None:
            scaler.unscale_(optimizer)
        grad_norm = self.clip_grad_norm(model, max_grad_norm)
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return grad_norm

    def clip_grad_norm(self, model: nn.Module, max_norm: float) -> torch.Tensor:
        params = [p for p in model.parameters() if p.grad is not None]
        # max_norm 0 means "no clipping"; the norm is still reported.
        return torch.nn.utils.clip_grad_norm_(params, max_norm if max_norm > 0 else float("inf"))

    def model_state(self, model: nn.Module, is_adapter: bool) -> dict[str, torch.Tensor]:
        """The live tensors (no copy: checkpoint.HostCopier copies them off before training goes on)."""
        inner = self.unwrap(model)
        if is_adapter:
            from peft import get_peft_model_state_dict

            return {k: v.detach() for k, v in get_peft_model_state_dict(inner).items()}
        return {k: v.detach() for k, v in inner.state_dict().items()}

    def load_model_state(self, model: nn.Module, tensors: dict[str, torch.Tensor], is_adapter: bool) -> None:
        inner = self.unwrap(model)
        if is_adapter:
            from peft import set_peft_model_state_dict

            result = set_peft_model_state_dict(inner, tensors)
            unexpected = getattr(result, "unexpected_keys", [])
            if unexpected:
                raise UserError(f"checkpoint adapter does not fit this model: unexpected keys {unexpected[:5]}")
            return
        inner.load_state_dict(tensors, strict=True)

    def optimizer_state(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        return optimizer.state_dict()  # live tensors, like model_state

    def load_optimizer_state(self, model: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
        refuse_zero_partitions(state)
        optimizer.load_state_dict(state)

    def all_reduce_sum(self, values: list[float]) -> list[float]:
        return values

    def gather_object(self, obj: Any) -> list[Any]:
        return [obj]

    def broadcast_flag(self, flag: bool) -> bool:
        return flag

    def barrier(self) -> None:
        return None

    def close(self) -> None:
        return None


class DistributedRuntime(Runtime):
    def __init__(self, worker: WorkerEnv, framework: FrameworkType, backend: str) -> None:
        import torch.distributed as dist

        self.dist = dist
        self.rank, self.world_size, self.local_rank = worker.rank, worker.world_size, worker.local_rank
        if torch.cuda.is_available():
            torch.cuda.set_device(worker.local_rank)
            device = torch.device("cuda", worker.local_rank)
        else:
            device = torch.device("cpu")
            if backend != "gloo":
                log(f"distributed backend {backend!r} needs CUDA; using gloo on this CPU-only host")
                backend = "gloo"
        super().__init__(device)
        self.framework = framework
        if not dist.is_initialized():
            dist.init_process_group(backend=backend, rank=worker.rank, world_size=worker.world_size)

    @property
    def collective_state(self) -> bool:
        return self.framework == FrameworkType.FSDP

    @property
    def shards_parameters(self) -> bool:
        return self.framework == FrameworkType.FSDP

    def wrap(self, model: nn.Module) -> nn.Module:
        if self.framework == FrameworkType.FSDP:
            from torch.distributed.fsdp import fully_shard

            for module in _decoder_layers(model):
                fully_shard(module)
            fully_shard(model)
            return model
        from torch.nn.parallel import DistributedDataParallel

        device_ids = [self.device.index] if self.device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=device_ids)

    def unwrap(self, model: nn.Module) -> nn.Module:
        return getattr(model, "module", model)

    def no_sync(self, model: nn.Module) -> contextlib.AbstractContextManager[Any]:
        # Reduce gradients only on the last micro-batch of a step.
        if (no_sync := getattr(model, "no_sync", None)) is not None:
            return cast("contextlib.AbstractContextManager[Any]", no_sync())  # DDP
        if hasattr(model, "set_requires_gradient_sync"):
            return _fsdp_no_sync(model)  # FSDP2
        return contextlib.nullcontext()

    def _options(self) -> Any:
        from torch.distributed.checkpoint.state_dict import StateDictOptions

        return StateDictOptions(full_state_dict=True, cpu_offload=True)

    def model_state(self, model: nn.Module, is_adapter: bool) -> dict[str, torch.Tensor]:
        if self.framework != FrameworkType.FSDP:
            return super().model_state(model, is_adapter)
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        # collective; rank 0 gets the tensors (full_state_dict: plain tensors, never DTensor shards)
        full = cast("dict[str, torch.Tensor]", get_model_state_dict(model, options=self._options()))
        if is_adapter:
            # The same key names as peft's get_peft_model_state_dict (single process), so either kind
            # of run can resume the other's checkpoint.
            full = {ADAPTER_NAME_RE.sub("", k): v for k, v in full.items() if "lora_" in k}
        return full  # cpu_offload: already fresh host tensors on rank 0

    def load_model_state(self, model: nn.Module, tensors: dict[str, torch.Tensor], is_adapter: bool) -> None:
        if self.framework != FrameworkType.FSDP:
            super().load_model_state(model, tensors, is_adapter)
            return
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        if is_adapter:
            by_peft_name = {ADAPTER_NAME_RE.sub("", k): k for k in model.state_dict() if "lora_" in k}
            unknown = sorted(set(tensors) - set(by_peft_name))
            if unknown:
                raise UserError(f"checkpoint adapter does not fit this model: unexpected keys {unknown[:5]}")
            tensors = {by_peft_name[k]: v for k, v in tensors.items()}
        state: dict[str, Any] = dict(tensors)  # torch's ValueType union; plain tensors here
        set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True, strict=not is_adapter))

    def optimizer_state(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        if self.framework != FrameworkType.FSDP:
            return super().optimizer_state(model, optimizer)
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        return get_optimizer_state_dict(model, optimizer, options=self._options())

    def load_optimizer_state(self, model: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
        if self.framework != FrameworkType.FSDP:
            super().load_optimizer_state(model, optimizer, state)
            return
        refuse_zero_partitions(state)
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        state = keyed_by_name(model, optimizer, state)
        set_optimizer_state_dict(model, optimizer, state, options=StateDictOptions(full_state_dict=True))

    def all_reduce_sum(self, values: list[float]) -> list[float]:
        tensor = torch.tensor(values, dtype=torch.float64, device=self.device)
        self.dist.all_reduce(tensor)
        return tensor.tolist()

    def gather_object(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.world_size
        self.dist.all_gather_object(out, obj)
        return out

    def broadcast_flag(self, flag: bool) -> bool:
        """Any rank's stop request stops every rank at the same step (SIGTERM reaches them at different times)."""
        return bool(self.all_reduce_sum([1.0 if flag else 0.0])[0] > 0)

    def barrier(self) -> None:
        self.dist.barrier()

    def close(self) -> None:
        if self.dist.is_initialized():
            self.dist.destroy_process_group()


def refuse_zero_partitions(state: dict[str, Any]) -> None:
    if "zero_stage" in state:
        raise UserError(
            "this checkpoint's optimizer state holds DeepSpeed ZeRO partitions; "
            "only a DEEPSPEED run of the same world_size and ZeRO stage resumes it"
        )


def keyed_by_name(model: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> dict[str, Any]:
    """An optimizer state keyed by parameter index (one process's, DDP's: torch's own format) keyed by
    parameter name, as FSDP's full state dict is, so an FSDP run resumes a checkpoint of any world size.

    torch numbers the parameters in the order of the optimizer's groups; build_optimizer builds the same
    groups in the same order whatever the world size, so index i is this optimizer's i-th parameter.
    """
    groups = state.get("param_groups", [])
    saved = [key for group in groups for key in group["params"]]
    if all(isinstance(key, str) for key in saved):
        return state
    names = {id(param): name for name, param in model.named_parameters()}
    ordered = [names[id(param)] for group in optimizer.param_groups for param in group["params"]]
    if len(saved) != len(ordered):
        raise UserError(f"the checkpoint's optimizer state holds {len(saved)} parameters; this model trains {len(ordered)}")
    name_of = dict(zip(saved, ordered, strict=True))
    return {
        "state": {name_of[key]: value for key, value in state["state"].items()},
        "param_groups": [{**group, "params": [name_of[key] for key in group["params"]]} for group in groups],
    }


@contextlib.contextmanager
def _fsdp_no_sync(model: Any) -> Iterator[None]:
    model.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)


def _decoder_layers(model: nn.Module) -> Iterator[nn.Module]:
    """The repeated transformer blocks: FSDP shards each on its own so only one is gathered at a time."""
    for module in model.modules():
        if isinstance(module, nn.ModuleList) and len(module) > 0:
            yield from module
            return
