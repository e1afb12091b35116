"""The lifecycle: one Step Functions state machine (the ASL file local mode runs too) and its task Lambda.

The definition stays a plain JSON string handed to CloudFormation with `DefinitionSubstitutions`, so
cfn-lint checks it and the deployed text is the file's text. The state machine's role is derived
from the definition itself: each Task's integration maps to the few actions it needs on this stack's
own resources, and an integration we do not know stops the synth instead of deploying a role that
fails (or grants too much) at run time.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from aws_cdk import Acknowledgment, Stack, Validations
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from functions import constants
from infra.config import ConfigError, StageConfig
from infra.constructs.common import allow, arn, log_retention, removal_policy
from infra.constructs.compute import Compute
from infra.constructs.function import FunctionSpec, TrainplaneFunction
from infra.constructs.storage import Storage

LIFECYCLE = FunctionSpec(
    name="lifecycle",
    handler="functions.handlers.lifecycle.handler",  # the same entry point local mode invokes
    description="trainplane lifecycle tasks (admit, prepare, launch, wait, stop) invoked by the state machine",
    memory_mb=512,
    timeout_s=120,
)

_DYNAMODB_TASKS = {"getItem": "GetItem", "putItem": "PutItem", "updateItem": "UpdateItem", "deleteItem": "DeleteItem"}
_LAMBDA_TASKS = {"arn:aws:states:::lambda:invoke", "arn:aws:states:::lambda:invoke.waitForTaskToken"}
_PLACEHOLDER = re.compile(r"\$\{([A-Za-z0-9_]+)\}")


def state_machine_name(config: StageConfig) -> str:
    return config.name(constants.STATE_MACHINE_NAME.removeprefix("trainplane-"))


def state_machine_arn(scope: Construct, config: StageConfig) -> str:
    """Built from the name, not from the resource: the task Lambda's settings carry this ARN while
    the definition carries the Lambda's ARN, and tokens both ways would be a dependency cycle."""
    return arn(scope, "states", f"stateMachine:{state_machine_name(config)}")


def load_definition() -> tuple[str, tuple[str, ...]]:
    """The raw ASL text (placeholders kept) and the substitution names, from infra/statemachine."""
    try:
        from infra import statemachine
    except ImportError as exc:  # the lifecycle engine (issue 4) owns that package
        raise ConfigError(f"infra/statemachine is missing or broken ({exc}): the lifecycle definition comes from there") from exc
    path = getattr(statemachine, "DEFINITION_PATH", None)
    if path is None or not path.exists():
        raise ConfigError(f"the lifecycle definition {path or 'infra/statemachine/lifecycle.asl.json'} is missing")
    return statemachine.load_template(), tuple(statemachine.SUBSTITUTION_NAMES)


