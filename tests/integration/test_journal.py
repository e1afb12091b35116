"""Local mode's durability and thread safety on a real moto server (in-process, over HTTP).

A "restart" here is what `trainplane up` does on start-up, minus the process: moto emptied, the
deployers run again, the journal folded, replayed and compacted. tests/e2e/test_local_mode.py does it
with real processes (SIGTERM, kill -9).
"""

from __future__ import annotations

import copy
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import moto
import pytest
import requests
from botocore.config import Config
from botocore.exceptions import ClientError
from moto.core.config import default_user_config

from functions import constants
from localmode import moto_hooks, moto_pin
from localmode.deploy import LocalContext, deploy_all
from localmode.journal import Journal
from localmode.server import EmulatedAws

JOBS = constants.JOBS_TABLE
BUCKET = constants.ARTIFACTS_BUCKET


@pytest.fixture(scope="module")
def aws() -> Iterator[EmulatedAws]:
    # moto's config and MOTO_PORT are process-wide: put them back for the rest of the suite.
    saved_config, saved_port = copy.deepcopy(default_user_config), os.environ.get("MOTO_PORT")
    moto_hooks.install()
    server = EmulatedAws()
    server.start()
    yield server
    server.stop()
    moto_hooks.uninstall()
    default_user_config.clear()
    default_user_config.update(saved_config)
    if saved_port is None:
        os.environ.pop("MOTO_PORT", None)
    else:
        os.environ["MOTO_PORT"] = saved_port


class Plane:
    """moto + deployed storage + an attached journal, with an in-process restart."""

    def __init__(self, aws: EmulatedAws, state_dir: Path) -> None:
        self.aws = aws
        self.state_dir = state_dir
        self.journal: Journal | None = None
        self.restored: dict[str, int] = {}
        self.start()

    def client(self, service: str, **config: Any) -> Any:
        return boto3.client(
            service,
            endpoint_url=self.aws.endpoint_url,
            region_name=constants.LOCAL_REGION,
            aws_access_key_id="test",
            aws_secret_access_key="test",
            config=Config(retries={"max_attempts": 0}, **config),
        )

    def start(self) -> None:
        requests.post(f"{self.aws.endpoint_url}/moto-api/reset", timeout=10).raise_for_status()
        deploy_all(LocalContext(endpoint_url=self.aws.endpoint_url, state_dir=self.state_dir))
        self.journal = Journal(self.state_dir / "journal")
        state = self.journal.fold()
        self.restored = moto_hooks.restore(state, self.journal)
        self.journal.compact(state)
        moto_hooks.attach(self.journal)

    def restart(self) -> None:
        moto_hooks.detach()
        assert self.journal is not None
        self.journal.close()
        self.start()

    def close(self) -> None:
        moto_hooks.detach()
        if self.journal is not None:
            self.journal.close()


@pytest.fixture
def plane(aws: EmulatedAws, tmp_path: Path) -> Iterator[Plane]:
    p = Plane(aws, tmp_path)
    yield p
    p.close()


def job_item(job_id: str, owner: str, **extra: Any) -> dict[str, Any]:
    return {
        "pk": {"S": f"JOB#{job_id}"},
        "sk": {"S": "JOB"},
        "gsi1pk": {"S": f"OWNER#{owner}"},
        "gsi1sk": {"S": f"2024-01-01T00:00:0{job_id[-1]}#{job_id}"},
        "gsi2pk": {"S": "JOBS"},
        "gsi2sk": {"S": f"2024-01-01T00:00:0{job_id[-1]}#{job_id}"},
        "version": {"N": "1"},
        **extra,
    }


def table_snapshot(ddb: Any, table: str = JOBS) -> list[dict[str, Any]]:
    items = ddb.scan(TableName=table, ConsistentRead=True)["Items"]
    return sorted(items, key=lambda i: json.dumps(i, sort_keys=True, default=str))


def by_owner(ddb: Any, owner: str) -> list[str]:
    page = ddb.query(
        TableName=JOBS,
        IndexName=constants.GSI_OWNER,
        KeyConditionExpression="gsi1pk = :o",
        ExpressionAttributeValues={":o": {"S": f"OWNER#{owner}"}},
        ScanIndexForward=False,
    )
    return [i["pk"]["S"] for i in page["Items"]]


