"""Local mode's fast paths into moto: in-process clients (moto_inprocess.py) and the DynamoDB item
serializer (moto_speedups.py). Both must change nothing but speed: the same answers, byte for byte,
and every write still under moto_hooks' locks and in the journal.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError, ParamValidationError

from functions import constants
from functions.adapters import aws as aws_clients
from functions.adapters.aws import AwsClients
from localmode import moto_speedups
from localmode.moto_inprocess import DirectGetItem, InProcessAws
from localmode.server import EmulatedAws
from tests.integration.test_journal import BUCKET, JOBS, Plane, aws, job_item, plane, table_snapshot  # noqa: F401 (fixtures)

# Nothing listens here: a request that went over HTTP would fail (connection refused).
DEAD_ENDPOINT = "http://127.0.0.1:9"

RICH = {
    "blob": {"B": b"\x00\xffbinary"},
    "blobs": {"BS": [b"\x01", b"\x02\x03"]},
    "ns": {"NS": ["1", "2.5", "-3E2"]},
    "ss": {"SS": ["a", "b é"]},
    "n": {"N": "12.50"},
    "empty": {"S": ""},
    "t": {"BOOL": True},
    "f": {"BOOL": False},
    "nothing": {"NULL": True},
    "doc": {
        "M": {
            "nested": {"B": b"\x01\x02"},
            "list": {"L": [{"N": "3"}, {"BOOL": True}, {"NULL": True}, {"M": {}}, {"L": []}, {"SS": ["x"]}]},
            "deeper": {"M": {"s": {"S": "unicode ✓"}}},
        }
    },
}
J1 = {"pk": {"S": "JOB#j1"}, "sk": {"S": "JOB"}}


@pytest.fixture
def in_process(plane: Plane) -> Iterator[AwsClients]:  # noqa: F811 (the imported fixture)
    """AwsClients whose DynamoDB, S3 and Step Functions clients reach the plane's moto only in-process."""
    transport = InProcessAws(DEAD_ENDPOINT)
    aws_clients.add_client_hook(transport.attach)
    try:
        clients = AwsClients(region=constants.LOCAL_REGION, endpoint_url=DEAD_ENDPOINT)
        clients.transport = transport  # type: ignore[attr-defined]
        yield clients
    finally:
        aws_clients.remove_client_hook(transport.attach)


def raw_bodies(client: Any) -> list[bytes]:
    bodies: list[bytes] = []
    client.meta.events.register("after-call", lambda http_response, **_: bodies.append(http_response.content))
    return bodies


def test_item_serializer_writes_exactly_what_moto_writes(plane: Plane) -> None:  # noqa: F811
    # Given items of every attribute type, read back by every kind of read and write that returns items
    ddb = plane.client("dynamodb")
    ddb.put_item(TableName=JOBS, Item=job_item("j1", "alice", **RICH))
    ddb.put_item(TableName=JOBS, Item=job_item("j2", "alice", extra={"S": "x" * 300}))
    calls: list[tuple[str, dict[str, Any]]] = [
        ("get_item", {"TableName": JOBS, "Key": J1}),
        ("get_item", {"TableName": JOBS, "Key": J1, "ProjectionExpression": "doc.#l, ns", "ExpressionAttributeNames": {"#l": "list"}}),
        ("get_item", {"TableName": JOBS, "Key": {"pk": {"S": "nope"}, "sk": {"S": "JOB"}}}),
        ("query", {"TableName": JOBS, "KeyConditionExpression": "pk = :p", "ExpressionAttributeValues": {":p": {"S": "JOB#j1"}}}),
        ("scan", {"TableName": JOBS, "Limit": 1}),
        ("batch_get_item", {"RequestItems": {JOBS: {"Keys": [J1]}}}),
        ("transact_get_items", {"TransactItems": [{"Get": {"TableName": JOBS, "Key": J1}}]}),
        (
            "update_item",
            {
                "TableName": JOBS,
                "Key": J1,
                "UpdateExpression": "SET n = :n",
                "ExpressionAttributeValues": {":n": {"N": "7"}},
                "ReturnValues": "ALL_NEW",
            },
        ),
        ("put_item", {"TableName": JOBS, "Item": job_item("j1", "alice", **RICH), "ReturnValues": "ALL_OLD"}),
        ("execute_statement", {"Statement": f"SELECT * FROM \"{JOBS}\" WHERE pk = 'JOB#j1'"}),
        ("describe_table", {"TableName": JOBS}),
    ]

    def answers() -> list[bytes]:
        reader = plane.client("dynamodb")
        bodies = raw_bodies(reader)
        for name, kwargs in calls:
            getattr(reader, name)(**kwargs)
        return bodies

    # When moto answers them with the fast item serializer, and then with its own
    assert moto_speedups.installed()
    taken: list[int] = []
    original = moto_speedups.attribute_value

    def counting(value: dict[str, Any]) -> dict[str, Any]:
        taken.append(1)
        return original(value)

    moto_speedups.attribute_value = counting  # type: ignore[assignment]
    try:
        fast = answers()
    finally:
        moto_speedups.attribute_value = original  # type: ignore[assignment]
    moto_speedups.uninstall()
    try:
        slow = answers()
    finally:
        moto_speedups.install()

    # Then every body is the same, byte for byte, and the fast path really ran
    assert len(fast) == len(calls)
    for (name, _), a, b in zip(calls, fast, slow, strict=True):
        assert a == b, name
    assert len(taken) > 100


