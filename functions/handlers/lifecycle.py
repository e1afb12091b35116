"""The lifecycle Lambda: one thin entry point for every task of the state machine.

Payload (infra/statemachine/lifecycle.asl.json): {"action", "job_id", "execution", "token"?, "error"?}.
Returns {"next": ...} for the machine's Choice states. A lost race that keeps losing, or a throttled
AWS call, is raised as TransientError (the machine retries it with backoff); a job that no longer
exists ends its execution quietly.
"""

from __future__ import annotations

from collections.abc import Mapping
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


def _dispatch(svc: LifecycleService, event: Mapping[str, Any]) -> dict[str, Any]:
    action = event.get("action")
    job_id = str(event["job_id"])
    execution = event.get("execution")
    token = event.get("token")
    if action == Action.ADMIT:
        return svc.admit(job_id, execution)
    if action == Action.WAIT_CAPACITY:
        return svc.wait_capacity(job_id, execution, str(token))
    if action == Action.PREPARE:
        return svc.prepare(job_id, execution)
    if action == Action.LAUNCH:
        return svc.launch(job_id, execution)
    if action == Action.WAIT_RUN:
        return svc.wait_run(job_id, execution, str(token))
    if action == Action.WAIT_RESUME:
        return svc.wait_resume(job_id, execution, str(token))
    if action == Action.RUN_TIMEOUT:
        return svc.run_timeout(job_id, execution)
    if action == Action.CRASH:
        return svc.crash(job_id, execution, event.get("error"))
    raise ValueError(f"unknown lifecycle action {action!r}")


ACTIONS = frozenset(Action)


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