def test_every_kind_of_dynamodb_write_survives_a_restart(plane: Plane) -> None:
    ddb = plane.client("dynamodb")
    # Given items written by every write path moto has: put, update, conditional failures, delete,
    # batch, transactions (one cancelled), PartiQL; with binary, sets, maps, lists, bools and nulls
    rich = {
        "blob": {"B": b"\x00\xffbinary"},
        "ns": {"NS": ["1", "2.5"]},
        "ss": {"SS": ["a", "b"]},
        "doc": {"M": {"nested": {"B": b"\x01\x02"}, "list": {"L": [{"N": "3"}, {"BOOL": True}, {"NULL": True}]}}},
    }
    ddb.put_item(TableName=JOBS, Item=job_item("j1", "alice", **rich))
    ddb.put_item(TableName=JOBS, Item=job_item("j2", "alice"))
    ddb.put_item(TableName=JOBS, Item=job_item("j3", "bob"))
    ddb.update_item(
        TableName=JOBS,
        Key={"pk": {"S": "JOB#j1"}, "sk": {"S": "JOB"}},
        UpdateExpression="SET #s = :s ADD version :one",
        ConditionExpression="version = :v",
        ExpressionAttributeNames={"#s": "status"},
        ExpressionAttributeValues={":s": {"S": "QUEUED"}, ":one": {"N": "1"}, ":v": {"N": "1"}},
    )
    with pytest.raises(ClientError, match="ConditionalCheckFailed"):
        ddb.update_item(
            TableName=JOBS,
            Key={"pk": {"S": "JOB#j1"}, "sk": {"S": "JOB"}},
            UpdateExpression="SET #s = :s",
            ConditionExpression="version = :v",
            ExpressionAttributeNames={"#s": "status"},
            ExpressionAttributeValues={":s": {"S": "LOST"}, ":v": {"N": "1"}},
        )
    ddb.delete_item(TableName=JOBS, Key={"pk": {"S": "JOB#j3"}, "sk": {"S": "JOB"}})
    ddb.batch_write_item(
        RequestItems={
            JOBS: [{"PutRequest": {"Item": {"pk": {"S": "JOB#j1"}, "sk": {"S": f"EVENT#{n}"}, "to": {"S": f"S{n}"}}}} for n in range(3)]
            + [{"DeleteRequest": {"Key": {"pk": {"S": "JOB#j2"}, "sk": {"S": "JOB"}}}}]
        }
    )
    counter = {"pk": {"S": "COUNT#alice"}, "sk": {"S": "QUEUED"}}
    ddb.transact_write_items(
        TransactItems=[
            {"Put": {"TableName": JOBS, "Item": job_item("j4", "bob")}},
            {
                "Update": {
                    "TableName": JOBS,
                    "Key": counter,
                    "UpdateExpression": "ADD n :one",
                    "ExpressionAttributeValues": {":one": {"N": "1"}},
                }
            },
        ]
    )
    j1_key = {"pk": {"S": "JOB#j1"}, "sk": {"S": "JOB"}}
    with pytest.raises(ClientError, match="TransactionCanceled"):
        ddb.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": JOBS, "Item": job_item("j5", "bob")}},
                {
                    "ConditionCheck": {
                        "TableName": JOBS,
                        "Key": j1_key,
                        "ConditionExpression": "version = :v",
                        "ExpressionAttributeValues": {":v": {"N": "99"}},
                    }
                },
            ]
        )
    ddb.execute_statement(Statement=f"INSERT INTO \"{JOBS}\" VALUE {{'pk': 'PARTIQL', 'sk': 'A', 'x': 1}}")
    ddb.execute_statement(Statement=f"UPDATE \"{JOBS}\" SET x = 'two' WHERE pk = 'PARTIQL' AND sk = 'A'")
    ddb.execute_statement(Statement=f"INSERT INTO \"{JOBS}\" VALUE {{'pk': 'PARTIQL', 'sk': 'B'}}")
    ddb.execute_statement(Statement=f"DELETE FROM \"{JOBS}\" WHERE pk = 'PARTIQL' AND sk = 'B'")
    before = table_snapshot(ddb)
    owners_before = (by_owner(ddb, "alice"), by_owner(ddb, "bob"))
    assert any(i["pk"]["S"] == "PARTIQL" and i["x"]["S"] == "two" for i in before)

    # When local mode restarts with the same state dir
    plane.restart()

    # Then the table holds exactly what it held, and its GSIs answer the same
    ddb = plane.client("dynamodb")
    assert table_snapshot(ddb) == before
    assert (by_owner(ddb, "alice"), by_owner(ddb, "bob")) == owners_before == (["JOB#j1"], ["JOB#j4"])
    j1 = ddb.get_item(TableName=JOBS, Key={"pk": {"S": "JOB#j1"}, "sk": {"S": "JOB"}})["Item"]
    assert j1["blob"]["B"] == b"\x00\xffbinary"
    assert j1["doc"]["M"]["nested"]["B"] == b"\x01\x02"
    assert (j1["status"]["S"], j1["version"]["N"]) == ("QUEUED", "2")
    assert plane.restored["items"] == len(before)


