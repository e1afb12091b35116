"""One Lambda function of the control plane: the shared bundle, its own role, log group and settings."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from aws_cdk import Acknowledgment, Duration, Validations
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from functions import constants
from functions.settings import PREFIX, Settings
from infra.config import StageConfig
from infra.constructs.common import allow, log_retention, removal_policy


@dataclass(frozen=True)
class FunctionSpec:
    name: str  # short name: api, lifecycle, events, retraining
    handler: str  # module.function inside the bundle
    description: str
    memory_mb: int = 512
    timeout_s: int = 60

    def defined_in(self, root: Path) -> bool:
        """Whether the bundle under `root` defines the handler (read, not imported: no heavy imports at synth)."""
        module, _, attribute = self.handler.rpartition(".")
        path = root / (module.replace(".", "/") + ".py")
        if not path.exists():
            return False
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == attribute:
                return True
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
            if any(isinstance(t, ast.Name) and t.id == attribute for t in targets):
                return True
        return False


def settings_environment(values: Mapping[str, str | None]) -> dict[str, str]:
    """TRAINPLANE_<FIELD> variables for functions.settings.Settings; refuses names Settings lacks.

    A typo here would otherwise be ignored by Settings.from_env and silently leave a default.
    """
    unknown = sorted(set(values) - set(Settings.model_fields))
    if unknown:
        raise ValueError(f"not fields of functions.settings.Settings: {', '.join(unknown)}")
    return {PREFIX + name.upper(): value for name, value in values.items() if value is not None}


class TrainplaneFunction(Construct):
    """Python 3.12 on arm64, X-Ray tracing, Powertools settings, bounded concurrency, least-privilege role."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        spec: FunctionSpec,
        code: lambda_.Code,
        config: StageConfig,
        environment: Mapping[str, str],
        reserved_concurrency: int,
        dead_letter_queue: sqs.IQueue | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.spec = spec
        # No managed policy (AWSLambdaBasicExecutionRole grants logs on every group): the grants below
        # and the ones the owning construct adds are the whole of what this function may do.
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"trainplane {config.stage} {spec.name} function",
        )
        self.log_group = logs.LogGroup(
            self,
            "Logs",
            retention=log_retention(config),
            removal_policy=removal_policy(config),
        )
        allow(self.role, ["logs:CreateLogStream", "logs:PutLogEvents"], [self.log_group.log_group_arn])
        self.function = lambda_.Function(
            self,
            "Function",
            function_name=config.name(spec.name),
            description=spec.description,
            runtime=lambda_.Runtime.PYTHON_3_12,
            architecture=lambda_.Architecture.ARM_64,
            handler=spec.handler,
            code=code,
            role=self.role,
            memory_size=spec.memory_mb,
            timeout=Duration.seconds(spec.timeout_s),
            tracing=lambda_.Tracing.ACTIVE,
            log_group=self.log_group,
            reserved_concurrent_executions=reserved_concurrency or None,
            dead_letter_queue=dead_letter_queue,
            environment={
                "POWERTOOLS_SERVICE_NAME": constants.SERVICE_NAME,
                "POWERTOOLS_METRICS_NAMESPACE": constants.METRICS_NAMESPACE,
                "POWERTOOLS_LOG_LEVEL": config.log_level,
                "POWERTOOLS_LOGGER_LOG_EVENT": "false",
                **constants.FUNCTION_RUNTIME_ENV,
                **environment,
            },
        )

        Validations.of(self).acknowledge(
            Acknowledgment(
                id="AwsSolutions-IAM5[Resource::*]",
                reason="Active tracing: xray:PutTraceSegments and xray:PutTelemetryRecords support no resource-level permissions.",
            ),
            Acknowledgment(
                id="AwsSolutions-L1",
                reason=(
                    "Python 3.12 on purpose: the bundle's wheels are built for cp312 "
                    "(infra/bundling.py), the version the code is tested on."
                ),
            ),
        )
