"""Local deployer: the sweep controller as an in-process worker thread (AWS: its own Lambda).

Wakes from the API and the lifecycle's hook (functions/adapters/sweeps_wake.py) land on one worker
that decides for each woken sweep; every few seconds, and at start-up, it also wakes every active
sweep (the reconciler: a wake lost with a killed process changes nothing, since every decision
rebuilds the study from the table).
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from localmode import iam_calls

if TYPE_CHECKING:
    from localmode.deploy import LocalContext

logger = logging.getLogger(__name__)

RECONCILE_SECONDS = 5.0


def deploy(ctx: LocalContext) -> None:
    from functions.adapters.sweeps_wake import LOCAL_CONTROLLER

    ctx.set_setting("sweep_controller_function", LOCAL_CONTROLLER)
    ctx.add_background("sweeps", _serve)


def _serve(stop: threading.Event) -> None:
    from functions import composition
    from functions.adapters.sweeps_wake import LocalWorker, set_local_worker

    try:
        controller = composition.current().sweep_controller
    except Exception:
        logger.exception("the sweep controller is not available (is optuna installed? pip install 'trainplane[sweeps]')")
        return
    worker = LocalWorker(controller.decide)
    set_local_worker(worker)
    try:
        with iam_calls.acting_as("Sweeps"):  # the controller's own Lambda in the cloud (make iam-check)
            worker.run(stop, reconcile=lambda: list(controller.sweeps.active_sweep_ids()), interval=RECONCILE_SECONDS)
    finally:
        set_local_worker(None)