def test_a_write_is_on_disk_when_it_is_answered(plane: Plane) -> None:
    # Given a journaled plane
    ddb = plane.client("dynamodb")
    # When one PutItem returns
    ddb.put_item(TableName=JOBS, Item=job_item("j7", "carol"))
    # Then another reader of the state dir (a restarted process) already sees it
    state = Journal(plane.state_dir / "journal").fold()
    table = state.tables[(constants.LOCAL_ACCOUNT_ID, constants.LOCAL_REGION, JOBS)]
    assert [op["item"]["pk"]["S"] for op in table.items.values()] == ["JOB#j7"]


def test_s3_objects_survive_a_restart(plane: Plane) -> None:
    s3 = plane.client("s3")
    # Given objects written by put (metadata, content type), overwrite, copy, multipart, deletes, and
    # a bucket created at run time
    s3.put_object(Bucket=BUCKET, Key="jobs/j1/config/run.json", Body=b'{"a": 1}', ContentType="application/json", Metadata={"k": "v"})
    s3.put_object(Bucket=BUCKET, Key="jobs/j1/metrics.jsonl", Body=b"old")
    s3.put_object(Bucket=BUCKET, Key="jobs/j1/metrics.jsonl", Body=b'{"step": 1}\n')
    s3.copy_object(Bucket=BUCKET, Key="jobs/j2/config/run.json", CopySource={"Bucket": BUCKET, "Key": "jobs/j1/config/run.json"})
    part = os.urandom(5 * 1024 * 1024)
    upload = s3.create_multipart_upload(Bucket=BUCKET, Key="jobs/j1/checkpoints/step-1/model.safetensors")
    etags = [
        s3.upload_part(Bucket=BUCKET, Key=upload["Key"], UploadId=upload["UploadId"], PartNumber=n, Body=body)["ETag"]
        for n, body in ((1, part), (2, b"tail"))
    ]
    s3.complete_multipart_upload(
        Bucket=BUCKET,
        Key=upload["Key"],
        UploadId=upload["UploadId"],
        MultipartUpload={"Parts": [{"PartNumber": n, "ETag": e} for n, e in enumerate(etags, start=1)]},
    )
    s3.put_object(Bucket=BUCKET, Key="gone/one", Body=b"x")
    s3.put_object(Bucket=BUCKET, Key="gone/two", Body=b"y")
    s3.delete_object(Bucket=BUCKET, Key="gone/one")
    s3.delete_objects(Bucket=BUCKET, Delete={"Objects": [{"Key": "gone/two"}]})
    s3.create_bucket(Bucket="user-datasets")
    s3.put_object(Bucket="user-datasets", Key="train.jsonl", Body=b'{"text": "hi"}\n')

    def snapshot() -> dict[str, Any]:
        out = {}
        for bucket in (BUCKET, "user-datasets"):
            for entry in s3.list_objects_v2(Bucket=bucket).get("Contents", []):
                got = s3.get_object(Bucket=bucket, Key=entry["Key"])
                out[f"{bucket}/{entry['Key']}"] = (
                    got["Body"].read(),
                    got["ContentType"],
                    got["Metadata"],
                    got["ETag"],
                    got["LastModified"],
                    entry["Size"],
                )
        return out

    before = snapshot()
    assert len(before) == 5
    assert before[f"{BUCKET}/jobs/j1/checkpoints/step-1/model.safetensors"][3].endswith('-2"')

    # When local mode restarts
    plane.restart()

    # Then every object is back, byte for byte, with its content type, metadata, ETag and date
    s3 = plane.client("s3")
    assert snapshot() == before
    assert plane.restored["buckets"] == 1


