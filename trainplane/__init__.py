"""trainplane's client: the Python SDK (`Client`, errors) and the `trainplane` CLI (trainplane.cli).

Names load on first use, so importing a submodule (local mode's `trainplane.local`, the CLI) does not
pay for the SDK's HTTP stack, and the SDK does not pay for typer/rich or moto.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainplane.async_client import AsyncClient
    from trainplane.client import Client
    from trainplane.errors import (
        AuthError,
        Conflict,
        ConnectionFailed,
        EndpointNotConfigured,
        JobFailed,
        NotFound,
        ServerError,
        StaleEndpoint,
        TrainplaneError,
        ValidationFailed,
        WaitTimeout,
    )

_EXPORTS = {
    "AsyncClient": "trainplane.async_client",
    "Client": "trainplane.client",
    "JobFailed": "trainplane.errors",
    "AuthError": "trainplane.errors",
    "Conflict": "trainplane.errors",
    "ConnectionFailed": "trainplane.errors",
    "EndpointNotConfigured": "trainplane.errors",
    "NotFound": "trainplane.errors",
    "ServerError": "trainplane.errors",
    "StaleEndpoint": "trainplane.errors",
    "TrainplaneError": "trainplane.errors",
    "ValidationFailed": "trainplane.errors",
    "WaitTimeout": "trainplane.errors",
}

__all__ = [
    "AsyncClient",
    "AuthError",
    "Client",
    "Conflict",
    "ConnectionFailed",
    "EndpointNotConfigured",
    "JobFailed",
    "NotFound",
    "ServerError",
    "StaleEndpoint",
    "TrainplaneError",
    "ValidationFailed",
    "WaitTimeout",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'trainplane' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
