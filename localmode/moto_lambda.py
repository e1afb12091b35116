"""THE adapter over moto's Lambda that runs our handlers in-process (local mode and integration tests).

moto 5.2.5 has no supported hook to run a Python handler without Docker: its no-docker backend
(`moto.awslambda_simple.models.LambdaSimpleBackend.invoke`) only echoes the payload. `install()`
replaces that one method: it imports the function's configured `Handler` ("package.module.function")
and calls it with the decoded event, the way the Lambda Python runtime does, including the error
shape of an unhandled exception ({"errorType": <class name>, "errorMessage": ...} with the
X-Amz-Function-Error header), which is what a state machine's Retry/Catch match on.

It also delivers CloudWatch Logs subscription filters whose destination is a Lambda function (the
trainer's reports, localmode/deploy/trainer_reports.py): moto builds the awslogs payload inside
PutLogEvents but then runs the function in Docker, and ignores the filter's pattern. Here
`LambdaSimpleBackend.send_log_event` applies the pattern and queues the payload; one delivery thread
invokes the handler with it, asynchronously and in order, retrying an error twice, as Lambda's
asynchronous invocation does. `TRAINPLANE_LOCAL_DROP_TRAINER_REPORTS=1` drops every delivery (the
channel is down: tests of what the reconciler recovers).

It also works around one race of moto's Step Functions engine (see `_nudge`). Everything here
depends on moto internals: it refuses any other moto version, and tests/integration/
test_lifecycle_moto_lambda.py fails loudly if an upgrade changes what it relies on.
"""

from __future__ import annotations

import base64
import gzip
import importlib
import importlib.metadata
import json
import logging
import os
import queue
import shlex
import threading
import traceback
from collections.abc import Callable
from typing import Any

from localmode import moto_pin
from schemas.lifecycle import Next

logger = logging.getLogger(__name__)

_NUDGE_DELAYS = (0.05, 0.2, 0.5, 1.0, 2.0)

DROP_REPORTS_ENV = "TRAINPLANE_LOCAL_DROP_TRAINER_REPORTS"
_ASYNC_RETRIES = 2  # Lambda retries a failed asynchronous invocation twice

_installed: Callable[..., Any] | None = None
_installed_send_log_event: Callable[..., Any] | None = None
_lock = threading.Lock()
_deliveries: queue.SimpleQueue[tuple[Any, dict[str, Any]]] = queue.SimpleQueue()
_deliverer: threading.Thread | None = None
_outstanding = 0  # queued or being delivered
_settled = threading.Condition()


def check_version() -> None:
    moto_pin.check("localmode.moto_lambda", "LambdaSimpleBackend.invoke and the Step Functions callback engine")


def install() -> None:
    """Make moto's no-docker Lambda run our handlers in this process. Idempotent."""
    global _installed
    check_version()
    from moto.awslambda_simple.models import LambdaSimpleBackend

    global _installed_send_log_event
    with _lock:
        if _installed is None:
            _installed = LambdaSimpleBackend.invoke
            _installed_send_log_event = LambdaSimpleBackend.send_log_event
            LambdaSimpleBackend.invoke = _invoke  # type: ignore[method-assign]
            LambdaSimpleBackend.send_log_event = _send_log_event  # type: ignore[method-assign]


def uninstall() -> None:
    global _installed, _installed_send_log_event
    from moto.awslambda_simple.models import LambdaSimpleBackend

    with _lock:
        if _installed is not None:
            LambdaSimpleBackend.invoke = _installed  # type: ignore[method-assign]
            LambdaSimpleBackend.send_log_event = _installed_send_log_event  # type: ignore[method-assign,assignment]
            _installed = _installed_send_log_event = None


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


# --- CloudWatch Logs subscription filters -> a Lambda function -------------------------------------


def matches_filter_pattern(pattern: str, message: str) -> bool:
    """CloudWatch Logs' term patterns: every term (quoted or not) must occur in the message; an empty
    pattern matches everything. JSON (`{...}`) and space-delimited (`[...]`) patterns are not emulated."""
    pattern = pattern.strip()
    if not pattern:
        return True
    terms = shlex.split(pattern)
    if pattern[0] in "{[" or any(term.startswith(("?", "-")) for term in terms):
        raise ValueError(f"filter pattern {pattern!r} is not emulated (terms only)")
    return all(term in message for term in terms)


def awslogs_event(owner: str, log_group: str, log_stream: str, filter_name: str, log_events: list[dict[str, Any]]) -> dict[str, Any]:
    """What CloudWatch Logs invokes a subscribed function with: gzip + base64 of the batch."""
    data = {
        "messageType": "DATA_MESSAGE",
        "owner": owner,
        "logGroup": log_group,
        "logStream": log_stream,
        "subscriptionFilters": [filter_name],
        "logEvents": log_events,
    }
    return {"awslogs": {"data": base64.b64encode(gzip.compress(json.dumps(data, separators=(",", ":")).encode())).decode()}}


def _send_log_event(self: Any, function_arn: str, filter_name: str, log_group_name: str, log_stream_name: str, log_events: Any) -> None:
    """Called by moto's PutLogEvents once per subscription filter of the group (in the request's thread)."""
    from moto.logs.models import logs_backends

    group = logs_backends[self.account_id][self.region_name].groups.get(log_group_name)
    subscription = group.subscription_filters.get(filter_name) if group is not None else None
    pattern = subscription.filter_pattern if subscription is not None else ""
    try:
        matching = [e for e in log_events if matches_filter_pattern(pattern, str(e.get("message", "")))]
    except ValueError:
        logger.exception("subscription filter %s of %s: nothing delivered", filter_name, log_group_name)
        return
    if not matching:
        return
    # AWS's event ids are 56-digit strings; moto's are small ints.
    matching = [{**e, "id": f"{int(e['id']):056d}" if str(e.get("id", "")).isdigit() else str(e.get("id"))} for e in matching]
    function = self.get_function(function_arn)
    global _outstanding
    with _settled:
        _outstanding += 1
    _deliveries.put((function, awslogs_event(self.account_id, log_group_name, log_stream_name, filter_name, matching)))
    _start_deliverer()


def _start_deliverer() -> None:
    global _deliverer
    with _lock:
        if _deliverer is None or not _deliverer.is_alive():
            _deliverer = threading.Thread(target=_deliver_forever, name="logs-subscription-deliveries", daemon=True)
            _deliverer.start()


def _deliver_forever() -> None:
    global _outstanding
    while True:
        function, event = _deliveries.get()
        try:
            _deliver(function, event)
        finally:
            with _settled:
                _outstanding -= 1
                _settled.notify_all()


def _deliver(function: Any, event: dict[str, Any]) -> None:
    if os.environ.get(DROP_REPORTS_ENV, "").lower() in {"1", "true", "yes"}:
        logger.info("%s is set: a subscription delivery to %s dropped", DROP_REPORTS_ENV, function.function_name)
        return
    for _ in range(1 + _ASYNC_RETRIES):
        headers: dict[str, str] = {}
        try:
            _call(function, event, headers)
        except Exception:
            logger.exception("subscription delivery to %s failed", function.function_name)
            continue
        if "x-amz-function-error" not in headers:
            break


def pending_deliveries() -> int:
    """Deliveries queued or being delivered (tests wait for 0)."""
    with _settled:
        return _outstanding


def wait_for_deliveries(timeout: float) -> bool:
    """Wait until every subscription delivery queued so far has been handled; False on timeout."""
    with _settled:
        return _settled.wait_for(lambda: _outstanding == 0, timeout)
