"""localmode.moto_lambda: our handlers run in-process behind moto's Lambda, pinned to moto 5.2.5.

These tests fail loudly when a moto upgrade moves what the adapter relies on: the version pin,
LambdaSimpleBackend.invoke's signature and use, the error shape Step Functions' Retry/Catch read,
and the callback engine's heartbeat entry point used to wake a wait answered during its invocation.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import json
import sys
import types
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from localmode import moto_lambda

REGION = "us-east-1"
ROLE_POLICY = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}],
}


@pytest.fixture
def handlers() -> Iterator[types.ModuleType]:
    """A module of handlers the fake functions point at."""
    module = types.ModuleType("lifecycle_test_handlers")
    calls: list[Any] = []

    def echo(event: dict[str, Any], context: Any) -> dict[str, Any]:
        calls.append((event, context.function_name, context.get_remaining_time_in_millis()))
        return {"next": "ok", "seen": event}

    class TransientError(Exception):
        pass

    def flaky(event: dict[str, Any], context: Any) -> dict[str, Any]:
        raise TransientError("try again")

    module.echo, module.flaky, module.calls = echo, flaky, calls  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    yield module
    del sys.modules[module.__name__]


@pytest.fixture
def aws() -> Iterator[Any]:
    with mock_aws(config=moto_lambda.MOTO_CONFIG):
        moto_lambda.install()
        try:
            yield boto3.client("lambda", region_name=REGION)
        finally:
            moto_lambda.uninstall()


def _function(client: Any, handler: str) -> str:
    role = boto3.client("iam", region_name=REGION).create_role(RoleName=f"r-{handler}", AssumeRolePolicyDocument=json.dumps(ROLE_POLICY))
    name = handler.replace(".", "-")
    client.create_function(FunctionName=name, Runtime="python3.12", Role=role["Role"]["Arn"], Handler=handler, Code={"ZipFile": b"x"})
    return name


def test_the_pinned_moto_is_the_installed_one() -> None:
    assert importlib.metadata.version("moto") == moto_lambda.PINNED_MOTO_VERSION
    moto_lambda.check_version()


def test_refuses_another_moto_version(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(moto_lambda, "PINNED_MOTO_VERSION", "0.0.1")
    with pytest.raises(moto_lambda.MotoVersionError, match=r"re-check LambdaSimpleBackend\.invoke"):
        moto_lambda.install()


def test_moto_internals_the_adapter_relies_on_are_where_it_expects() -> None:
    from moto.awslambda_simple.models import LambdaSimpleBackend
    from moto.stepfunctions.parser.models import StepFunctionsParserBackend

    params = list(inspect.signature(LambdaSimpleBackend.invoke).parameters)
    assert params == ["self", "function_name", "qualifier", "body", "headers", "response_headers"]
    assert "task_token" in inspect.signature(StepFunctionsParserBackend.send_task_heartbeat).parameters
    assert {"lambda", "stepfunctions"} <= set(moto_lambda.MOTO_CONFIG)


def test_invoke_runs_the_configured_handler_in_process(aws: Any, handlers: types.ModuleType) -> None:
    # Given a function whose Handler is a module.function of ours
    name = _function(aws, "lifecycle_test_handlers.echo")
    # When it is invoked
    response = aws.invoke(FunctionName=name, Payload=json.dumps({"action": "admit", "job_id": "j1"}))
    # Then our handler ran with the event and a Lambda-like context, and its result is the payload
    assert "FunctionError" not in response
    assert json.loads(response["Payload"].read()) == {"next": "ok", "seen": {"action": "admit", "job_id": "j1"}}
    assert handlers.calls == [({"action": "admit", "job_id": "j1"}, name, 900_000)]


def test_an_exception_has_the_lambda_runtime_error_shape(aws: Any, handlers: types.ModuleType) -> None:
    name = _function(aws, "lifecycle_test_handlers.flaky")
    response = aws.invoke(FunctionName=name, Payload=b"{}")
    # Then the error is what Step Functions' Retry matches on: errorType = the exception class name
    assert response["FunctionError"] == "Unhandled"
    error = json.loads(response["Payload"].read())
    assert error["errorType"] == "TransientError" and error["errorMessage"] == "try again"


def test_uninstall_restores_moto(aws: Any, handlers: types.ModuleType) -> None:
    from moto.awslambda_simple.models import LambdaSimpleBackend

    name = _function(aws, "lifecycle_test_handlers.echo")
    moto_lambda.uninstall()
    assert not moto_lambda.installed()
    # moto's own no-docker behaviour is back: it echoes the payload
    assert aws.invoke(FunctionName=name, Payload=b'{"a": 1}')["Payload"].read() == b'{"a": 1}'
    assert LambdaSimpleBackend.invoke.__name__ == "invoke"
    moto_lambda.install()
    moto_lambda.install()  # idempotent
    assert json.loads(aws.invoke(FunctionName=name, Payload=b"{}")["Payload"].read())["next"] == "ok"


def test_a_state_machine_task_reaches_the_handler_and_routes_on_its_result(aws: Any, handlers: types.ModuleType) -> None:
    # Given a one-task machine calling our handler through the Lambda integration
    name = _function(aws, "lifecycle_test_handlers.echo")
    arn = aws.get_function(FunctionName=name)["Configuration"]["FunctionArn"]
    definition = {
        "StartAt": "Call",
        "States": {
            "Call": {
                "Type": "Task",
                "Resource": "arn:aws:states:::lambda:invoke",
                "Parameters": {"FunctionName": arn, "Payload": {"action": "admit", "job_id.$": "$.job_id"}},
                "ResultSelector": {"out.$": "$.Payload"},
                "Next": "Route",
            },
            "Route": {"Type": "Choice", "Choices": [{"Variable": "$.out.next", "StringEquals": "ok", "Next": "Yes"}], "Default": "No"},
            "Yes": {"Type": "Succeed"},
            "No": {"Type": "Fail"},
        },
    }
    sfn = boto3.client("stepfunctions", region_name=REGION)
    machine = sfn.create_state_machine(name="m", definition=json.dumps(definition), roleArn="arn:aws:iam::123456789012:role/sfn")
    execution = sfn.start_execution(stateMachineArn=machine["stateMachineArn"], name="e1", input=json.dumps({"job_id": "j9"}))
    # When it runs, Then it took the "ok" branch our handler returned
    from tests.lifecycle_support import wait_until

    status = wait_until(
        lambda: (s := sfn.describe_execution(executionArn=execution["executionArn"])["status"]) != "RUNNING" and s, 20, what="the execution"
    )
    assert status == "SUCCEEDED"
    assert handlers.calls[-1][0] == {"action": "admit", "job_id": "j9"}
