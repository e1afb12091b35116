"""Helpers the constructs share: log retention, removal policy, ARNs, and `allow` (a statement + its nag reason)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from aws_cdk import Acknowledgment, RemovalPolicy, Stack, Validations
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from constructs import Construct, IConstruct

from infra.config import LOG_RETENTION_DAYS, StageConfig

# jsii exposes RetentionDays by member name; CloudWatch's allowed day counts are in the same order.
_RETENTION = dict(zip(LOG_RETENTION_DAYS, (m for m in logs.RetentionDays if m is not logs.RetentionDays.INFINITE), strict=True))


def log_retention(config: StageConfig) -> logs.RetentionDays:
    return _RETENTION[config.log_retention_days]


def removal_policy(config: StageConfig) -> RemovalPolicy:
    """Dev stacks clean up after themselves; every other stage keeps its data when the stack goes."""
    return RemovalPolicy.DESTROY if config.is_dev else RemovalPolicy.RETAIN


def arn(scope: Construct, service: str, resource: str, *, region: bool = True, account: bool = True) -> str:
    """arn:<partition>:<service>:<region>:<account>:<resource> for this stack (tokens resolve at deploy)."""
    stack = Stack.of(scope)
    return f"arn:{stack.partition}:{service}:{stack.region if region else ''}:{stack.account if account else ''}:{resource}"


def flatten(scope: IConstruct, value: str) -> str:
    """A resource string as cdk-nag prints it in a finding id: tokens become <LogicalId.Attr> / <AWS::Region>."""
    return _flatten(Stack.of(scope).resolve(value))


def _flatten(node: Any) -> str:
    if isinstance(node, str):
        return node
    if isinstance(node, list):
        return "".join(_flatten(n) for n in node)
    if isinstance(node, dict):
        if "Ref" in node:
            return f"<{node['Ref']}>"
        if "Fn::GetAtt" in node:
            return f"<{'.'.join(node['Fn::GetAtt'])}>"
        if "Fn::Join" in node:
            delimiter, parts = node["Fn::Join"]
            return delimiter.join(_flatten(p) for p in parts)
    return json.dumps(node)


def allow(
    role: iam.IRole,
    actions: Sequence[str],
    resources: Sequence[str],
    *,
    why: str | None = None,
    conditions: Mapping[str, Any] | None = None,
) -> None:
    """Add one statement to `role`; a wildcard in a resource needs `why`, recorded as the nag acknowledgment.

    Actions are always named in full: no `*` in an action, ever.
    """
    starred = [a for a in actions if "*" in a]
    if starred:
        raise ValueError(f"wildcard actions are not allowed: {', '.join(starred)}")
    role.add_to_principal_policy(
        iam.PolicyStatement(actions=list(actions), resources=list(resources), conditions=dict(conditions) if conditions else None)
    )
    wildcards = [r for r in resources if "*" in flatten(role, r)]
    if wildcards and not why:
        raise ValueError(f"{', '.join(actions)} on {', '.join(flatten(role, r) for r in wildcards)}: say why a wildcard resource is needed")
    if wildcards:
        acknowledge_wildcards(role, wildcards, why or "")


def acknowledge_wildcards(scope: IConstruct, resources: Sequence[str], why: str) -> None:
    Validations.of(scope).acknowledge(
        *(Acknowledgment(id=f"AwsSolutions-IAM5[Resource::{flatten(scope, r)}]", reason=why) for r in resources)
    )
