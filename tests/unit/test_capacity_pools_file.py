"""Scripted capacity pools (localmode/deploy/emulated_compute/capacity_pools.py): the file, free units over
time, running instances counted against them, interruptions fired once, on the first instances due."""

from __future__ import annotations

from pathlib import Path

import pytest

from localmode.deploy.emulated_compute.capacity_pools import Running, ScriptedPools


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


FILE = """
pools:
  - {instance_type: p5.48xlarge, purchase: spot, free: [[0, 0]]}
  - {instance_type: p4d.24xlarge, purchase: spot, free: [[0, 2], [100, 1]], interruptions: [30]}
"""


def test_free_units_over_time_and_what_runs_counts_against_them(tmp_path: Path) -> None:
    path = tmp_path / "pools.yaml"
    path.write_text(FILE)
    clock = Clock()
    pools = ScriptedPools.from_file(path, clock)
    a100 = [Running("i-1", "p4d.24xlarge", "spot", "us-east-1a")]
    assert pools.refusal("p5.48xlarge", "spot", None, 1, []) is not None  # H100 spot is out
    assert pools.refusal("p4d.24xlarge", "spot", None, 1, a100) is None  # 2 free, 1 held
    assert pools.refusal("p4d.24xlarge", "spot", None, 2, a100) is not None
    assert pools.refusal("p4d.24xlarge", "on_demand", None, 8, []) is None  # not scripted: unlimited
    clock.now = 150
    assert pools.refusal("p4d.24xlarge", "spot", None, 1, a100) is not None  # down to 1 at t=100


def test_an_interruption_fires_once_on_the_first_instances_running_at_or_after_it(tmp_path: Path) -> None:
    path = tmp_path / "pools.yaml"
    path.write_text(FILE)
    clock = Clock()
    pools = ScriptedPools.from_file(path, clock)
    a100 = [Running("i-1", "p4d.24xlarge", "spot", None)]
    assert pools.due_interruptions(a100) == []  # not yet
    clock.now = 40
    assert pools.due_interruptions([]) == []  # due, but nothing runs: it waits for the next instance
    assert pools.due_interruptions(a100) == ["i-1"]
    assert pools.due_interruptions(a100) == []  # once


def test_a_bad_file_names_the_entry(tmp_path: Path) -> None:
    path = tmp_path / "pools.json"
    path.write_text('{"pools": [{"instance_type": "p5.48xlarge", "purchase": "reserved", "free": [[0, 1]]}]}')
    with pytest.raises(ValueError, match="purchase"):
        ScriptedPools.from_file(path)
    path.write_text('{"pools": [{"instance_type": "p5.48xlarge", "free": [[10, 1], [0, 2]]}]}')
    with pytest.raises(ValueError, match="time order"):
        ScriptedPools.from_file(path)
