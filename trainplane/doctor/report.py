"""A doctor's checklist: one line per check, a mark, and for each failure what to do about it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any


class Mark(StrEnum):
    PASS = "pass"  # noqa: S105 (a checklist mark, not a password)
    FAIL = "fail"
    SKIP = "skip"  # does not apply to this deployment (said why); never hides a failure


@dataclass(frozen=True)
class CheckResult:
    name: str
    mark: Mark
    detail: str
    fix: str = ""

    @classmethod
    def ok(cls, name: str, detail: str) -> CheckResult:
        return cls(name, Mark.PASS, detail)

    @classmethod
    def failed(cls, name: str, detail: str, fix: str) -> CheckResult:
        return cls(name, Mark.FAIL, detail, fix)

    @classmethod
    def skipped(cls, name: str, why: str) -> CheckResult:
        return cls(name, Mark.SKIP, why)


@dataclass
class Report:
    target: str
    checks: list[CheckResult] = field(default_factory=list)
    smoke: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return all(c.mark is not Mark.FAIL for c in self.checks)

    def failures(self) -> list[CheckResult]:
        return [c for c in self.checks if c.mark is Mark.FAIL]

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "ok": self.ok,
            "checks": [{**asdict(c), "mark": c.mark.value} for c in self.checks],
            **({"smoke": self.smoke} if self.smoke is not None else {}),
        }