def task_states(states: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every Task state, inside Parallel branches and Map iterators too."""
    for name, state in states.items():
        if state.get("Type") == "Task":
            yield name, state
        for branch in state.get("Branches", []):
            yield from task_states(branch["States"])
        processor = state.get("ItemProcessor") or state.get("Iterator")
        if processor:
            yield from task_states(processor["States"])


class Lifecycle(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: StageConfig,
        storage: Storage,
        compute: Compute,
        code: lambda_.Code,
        environment: Mapping[str, str],
    ) -> None:
        super().__init__(scope, construct_id)
        self.config = config
        self.storage = storage
        self.state_machine_name = state_machine_name(config)
        self.state_machine_arn = state_machine_arn(self, config)
        self.executions_arn = arn(self, "states", f"execution:{self.state_machine_name}:*")

        self.tasks = TrainplaneFunction(
            self,
            "Tasks",
            spec=LIFECYCLE,
            code=code,
            config=config,
            environment={**environment},
            reserved_concurrency=config.reserved_concurrency.lifecycle,
        )
        role = self.tasks.role
        storage.grant_jobs(role, write=True)
        storage.grant_artifacts(role, prefixes=[f"{constants.JOBS_PREFIX}/"], write=True, delete=True)
        compute.grant_launch(role)
        self.grant_answer_tasks(role)
        self.grant_start(role)

        text, names = load_definition()
        definition = json.loads(text)
        substitutions = {
            "LifecycleFunctionArn": self.tasks.function.function_arn,
            "JobsTableName": storage.jobs_table.table_name,
            "ArtifactsBucketName": storage.artifacts_bucket.bucket_name,
            "EventBusName": constants.EVENT_BUS_NAME,
        }
        used = set(_PLACEHOLDER.findall(text))
        missing = (used | set(names)) - set(substitutions)
        if missing:
            raise ConfigError(f"the lifecycle definition uses placeholders the stack does not provide: {', '.join(sorted(missing))}")

        self.role = iam.Role(
            self,
            "StateMachineRole",
            assumed_by=iam.ServicePrincipal(
                "states.amazonaws.com", conditions={"StringEquals": {"aws:SourceAccount": Stack.of(self).account}}
            ),
            description=f"trainplane {config.stage} lifecycle state machine",
        )
        self._grant_tasks(definition)

        self.log_group = logs.LogGroup(
            self,
            "ExecutionLogs",
            # The /aws/vendedlogs/ prefix keeps CloudWatch's log resource policy small as stacks multiply.
            log_group_name=f"/aws/vendedlogs/states/{self.state_machine_name}",
            retention=log_retention(config),
            removal_policy=removal_policy(config),
        )
        self.state_machine = sfn.StateMachine(
            self,
            "StateMachine",
            state_machine_name=self.state_machine_name,
            state_machine_type=sfn.StateMachineType.STANDARD,
            definition_body=sfn.DefinitionBody.from_string(text),
            definition_substitutions={k: v for k, v in substitutions.items() if k in used},
            role=self.role,
            logs=sfn.LogOptions(destination=self.log_group, level=sfn.LogLevel.ALL, include_execution_data=True),
            tracing_enabled=True,
            removal_policy=removal_policy(config),
        )
        Validations.of(self.role).acknowledge(
            # What CDK adds for logging ALL and tracing: these APIs accept no resource ARN.
            Acknowledgment(
                id="AwsSolutions-IAM5[Resource::*]",
                reason="CloudWatch Logs delivery and X-Ray actions support no resource-level permissions.",
            )
        )

    def _grant_tasks(self, definition: Mapping[str, Any]) -> None:
        function = self.tasks.function
        lambda_states: list[str] = []
        actions: dict[tuple[str, ...], set[str]] = {}
        for name, state in task_states(definition["States"]):
            resource = state.get("Resource", "")
            params = state.get("Parameters") or state.get("Arguments") or {}
            if resource in _LAMBDA_TASKS or resource == "${LifecycleFunctionArn}":
                target = params.get("FunctionName", resource)
                if not str(target).startswith("${LifecycleFunctionArn}"):
                    raise ConfigError(f"state {name}: invokes {target!r}; the lifecycle may invoke only ${{LifecycleFunctionArn}}")
                lambda_states.append(name)
            elif resource.startswith("arn:aws:states:::dynamodb:"):
                action = _DYNAMODB_TASKS.get(resource.rsplit(":", 1)[1])
                if action is None or params.get("TableName") != "${JobsTableName}":
                    raise ConfigError(
                        f"state {name}: {resource} on {params.get('TableName')!r} is not a jobs-table item call the stack knows"
                    )
                actions.setdefault((self.storage.jobs_table.table_arn,), set()).add(f"dynamodb:{action}")
            elif resource == "arn:aws:states:::events:putEvents":
                buses = {entry.get("EventBusName") for entry in params.get("Entries", [])}
                if buses - {"${EventBusName}"}:
                    raise ConfigError(f"state {name}: puts events on {buses}; only ${{EventBusName}} is granted")
                actions.setdefault((arn(self, "events", f"event-bus/{constants.EVENT_BUS_NAME}"),), set()).add("events:PutEvents")
            else:
                raise ConfigError(
                    f"state {name}: the integration {resource!r} has no permission mapping in infra/constructs/lifecycle.py; add one there"
                )
        for resources, granted in actions.items():
            allow(self.role, sorted(granted), resources)
        if lambda_states:
            allow(
                self.role,
                ["lambda:InvokeFunction"],
                [function.function_arn, f"{function.function_arn}:*"],
                why="The lifecycle Lambda itself and its versions/aliases (the ':*' qualifier), that one function only.",
            )
        if (self.storage.jobs_table.table_arn,) in actions:
            self.storage.grant_key(self.role, "dynamodb")

    # --- grants ---------------------------------------------------------------------------------

    def grant_start(self, role: iam.IRole) -> None:
        """Start a job's execution, and look at or stop the executions of this state machine."""
        allow(role, ["states:StartExecution"], [self.state_machine_arn])
        allow(
            role,
            ["states:DescribeExecution", "states:StopExecution"],
            [self.executions_arn],
            why="Executions of the lifecycle state machine only; each is named after its job and attempt at run time.",
        )

    def grant_answer_tasks(self, role: iam.IRole) -> None:
        """Answer the task tokens the executions wait on (capacity, run outcome, resume). Every answer is a
        success carrying the outcome (no SendTaskFailure: make iam-check saw no call use it)."""
        allow(
            role,
            ["states:SendTaskSuccess", "states:SendTaskHeartbeat"],
            ["*"],
            why="The task-token calls take a token, not an ARN: Step Functions offers no resource to scope them to.",
        )
