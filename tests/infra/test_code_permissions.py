"""Every AWS call the Lambda code makes is allowed to some function of the stack (no AccessDenied in AWS
for a call added to an adapter without a grant); each call is read from the adapters' source."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.infra.conftest import Synth
from tests.infra.test_checks import function_roles, role_actions

pytestmark = pytest.mark.infra

ROOT = Path(__file__).resolve().parents[2]
IAM_PREFIX = {"stepfunctions": "states"}
# boto3 methods whose IAM action is not their own name.
ACTION_OF = {
    ("s3", "list_objects_v2"): ["ListBucket"],
    ("s3", "delete_objects"): ["DeleteObject"],
    ("s3", "head_object"): ["GetObject"],
    ("s3", "upload_file"): ["PutObject"],
    ("s3", "upload_fileobj"): ["PutObject"],
    ("s3", "download_file"): ["GetObject"],
    ("dynamodb", "transact_write_items"): ["PutItem", "UpdateItem", "DeleteItem", "ConditionCheckItem"],
    ("dynamodb", "transact_get_items"): ["GetItem"],
    ("lambda", "invoke"): ["InvokeFunction"],
}
NOT_CALLS = {"get_paginator", "exceptions", "meta", "can_paginate", "get_waiter"}
_CLIENT_PROPERTY = re.compile(
    r"def (\w+)\(self\)[^\n]*:\n(?:[ \t]*#[^\n]*\n)*[ \t]*return self\._clients\.(?:client\(\s*\"([a-z0-9-]+)\"\s*\)|(dynamodb|s3)\(\))"
)

_CLIENT_NAME = re.compile(r"((?:self\.)?\w+) = self\._clients\.client\(\s*\"([a-z0-9-]+)\"\s*\)")


def aws_calls() -> set[tuple[str, str]]:
    """(service, boto3 method) for every call on a client the functions/ code creates."""
    calls: set[tuple[str, str]] = set()
    for path in (ROOT / "functions").rglob("*.py"):
        source = path.read_text()
        # A client is a property returning one, or a name (self.x or local) bound to one.
        clients = {f"self.{m.group(1)}": m.group(2) or m.group(3) for m in _CLIENT_PROPERTY.finditer(source)}
        clients.update({name: service for name, service in _CLIENT_NAME.findall(source)})
        for name, service in clients.items():
            for method in re.findall(rf"(?<![\w.]){re.escape(name)}\.(\w+)\(", source):
                if method not in NOT_CALLS:
                    calls.add((service, method))
            for method in re.findall(rf"(?<![\w.]){re.escape(name)}\.get_paginator\(\s*\"(\w+)\"", source):
                calls.add((service, method))
        for service, method in re.findall(r"client\(\s*\"([a-z0-9-]+)\"\s*\)\.(\w+)\(", source):
            calls.add((service, method))
    return calls


def iam_actions(service: str, method: str) -> list[str]:
    names = ACTION_OF.get((service, method)) or ["".join(part.title() for part in method.split("_"))]
    return [f"{IAM_PREFIX.get(service, service)}:{name}" for name in names]


def test_every_aws_call_in_the_lambda_code_is_granted(synth: Synth) -> None:
    # Given the AWS calls the adapters make ...
    calls = aws_calls()
    # ... which the scan does find (a scan that finds nothing would pass anything)
    assert {
        ("stepfunctions", "start_execution"),
        ("sagemaker", "create_training_job"),
        ("ec2", "run_instances"),
        ("logs", "filter_log_events"),
    } <= calls
    # And the actions the functions' roles allow, over both stages (dev runs SageMaker, prod EC2)
    granted = {
        a for stage in synth.templates for role in function_roles(synth, stage).values() for a in role_actions(synth.templates[stage], role)
    }
    # Then every call maps to an allowed action
    missing = sorted({action for service, method in calls for action in iam_actions(service, method)} - granted)
    assert missing == [], f"calls with no grant in infra/constructs: {missing}"