def test_a_table_created_at_run_time_comes_back_with_its_index(plane: Plane) -> None:
    ddb = plane.client("dynamodb")
    # Given a table another component created at run time, with a GSI, and an item in it
    ddb.create_table(
        TableName="runtime-table",
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}, {"AttributeName": "g", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        GlobalSecondaryIndexes=[
            {"IndexName": "by-g", "KeySchema": [{"AttributeName": "g", "KeyType": "HASH"}], "Projection": {"ProjectionType": "ALL"}}
        ],
    )
    ddb.put_item(TableName="runtime-table", Item={"id": {"S": "1"}, "g": {"S": "x"}})
    # When local mode restarts
    plane.restart()
    # Then the table, its index and its item are back
    ddb = plane.client("dynamodb")
    found = ddb.query(
        TableName="runtime-table", IndexName="by-g", KeyConditionExpression="g = :g", ExpressionAttributeValues={":g": {"S": "x"}}
    )
    assert [i["id"]["S"] for i in found["Items"]] == ["1"]


def test_torn_last_record_is_dropped_and_a_corrupt_middle_one_refused(plane: Plane) -> None:
    ddb = plane.client("dynamodb")
    # Given two committed writes, and the process dying half-way through writing a third line
    ddb.put_item(TableName=JOBS, Item=job_item("j1", "alice"))
    ddb.put_item(TableName=JOBS, Item=job_item("j2", "alice"))
    journal_file = plane.state_dir / "journal" / "journal.jsonl"
    with open(journal_file, "ab") as fh:
        fh.write(b'{"v":1,"ops":[{"op":"ddb.put","account":"1')
    # When it restarts
    plane.restart()
    # Then the committed writes are there and the torn one is gone
    assert sorted(by_owner(plane.client("dynamodb"), "alice")) == ["JOB#j1", "JOB#j2"]
    # And a line broken in the middle of the journal is an error, not silently skipped data
    lines = journal_file.read_bytes().split(b"\n")
    journal_file.write_bytes(b"\n".join([b"{broken", *lines]))
    with pytest.raises(RuntimeError, match="line 1 is corrupt"):
        Journal(plane.state_dir / "journal").fold()


def test_compaction_keeps_one_record_and_only_referenced_bodies(plane: Plane) -> None:
    s3 = plane.client("s3")
    ddb = plane.client("dynamodb")
    # Given many writes, overwrites and deletes
    for n in range(5):
        ddb.put_item(TableName=JOBS, Item=job_item("j1", "alice", n={"N": str(n)}))
        s3.put_object(Bucket=BUCKET, Key="k", Body=f"version {n}".encode())
    s3.put_object(Bucket=BUCKET, Key="deleted", Body=b"bye")
    s3.delete_object(Bucket=BUCKET, Key="deleted")
    journal_dir = plane.state_dir / "journal"
    assert len((journal_dir / "journal.jsonl").read_text().splitlines()) == 12
    # When it restarts (start-up compacts)
    plane.restart()
    # Then the journal is one record of the final state, and only the live body is kept
    lines = (journal_dir / "journal.jsonl").read_text().splitlines()
    assert len(lines) == 1
    ops = json.loads(lines[0])["ops"]
    assert sorted(op["op"] for op in ops) == ["ddb.put", "s3.put"]
    assert [p.name for p in (journal_dir / "blobs").glob("*/*")] == [next(op["blob"] for op in ops if op["op"] == "s3.put")]
    assert s3.get_object(Bucket=BUCKET, Key="k")["Body"].read() == b"version 4"


