"""Powertools' Tracer, built on the first invocation instead of at import time.

`Tracer()` imports the X-Ray SDK (and with it botocore) in its constructor, even when tracing is
off: about a second on a small machine, which would dominate the API module's import. Built lazily,
a traced Lambda pays it once at its first invocation, and an untraced process (tests, local mode)
never does: outside Lambda, or with POWERTOOLS_TRACE_DISABLED, Powertools would disable it anyway.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable
from typing import Any

_TRUE = {"1", "true", "yes", "on"}


def tracing_wanted() -> bool:
    """Powertools' own rule: on in Lambda (LAMBDA_TASK_ROOT), off when disabled or in SAM/Chalice local."""
    if os.getenv("POWERTOOLS_TRACE_DISABLED", "false").lower() in _TRUE:
        return False
    if os.getenv("AWS_SAM_LOCAL") or os.getenv("AWS_CHALICE_CLI_MODE"):
        return False
    return bool(os.getenv("LAMBDA_TASK_ROOT"))


class LazyTracer:
    def __init__(self, service: str) -> None:
        self.service = service
        self._tracer: Any = None
        self._lock = threading.Lock()

    @property
    def tracer(self) -> Any:
        """The Powertools Tracer, created on first use."""
        if self._tracer is None:
            with self._lock:
                if self._tracer is None:
                    from aws_lambda_powertools import Tracer

                    self._tracer = Tracer(service=self.service)
        return self._tracer

    def capture_lambda_handler(self, handler: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        traced: list[Callable[[Any, Any], Any]] = []

        @functools.wraps(handler)
        def wrapper(event: Any, context: Any) -> Any:
            if not tracing_wanted():
                return handler(event, context)
            if not traced:
                traced.append(self.tracer.capture_lambda_handler(handler))
            return traced[0](event, context)

        return wrapper
