"""A worker's place in a multi-process run, as torchrun (or our supervisor, trainer/distributed.py) sets it
in the environment. Torch-free: the supervisor of a CPU job reads it without importing torch."""

from __future__ import annotations

import os
from dataclasses import dataclass

DEFAULT_MASTER_PORT = 29500


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
