"""The SDK's placement call (issue 26), mixed into trainplane.Client and trainplane.AsyncClient: written once
as steps in trainplane/operations.py, made a method (synced) or a coroutine (asynced).

    record = client.placement(job_id)   # PlacementRecord: tries, pools blocked, recoveries, dollars saved
"""

from __future__ import annotations

from trainplane import operations as ops
from trainplane.transport import asynced, synced


class PlacementMethods:
    placement = synced(ops.get_placement)


class AsyncPlacementMethods:
    placement = asynced(ops.get_placement)