def test_in_process_clients_never_use_http_and_every_write_is_journaled(plane: Plane, in_process: AwsClients) -> None:  # noqa: F811
    # Given AwsClients pointed at an endpoint where nothing listens, with local mode's in-process hook
    ddb, s3 = in_process.dynamodb(), in_process.s3()
    # When every kind of write goes through them
    ddb.put_item(TableName=JOBS, Item=job_item("j1", "alice", **RICH))
    ddb.put_item(TableName=JOBS, Item=job_item("j2", "bob"))
    ddb.update_item(
        TableName=JOBS,
        Key=J1,
        UpdateExpression="SET #s = :s ADD version :one",
        ConditionExpression="version = :v",
        ExpressionAttributeNames={"#s": "status"},
        ExpressionAttributeValues={":s": {"S": "QUEUED"}, ":one": {"N": "1"}, ":v": {"N": "1"}},
    )
    ddb.delete_item(TableName=JOBS, Key={"pk": {"S": "JOB#j2"}, "sk": {"S": "JOB"}})
    ddb.transact_write_items(TransactItems=[{"Put": {"TableName": JOBS, "Item": job_item("j3", "bob")}}])
    ddb.batch_write_item(RequestItems={JOBS: [{"PutRequest": {"Item": {"pk": {"S": "JOB#j1"}, "sk": {"S": "EVENT#1"}}}}]})
    s3.put_object(Bucket=BUCKET, Key="jobs/j1/metrics.jsonl", Body=b'{"step": 1}\n')
    s3.put_object(Bucket=BUCKET, Key="jobs/j1/gone.txt", Body=b"x")
    s3.delete_object(Bucket=BUCKET, Key="jobs/j1/gone.txt")

    # Then they were answered in-process (nothing could have answered over HTTP)
    assert in_process.transport.calls == 9  # type: ignore[attr-defined]
    # And the emulated AWS behind the HTTP endpoint holds them
    http_ddb = plane.client("dynamodb")
    before = table_snapshot(http_ddb)
    assert {i["pk"]["S"] + "/" + i["sk"]["S"] for i in before} == {"JOB#j1/JOB", "JOB#j1/EVENT#1", "JOB#j3/JOB"}
    # And after a restart (moto emptied, the journal replayed) everything is back
    plane.restart()
    assert table_snapshot(plane.client("dynamodb")) == before
    http_s3 = plane.client("s3")
    assert http_s3.get_object(Bucket=BUCKET, Key="jobs/j1/metrics.jsonl")["Body"].read() == b'{"step": 1}\n'
    assert http_s3.list_objects_v2(Bucket=BUCKET, Prefix="jobs/j1/")["KeyCount"] == 1


