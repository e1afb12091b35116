"""Scripted capacity pools for the emulated EC2 (`trainplane up --compute ec2 --capacity-pools FILE`).

A file (JSON or YAML) gives each pool's free units and interruptions over time, in seconds since local
mode started, so "H100 spot is out, A100 spot has 2, then A100 spot is interrupted" is a reproducible run
(docs/PLACEMENT.md):

    pools:
      - {instance_type: p5.48xlarge, purchase: spot, free: [[0, 0]]}
      - {instance_type: p4d.24xlarge, purchase: spot, free: [[0, 2]], interruptions: [30]}
      - {instance_type: p4d.24xlarge, purchase: on_demand, zone: us-east-1a, free: [[0, 1], [600, 0]]}

A RunInstances into a scripted pool that has fewer free units than instances asked (running ones count
against them) is refused with EC2's InsufficientInstanceCapacity. At each interruption time, the pool's
instances running then (or the first ones to run after it) get the emulator's interruption tag: the
two-minute warning, then SIGTERM. A pool the file does not name is unlimited, as moto is.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

PURCHASES = ("spot", "on_demand")


class PoolScript(BaseModel):
    model_config = ConfigDict(extra="forbid")

    instance_type: str = Field(min_length=1)
    purchase: str = "spot"
    zone: str = "any"
    free: list[tuple[float, int]] = Field(min_length=1, description="(seconds since start, free units) steps, in time order")
    interruptions: list[float] = Field(default_factory=list)

    @field_validator("purchase")
    @classmethod
    def _purchase(cls, value: str) -> str:
        if value not in PURCHASES:
            raise ValueError(f"must be one of {', '.join(PURCHASES)}")
        return value

    @field_validator("free")
    @classmethod
    def _ordered(cls, value: list[tuple[float, int]]) -> list[tuple[float, int]]:
        if [t for t, _ in value] != sorted(t for t, _ in value) or any(units < 0 for _, units in value):
            raise ValueError("steps must be in time order with free units >= 0")
        return value

    def matches(self, instance_type: str, purchase: str, zone: str | None) -> bool:
        return self.instance_type == instance_type and self.purchase == purchase and self.zone in ("any", zone)

    def free_at(self, elapsed: float) -> int:
        units = 0
        for at, free in self.free:
            if at <= elapsed:
                units = free
        return units


class PoolsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    pools: list[PoolScript] = Field(default_factory=list)


@dataclass(frozen=True)
class Running:
    """A running or pending instance as the pools count it."""

    instance_id: str
    instance_type: str
    purchase: str
    zone: str | None


class ScriptedPools:
    def __init__(self, scripts: Iterable[PoolScript], clock: Callable[[], float] = time.monotonic) -> None:
        self.scripts = list(scripts)
        self.clock = clock
        self.started = clock()
        self._fired: set[tuple[int, float]] = set()
        self._lock = threading.Lock()

    @classmethod
    def from_file(cls, path: Path, clock: Callable[[], float] = time.monotonic) -> ScriptedPools:
        """The pools of a JSON or YAML file; ValueError naming the file and the entry that is wrong."""
        import yaml

        text = path.read_text()
        document: Any = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        try:
            parsed = PoolsFile.model_validate(document)
        except Exception as exc:
            raise ValueError(f"capacity pools file {path}: {exc}") from exc
        return cls(parsed.pools, clock)

    def elapsed(self) -> float:
        return self.clock() - self.started

    def refusal(self, instance_type: str, purchase: str, zone: str | None, count: int, running: Iterable[Running]) -> str | None:
        """Why RunInstances of `count` such instances finds no capacity now; None when it fits."""
        script = next((s for s in self.scripts if s.matches(instance_type, purchase, zone)), None)
        if script is None:
            return None
        held = sum(1 for r in running if script.matches(r.instance_type, r.purchase, r.zone))
        free = script.free_at(self.elapsed()) - held
        if free >= count:
            return None
        where = f" in {zone}" if zone else ""
        return f"We currently do not have sufficient {instance_type} capacity{where} ({purchase}: {max(free, 0)} free, {count} asked)."

    def due_interruptions(self, running: Iterable[Running]) -> list[str]:
        """Instance ids to interrupt now: the running spot instances of pools whose interruption time passed."""
        elapsed = self.elapsed()
        hit: list[str] = []
        instances = list(running)
        with self._lock:
            for index, script in enumerate(self.scripts):
                for at in script.interruptions:
                    if at > elapsed or (index, at) in self._fired:
                        continue
                    victims = [r.instance_id for r in instances if script.matches(r.instance_type, r.purchase, r.zone)]
                    if victims:  # an interruption hits the pool's first instances running at or after its time
                        self._fired.add((index, at))
                        hit.extend(victims)
        return hit
