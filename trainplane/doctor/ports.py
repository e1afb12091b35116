"""What the doctor asks of AWS, one port per service, in the doctor's words (adapters: aws.py).

Each method answers None for "there is no such thing" and raises for anything else (a denied call, a
throttle): the checklist turns a raise into a failed line naming the AWS error. Tests hand fakes for
what moto does not model (IAM policy simulation, Service Quotas); everything else runs against moto
through the same boto3 adapters the cloud uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from schemas.deployment import DeploymentInfo


class Identity(Protocol):  # STS
    def caller_arn(self) -> str: ...


class PolicySimulator(Protocol):  # IAM
    def denied_actions(self, caller_arn: str, actions: list[str], resource_arn: str) -> list[str] | None:
        """The actions the caller's policies deny on the resource; None where no IAM can be asked."""
        ...


class Stacks(Protocol):  # CloudFormation
    def outputs(self, stack: str) -> dict[str, str] | None: ...


class Tables(Protocol):  # DynamoDB
    def status(self, name: str) -> str | None: ...


class Buckets(Protocol):  # S3
    def exists(self, name: str) -> bool: ...

    def put(self, uri: str, body: bytes) -> None: ...

    def delete(self, uri: str) -> None: ...


class EventBuses(Protocol):  # EventBridge
    def exists(self, name: str) -> bool: ...


class StateMachines(Protocol):  # Step Functions
    def definition(self, arn: str) -> str | None: ...


class Images(Protocol):  # ECR
    def platforms(self, image_uri: str) -> list[str] | None:
        """The platforms (os/arch) the image offers; None when the repository or the tag is not there."""
        ...


class LogGroups(Protocol):  # CloudWatch Logs
    def subscription_filters(self, group: str) -> list[str] | None:
        """The names of the group's subscription filters; None when the group does not exist."""
        ...


@dataclass(frozen=True)
class Quota:
    code: str
    name: str
    value: float


class Quotas(Protocol):  # Service Quotas
    def quotas(self, service_code: str) -> list[Quota]: ...


class Dashboards(Protocol):  # Cognito and CloudFront
    def user_pool_exists(self, pool_id: str) -> bool: ...

    def distribution_status(self, distribution_id: str) -> str | None:
        """ "Deployed" or "InProgress" (disabled: "Disabled"); None when there is no such distribution."""
        ...


class DeploymentApi(Protocol):  # the trainplane API itself, signed as the caller
    def info(self) -> DeploymentInfo: ...


@dataclass(frozen=True)
class Ports:
    identity: Identity
    simulator: PolicySimulator
    stacks: Stacks
    tables: Tables
    buckets: Buckets
    buses: EventBuses
    machines: StateMachines
    images: Images
    logs: LogGroups
    quotas: Quotas
    dashboards: Dashboards
    api: DeploymentApi
