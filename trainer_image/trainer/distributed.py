"""Single process by default; world_size > 1 runs one worker process per device.

How a multi-process run starts:
  - Already under torchrun (or any launcher that sets RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR): this
    process is one worker and only joins the process group.
  - Otherwise the entry point becomes a small supervisor (`spawn_workers`) that starts
    world_size / node_count workers on this node with the torchrun-style environment. Node rank and
    the master address come from SageMaker's resourceconfig.json host list (contract.Hosts). We do not
    exec torchrun itself: it reports every worker failure as exit 1, and the launcher contract needs
    the worker's own exit code (75 = stopped with checkpoint, 65 = data error...).

What each framework means here (framework.type, when world_size > 1):
  HF_TRAINER -> DistributedDataParallel;  FSDP -> torch FSDP2 (`fully_shard` per decoder layer, the
  same sharding accelerate's FSDP plugin applies), with full state dicts gathered for checkpoints;
  DEEPSPEED -> DeepSpeed ZeRO stage 1/2/3 through accelerate's DeepSpeedPlugin (trainer/deepspeed_zero.py),
  framework.config zero_stage (default 2).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from schemas.configs import FrameworkType, TrainingType
from schemas.trainer import ExitCode, RunSpec
from trainer.contract import ContainerPaths
from trainer.events import log
from trainer.failures import UserError

DEFAULT_MASTER_PORT = 29500
# peft names adapter weights "...lora_A.default.weight" in the module tree and "...lora_A.weight" in
# get_peft_model_state_dict; checkpoints always use the latter.
ADAPTER_NAME_RE = re.compile(r"\.default(?=\.)")
WORKER_ENV_KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True)
class WorkerEnv:
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> WorkerEnv | None:
        env = dict(os.environ if env is None else env)
        if "RANK" not in env or "WORLD_SIZE" not in env:
            return None
        return cls(
            rank=int(env["RANK"]),
            world_size=int(env["WORLD_SIZE"]),
            local_rank=int(env.get("LOCAL_RANK", env["RANK"])),
            local_world_size=int(env.get("LOCAL_WORLD_SIZE", env["WORLD_SIZE"])),
            master_addr=env.get("MASTER_ADDR", "127.0.0.1"),
            master_port=int(env.get("MASTER_PORT", DEFAULT_MASTER_PORT)),
        )


@dataclass(frozen=True)
class LaunchPlan:
    world_size: int
    nnodes: int
    node_rank: int
    nproc_per_node: int
    master_addr: str
    master_port: int

    def worker_env(self, local_rank: int) -> dict[str, str]:
        return {
            "RANK": str(self.node_rank * self.nproc_per_node + local_rank),
            "WORLD_SIZE": str(self.world_size),
            "LOCAL_RANK": str(local_rank),
            "LOCAL_WORLD_SIZE": str(self.nproc_per_node),
            "GROUP_RANK": str(self.node_rank),
            "MASTER_ADDR": self.master_addr,
            "MASTER_PORT": str(self.master_port),
        }


def validate_framework(spec: RunSpec, *, cuda_available: bool, device_count: int) -> None:
    """Refuse, before any work, a distributed setup this host cannot run. Raises UserError."""
    tc = spec.training_config
    framework = tc.framework
    world = framework.distributed.world_size
    nodes = spec.resource_config.node_count
    if framework.type == FrameworkType.MEGATRON:
        raise UserError("the MEGATRON framework is not supported by this trainer; use FSDP")
    if world % nodes:
        raise UserError(f"framework.distributed.world_size={world} is not a multiple of resource_config.node_count={nodes}")
    per_node = world // nodes
    gpus = spec.resource_config.gpu_count
    if gpus > 0 and world > 1:
        if per_node > gpus:
            raise UserError(f"world_size={world} over {nodes} node(s) needs {per_node} GPUs per node; resource_config.gpu_count={gpus}")
        if cuda_available and per_node > device_count:
            raise UserError(f"{per_node} workers per node but this host has {device_count} CUDA device(s)")
    if world > 1 and tc.training_type == TrainingType.QLORA and framework.type == FrameworkType.FSDP:
        raise UserError("QLORA with FSDP is not supported (4-bit weights cannot be sharded by FSDP2); use HF_TRAINER (DDP)")
    if world > 1 and tc.training_type == TrainingType.QLORA and framework.type == FrameworkType.DEEPSPEED:
        raise UserError("QLORA with DEEPSPEED is not supported (ZeRO does not partition bitsandbytes 4-bit weights); use HF_TRAINER (DDP)")


def plan_launch(spec: RunSpec, paths: ContainerPaths, env: dict[str, str] | None = None) -> LaunchPlan | None:
    """None: run in this process (single process, or already a worker). Else: spawn workers."""
    env = dict(os.environ if env is None else env)
    world = spec.training_config.framework.distributed.world_size
    if world <= 1 or WorkerEnv.from_env(env) is not None:
        return None
    hosts = paths.hosts()
    nodes = spec.resource_config.node_count
    if hosts is not None and len(hosts.hosts) != nodes:
        raise UserError(f"resource_config.node_count={nodes} but SageMaker started {len(hosts.hosts)} host(s)")
    if hosts is None and nodes > 1:
        # Without SageMaker's host list (EC2), the launcher must start torchrun-style workers itself.
        node_rank = int(env.get("NODE_RANK", env.get("GROUP_RANK", "-1")))
        master = env.get("MASTER_ADDR")
        if node_rank < 0 or not master:
            raise UserError(f"node_count={nodes} needs SageMaker's resourceconfig.json or NODE_RANK and MASTER_ADDR in the environment")
    else:
        node_rank, master = (hosts.node_rank, hosts.master) if hosts else (0, "127.0.0.1")
    return LaunchPlan(
        world_size=world,
        nnodes=nodes,
        node_rank=node_rank,
        nproc_per_node=world // nodes,
        master_addr=master,
        master_port=int(env["MASTER_PORT"]) if env.get("MASTER_PORT") else _master_port(nodes),
    )


def _master_port(nodes: int) -> int:
    """Several single-node jobs may share a host (local mode): each takes a free port. Nodes of one
    multi-node job must agree without talking, so they use the fixed default."""
    if nodes > 1:
        return DEFAULT_MASTER_PORT
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def spawn_workers(plan: LaunchPlan, argv: list[str], *, grace_seconds: float) -> int:
    """Run this node's workers; forward SIGTERM; the exit code is the most telling worker's."""
    procs: list[subprocess.Popen[bytes]] = []
    for local_rank in range(plan.nproc_per_node):
        env = {**os.environ, **plan.worker_env(local_rank)}
        procs.append(subprocess.Popen([sys.executable, "-m", "trainer", *argv], env=env))

    def forward(signum: int, _frame: Any) -> None:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        codes = _wait_all(procs, grace_seconds)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return combine_exit_codes(codes)


def _wait_all(procs: list[subprocess.Popen[bytes]], grace_seconds: float) -> list[int]:
    failed_at: float | None = None
    while any(p.poll() is None for p in procs):
        codes = [p.poll() for p in procs]
        if failed_at is None and any(c not in (None, 0, ExitCode.STOPPED_WITH_CHECKPOINT) for c in codes):
            # One worker failed: the others would block in a collective forever. Ask them to stop.
            failed_at = time.monotonic()
            for p in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
        if failed_at is not None and time.monotonic() - failed_at > grace_seconds:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        time.sleep(0.2)
    return [int(p.returncode) for p in procs]


def combine_exit_codes(codes: list[int]) -> int:
    """A real failure beats a graceful stop, which beats success; rank order breaks ties."""
    failures = [c for c in codes if c not in (ExitCode.COMPLETED, ExitCode.STOPPED_WITH_CHECKPOINT)]
    if failures:
        # A negative code is a worker killed by a signal (the OOM killer, our own kill): not classifiable.
        return failures[0] if failures[0] > 0 else int(ExitCode.INTERNAL_ERROR)
    if ExitCode.STOPPED_WITH_CHECKPOINT in codes:
        return int(ExitCode.STOPPED_WITH_CHECKPOINT)
    return int(ExitCode.COMPLETED)


# --- runtime: what the training loop calls --------------------------------------------------


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
        if hasattr(model, "no_sync"):
            return model.no_sync()  # DDP
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

        full = get_model_state_dict(model, options=self._options())  # collective; rank 0 gets the tensors
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
        set_model_state_dict(model, tensors, options=StateDictOptions(full_state_dict=True, strict=not is_adapter))

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


def make_runtime(spec: RunSpec, device: torch.device) -> Runtime:
    worker = WorkerEnv.from_env()
    if worker is None or worker.world_size == 1:
        return Runtime(device)
    framework = spec.training_config.framework
    if framework.distributed.world_size != worker.world_size:
        log(f"WORLD_SIZE={worker.world_size} from the environment overrides distributed.world_size={framework.distributed.world_size}")
    if framework.type == FrameworkType.DEEPSPEED:
        from trainer.deepspeed_zero import DeepSpeedRuntime

        return DeepSpeedRuntime(worker, framework.distributed.backend, framework.zero_stage())
    return DistributedRuntime(worker, framework.type, framework.distributed.backend)
