"""Deterministic races: two writers that both pass the pre-read, so only the conditional write decides.

A thread storm catches a missing condition only when the scheduler happens to interleave the threads
badly; these helpers force the bad interleaving every run (docs/TESTING.md, "Deterministic races"):

- `StaleRead` runs the writers one after the other and answers each later writer's first read
  through `obj.name` (per arguments) with what the first writer read: every writer decides on the state
  as it was before any of them wrote, as if all read first. A writer that reads again (a retry after
  losing) reads what is stored. No threads.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from unittest import mock


@dataclass
class Outcome:
    value: Any = None
    error: BaseException | None = None

    @property
    def won(self) -> bool:
        return self.error is None


def attempt(writer: Callable[[], Any]) -> Outcome:
    try:
        return Outcome(value=writer())
    except Exception as exc:  # a lost race is an exception for most writers: kept for the assertions
        return Outcome(error=exc)


def winners(outcomes: list[Outcome], won: Callable[[Outcome], bool] = lambda o: o.won) -> list[int]:
    """The indexes of the writers that won (by default: returned without raising)."""
    return [i for i, o in enumerate(outcomes) if won(o)]


class StaleRead:
    def __init__(self, obj: Any, name: str) -> None:
        self.obj, self.name = obj, name
        self.seen: dict[Any, Any] = {}
        self.replayed = 0

    def run(self, *writers: Callable[[], Any]) -> list[Outcome]:
        real = getattr(self.obj, self.name)

        def recording(*args: Any, **kwargs: Any) -> Any:
            result = real(*args, **kwargs)
            self.seen.setdefault((args, tuple(sorted(kwargs.items()))), copy.deepcopy(result))
            return result

        fresh: set[Any] = set()

        def replaying(*args: Any, **kwargs: Any) -> Any:
            key = (args, tuple(sorted(kwargs.items())))
            if key in fresh:
                fresh.discard(key)
                self.replayed += 1
                return copy.deepcopy(self.seen[key])
            return real(*args, **kwargs)

        outcomes = []
        for i, writer in enumerate(writers):
            fresh.clear()
            fresh.update(self.seen)
            with mock.patch.object(self.obj, self.name, recording if i == 0 else replaying):
                outcomes.append(attempt(writer))
        # The race was forced only if the later writers did read what the first one read.
        assert self.replayed >= len(writers) - 1, f"the later writers never read through {self.name}: no race was forced"
        return outcomes
