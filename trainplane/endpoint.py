"""Where the API is and whose keys sign the requests.

Endpoint: an explicit argument (--endpoint) > env TRAINPLANE_ENDPOINT > the endpoint.json that a running
`trainplane up` writes into its state directory (--state-dir > env TRAINPLANE_STATE_DIR > ./.state).

A local endpoint.json records the pid and host of the `trainplane up` that wrote it: when that process
is gone (killed with -9, crashed), the file is stale and reading it raises StaleEndpoint, which says so,
instead of a client retrying a dead port. The next `up` on that state dir replaces it.

Credentials: explicit ones > for a local-mode endpoint, `--principal NAME` from endpoint.json > the
standard AWS chain (botocore). A local front door knows only the principals it wrote into endpoint.json,
so for a local endpoint the chain's keys are used only when they are one of those principals (e.g.
alice's keys exported in the shell); otherwise the first principal of endpoint.json signs. Real AWS keys
would only earn a 403 there.
"""

from __future__ import annotations

import json
import os
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import botocore.session
from botocore.credentials import Credentials, ReadOnlyCredentials

from trainplane.errors import EndpointNotConfigured, StaleEndpoint

ENDPOINT_FILE = "endpoint.json"
ENV_ENDPOINT = "TRAINPLANE_ENDPOINT"
ENV_STATE_DIR = "TRAINPLANE_STATE_DIR"
DEFAULT_STATE_DIR = ".state"
DEFAULT_REGION = "us-east-1"

# https://<api-id>.execute-api.<region>.amazonaws.com/<stage>: the region is in the host name.
_EXECUTE_API_HOST = re.compile(r"\.execute-api\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?$")


@dataclass(frozen=True)
class Principal:
    name: str
    access_key_id: str
    secret_access_key: str
    arn: str = ""

    def credentials(self) -> Credentials:
        return Credentials(self.access_key_id, self.secret_access_key)


@dataclass(frozen=True)
class LocalEndpoint:
    """The endpoint.json of a running local mode (docs/CONTRACTS.md)."""

    api_url: str
    region: str
    aws_endpoint_url: str | None
    bucket: str | None
    principals: tuple[Principal, ...]
    path: Path
    pid: int | None = None
    stack: str | None = None  # the local deployment's stack in the emulated AWS (`trainplane doctor`)

    def principal(self, name: str) -> Principal:
        for p in self.principals:
            if p.name == name:
                return p
        known = ", ".join(p.name for p in self.principals) or "none"
        raise EndpointNotConfigured(f"principal {name!r} is not in {self.path} (known: {known})")

    def principal_with_key(self, access_key_id: str) -> Principal | None:
        return next((p for p in self.principals if p.access_key_id == access_key_id), None)


@dataclass(frozen=True)
class ResolvedEndpoint:
    url: str
    region: str
    credentials: Credentials
    # Human-readable provenance, shown by `trainplane endpoint` and in error hints.
    url_source: str
    credentials_source: str
    local: LocalEndpoint | None = field(default=None, repr=False)


def state_dir_of(state_dir: str | os.PathLike[str] | None = None) -> Path:
    if state_dir is not None:
        return Path(state_dir)
    return Path(os.environ.get(ENV_STATE_DIR) or DEFAULT_STATE_DIR)


def read_endpoint_file(state_dir: str | os.PathLike[str] | None = None) -> LocalEndpoint | None:
    """The local endpoint.json, or None if no local mode is running there.

    StaleEndpoint if the file is there but the process that wrote it is gone.
    """
    path = state_dir_of(state_dir) / ENDPOINT_FILE
    try:
        raw: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise EndpointNotConfigured(f"cannot read {path}: {exc}") from exc
    try:
        principals = tuple(
            Principal(name=c["name"], access_key_id=c["access_key_id"], secret_access_key=c["secret_access_key"], arn=c.get("arn", ""))
            for c in raw.get("credentials", [])
        )
        local = LocalEndpoint(
            api_url=_normalise(raw["api_url"]),
            region=raw.get("region") or DEFAULT_REGION,
            aws_endpoint_url=raw.get("aws_endpoint_url"),
            bucket=raw.get("bucket"),
            principals=principals,
            path=path,
            pid=raw["pid"] if isinstance(raw.get("pid"), int) else None,
            stack=raw.get("stack") if isinstance(raw.get("stack"), str) else None,
        )
    except (KeyError, TypeError) as exc:
        raise EndpointNotConfigured(f"{path} is not a trainplane endpoint file (missing {exc})") from exc
    if local.pid is not None and raw.get("hostname") in (None, socket.gethostname()) and not _process_alive(local.pid):
        raise StaleEndpoint(
            f"{path} is stale: the `trainplane up` that wrote it (pid {local.pid}) is no longer running "
            f"(killed, or crashed); start it again with `trainplane up --state-dir {path.parent}`, which replaces the file"
        )
    return local