def test_in_process_answers_equal_http_answers_errors_included(plane: Plane, in_process: AwsClients) -> None:  # noqa: F811
    # Given the same item, read through an in-process client and an HTTP client
    plane.client("dynamodb").put_item(TableName=JOBS, Item=job_item("j1", "alice", **RICH))
    plane.client("s3").put_object(Bucket=BUCKET, Key="a/b.txt", Body=b"body", Metadata={"k": "v"})
    ddb, http_ddb = in_process.dynamodb(), plane.client("dynamodb")
    # When read both ways
    # Then the answers are the same
    assert ddb.get_item(TableName=JOBS, Key=J1)["Item"] == http_ddb.get_item(TableName=JOBS, Key=J1)["Item"]
    obj = in_process.s3().get_object(Bucket=BUCKET, Key="a/b.txt")
    assert (obj["Body"].read(), obj["Metadata"]) == (b"body", {"k": "v"})
    machines = in_process.client("stepfunctions").list_state_machines()["stateMachines"]
    assert machines == plane.client("stepfunctions").list_state_machines()["stateMachines"] != []
    # And moto's errors are the same ClientErrors
    with pytest.raises(ClientError) as failed:
        ddb.update_item(
            TableName=JOBS, Key=J1, UpdateExpression="SET x = :x", ConditionExpression="version = :v",
            ExpressionAttributeValues={":x": {"S": "y"}, ":v": {"N": "99"}}, ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )  # fmt: skip
    assert failed.value.response["Error"]["Code"] == "ConditionalCheckFailedException"
    assert failed.value.response["Item"]["blob"]["B"] == b"\x00\xffbinary"
    with pytest.raises(ClientError, match="ResourceNotFoundException"):
        ddb.get_item(TableName="no-such-table", Key=J1)
    with pytest.raises(ClientError, match="NoSuchKey"):
        in_process.s3().get_object(Bucket=BUCKET, Key="missing")


