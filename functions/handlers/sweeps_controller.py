"""The sweep controller Lambda: {"sweep_id"} (a wake from the API or the lifecycle) decides for one sweep;
an EventBridge schedule's event (no sweep_id) decides for every active sweep (the reconciler).

The only handler that imports Optuna (functions/service/sweeps/controller.py), in its own bundle.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from aws_lambda_powertools import Logger

from functions import composition, constants

logger = Logger(service=constants.SERVICE_NAME)


@logger.inject_lambda_context
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    controller = composition.current().sweep_controller
    sweep_id = event.get("sweep_id") if isinstance(event, dict) else None
    if isinstance(sweep_id, str) and sweep_id:
        return asdict(controller.decide(sweep_id))
    return {"decided": [asdict(d) for d in controller.reconcile()]}