def _process_alive(pid: int) -> bool:
    # Only meaningful on the host that wrote the file (checked by the caller).
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, another user's
    return True


def region_from_url(url: str) -> str | None:
    host = url.split("://", 1)[-1].split("/", 1)[0].split(":", 1)[0]
    match = _EXECUTE_API_HOST.search(host)
    return match.group(1) if match else None


def resolve(
    endpoint: str | None = None,
    *,
    credentials: Credentials | ReadOnlyCredentials | None = None,
    region: str | None = None,
    state_dir: str | os.PathLike[str] | None = None,
    principal: str | None = None,
) -> ResolvedEndpoint:
    """Apply the precedence rules of this module's docstring; EndpointNotConfigured if nothing is found."""
    try:
        local = read_endpoint_file(state_dir)
    except StaleEndpoint:
        if not (endpoint or os.environ.get(ENV_ENDPOINT)):
            raise
        local = None  # an endpoint named explicitly does not need the stale file
    if endpoint:
        url, url_source = _normalise(endpoint), "argument"
    elif os.environ.get(ENV_ENDPOINT):
        url, url_source = _normalise(os.environ[ENV_ENDPOINT]), f"${ENV_ENDPOINT}"
    elif local is not None:
        url, url_source = local.api_url, str(local.path)
    else:
        where = state_dir_of(state_dir) / ENDPOINT_FILE
        raise EndpointNotConfigured(
            f"no trainplane endpoint: pass --endpoint URL, set {ENV_ENDPOINT}, "
            f"or start local mode with `trainplane up` (looked for {where})"
        )
    # endpoint.json describes this endpoint only if it is the one we talk to.
    if local is not None and local.api_url != url:
        local = None

    creds, creds_source = _credentials(credentials, principal, local, state_dir)
    resolved_region = region or (local.region if local else None) or region_from_url(url) or _chain_region() or DEFAULT_REGION
    return ResolvedEndpoint(
        url=url, region=resolved_region, credentials=creds, url_source=url_source, credentials_source=creds_source, local=local
    )


def _credentials(
    explicit: Credentials | ReadOnlyCredentials | None,
    principal: str | None,
    local: LocalEndpoint | None,
    state_dir: str | os.PathLike[str] | None,
) -> tuple[Credentials, str]:
    if explicit is not None:
        if isinstance(explicit, ReadOnlyCredentials):
            return Credentials(explicit.access_key, explicit.secret_key, explicit.token), "argument"
        return explicit, "argument"
    if principal:
        if local is None:
            where = state_dir_of(state_dir) / ENDPOINT_FILE
            raise EndpointNotConfigured(f"--principal needs a local-mode endpoint described by {where}; none matches this endpoint")
        return local.principal(principal).credentials(), f"principal {principal} from {local.path}"
    chain = _chain_credentials(skip_instance_roles=local is not None)
    if local is None:
        if chain is None:
            raise EndpointNotConfigured("no AWS credentials found (environment, ~/.aws, SSO, instance role): configure them")
        return chain, "AWS credential chain"
    if chain is not None:
        match = local.principal_with_key(chain.access_key)
        if match is not None:
            return chain, f"AWS credential chain (principal {match.name})"
    if not local.principals:
        raise EndpointNotConfigured(f"{local.path} lists no credentials")
    first = local.principals[0]
    return first.credentials(), f"principal {first.name} from {local.path}"


def _chain_credentials(*, skip_instance_roles: bool) -> Credentials | None:
    session = botocore.session.Session()
    if skip_instance_roles:
        # A local endpoint never accepts instance-role keys, and probing the metadata service costs
        # seconds on a machine that has none.
        resolver = session.get_component("credential_provider")
        for name in ("container-role", "iam-role"):
            resolver.remove(name)
    creds = session.get_credentials()
    return creds if creds is not None and creds.access_key else None


def _chain_region() -> str | None:
    return botocore.session.Session().get_config_variable("region")


def _normalise(url: str) -> str:
    url = url.strip()
    if "://" not in url:
        raise EndpointNotConfigured(f"endpoint {url!r} is not a URL (expected e.g. http://127.0.0.1:8080 or https://...)")
    return url.rstrip("/")


def fresh_credentials(current: Credentials, endpoint: str | None, resolve_args: dict[str, Any]) -> Credentials:
    """The credentials to sign with after a 403: a refreshable set is refreshed at once (botocore would
    only do so near its expiry); anything else is resolved again as at the start."""
    refresh = getattr(current, "_protected_refresh", None)
    if callable(refresh):
        # botocore's RefreshableCredentials: its public methods refresh only when the expiry is near;
        # a 403 says the keys are bad now (revoked, rotated), so the refresh is forced.
        refresh(is_mandatory=True)
        return current
    if resolve_args.get("credentials") is not None:
        return current  # fixed keys given by the caller: nothing else to look up
    return resolve(endpoint, **resolve_args).credentials
