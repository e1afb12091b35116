"""Lazily created boto3 clients, one per service, honouring Settings.aws_endpoint_url and region.

boto3 is imported on first use, not at import time: the API handler's cold start pays for it only
when a request really talks to AWS, and importing this module stays cheap.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from functions.settings import Settings

# Called as hook(service, client) on every client AwsClients creates. Local mode registers one that
# answers requests to its emulated AWS in-process instead of over HTTP (localmode/moto_inprocess.py).
ClientHook = Callable[[str, Any], Any]
_client_hooks: list[ClientHook] = []

# Short timeouts and standard retries: a Lambda behind API Gateway has 29 s in all, and the
# adaptive/standard retry modes already back off on throttling.
_CONNECT_TIMEOUT_S = 3
_READ_TIMEOUT_S = 10
_MAX_ATTEMPTS = 4
_MAX_POOL_CONNECTIONS = 32  # local mode serves concurrent requests from threads sharing these clients


class AwsClients:
    """A cache of boto3 clients for one endpoint/region; thread-safe, built on first use."""

    def __init__(self, region: str, endpoint_url: str | None = None, *, session: Any = None) -> None:
        self.region = region
        self.endpoint_url = endpoint_url
        self._session = session
        self._clients: dict[str, Any] = {}
        # boto3 sessions are not thread-safe while creating clients; created clients are.
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Settings) -> AwsClients:
        return cls(region=settings.region, endpoint_url=settings.aws_endpoint_url)

    def client(self, service: str) -> Any:
        existing = self._clients.get(service)
        if existing is not None:
            return existing
        with self._lock:
            if service not in self._clients:
                self._clients[service] = self._create(service)
            return self._clients[service]

    def _create(self, service: str) -> Any:
        import boto3.session
        from botocore.config import Config

        if self._session is None:
            self._session = boto3.session.Session()
        config = Config(
            region_name=self.region,
            connect_timeout=_CONNECT_TIMEOUT_S,
            read_timeout=_READ_TIMEOUT_S,
            retries={"max_attempts": _MAX_ATTEMPTS, "mode": "standard"},
            max_pool_connections=_MAX_POOL_CONNECTIONS,
        )
        client = self._session.client(service, region_name=self.region, endpoint_url=self.endpoint_url, config=config)
        for hook in tuple(_client_hooks):
            hook(service, client)
        return client

    def dynamodb(self) -> Any:
        return self.client("dynamodb")

    def s3(self) -> Any:
        return self.client("s3")


def add_client_hook(hook: ClientHook) -> None:
    """Run `hook(service, client)` on every client created from now on (local mode; tests)."""
    if hook not in _client_hooks:
        _client_hooks.append(hook)


def remove_client_hook(hook: ClientHook) -> None:
    if hook in _client_hooks:
        _client_hooks.remove(hook)
