"""`trainplane doctor`: is this deployment ready to train? A checklist over the deployment's AWS resources,
the caller's rights, the account's quotas and the code it runs; `--smoke` then trains one tiny job.

    from trainplane.doctor import diagnose_stack, diagnose_local
    report = diagnose_stack("Trainplane-prod", "eu-west-1", smoke=True)
    report.ok, report.failures()

The same checks run against a cloud stack (`--stack NAME --region R`) and against local mode
(`--state-dir DIR`: endpoint.json names its emulated AWS and its stack), through the same boto3
adapters (aws.py); only IAM policy simulation and Service Quotas have no local counterpart.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from trainplane.doctor.checks import QUOTAS, Target, run_checks
from trainplane.doctor.ports import Ports
from trainplane.doctor.report import CheckResult, Mark, Report

if TYPE_CHECKING:
    from schemas.deployment import DeploymentInfo
    from trainplane.client import Client

__all__ = ["CheckResult", "ClientApi", "Mark", "Report", "Target", "diagnose", "diagnose_local", "diagnose_stack"]

# The stack's subscription filter on the trainer's log group: infra/constructs/events.py names it
# trainplane-<stage>-trainer-reports (local mode: trainplane-trainer-reports, functions/constants.py).
_FILTER = "trainer-reports"
LOCAL_STACK_NAME = "Trainplane-local"  # functions/constants.py LOCAL_STACK_NAME (older endpoint.json files lack "stack")
DEFAULT_SMOKE_TIMEOUT_S = 1800.0
Echo = Callable[[str], None]


def filter_name(stack: str, *, local: bool) -> str:
    if local:
        return f"trainplane-{_FILTER}"
    stage = stack.split("-", 1)[1] if stack.startswith("Trainplane-") else stack
    return f"trainplane-{stage}-{_FILTER}"


class ClientApi:
    """The DeploymentApi port over the SDK's client, built on first use (the stack names its URL)."""

    def __init__(self, factory: Callable[[], Client]) -> None:
        self._factory = factory
        self._client: Client | None = None

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = self._factory()
        return self._client

    def info(self) -> DeploymentInfo:
        return self.client.deployment()


def diagnose(
    ports: Ports,
    target: Target,
    *,
    api: ClientApi,
    smoke: bool = False,
    smoke_timeout: float = DEFAULT_SMOKE_TIMEOUT_S,
    echo: Echo | None = None,
) -> Report:
    """The checklist, then (asked for, and only when every check passed) the smoke job."""
    from trainplane.doctor.smoke import NAME, run_smoke

    report = run_checks(ports, target)
    if not smoke:
        return report
    # A quota too low for some instance type does not stop the smoke job (it runs on the cheapest CPU
    # type, whose quota it then proves); any other failure would only make it fail for a known reason.
    blocking = [c.name for c in report.failures() if c.name != QUOTAS]
    if blocking:
        report.checks.append(CheckResult.skipped(NAME, f"not run: fix the failures above first ({', '.join(blocking)})"))
        return report
    result, summary = run_smoke(api.client, ports.buckets, api.info(), timeout=smoke_timeout, echo=echo or (lambda _line: None))
    report.checks.append(result)
    report.smoke = summary
    return report


def diagnose_stack(
    stack: str,
    region: str,
    *,
    smoke: bool = False,
    smoke_timeout: float = DEFAULT_SMOKE_TIMEOUT_S,
    echo: Echo | None = None,
    unused_instance_types: frozenset[str] = frozenset(),
) -> Report:
    """The checks against a cloud stack, with the caller's credentials from the standard AWS chain."""
    from trainplane.client import Client
    from trainplane.doctor.aws import AwsSession, CloudFormationStacks, aws_ports
    from trainplane.errors import EndpointNotConfigured

    session = AwsSession(region=region)

    def client() -> Client:
        url = (CloudFormationStacks(session).outputs(stack) or {}).get("ApiUrl")
        if not url:
            raise EndpointNotConfigured(f"stack {stack} has no ApiUrl output")
        return Client(url, region=region)

    api = ClientApi(client)
    target = Target(stack=stack, region=region, filter_name=filter_name(stack, local=False), unused_instance_types=unused_instance_types)
    return diagnose(aws_ports(session, api), target, api=api, smoke=smoke, smoke_timeout=smoke_timeout, echo=echo)


def diagnose_local(
    state_dir: str | os.PathLike[str], *, smoke: bool = False, smoke_timeout: float = DEFAULT_SMOKE_TIMEOUT_S, echo: Echo | None = None
) -> Report:
    """The checks against local mode: its emulated AWS, signed as its admin principal (endpoint.json)."""
    from botocore.credentials import Credentials

    from trainplane.client import Client
    from trainplane.doctor.aws import AwsSession, aws_ports
    from trainplane.endpoint import read_endpoint_file
    from trainplane.errors import EndpointNotConfigured

    local = read_endpoint_file(Path(state_dir))
    if local is None or not local.aws_endpoint_url:
        raise EndpointNotConfigured(f"no local mode runs with state dir {state_dir}: start it with `trainplane up --state-dir {state_dir}`")
    admin = next((p for p in local.principals if p.name == "admin"), local.principals[0] if local.principals else None)
    if admin is None:
        raise EndpointNotConfigured(f"{local.path} lists no credentials")
    session = AwsSession(region=local.region, endpoint_url=local.aws_endpoint_url, principal=admin)
    keys = Credentials(admin.access_key_id, admin.secret_access_key)
    api = ClientApi(lambda: Client(local.api_url, credentials=keys, region=local.region, state_dir=state_dir))
    stack = local.stack or LOCAL_STACK_NAME
    target = Target(stack=stack, region=local.region, local=True, filter_name=filter_name(stack, local=True))
    return diagnose(aws_ports(session, api, local=True), target, api=api, smoke=smoke, smoke_timeout=smoke_timeout, echo=echo)
