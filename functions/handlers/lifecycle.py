"""The lifecycle Lambda: one thin entry point for every task of the state machine.

Payload (infra/statemachine/lifecycle.asl.json): {"action", "job_id", "execution", "token"?, "error"?}.
Returns {"next": ...} for the machine's Choice states. A lost race that keeps losing, or a throttled
AWS call, is raised as TransientError (the machine retries it with backoff); a job that no longer
exists ends its execution quietly.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from aws_lambda_powertools import Logger

from functions import constants
from functions.errors import ConcurrentModification, JobNotFound
from functions.service.lifecycle import LifecycleService, TransientError
from schemas.lifecycle import Action, Next

logger = Logger(service=constants.SERVICE_NAME)

_THROTTLING = {"ThrottlingException", "ProvisionedThroughputExceededException", "RequestLimitExceeded", "TooManyRequestsException"}


def service() -> LifecycleService:
    from functions import composition  # the composition root wires the real adapters (tests: composition.configure)

    return composition.lifecycle_service()


# One entry per Action: what the task's payload becomes as a LifecycleService call. The state machine's
# Tasks name exactly these keys (tests/unit/test_lifecycle_protocol.py).
_Task = Callable[[LifecycleService, str, Any, Mapping[str, Any]], dict[str, Any]]
TASKS: Mapping[Action, _Task] = {
    Action.ADMIT: lambda svc, job_id, execution, event: svc.admit(job_id, execution),
    Action.WAIT_CAPACITY: lambda svc, job_id, execution, event: svc.wait_capacity(job_id, execution, str(event.get("token"))),
    Action.PREPARE: lambda svc, job_id, execution, event: svc.prepare(job_id, execution),
    Action.LAUNCH: lambda svc, job_id, execution, event: svc.launch(job_id, execution),
    Action.WAIT_RUN: lambda svc, job_id, execution, event: svc.wait_run(job_id, execution, str(event.get("token"))),
    Action.WAIT_RESUME: lambda svc, job_id, execution, event: svc.wait_resume(job_id, execution, str(event.get("token"))),
    Action.RUN_TIMEOUT: lambda svc, job_id, execution, event: svc.run_timeout(job_id, execution),
    Action.CRASH: lambda svc, job_id, execution, event: svc.crash(job_id, execution, event.get("error")),
}
ACTIONS = frozenset(TASKS)


def _dispatch(svc: LifecycleService, event: Mapping[str, Any]) -> dict[str, Any]:
    action = event.get("action")
    job_id = str(event["job_id"])
    try:
        task = TASKS[Action(str(action))]
    except ValueError:
        raise ValueError(f"unknown lifecycle action {action!r}") from None
    return task(svc, job_id, event.get("execution"), event)


def handler(event: Mapping[str, Any], context: Any = None) -> dict[str, Any]:
    logger.append_keys(job_id=event.get("job_id"), action=event.get("action"))
    svc = service()
    try:
        result = _dispatch(svc, event)
        logger.debug("lifecycle task done", extra={"next": result.get("next")})
        return result
    except JobNotFound:
        logger.warning("job %s no longer exists; ending its execution", event.get("job_id"))
        if event.get("token"):
            svc.tokens.send_success(str(event["token"]), {"next": Next.ENDED})
        return {"next": Next.ENDED}
    except ConcurrentModification as exc:
        raise TransientError(str(exc)) from exc
    except Exception as exc:
        code = getattr(exc, "response", {}).get("Error", {}).get("Code") if hasattr(exc, "response") else None
        if code in _THROTTLING:
            raise TransientError(f"{code}: {exc}") from exc
        raise
