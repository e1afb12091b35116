"""The local deployment's CloudFormation stack: its outputs, as the cloud stack (infra/stack.py) states them.

Local mode creates its resources with plain API calls (the other deployers), not through CloudFormation;
this registers a stack named `constants.LOCAL_STACK_NAME` in the emulated AWS whose outputs name them, so
that `trainplane doctor --state-dir` reads a deployment the one way it reads a cloud one
(DescribeStacks). It runs last, once the front door is bound (ApiUrl is its address).
"""

from __future__ import annotations

import json
import warnings
from typing import TYPE_CHECKING

from functions import constants

if TYPE_CHECKING:
    from localmode.deploy import LocalContext


def publish(ctx: LocalContext, api_url: str) -> None:
    settings = ctx.settings()
    outputs = {
        "ApiUrl": api_url,
        "ArtifactsBucketName": settings.artifacts_bucket,
        "JobsTableName": settings.jobs_table,
        "StateMachineArn": settings.state_machine_arn or "",
    }
    if settings.trainer_image_uri:
        outputs["TrainerImageUri"] = settings.trainer_image_uri
    template = {
        "Description": "trainplane control plane (local mode)",
        # CloudFormation needs a resource; the real ones were created by the deployers.
        "Resources": {"LocalDeployment": {"Type": "AWS::CloudFormation::WaitConditionHandle"}},
        "Outputs": {key: {"Value": value} for key, value in outputs.items() if value},
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # moto warns that it does not model WaitConditionHandle: nothing to model
        ctx.client("cloudformation").create_stack(StackName=constants.LOCAL_STACK_NAME, TemplateBody=json.dumps(template))