def test_hooks_are_pinned_to_the_moto_they_were_written_for(aws: EmulatedAws) -> None:
    # If this fails after a moto upgrade: re-verify localmode/moto_hooks.py, then move the pin.
    assert moto.__version__ == moto_pin.PINNED_MOTO_VERSION
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.models.table import Table
    from moto.dynamodb.responses import DynamoHandler
    from moto.s3.models import S3Backend
    from moto.s3.responses import S3Response

    patched = [(DynamoHandler, "call_action"), (S3Response, "_key_response"), (S3Response, "_bucket_response")]
    patched += [(Table, "put_item"), (Table, "delete_item")]
    patched += [(DynamoDBBackend, n) for n in moto_hooks.DDB_ENTRY_POINTS] + [(S3Backend, n) for n in moto_hooks.S3_ENTRY_POINTS]
    for owner, name in patched:
        assert hasattr(getattr(owner, name), "__wrapped__"), f"{owner.__name__}.{name} is not hooked"
    # moto internals the hooks read
    from moto.s3.models import FakeKey

    assert {"_value_buffer", "_etag", "lock"} <= set(vars(FakeKey("k", b"v", account_id="1", region_name="us-east-1")))


# --- concurrency -------------------------------------------------------------------------------------

THREADS = 24


@pytest.mark.slow
def test_concurrent_conditional_updates_have_exactly_one_winner_per_version(plane: Plane) -> None:
    key = {"pk": {"S": "RACE"}, "sk": {"S": "JOB"}}
    plane.client("dynamodb").put_item(TableName=JOBS, Item={**key, "version": {"N": "0"}, "winners": {"L": []}})
    clients = [plane.client("dynamodb", max_pool_connections=2) for _ in range(THREADS)]
    start = threading.Barrier(THREADS)
    wins: list[tuple[int, int]] = []
    first_round: list[bool] = [False] * THREADS

    def update(ddb: Any, me: int, version: int) -> bool:
        try:
            ddb.update_item(
                TableName=JOBS,
                Key=key,
                UpdateExpression="SET version = :next, winners = list_append(winners, :me)",
                ConditionExpression="version = :v",
                ExpressionAttributeValues={":v": {"N": str(version)}, ":next": {"N": str(version + 1)}, ":me": {"L": [{"N": str(me)}]}},
            )
        except ClientError as exc:
            assert exc.response["Error"]["Code"] == "ConditionalCheckFailedException"
            return False
        wins.append((me, version))
        return True

    def contender(me: int) -> None:
        ddb = clients[me]
        start.wait()
        # Round 1: everyone at once on version 0.
        first_round[me] = update(ddb, me, 0)
        # Round 2: everyone keeps trying (read, conditional write) until it has won once more.
        while True:
            current = int(ddb.get_item(TableName=JOBS, Key=key, ConsistentRead=True)["Item"]["version"]["N"])
            if update(ddb, me, current):
                return

    # Given 24 writers racing conditional updates over HTTP
    threads = [threading.Thread(target=contender, args=(n,)) for n in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)

    # Then exactly one won the first race, and every version had exactly one winner
    assert sum(first_round) == 1
    versions = sorted(v for _, v in wins)
    assert versions == list(range(THREADS + 1))
    # And no write was lost: the item records every winner, in version order
    item = plane.client("dynamodb").get_item(TableName=JOBS, Key=key, ConsistentRead=True)["Item"]
    assert int(item["version"]["N"]) == THREADS + 1
    assert [int(w["N"]) for w in item["winners"]["L"]] == [me for me, _ in sorted(wins, key=lambda w: w[1])]
    # And the journal tells the same story after a restart
    plane.restart()
    assert plane.client("dynamodb").get_item(TableName=JOBS, Key=key, ConsistentRead=True)["Item"] == item


