"""Local deployer: the deployment's own EventBridge bus (issue 23, docs/EVENTS.md) and its publisher.

The bus and its archive are created in the emulated AWS under the cloud's name (endpoint.json names it
as `event_bus`: a user puts a rule with an SQS target on it with boto3). The publisher is the cloud's
code (functions/service/event_publisher.py) driven by a loop instead of the table's stream: it drains
the outbox whenever it holds something. The outbox items are in the jobs table, which the journal keeps:
events committed before a `kill -9` are sent after the restart (duplicates possible, loss not).
"""

from __future__ import annotations

import logging
import os
import threading
from typing import TYPE_CHECKING

from functions import constants
from functions.catalog import own_events as et
from functions.settings import PREFIX
from localmode import iam_calls, moto_hooks

if TYPE_CHECKING:
    from localmode.deploy import LocalContext

logger = logging.getLogger(__name__)

IDLE_SECONDS = 2.0  # idle: woken by any DynamoDB write in-process (moto_hooks.write_signal); a pass at least this often
ERROR_BACKOFF_SECONDS = 1.0


def deploy(ctx: LocalContext) -> None:
    events = ctx.client("events")
    bus_arn = events.create_event_bus(Name=constants.TRAINPLANE_BUS_NAME)["EventBusArn"]
    events.create_archive(
        ArchiveName=constants.TRAINPLANE_BUS_NAME,
        EventSourceArn=bus_arn,
        EventPattern=f'{{"source": ["{et.SOURCE}"]}}',
        Description="every trainplane event, for replay",
    )
    ctx.set_setting("trainplane_bus_name", constants.TRAINPLANE_BUS_NAME)
    ctx.add_background("event-publisher", _serve)


def _serve(stop: threading.Event) -> None:
    from functions import composition

    # As the other background loops: settings are complete only once `trainplane up` exported them.
    while not stop.is_set() and not os.environ.get(PREFIX + "TRAINPLANE_BUS_NAME"):
        stop.wait(0.05)
    publisher = composition.current().event_publisher
    written = moto_hooks.write_signal()
    while not stop.is_set():
        written.clear()  # before the pass: a write during it makes the next pass start at once
        try:
            with iam_calls.acting_as("EventPublisher"):  # the publisher Lambda's role (make iam-check)
                result = publisher.drain()
        except Exception:
            logger.exception("event publisher: drain failed; the outbox keeps the events, retrying")
            stop.wait(ERROR_BACKOFF_SECONDS)
            continue
        if result.failed:
            stop.wait(ERROR_BACKOFF_SECONDS)
        elif not result.sent:
            moto_hooks.wait_for_write(stop, written, IDLE_SECONDS)
