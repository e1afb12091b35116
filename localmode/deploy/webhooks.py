"""Local deployer: webhook delivery (issue 23.4, docs/EVENTS.md), the cloud's worker on a loop.

The publisher's fan-out (functions/service/webhooks.py) queues deliveries as items of the jobs table,
which local mode's journal keeps: deliveries queued or waiting for a retry before a `kill -9` of
`trainplane up` are attempted after the restart (a lease cut short by the kill ends and the attempt is
made again, with the same webhook-id). Loopback receivers are allowed here, and only here.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import TYPE_CHECKING

from functions.settings import PREFIX
from localmode import iam_calls, moto_hooks

if TYPE_CHECKING:
    from localmode.deploy import LocalContext

logger = logging.getLogger(__name__)

IDLE_SECONDS = 1.0  # idle: woken by any DynamoDB write in-process (moto_hooks.write_signal); a retry comes due at least this often
ERROR_BACKOFF_SECONDS = 1.0


def deploy(ctx: LocalContext) -> None:
    ctx.add_background("webhook-delivery", _serve)


def _serve(stop: threading.Event) -> None:
    from functions import composition

    # As the publisher's loop: settings are complete only once `trainplane up` exported them.
    while not stop.is_set() and not os.environ.get(PREFIX + "TRAINPLANE_BUS_NAME"):
        stop.wait(0.05)
    worker = composition.current().webhook_delivery
    written = moto_hooks.write_signal()
    while not stop.is_set():
        written.clear()  # before the pass: a write during it makes the next pass start at once
        try:
            with iam_calls.acting_as(iam_calls.WEBHOOK_DELIVERY):  # the delivery Lambda's role (make iam-check)
                attempted = worker.deliver_due()
        except Exception:
            logger.exception("webhook delivery: a pass failed; the queue keeps its items, retrying")
            stop.wait(ERROR_BACKOFF_SECONDS)
            continue
        if not attempted:
            moto_hooks.wait_for_write(stop, written, IDLE_SECONDS)
