"""THE adapter over moto's Lambda that runs our handlers in-process (local mode and integration tests).

moto 5.2.5 has no supported hook to run a Python handler without Docker: its no-docker backend
(`moto.awslambda_simple.models.LambdaSimpleBackend.invoke`) only echoes the payload. `install()`
replaces that one method: it imports the function's configured `Handler` ("package.module.function")
and calls it with the decoded event, the way the Lambda Python runtime does, including the error
shape of an unhandled exception ({"errorType": <class name>, "errorMessage": ...} with the
X-Amz-Function-Error header), which is what a state machine's Retry/Catch match on.

It also works around one race of moto's Step Functions engine (see `_nudge`). Everything here
depends on moto internals: it refuses any other moto version, and tests/integration/
test_lifecycle_moto_lambda.py fails loudly if an upgrade changes what it relies on.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import logging
import threading
import traceback
from collections.abc import Callable
from typing import Any

from schemas.lifecycle import Next

logger = logging.getLogger(__name__)

PINNED_MOTO_VERSION = "5.2.5"
# What local mode and the tests switch on in moto: our in-process Lambda, and ASL execution.
MOTO_CONFIG: dict[str, dict[str, bool]] = {"lambda": {"use_docker": False}, "stepfunctions": {"execute_state_machine": True}}
_NUDGE_DELAYS = (0.05, 0.2, 0.5, 1.0, 2.0)

_installed: Callable[..., Any] | None = None
_lock = threading.Lock()


class MotoVersionError(RuntimeError):
    pass


def check_version() -> None:
    version = importlib.metadata.version("moto")
    if version != PINNED_MOTO_VERSION:
        raise MotoVersionError(
            f"localmode.moto_lambda is written against moto {PINNED_MOTO_VERSION} internals but moto {version} is installed; "
            "re-check LambdaSimpleBackend.invoke and the Step Functions callback engine, then update PINNED_MOTO_VERSION"
        )


def install() -> None:
    """Make moto's no-docker Lambda run our handlers in this process. Idempotent."""
    global _installed
    check_version()
    from moto.awslambda_simple.models import LambdaSimpleBackend

    with _lock:
        if _installed is None:
            _installed = LambdaSimpleBackend.invoke
            LambdaSimpleBackend.invoke = _invoke  # type: ignore[method-assign]


def uninstall() -> None:
    global _installed
    from moto.awslambda_simple.models import LambdaSimpleBackend

    with _lock:
        if _installed is not None:
            LambdaSimpleBackend.invoke = _installed  # type: ignore[method-assign]
            _installed = None


def installed() -> bool:
    return _installed is not None


class LambdaContext:
    """The few attributes of the Lambda runtime's context object that handlers (and Powertools) read."""

    def __init__(self, function: Any) -> None:
        self.function_name = function.function_name
        self.function_version = "$LATEST"
        self.invoked_function_arn = function.function_arn
        self.memory_limit_in_mb = int(getattr(function, "memory_size", 128) or 128)
        self.aws_request_id = __import__("uuid").uuid4().hex
        self.log_group_name = f"/aws/lambda/{function.function_name}"
        self.log_stream_name = "local"

    def get_remaining_time_in_millis(self) -> int:
        return 900_000


def resolve_handler(spec: str) -> Callable[..., Any]:
    module_name, _, attr = spec.rpartition(".")
    if not module_name:
        raise ValueError(f"Handler {spec!r} is not 'package.module.function'")
    return getattr(importlib.import_module(module_name), attr)


def _invoke(self: Any, function_name: str, qualifier: str | None, body: Any, headers: Any, response_headers: Any) -> bytes:
    function = self.get_function(function_name, qualifier)
    event = json.loads(body) if body else {}
    invocation_type = (headers or {}).get("X-Amz-Invocation-Type") or (headers or {}).get("x-amz-invocation-type") or "RequestResponse"
    if invocation_type == "Event":
        threading.Thread(target=_call, args=(function, event, {}), daemon=True).start()
        return b""
    payload = _call(function, event, response_headers)
    response_headers["Content-Length"] = str(len(payload))
    return payload


def _call(function: Any, event: Any, response_headers: dict[str, str]) -> bytes:
    try:
        result = resolve_handler(function.handler)(event, LambdaContext(function))
    except Exception as exc:
        logger.warning("Lambda %s raised %s: %s", function.function_name, type(exc).__name__, exc)
        response_headers["x-amz-function-error"] = "Unhandled"
        error = {"errorType": type(exc).__name__, "errorMessage": str(exc), "stackTrace": traceback.format_exception(exc)[-5:]}
        return json.dumps(error).encode()
    if isinstance(event, dict) and event.get("token") and isinstance(result, dict) and result.get("next") == Next.ANSWERED:
        _nudge(function, str(event["token"]))
    return json.dumps(result, default=str).encode()


def _nudge(function: Any, token: str) -> None:
    """moto's engine race: a waitForTaskToken task with HeartbeatSeconds sets up its heartbeat watch
    only after the Lambda returns, so a token answered DURING the invocation (our "answered" tasks) is
    noticed only when the first heartbeat period runs out. A few heartbeats right after the invocation
    wake the watch up and it reads the answer at once. In AWS the answer is seen immediately anyway.
    """
    from moto.stepfunctions.parser.models import stepfunctions_parser_backends

    backend = stepfunctions_parser_backends[function.account_id][function.region]

    def beat() -> None:
        import time

        for delay in _NUDGE_DELAYS:
            time.sleep(delay)
            try:
                backend.send_task_heartbeat(token)
            except Exception as exc:  # no heartbeat watch yet, or the wait is over: harmless, try again
                logger.debug("nudge of a task token: %s", exc)

    threading.Thread(target=beat, name="moto-token-nudge", daemon=True).start()