def test_direct_get_item_answers_what_botocore_would_have_parsed(plane: Plane, in_process: AwsClients) -> None:  # noqa: F811
    # Given an item of every attribute type, and an in-process client whose GetItem skips botocore
    plane.client("dynamodb").put_item(TableName=JOBS, Item=job_item("j1", "alice", **RICH))
    ddb = in_process.dynamodb()
    direct = ddb.get_item
    assert isinstance(direct, DirectGetItem)
    through_botocore = direct.original  # the client's own method: botocore + moto's in-process path

    # When the plain forms of the call are answered both ways
    plain_calls: list[dict[str, Any]] = [
        {"TableName": JOBS, "Key": J1},
        {"TableName": JOBS, "Key": J1, "ConsistentRead": True},
        {"TableName": JOBS, "Key": {"pk": {"S": "JOB#missing"}, "sk": {"S": "JOB"}}},
    ]
    for call in plain_calls:
        before = direct.calls
        fast, slow = direct(**call), through_botocore(**call)
        # Then the direct path answered them, with exactly what botocore parsed (blobs as bytes)
        assert direct.calls == before + 1
        assert {k: v for k, v in fast.items() if k != "ResponseMetadata"} == {k: v for k, v in slow.items() if k != "ResponseMetadata"}
        assert fast["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert ddb.get_item(TableName=JOBS, Key=J1)["Item"]["doc"]["M"]["nested"] == {"B": b"\x01\x02"}

    # And every other form goes through botocore, with moto's answers and errors
    before = direct.calls
    projected = ddb.get_item(TableName=JOBS, Key=J1, ProjectionExpression="ns")
    assert projected["Item"] == plane.client("dynamodb").get_item(TableName=JOBS, Key=J1, ProjectionExpression="ns")["Item"]
    assert list(projected["Item"]) == ["ns"]
    refusals: list[tuple[dict[str, Any], str]] = [
        ({"TableName": "no-such-table", "Key": J1}, "ResourceNotFoundException"),
        ({"TableName": JOBS, "Key": {"pk": {"S": "JOB#j1"}}}, "ValidationException"),
        ({"TableName": JOBS, "Key": {"pk": {"S": "JOB#j1"}, "other": {"S": "x"}}}, "ValidationException"),
        ({"TableName": JOBS, "Key": {"pk": {"S": ""}, "sk": {"S": "JOB"}}}, "ValidationException"),
    ]
    for call, code in refusals:
        with pytest.raises(ClientError) as refused:
            ddb.get_item(**call)
        assert refused.value.response["Error"]["Code"] == code, call
    with pytest.raises(ParamValidationError):
        ddb.get_item(TableName=JOBS, Key=J1, ConsistentRead="yes")
    assert direct.calls == before


def test_concurrent_in_process_conditional_updates_have_one_winner_per_version(plane: Plane, in_process: AwsClients) -> None:  # noqa: F811
    # Given 6 threads sharing the in-process client, racing conditional updates on one item
    ddb = in_process.dynamodb()
    key = {"pk": {"S": "RACE"}, "sk": {"S": "JOB"}}
    ddb.put_item(TableName=JOBS, Item={**key, "version": {"N": "0"}, "winners": {"L": []}})
    threads_n, rounds = 6, 3
    wins: list[int] = []
    start = threading.Barrier(threads_n)

    def contender(me: int) -> None:
        start.wait()
        won = 0
        while won < rounds:
            current = int(ddb.get_item(TableName=JOBS, Key=key, ConsistentRead=True)["Item"]["version"]["N"])
            try:
                ddb.update_item(
                    TableName=JOBS,
                    Key=key,
                    UpdateExpression="SET version = :next, winners = list_append(winners, :me)",
                    ConditionExpression="version = :v",
                    ExpressionAttributeValues={":v": {"N": str(current)}, ":next": {"N": str(current + 1)}, ":me": {"L": [{"N": str(me)}]}},
                )
            except ClientError as exc:
                assert exc.response["Error"]["Code"] == "ConditionalCheckFailedException"
                continue
            wins.append(current)
            won += 1

    # When they all run
    threads = [threading.Thread(target=contender, args=(n,)) for n in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)

    # Then every version had exactly one winner and no write was lost, in moto and in the journal
    assert sorted(wins) == list(range(threads_n * rounds))
    item = ddb.get_item(TableName=JOBS, Key=key, ConsistentRead=True)["Item"]
    assert len(item["winners"]["L"]) == int(item["version"]["N"]) == threads_n * rounds
    plane.restart()
    assert plane.client("dynamodb").get_item(TableName=JOBS, Key=key, ConsistentRead=True)["Item"] == item


def test_only_clients_of_the_emulated_endpoint_and_listed_services_are_attached(aws: EmulatedAws) -> None:  # noqa: F811
    # Given the in-process transport for the emulated AWS
    transport = InProcessAws(aws.endpoint_url + "/")
    # When clients of other endpoints or services are offered to it
    elsewhere = AwsClients(region=constants.LOCAL_REGION, endpoint_url="http://127.0.0.1:1")
    here = AwsClients(region=constants.LOCAL_REGION, endpoint_url=aws.endpoint_url)
    # Then only DynamoDB, S3 and Step Functions clients of that endpoint are taken
    assert transport.attach("dynamodb", here.dynamodb())
    assert transport.attach("s3", here.s3())
    assert transport.attach("stepfunctions", here.client("stepfunctions"))
    assert not transport.attach("sqs", here.client("sqs"))
    assert not transport.attach("dynamodb", elsewhere.dynamodb())


def test_client_hooks_see_every_new_client_until_removed() -> None:
    # Given a registered hook
    seen: list[str] = []

    def hook(service: str, client: Any) -> None:
        seen.append(f"{service}:{client.meta.service_model.service_name}")

    aws_clients.add_client_hook(hook)
    aws_clients.add_client_hook(hook)  # twice: still once
    try:
        clients = AwsClients(region=constants.LOCAL_REGION, endpoint_url=DEAD_ENDPOINT)
        # When clients are created (and one asked for twice)
        clients.dynamodb()
        clients.dynamodb()
        clients.s3()
    finally:
        aws_clients.remove_client_hook(hook)
    AwsClients(region=constants.LOCAL_REGION, endpoint_url=DEAD_ENDPOINT).dynamodb()
    # Then the hook saw each created client once, and none after it was removed
    assert seen == ["dynamodb:dynamodb", "s3:s3"]


PASS_CHOICE = json.dumps(
    {
        "StartAt": "Pick",
        "States": {
            "Pick": {
                "Type": "Choice",
                "Choices": [{"Variable": "$.n", "NumericGreaterThan": 10, "Next": "Big"}],
                "Default": "Small",
            },
            "Big": {"Type": "Pass", "Parameters": {"size": "big", "n.$": "$.n"}, "End": True},
            "Small": {"Type": "Pass", "Parameters": {"size": "small", "n.$": "$.n"}, "End": True},
        },
    }
)


def test_a_definition_is_parsed_once_and_every_execution_gets_a_fresh_program(aws: EmulatedAws) -> None:  # noqa: F811
    from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser, ASLParserException

    # Given the speed-ups installed
    assert moto_speedups.installed()
    # When one definition is parsed twice
    first_program, first_tree = AmazonStateLanguageParser.parse(PASS_CHOICE)
    second_program, second_tree = AmazonStateLanguageParser.parse(PASS_CHOICE)
    # Then the syntax tree is shared, the evaluation components are not
    assert second_tree is first_tree
    assert second_program is not first_program
    # And a broken definition fails every time, not only the first
    for _ in range(2):
        with pytest.raises(ASLParserException):
            AmazonStateLanguageParser.parse('{"StartAt": "X", "States": {"X": {"Type": "Nope"}}}')


def test_executions_of_one_definition_do_not_share_state(aws: EmulatedAws) -> None:  # noqa: F811
    # Given a state machine in the emulated AWS (executions really run the ASL)
    sfn = boto3.client(
        "stepfunctions", endpoint_url=aws.endpoint_url, region_name=constants.LOCAL_REGION, aws_access_key_id="t", aws_secret_access_key="t"
    )
    arn = sfn.create_state_machine(name=f"speedups-{uuid.uuid4().hex[:8]}", definition=PASS_CHOICE, roleArn=ROLE)["stateMachineArn"]
    # When it runs several times with different inputs
    runs = {
        n: sfn.start_execution(stateMachineArn=arn, name=f"run-{n}", input=json.dumps({"n": n}))["executionArn"] for n in (1, 50, 2, 99)
    }
    # Then each execution took its own branch with its own input
    outputs = {n: _finished(sfn, execution) for n, execution in runs.items()}
    assert outputs == {
        1: {"size": "small", "n": 1},
        50: {"size": "big", "n": 50},
        2: {"size": "small", "n": 2},
        99: {"size": "big", "n": 99},
    }


ROLE = f"arn:aws:iam::{constants.LOCAL_ACCOUNT_ID}:role/speedups"


def _finished(sfn: Any, execution_arn: str) -> Any:
    for _ in range(200):
        described = sfn.describe_execution(executionArn=execution_arn)
        if described["status"] != "RUNNING":
            assert described["status"] == "SUCCEEDED", described
            return json.loads(described["output"])
        time.sleep(0.05)
    raise AssertionError(f"{execution_arn} still running")


def test_event_targets_parse_each_input_path_once_and_deliver_what_moto_delivers(aws: EmulatedAws) -> None:  # noqa: F811
    import jsonpath_ng.ext

    # Given a bus with a rule whose targets are two queues: moto's default input, and an input transformer
    def client(service: str) -> Any:
        return boto3.client(
            service, endpoint_url=aws.endpoint_url, region_name=constants.LOCAL_REGION, aws_access_key_id="t", aws_secret_access_key="t"
        )

    events, sqs = client("events"), client("sqs")
    name = f"speedups-{uuid.uuid4().hex[:8]}"
    events.create_event_bus(Name=name)
    events.put_rule(Name=name, EventBusName=name, EventPattern=json.dumps({"source": ["trainplane"]}))
    queues = {kind: sqs.create_queue(QueueName=f"{name}-{kind}")["QueueUrl"] for kind in ("plain", "shaped")}
    arns = {
        kind: sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"] for kind, url in queues.items()
    }
    shaped = {"InputPathsMap": {"s": "$.detail.state", "j": "$.detail.job.id"}, "InputTemplate": '{"state": "<s>", "job": "<j>"}'}
    events.put_targets(
        Rule=name,
        EventBusName=name,
        Targets=[{"Id": "plain", "Arn": arns["plain"]}, {"Id": "shaped", "Arn": arns["shaped"], "InputTransformer": shaped}],
    )

    def deliver(state: str) -> dict[str, Any]:
        detail = {"state": state, "job": {"id": "j-1"}}
        events.put_events(Entries=[{"Source": "trainplane", "DetailType": "Job", "Detail": json.dumps(detail), "EventBusName": name}])
        bodies = {}
        for kind, url in queues.items():
            (message,) = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
            bodies[kind] = json.loads(message["Body"])
        del bodies["plain"]["id"], bodies["plain"]["time"]  # each event's own
        return bodies

    # When events go through with moto's own parsing, then with the parsed paths kept
    assert moto_speedups.installed()
    moto_speedups._uninstall_jsonpath_cache()
    try:
        plain = [deliver(state) for state in ("RUNNING", "FAILED")]
    finally:
        moto_speedups._install_jsonpath_cache()
    before = jsonpath_ng.ext.parse.cache_info()  # type: ignore[attr-defined]
    kept = [deliver(state) for state in ("RUNNING", "FAILED")]
    after = jsonpath_ng.ext.parse.cache_info()  # type: ignore[attr-defined]
    # Then the queues received the same bodies
    assert kept == plain
    assert kept[1]["shaped"] == {"state": "FAILED", "job": "j-1"}
    # And the second event parsed nothing: 2 events x (8 default paths + 2 shaped) lookups, at most 10 of them new
    assert after.hits + after.misses - before.hits - before.misses == 20
    assert after.misses - before.misses <= 10


def test_sqs_sends_and_receives_read_their_attributes_alone_and_answer_what_moto_answers(
    aws: EmulatedAws,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from moto.sqs.models import Queue

    sqs = boto3.client(
        "sqs", endpoint_url=aws.endpoint_url, region_name=constants.LOCAL_REGION, aws_access_key_id="t", aws_secret_access_key="t"
    )
    # Given a count of the full attribute computations (each counts a queue's visible messages)
    counted = {"n": 0}
    approximate = Queue.__dict__["approximate_number_of_messages"]

    def counting(queue: Queue) -> int:
        counted["n"] += 1
        return approximate.fget(queue)

    monkeypatch.setattr(Queue, "approximate_number_of_messages", property(counting))

    def sends(tag: str) -> tuple[list[Any], int]:
        """What a standard queue, a FIFO queue with content-based deduplication and one without answer to
        sends and receives, and how many full attribute computations those made."""
        standard = sqs.create_queue(QueueName=f"std-{tag}")["QueueUrl"]
        dedup = sqs.create_queue(QueueName=f"cbd-{tag}.fifo", Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"})[
            "QueueUrl"
        ]
        strict = sqs.create_queue(QueueName=f"strict-{tag}.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
        answers: list[Any] = []
        counted["n"] = 0
        for url, extra in (
            (standard, {}),
            (standard, {}),
            (standard, {}),
            (dedup, {"MessageGroupId": "g"}),
            (dedup, {"MessageGroupId": "g"}),
            (strict, {"MessageGroupId": "g"}),
        ):
            try:
                sqs.send_message(QueueUrl=url, MessageBody="same body", **extra)
                answers.append("sent")
            except ClientError as e:
                answers.append(e.response["Error"]["Message"])
        for url in (standard, dedup):
            answers.append(len(sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])))
        computed = counted["n"]
        answers.append(sqs.get_queue_attributes(QueueUrl=dedup, AttributeNames=["ContentBasedDeduplication"])["Attributes"])
        return answers, computed

    assert moto_speedups.installed()
    # When the same sends and receives run on plain moto, then with the speed-up
    moto_speedups.uninstall()
    try:
        plain, plain_computed = sends("plain")
    finally:
        moto_speedups.install()
    patched, patched_computed = sends("patched")
    # Then they answer alike (the duplicate body deduplicated, the strict queue's refusal), and the sends and
    # receives computed no attribute dict (plain moto: one or more per send and per message received)
    assert patched == plain
    assert plain[:8] == ["sent"] * 5 + [plain[5], 3, 1] and "ContentBasedDeduplication" in plain[5]
    assert plain[8] == {"ContentBasedDeduplication": "true"}
    assert (plain_computed >= 10, patched_computed) == (True, 0)
