"""Local deployer: the trainer's reports take the cloud's channel (docs/TRAINER.md, "Reports").

As the cloud stack does (infra/constructs/events.py), for the engine `--compute` names: the events
Lambda, a resource policy that lets CloudWatch Logs invoke it from the trainer's log group only, and
a subscription filter on that group's `TRAINPLANE_EVENT` lines. The emulated compute puts the
trainer's output into the group (PutLogEvents); moto matches the subscription and
trainplane.local.moto_lambda delivers the awslogs payload to the handler, as CloudWatch Logs would.
With `--compute local` the LocalLauncher reads the trainer's stdout itself and nothing is deployed.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from functions import constants

if TYPE_CHECKING:
    from infra.local import LocalContext

HANDLER = "functions.handlers.events.lambda_handler"


def log_group_for(ctx: LocalContext) -> str:
    """The group the engine's trainers write to: SageMaker's own, or the stage's trainer group (EC2)."""
    return constants.SAGEMAKER_TRAINING_LOG_GROUP if ctx.compute == "sagemaker" else ctx.settings().trainer_log_group


def deploy(ctx: LocalContext) -> None:
    if ctx.compute not in {"sagemaker", "ec2"}:
        return
    from trainplane.local import moto_lambda

    moto_lambda.install()
    role = ctx.client("iam").create_role(
        RoleName="trainplane-events",
        AssumeRolePolicyDocument=(
            '{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", '
            '"Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}]}'
        ),
    )["Role"]["Arn"]
    function_arn = ctx.client("lambda").create_function(
        FunctionName=constants.EVENTS_FUNCTION_NAME,
        Runtime="python3.12",
        Role=role,
        Handler=HANDLER,
        Code={"ZipFile": b"run in-process by trainplane.local.moto_lambda"},
        Timeout=60,
    )["FunctionArn"]
    group = log_group_for(ctx)
    logs = ctx.client("logs")
    with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
        logs.create_log_group(logGroupName=group)
    group_arn = f"arn:aws:logs:{ctx.region}:{ctx.account_id}:log-group:{group}:*"
    ctx.client("lambda").add_permission(
        FunctionName=constants.EVENTS_FUNCTION_NAME,
        StatementId="trainer-reports",
        Action="lambda:InvokeFunction",
        Principal="logs.amazonaws.com",
        SourceArn=group_arn,
        SourceAccount=ctx.account_id,
    )
    logs.put_subscription_filter(
        logGroupName=group,
        filterName=constants.TRAINER_REPORTS_FILTER_NAME,
        filterPattern=constants.TRAINER_REPORTS_FILTER_PATTERN,
        destinationArn=function_arn,
    )
