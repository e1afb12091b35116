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
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from localmode import moto_lambda, moto_pin

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
    with mock_aws(config=moto_pin.MOTO_CONFIG):
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
    assert importlib.metadata.version("moto") == moto_pin.PINNED_MOTO_VERSION
    # and the one pyproject.toml installs: one pin, spelled in localmode/moto_pin.py and the dependency
    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert f'"moto[server]=={moto_pin.PINNED_MOTO_VERSION}"' in pyproject
    moto_lambda.check_version()


def test_refuses_another_moto_version(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(moto_pin, "PINNED_MOTO_VERSION", "0.0.1")
    with pytest.raises(moto_pin.MotoVersionError, match=r"re-check LambdaSimpleBackend\.invoke"):
        moto_lambda.install()


def test_moto_internals_the_adapter_relies_on_are_where_it_expects() -> None:
    from moto.awslambda_simple.models import LambdaSimpleBackend
    from moto.stepfunctions.parser.models import StepFunctionsParserBackend

    params = list(inspect.signature(LambdaSimpleBackend.invoke).parameters)
    assert params == ["self", "function_name", "qualifier", "body", "headers", "response_headers"]
    assert "task_token" in inspect.signature(StepFunctionsParserBackend.send_task_heartbeat).parameters
    assert {"lambda", "stepfunctions"} <= set(moto_pin.MOTO_CONFIG)


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


def test_moto_internals_the_subscription_delivery_relies_on_are_where_it_expects() -> None:
    from moto.awslambda_simple.models import LambdaSimpleBackend
    from moto.logs.models import LogStream

    params = list(inspect.signature(LambdaSimpleBackend.send_log_event).parameters)
    assert params == ["self", "function_arn", "filter_name", "log_group_name", "log_stream_name", "log_events"]
    # PutLogEvents hands each subscription of the group to the destination's backend
    assert "send_log_event" in inspect.getsource(LogStream._send_log_events)


def _subscribed(aws: Any, handler: str, group: str, pattern: str) -> Any:
    name = _function(aws, handler)
    logs = boto3.client("logs", region_name=REGION)
    logs.create_log_group(logGroupName=group)
    logs.create_log_stream(logGroupName=group, logStreamName="tp-job1-a1/algo-1-1")
    arn = aws.get_function(FunctionName=name)["Configuration"]["FunctionArn"]
    logs.put_subscription_filter(logGroupName=group, filterName="reports", filterPattern=pattern, destinationArn=arn)
    return logs


def _now_ms() -> int:
    import time

    return int(time.time() * 1000)  # CloudWatch Logs refuses events older than 14 days


def _wait_delivered(handlers: types.ModuleType, count: int) -> None:
    import time

    deadline = time.monotonic() + 10
    while len(handlers.calls) < count and time.monotonic() < deadline:
        time.sleep(0.02)
    while moto_lambda.pending_deliveries() and time.monotonic() < deadline:
        time.sleep(0.02)


def test_a_log_subscription_delivers_the_matching_lines_as_awslogs(aws: Any, handlers: types.ModuleType) -> None:
    from aws_lambda_powertools.utilities.parser import parse
    from aws_lambda_powertools.utilities.parser.models import CloudWatchLogsModel

    # Given a function subscribed to a log group's TRAINPLANE_EVENT lines
    logs = _subscribed(aws, "lifecycle_test_handlers.echo", "/aws/sagemaker/TrainingJobs", '"TRAINPLANE_EVENT"')
    # When lines are put, only some of them reports
    lines = ["plain log", 'TRAINPLANE_EVENT {"kind":"phase","time":1.0,"data":{"phase":"TRAINING"}}', "another", "TRAINPLANE_EVENT {}"]
    logs.put_log_events(
        logGroupName="/aws/sagemaker/TrainingJobs",
        logStreamName="tp-job1-a1/algo-1-1",
        logEvents=[{"timestamp": _now_ms() + i, "message": m} for i, m in enumerate(lines)],
    )
    _wait_delivered(handlers, 1)
    # Then the handler got one awslogs event: gzip+base64, the group, the stream, the filter, the matching lines only
    assert len(handlers.calls) == 1
    event, function_name, _ = handlers.calls[0]
    assert function_name == "lifecycle_test_handlers-echo" and set(event) == {"awslogs"}
    batch = parse(event=event, model=CloudWatchLogsModel).awslogs.decoded_data
    assert (batch.messageType, batch.logGroup, batch.logStream, batch.subscriptionFilters) == (
        "DATA_MESSAGE",
        "/aws/sagemaker/TrainingJobs",
        "tp-job1-a1/algo-1-1",
        ["reports"],
    )
    assert [e.message for e in batch.logEvents] == [lines[1], lines[3]]


def test_dropping_reports_is_a_channel_that_is_down(aws: Any, handlers: types.ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    logs = _subscribed(aws, "lifecycle_test_handlers.echo", "/trainplane/trainer", "TRAINPLANE_EVENT")
    monkeypatch.setenv(moto_lambda.DROP_REPORTS_ENV, "1")
    logs.put_log_events(
        logGroupName="/trainplane/trainer",
        logStreamName="tp-job1-a1/algo-1-1",
        logEvents=[{"timestamp": _now_ms(), "message": "TRAINPLANE_EVENT {}"}],
    )
    deadline = time.monotonic() + 5
    while moto_lambda.pending_deliveries() and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.2)
    assert handlers.calls == []


def test_filter_patterns_beyond_terms_are_refused() -> None:
    assert moto_lambda.matches_filter_pattern("", "anything")
    assert moto_lambda.matches_filter_pattern('"TRAINPLANE_EVENT" phase', 'TRAINPLANE_EVENT {"phase"}')
    assert not moto_lambda.matches_filter_pattern('"TRAINPLANE_EVENT"', "a plain line")
    for unsupported in ('{ $.kind = "phase" }', "[ip, user]", "?ERROR ?WARN"):
        with pytest.raises(ValueError, match="not emulated"):
            moto_lambda.matches_filter_pattern(unsupported, "x")
