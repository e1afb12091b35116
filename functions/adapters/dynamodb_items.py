"""How jobs, history entries and counters look as DynamoDB items (TABLE_DESIGN.md), and the tables.

Kept apart from the repository so that local mode, the CDK stack and the tests build the very same
tables from `jobs_table_definition()` and read the same key formats.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from functions import constants as c
from functions.catalog import page_tokens
from functions.catalog.gpu_types import gpu_type_of
from functions.errors import InvalidRequest
from schemas.configs import STORED
from schemas.job import Job, StatusEvent
from schemas.status import JobStatus
from schemas.teams import DEFAULT_TEAM

JOB_PREFIX = "JOB#"
META = "META"
EVENT_PREFIX = "EVENT#"
OWNER_PREFIX = "OWNER#"
QUEUE_PREFIX = "QUEUE#"
TEAM_QUEUE_PREFIX = "TEAMQUEUE#"  # + <team>#<gpu type> (team names have no '#')
ALL_JOBS = "JOBS"
COUNTS_SK = "COUNTS"
CLAIM_PREFIX = "CLAIM#"
CLAIM_SK = "CLAIM"
COUNTS_OWNER_PREFIX = "COUNTS#OWNER#"
COUNTS_ALL_PREFIX = "COUNTS#ALL#"
# The global counter is split over shards so that concurrent transitions of different jobs rarely
# touch the same item (two transactions on one item conflict: TransactionConflict).
COUNTER_SHARDS = 8
MAX_PRIORITY = 10

# Maps kept as native DynamoDB maps because list filters look inside them (labels.<k>, scheduling_config.queue).
NATIVE_FIELDS = frozenset({"labels", "scheduling_config"})

KEY_ATTRS = frozenset({c.PK, c.SK, *(a for pair in c.GSIS.values() for a in pair), "entity"})


def time_key(at: datetime) -> str:
    """Fixed-width UTC timestamp: sorts as a string exactly as it sorts as a time."""
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def job_pk(job_id: str) -> str:
    return JOB_PREFIX + job_id


def owner_pk(owner: str) -> str:
    return OWNER_PREFIX + owner


def queue_pk(queue: str) -> str:
    return QUEUE_PREFIX + queue


def team_queue_pk(team: str, gpu_type: str) -> str:
    return f"{TEAM_QUEUE_PREFIX}{team}#{gpu_type}"


def created_sk(job: Job) -> str:
    return f"{time_key(job.created_at)}#{job.job_id}"


def queue_sk(job: Job) -> str:
    # Priority descending first (10 -> "00"), then submission time ascending, then the id as tiebreak.
    return f"{MAX_PRIORITY - job.priority:02d}#{created_sk(job)}"


def claim_key(key: str) -> dict[str, Any]:
    """The item of a NameClaim (one live job per name: POST /train's run_id)."""
    return {c.PK: {"S": CLAIM_PREFIX + key}, c.SK: {"S": CLAIM_SK}}


def owner_counter_key(owner: str) -> dict[str, Any]:
    return {c.PK: {"S": COUNTS_OWNER_PREFIX + owner}, c.SK: {"S": COUNTS_SK}}


def counter_keys(owner: str, job_id: str) -> list[dict[str, Any]]:
    """The owner's counter item and the global shard this job counts in."""
    shard = int(hashlib.sha256(job_id.encode()).hexdigest(), 16) % COUNTER_SHARDS
    return [owner_counter_key(owner), {c.PK: {"S": f"{COUNTS_ALL_PREFIX}{shard}"}, c.SK: {"S": COUNTS_SK}}]


def all_counter_keys() -> list[dict[str, Any]]:
    return [{c.PK: {"S": f"{COUNTS_ALL_PREFIX}{i}"}, c.SK: {"S": COUNTS_SK}} for i in range(COUNTER_SHARDS)]


# --- attribute values ----------------------------------------------------------------------------


def _json_safe(document: Any) -> Any:
    # DynamoDB numbers are Decimals; NaN/Infinity (a diverged loss) cannot be stored and become null.
    return json.loads(json.dumps(document), parse_float=Decimal, parse_constant=lambda _: None)


def _finite(document: Any) -> Any:
    # Packed documents stay JSON: floats stay floats (a Decimal there would be written as a string by
    # json.dumps and come back as text); only NaN/Infinity, which JSON cannot hold, become null.
    return json.loads(json.dumps(document), parse_constant=lambda _: None)


def _serializer() -> Any:
    from boto3.dynamodb.types import TypeSerializer

    return TypeSerializer()


def _deserializer() -> Any:
    from boto3.dynamodb.types import TypeDeserializer

    return TypeDeserializer()


def to_attr(value: Any) -> dict[str, Any]:
    """A JSON-compatible Python value as a DynamoDB attribute value."""
    return _serializer().serialize(_json_safe(value))


def packed_attr(value: Any) -> dict[str, Any]:
    """A document as one Binary attribute holding its compact JSON (see field_attr)."""
    return {"B": json.dumps(value, separators=(",", ":"), sort_keys=True, allow_nan=False, default=str).encode()}


def field_attr(name: str, value: Any) -> dict[str, Any]:
    """A job field's attribute: scalars and the filterable maps natively, other documents packed.

    A job's configs, checkpoints and progress would be a few hundred nested attribute values; packed
    they are one. Nothing queries inside them, and it keeps every read and write cheap (moto in
    local mode serializes each nested value on every GetItem: ~60 ms per job unpacked, ~2 ms packed).
    """
    if isinstance(value, dict | list) and name not in NATIVE_FIELDS:
        return packed_attr(_finite(value))
    return to_attr(value)


def from_item(item: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _unpacked(v) if "B" in v else _native(v) for k, v in item.items()}


def _native(value: Mapping[str, Any]) -> Any:
    """An attribute value as plain Python: what _plain(TypeDeserializer().deserialize(value)) gives.

    Written out for the kinds a job item holds (every GET of a job decodes ~30 of them); the rest
    (sets, decimals with a fraction or exponent, anything unexpected) take boto3's deserializer.
    """
    if len(value) == 1:
        ((kind, raw),) = value.items()
        if kind == "S":
            return raw
        if kind == "N" and _is_plain_integer(raw):
            return int(raw)
        if kind == "BOOL":
            return raw
        if kind == "NULL":
            return None
        if kind == "M":
            return {k: _native(v) for k, v in raw.items()}
        if kind == "L":
            return [_native(v) for v in raw]
    return _plain(_deserializer().deserialize(value))


def _is_plain_integer(raw: Any) -> bool:
    # Digits only (an optional sign), within DynamoDB's 38 digits of precision: Decimal(raw) has a
    # zero exponent, so _plain would give int(raw) too.
    digits = raw[1:] if isinstance(raw, str) and raw[:1] == "-" else raw
    return isinstance(digits, str) and 0 < len(digits) <= 38 and digits.isascii() and digits.isdigit()


def _unpacked(value: Mapping[str, Any]) -> Any:
    raw = value["B"]
    return json.loads(raw.value if hasattr(raw, "value") else raw)


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        # A number written as 1.5 comes back a float, 3 an int (pydantic coerces either way per field).
        exponent = value.as_tuple().exponent
        return int(value) if isinstance(exponent, int) and exponent >= 0 else float(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | set | tuple):
        return [_plain(v) for v in value]
    return value


def job_document(job: Job) -> dict[str, Any]:
    """The job as stored: JSON mode, secrets revealed (hub_token must survive storage, never the API)."""
    return job.model_dump(mode="json", context={"reveal_secrets": True}, exclude_none=True)


def job_item(job: Job) -> dict[str, Any]:
    doc = job_document(job)
    item = {k: field_attr(k, v) for k, v in doc.items()}
    item.update(index_attrs(job))
    item[c.PK] = {"S": job_pk(job.job_id)}
    item[c.SK] = {"S": META}
    item["entity"] = {"S": "JOB"}
    return item


def index_attrs(job: Job) -> dict[str, dict[str, str]]:
    """The GSI key attributes of a job; the queue index is sparse (present only while QUEUED)."""
    attrs = {
        c.GSI_OWNER_PK: {"S": owner_pk(job.owner)},
        c.GSI_OWNER_SK: {"S": created_sk(job)},
        c.GSI_ALL_PK: {"S": ALL_JOBS},
        c.GSI_ALL_SK: {"S": created_sk(job)},
    }
    if job.status == JobStatus.QUEUED:
        attrs[c.GSI_QUEUE_PK] = {"S": queue_pk(job.queue)}
        attrs[c.GSI_QUEUE_SK] = {"S": queue_sk(job)}
        attrs[c.GSI_TEAM_QUEUE_PK] = {"S": team_queue_pk(job.team or DEFAULT_TEAM, gpu_type_of(job.resource_config))}
        attrs[c.GSI_TEAM_QUEUE_SK] = {"S": queue_sk(job)}
    return attrs


# DynamoDB refuses an item over 400 KB. What a caller submits may take at most this much of a job's
# item: the rest is kept for what its runs record later (up to MAX_CHECKPOINT_REFS checkpoint refs with
# their metrics, costs per attempt, progress, error messages), so that no later write hits the limit.
MAX_ITEM_BYTES = 400 * 1024
SUBMITTED_JOB_MAX_BYTES = 256 * 1024
# The job fields a caller writes (submit, PATCH); everything else is the control plane's bookkeeping.
SUBMITTED_FIELDS = frozenset(
    {"name", "description", "labels", "training_config", "data_config", "resource_config", "output_config", "scheduling_config"}
)


def item_size(item: Mapping[str, Any]) -> int:
    """An item's size as DynamoDB counts it against the 400 KB limit (attribute names + values)."""
    return sum(len(name.encode()) + _value_size(value) for name, value in item.items())


def _value_size(value: Mapping[str, Any]) -> int:
    ((kind, raw),) = value.items()
    if kind == "S":
        return len(raw.encode("utf-8", "surrogatepass"))
    if kind == "N":
        # Up to 38 significant digits, two per byte, plus one byte (DynamoDB's documented estimate).
        digits = len(raw.lstrip("-").replace(".", "").lstrip("0")) or 1
        return min(21, (digits + 1) // 2 + 1)
    if kind == "B":
        return len(raw.value if hasattr(raw, "value") else raw)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "M":
        return 3 + sum(1 + len(k.encode()) + _value_size(v) for k, v in raw.items())
    if kind == "L":
        return 3 + sum(1 + _value_size(v) for v in raw)
    if kind == "SS":
        return sum(len(v.encode()) for v in raw)
    if kind == "NS":
        return sum(_value_size({"N": v}) for v in raw)
    if kind == "BS":
        return sum(len(v) for v in raw)
    raise ValueError(f"not a DynamoDB attribute value: {kind}")


def submitted_size(item: Mapping[str, Any]) -> int:
    """The bytes of a job item that hold what its caller submitted (checked against SUBMITTED_JOB_MAX_BYTES)."""
    return item_size({name: value for name, value in item.items() if name in SUBMITTED_FIELDS})


def job_from_item(item: Mapping[str, Any]) -> Job:
    doc = {k: v for k, v in from_item(item).items() if k not in KEY_ATTRS}
    return Job.model_validate(doc, context=STORED)


def event_item(job_id: str, event: StatusEvent, seq: int) -> dict[str, Any]:
    doc = event.model_dump(mode="json", by_alias=True, exclude_none=True)
    item = {k: to_attr(v) for k, v in doc.items()}
    item[c.PK] = {"S": job_pk(job_id)}
    item[c.SK] = {"S": f"{EVENT_PREFIX}{time_key(event.at)}#{seq:09d}"}
    item["entity"] = {"S": "EVENT"}
    return item


def event_from_item(item: Mapping[str, Any]) -> StatusEvent:
    doc = {k: v for k, v in from_item(item).items() if k not in KEY_ATTRS}
    return StatusEvent.model_validate(doc)


# --- tables --------------------------------------------------------------------------------------


def jobs_table_definition(table_name: str = c.JOBS_TABLE) -> dict[str, Any]:
    """CreateTable arguments of the jobs table (local mode and tests; the CDK stack mirrors them)."""
    attrs = [c.PK, c.SK, *(a for pair in c.GSIS.values() for a in pair)]
    return {
        "TableName": table_name,
        "BillingMode": "PAY_PER_REQUEST",
        "AttributeDefinitions": [{"AttributeName": a, "AttributeType": "S"} for a in attrs],
        "KeySchema": [{"AttributeName": c.PK, "KeyType": "HASH"}, {"AttributeName": c.SK, "KeyType": "RANGE"}],
        "GlobalSecondaryIndexes": [
            {
                "IndexName": name,
                "KeySchema": [{"AttributeName": pk, "KeyType": "HASH"}, {"AttributeName": sk, "KeyType": "RANGE"}],
                "Projection": {"ProjectionType": "ALL"},
            }
            for name, (pk, sk) in c.GSIS.items()
        ],
    }


def idempotency_table_definition(table_name: str = c.IDEMPOTENCY_TABLE) -> dict[str, Any]:
    """Powertools' DynamoDBPersistenceLayer layout: partition key `id`, TTL on `expiration`."""
    return {
        "TableName": table_name,
        "BillingMode": "PAY_PER_REQUEST",
        "AttributeDefinitions": [{"AttributeName": c.IDEMPOTENCY_KEY_ATTR, "AttributeType": "S"}],
        "KeySchema": [{"AttributeName": c.IDEMPOTENCY_KEY_ATTR, "KeyType": "HASH"}],
    }


def add_missing_indexes(dynamodb_client: Any, jobs_table: str = c.JOBS_TABLE) -> None:
    """Add the GSIs a jobs table made by an older version lacks (a local state dir's journal replays the
    CreateTable it was made with): the scheduler's Query on a missing index would fail every pass."""
    definition = jobs_table_definition(jobs_table)
    table = dynamodb_client.describe_table(TableName=jobs_table)["Table"]
    have = {index["IndexName"] for index in table.get("GlobalSecondaryIndexes", [])}
    for index in definition["GlobalSecondaryIndexes"]:
        if index["IndexName"] not in have:
            keys = {k["AttributeName"] for k in index["KeySchema"]}
            dynamodb_client.update_table(
                TableName=jobs_table,
                AttributeDefinitions=[a for a in definition["AttributeDefinitions"] if a["AttributeName"] in keys],
                GlobalSecondaryIndexUpdates=[{"Create": index}],
            )


def create_tables(dynamodb_client: Any, jobs_table: str = c.JOBS_TABLE, idempotency_table: str = c.IDEMPOTENCY_TABLE) -> None:
    """Create both tables if missing (local mode, tests); the cloud stack creates them with CDK."""
    existing = set(dynamodb_client.list_tables().get("TableNames", []))
    if jobs_table not in existing:
        dynamodb_client.create_table(**jobs_table_definition(jobs_table))
    else:
        add_missing_indexes(dynamodb_client, jobs_table)
    if idempotency_table not in existing:
        dynamodb_client.create_table(**idempotency_table_definition(idempotency_table))
        dynamodb_client.update_time_to_live(
            TableName=idempotency_table,
            TimeToLiveSpecification={"Enabled": True, "AttributeName": c.IDEMPOTENCY_TTL_ATTR},
        )


def encode_key_token(key: Mapping[str, Any]) -> str:
    """A listing's next_token: its LastEvaluatedKey (string attributes only: the table's keys and an index's)."""
    return page_tokens.encode({k: v["S"] for k, v in key.items()})


def decode_key_token(token: str, pk_attr: str, sk_attr: str, pk_value: str) -> dict[str, Any]:
    """The ExclusiveStartKey of a token; refused unless it came from this very listing (same partition)."""
    plain = page_tokens.decode(token)
    if not isinstance(plain, dict) or plain.get(pk_attr) != pk_value or not all(isinstance(v, str) for v in plain.values()):
        raise InvalidRequest("next_token", "belongs to another listing (another caller or scope)")
    if set(plain) != {c.PK, c.SK, pk_attr, sk_attr}:
        raise InvalidRequest("next_token", page_tokens.NOT_OURS)
    return {k: {"S": v} for k, v in plain.items()}
