"""Failure classification: every way the trainer can end badly maps to one FailureReason, one exit
code, and the first line of /opt/ml/output/failure (SageMaker shows that file as FailureReason, and
the control plane decides retry vs fail from the first word).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from schemas.trainer import ExitCode, FailureReason

# SageMaker truncates FailureReason at 1024 characters; keep the useful head.
_MAX_FAILURE_CHARS = 1024


class TrainerError(Exception):
    """Base of the errors the trainer classifies itself; anything else is an InternalError."""

    reason: FailureReason = FailureReason.INTERNAL
    exit_code: ExitCode = ExitCode.INTERNAL_ERROR


class UserError(TrainerError):
    """The job's configuration asks for something impossible or invalid (bad hyperparameter, QLoRA on CPU...)."""

    reason = FailureReason.USER_ERROR
    exit_code = ExitCode.USER_ERROR


class DataError(TrainerError):
    """Bad training data: names the file and the 1-based line (0 when the whole file is at fault)."""

    reason = FailureReason.DATA_ERROR
    exit_code = ExitCode.DATA_ERROR

    def __init__(self, file: str | os.PathLike[str], line: int, message: str) -> None:
        self.file = str(file)
        self.line = line
        self.message = message
        where = f"{self.file}:{line}" if line else self.file
        super().__init__(f"{where}: {message}")


class OutOfMemory(TrainerError):
    reason = FailureReason.OUT_OF_MEMORY
    exit_code = ExitCode.OUT_OF_MEMORY


class Preempted(TrainerError):
    """The host is going away (spot reclaim) and no checkpoint could be saved in the grace period."""

    reason = FailureReason.PREEMPTED
    exit_code = ExitCode.INTERNAL_ERROR


@dataclass(frozen=True)
class Classified:
    reason: FailureReason
    exit_code: ExitCode
    message: str

    def failure_text(self) -> str:
        return f"{self.reason.value}: {self.message}"[:_MAX_FAILURE_CHARS]


def is_out_of_memory(exc: BaseException) -> bool:
    """torch.cuda.OutOfMemoryError, the CPU allocator's RuntimeError, or Python's MemoryError.

    Matched by name and message so this module never imports torch (it also classifies failures
    that happen before torch could be imported).
    """
    if isinstance(exc, MemoryError | OutOfMemory):
        return True
    if type(exc).__name__ == "OutOfMemoryError":
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text or "cuda oom" in text)


def classify(exc: BaseException) -> Classified:
    if isinstance(exc, TrainerError):
        return Classified(exc.reason, exc.exit_code, str(exc) or type(exc).__name__)
    if is_out_of_memory(exc):
        return Classified(FailureReason.OUT_OF_MEMORY, ExitCode.OUT_OF_MEMORY, _first_line(exc))
    return Classified(FailureReason.INTERNAL, ExitCode.INTERNAL_ERROR, f"{type(exc).__name__}: {_first_line(exc)}")


def write_failure(path: str | os.PathLike[str], classified: Classified) -> Path:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(classified.failure_text() + "\n", encoding="utf-8")
    os.replace(tmp, target)
    return target


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
