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

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from schemas.configs import FrameworkType, TrainingType
from schemas.trainer import ExitCode, RunSpec
from trainer.contract import ContainerPaths
from trainer.events import log
from trainer.failures import UserError
from trainer.worker_env import DEFAULT_MASTER_PORT, WorkerEnv

if TYPE_CHECKING:
    import torch

    from trainer.runtime import Runtime

WORKER_ENV_KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


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


def worker_threads(environ: Mapping[str, str], workers: int) -> dict[str, str]:
    """As torchrun does: several workers on one node each get one OpenMP thread unless OMP_NUM_THREADS is set,
    so their thread teams do not spin-wait for each other on the same cores (docs/TESTING.md, "CI wall time")."""
    env = dict(environ)
    if workers > 1:
        env.setdefault("OMP_NUM_THREADS", "1")
    return env


def spawn_workers(plan: LaunchPlan, argv: list[str], *, grace_seconds: float) -> int:
    """Run this node's workers; forward SIGTERM; the exit code is the most telling worker's."""
    procs: list[subprocess.Popen[bytes]] = []
    for local_rank in range(plan.nproc_per_node):
        env = {**worker_threads(os.environ, plan.nproc_per_node), **plan.worker_env(local_rank)}
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


def make_runtime(spec: RunSpec, device: torch.device) -> Runtime:
    from trainer.runtime import DistributedRuntime, Runtime

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