def test_a_cancelled_transaction_changes_nothing(plane: Plane) -> None:
    # moto's own rollback (a deep copy of every table per transaction) is replaced by an item-level
    # undo log (moto_hooks); this is the behaviour it must keep.
    ddb = plane.client("dynamodb")
    # Given a few items, one of them with a range of attribute types
    ddb.put_item(TableName=JOBS, Item=job_item("j1", "alice", doc={"M": {"a": {"L": [{"N": "1"}]}}}))
    ddb.put_item(TableName=JOBS, Item=job_item("j2", "alice"))
    ddb.put_item(TableName=constants.IDEMPOTENCY_TABLE, Item={"id": {"S": "idem"}, "n": {"N": "1"}})
    before = (table_snapshot(ddb), table_snapshot(ddb, constants.IDEMPOTENCY_TABLE))
    # When a transaction puts, updates (in place), deletes, and then fails its last condition
    j1, j2 = ({"pk": {"S": f"JOB#{j}"}, "sk": {"S": "JOB"}} for j in ("j1", "j2"))
    idem = {"id": {"S": "idem"}}
    missing = {"pk": {"S": "JOB#none"}, "sk": {"S": "JOB"}}
    in_place = {"UpdateExpression": "SET doc.a[0] = :x, version = :x", "ExpressionAttributeValues": {":x": {"N": "7"}}}
    with pytest.raises(ClientError, match="TransactionCanceled"):
        ddb.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": JOBS, "Item": job_item("j3", "bob")}},
                {"Update": {"TableName": JOBS, "Key": j1, **in_place}},
                {"Delete": {"TableName": JOBS, "Key": j2}},
                {
                    "Update": {
                        "TableName": constants.IDEMPOTENCY_TABLE,
                        "Key": idem,
                        "UpdateExpression": "ADD n :one",
                        "ExpressionAttributeValues": {":one": {"N": "1"}},
                    }
                },
                {"ConditionCheck": {"TableName": JOBS, "Key": missing, "ConditionExpression": "attribute_exists(pk)"}},
            ]
        )
    # Then every table is exactly as it was, and so is the journal after a restart
    assert (table_snapshot(ddb), table_snapshot(ddb, constants.IDEMPOTENCY_TABLE)) == before
    plane.restart()
    ddb = plane.client("dynamodb")
    assert (table_snapshot(ddb), table_snapshot(ddb, constants.IDEMPOTENCY_TABLE)) == before
    # And a successful transaction still commits all of its writes
    ddb.transact_write_items(
        TransactItems=[{"Put": {"TableName": JOBS, "Item": job_item("j3", "bob")}}, {"Delete": {"TableName": JOBS, "Key": j2}}]
    )
    assert by_owner(ddb, "bob") == ["JOB#j3"] and by_owner(ddb, "alice") == ["JOB#j1"]


def test_a_long_session_compacts_the_journal_while_serving(tmp_path: Path) -> None:
    # Given a journal with a small compaction threshold, and one item rewritten many times (progress
    # updates do that), beside an object body
    journal = Journal(tmp_path, compact_over_bytes=4096)
    blob, size = journal.put_blob(iter([b"body"]))
    journal.append([{"op": "s3.put", "account": "1", "bucket": "b", "key": "k", "blob": blob, "size": size, "etag": '"x"',
                     "metadata": {}, "last_modified": "2026-01-01T00:00:00", "storage_class": "STANDARD"}])  # fmt: skip
    key = {"pk": {"S": "JOB#1"}, "sk": {"S": "JOB"}}
    for n in range(500):
        journal.append([{"op": "ddb.put", "account": "1", "region": "r", "table": "t", "key": key, "item": {**key, "n": {"N": str(n)}}}])
    # Then the file never grew far past the threshold, nothing was lost, and the body is still there
    assert journal.path.stat().st_size < 2 * 4096
    journal.close()
    state = Journal(tmp_path).fold()
    (table,) = state.tables.values()
    assert [op["item"]["n"]["N"] for op in table.items.values()] == ["499"]
    (bucket,) = state.buckets.values()
    assert journal.read_blob(bucket.objects["k"]["blob"]) == b"body"


def test_an_item_that_no_longer_fits_its_table_stops_the_start_loudly(plane: Plane) -> None:
    # Given a journaled item whose key no longer matches the table's definition (a changed schema)
    plane.client("dynamodb").put_item(TableName=JOBS, Item=job_item("j1", "alice"))
    plane.journal.append(  # type: ignore[union-attr]
        [{"op": "ddb.put", "account": constants.LOCAL_ACCOUNT_ID, "region": constants.LOCAL_REGION, "table": JOBS,
          "key": {"pk": {"N": "1"}}, "item": {"pk": {"N": "1"}, "sk": {"S": "x"}}}]
    )  # fmt: skip
    # When local mode restarts, then it refuses to start without it, naming the item and the way out
    with pytest.raises(RuntimeError, match=r"cannot restore item .* into table trainplane-jobs .* Move the state dir aside"):
        plane.restart()
