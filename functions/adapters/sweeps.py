"""Sweeps and their trials in the jobs table (single-table design, TABLE_DESIGN.md), Query only, never Scan.

- Sweep: pk `SWEEP#<id>`, sk `META`; `doc` (the Sweep as compact JSON), native `status`, `version`;
  by-owner GSI `gsi1pk=SWEEPOWNER#<owner>` (its own prefix: jobs, policies and sweeps never share a
  listing), `gsi1sk=<created>#<id>`; by-created GSI `gsi2pk=SWEEPS` (admins; the sweep reconciler).
- A trial in flight (claimed, running): pk `SWEEP#<id>`, sk `TRIAL#<number:05>`; `doc` (the Trial as
  JSON: params, state, job, Optuna's system attributes), `version`, and `iv`, a native map step ->
  metric value, written by the trainer-event hook with one `SET iv.#step` (no read, no lost update, a
  resumed attempt that reports a step again overwrites it: a preempted trial counts once), on the
  condition that the reporting job is the trial's (`job_id`, a native copy of the doc's job id, set with
  it: no other job, whatever its labels, writes a trial's values).
- Ended trials, folded into blocks: sk `DONE#<number // 50:04>`, one attribute `t<number>` per ended
  trial of the block (the whole Trial, intermediate values included, as compact JSON). A trial that
  ends is moved there by one transaction that deletes its `TRIAL#` item (if its version and its number
  of reported steps are still those the decision read) and sets its attribute (if not yet set). So a
  sweep of 1,000 ended trials is ~20 items, not 1,000: a decision reads the sweep's partition in one
  or two pages (docs/BENCHMARKS.md). An ended trial too large for its share of a block (over
  ENTRY_MAX_BYTES: hundreds of reported steps) keeps an item of its own, sk `ENDED#<number:05>`, and
  its block attribute says "apart". (Items of the layout before the blocks, ended `TRIAL#` items, are
  read as they are.)

Every decision is a conditional write: a sweep's status/best on `version`; a new trial N by a
transaction that checks the sweep is RUNNING, that no `TRIAL#N` item exists and that N's block has
no `tN` (two concurrent decisions cannot both create trial N, even when one of them read before N
ended and was folded); a trial's state on its `version`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from typing import Any, Literal

from functions import constants as c
from functions.adapters import dynamodb_batch as batch
from functions.adapters import dynamodb_items as items
from functions.adapters import outbox
from functions.adapters.aws import AwsClients
from functions.catalog import own_events as et
from functions.errors import InvalidRequest, SweepNotFound, TooLarge
from schemas.configs import STORED
from schemas.sweeps import SWEEP_TERMINAL, TRIAL_ENDED, Sweep, SweepStatus, Trial

logger = logging.getLogger(__name__)

SWEEP_PREFIX = "SWEEP#"
TRIAL_PREFIX = "TRIAL#"
DONE_PREFIX = "DONE#"
ENDED_PREFIX = "ENDED#"
BLOCK = 50  # ended trials per DONE# item
ENTRY_MAX_BYTES = 7000  # an ended trial's share of its block (50 x 7,000 B < DynamoDB's 400 KB item limit)
JOB_ATTR = "job_id"  # a trial item's job, native: the condition of record_value
APART = "apart"  # a block's entry for a trial kept in an ENDED# item of its own
_LOAD_ATTEMPTS = 5
OWNER_PREFIX = "SWEEPOWNER#"
ALL_SWEEPS = "SWEEPS"


def _meta_key(sweep_id: str) -> dict[str, Any]:
    return {c.PK: {"S": SWEEP_PREFIX + sweep_id}, c.SK: {"S": items.META}}


def _trial_key(sweep_id: str, number: int) -> dict[str, Any]:
    return {c.PK: {"S": SWEEP_PREFIX + sweep_id}, c.SK: {"S": f"{TRIAL_PREFIX}{number:05d}"}}


def _block_key(sweep_id: str, number: int) -> dict[str, Any]:
    return {c.PK: {"S": SWEEP_PREFIX + sweep_id}, c.SK: {"S": f"{DONE_PREFIX}{number // BLOCK:04d}"}}


def _ended_key(sweep_id: str, number: int) -> dict[str, Any]:
    return {c.PK: {"S": SWEEP_PREFIX + sweep_id}, c.SK: {"S": f"{ENDED_PREFIX}{number:05d}"}}


def _entry_attr(number: int) -> str:
    return f"t{number}"


def _doc(model: Sweep) -> str:
    # Secrets kept (the template's hub token is stored, as a job's is; the API masks it). The version is the
    # item's own `version` attribute (the conditions test it, `_sweep` reads it), not part of the doc.
    return model.model_dump_json(exclude={"trials", "counts", "version"}, round_trip=True, context={"reveal_secrets": True})


def _trial_doc(trial: Trial) -> str:
    return json.dumps(_trial_data(trial), separators=(",", ":"))


def _trial_data(trial: Trial) -> dict[str, Any]:
    data = trial.model_dump(mode="json", exclude={"intermediate_values", "version"})
    data["system_attrs"] = trial.system_attrs
    data["prune_requested"] = trial.prune_requested
    return data


def _entry(trial: Trial, version: int) -> str:
    """An ended trial as its block keeps it: everything, intermediate values and version included."""
    data = _trial_data(trial)
    data["version"] = version
    data["iv"] = {str(step): value for step, value in trial.intermediate_values.items()}
    return json.dumps(data, separators=(",", ":"))


class DynamoSweepRepository:
    def __init__(self, clients: AwsClients, table_name: str = c.JOBS_TABLE, *, dashboard_url: str | None = None) -> None:
        self._clients = clients
        self.table = table_name
        self._dashboard_url = dashboard_url  # events link to the sweep's page there

    @property
    def _ddb(self) -> Any:
        return self._clients.dynamodb()

    # --- sweeps ----------------------------------------------------------------------------------

    def create(self, sweep: Sweep) -> None:
        created = f"{items.time_key(sweep.created_at)}#{sweep.sweep_id}"
        doc = _doc(sweep)
        if len(doc.encode()) > items.SUBMITTED_JOB_MAX_BYTES:
            # Its template becomes every trial's job, whose request may take at most that much of an item.
            raise TooLarge(
                "body",
                f"the sweep takes {len(doc.encode()):,} bytes as stored; a sweep may take at most "
                f"{items.SUBMITTED_JOB_MAX_BYTES:,} bytes (DynamoDB's item limit is {items.MAX_ITEM_BYTES:,} bytes)",
            )
        item = {
            **_meta_key(sweep.sweep_id),
            "doc": {"S": doc},
            "status": {"S": sweep.status.value},
            "version": {"N": str(sweep.version)},
            c.GSI_OWNER_PK: {"S": OWNER_PREFIX + sweep.owner},
            c.GSI_OWNER_SK: {"S": created},
            c.GSI_ALL_PK: {"S": ALL_SWEEPS},
            c.GSI_ALL_SK: {"S": created},
            "entity": {"S": "SWEEP"},
            outbox.SEQ_ATTR: {"N": "1"},
        }
        # The sweep and its first event (sequence 1) in one transaction (functions/adapters/outbox.py).
        detail = outbox.sweep_state_detail(sweep, None, sequence=1, at=sweep.created_at, dashboard_url=self._dashboard_url)
        writes = [
            {"Put": {"TableName": self.table, "Item": item, "ConditionExpression": "attribute_not_exists(pk)"}},
            {"Put": {"TableName": self.table, "Item": outbox.outbox_item(et.SWEEP_STATE_CHANGE, et.SUBJECT_SWEEP, sweep.sweep_id, detail)}},
        ]
        self._ddb.transact_write_items(TransactItems=writes)

    def get(self, sweep_id: str) -> Sweep:
        item = self._ddb.get_item(TableName=self.table, Key=_meta_key(sweep_id), ConsistentRead=True).get("Item")
        if item is None:
            raise SweepNotFound(sweep_id)
        return _sweep(item)

    def load(self, sweep_id: str) -> tuple[Sweep, list[Trial]]:
        """The sweep and all its trials, read consistently (a Query of its partition: the sweep, the
        blocks of ended trials, the trials in flight).

        A Query is not isolated from a transaction that moves a trial into its block (DynamoDB reads
        each item committed, not the partition as of one instant): a page may miss the moved trial
        (read again) or hold it twice (the ended copy wins)."""
        for _ in range(_LOAD_ATTEMPTS):
            sweep, trials = self._read(sweep_id)
            if [t.number for t in trials] == list(range(len(trials))):
                return sweep, trials
        logger.warning("sweep %s: its trials are not numbered 0..%d as read", sweep_id, len(trials) - 1)
        return sweep, trials

    def _read(self, sweep_id: str) -> tuple[Sweep, list[Trial]]:
        sweep: Sweep | None = None
        trials: dict[int, Trial] = {}
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": {"S": SWEEP_PREFIX + sweep_id}},
            "ConsistentRead": True,
        }
        while True:
            page = self._ddb.query(**kwargs)
            for item in page.get("Items", []):
                sk = item[c.SK]["S"]
                if sk == items.META:
                    sweep = _sweep(item)
                elif sk.startswith(DONE_PREFIX):
                    for attr, value in item.items():
                        if attr[:1] == "t" and attr[1:].isdigit() and value.get("S", APART) != APART:
                            trial = _from_entry(value["S"])
                            trials[trial.number] = trial
                elif sk.startswith(ENDED_PREFIX):
                    trial = _from_entry(item["doc"]["S"])
                    trials[trial.number] = trial
                elif sk.startswith(TRIAL_PREFIX):
                    trial = _trial(item)
                    if trial.number not in trials or trials[trial.number].state not in TRIAL_ENDED:
                        trials[trial.number] = trial
            if "LastEvaluatedKey" not in page:
                break
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        if sweep is None:
            raise SweepNotFound(sweep_id)
        return sweep, [trials[n] for n in sorted(trials)]

    def list_sweeps(self, owner: str | None, limit: int, next_token: str | None) -> tuple[list[Sweep], str | None]:
        if not 1 <= limit <= 1000:
            raise InvalidRequest("limit", "must be between 1 and 1000")
        index, pk_attr, sk_attr, pk_value = _listing(owner)
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "IndexName": index,
            "KeyConditionExpression": "#ipk = :ipk",
            "ExpressionAttributeNames": {"#ipk": pk_attr},
            "ExpressionAttributeValues": {":ipk": {"S": pk_value}},
            "ScanIndexForward": False,
            "Limit": limit,
        }
        if next_token:
            kwargs["ExclusiveStartKey"] = items.decode_key_token(next_token, pk_attr, sk_attr, pk_value)
        page = self._ddb.query(**kwargs)
        last = page.get("LastEvaluatedKey")
        return [_sweep(r) for r in page.get("Items", [])], items.encode_key_token(last) if last else None

    def active_sweep_ids(self) -> Iterator[str]:
        """Every sweep not yet ended (RUNNING or PAUSED): what the reconciler wakes."""
        index, pk_attr, _, pk_value = _listing(None)
        ended = [s.value for s in SWEEP_TERMINAL]
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "IndexName": index,
            "KeyConditionExpression": "#ipk = :ipk",
            "FilterExpression": "NOT #st IN (" + ", ".join(f":e{i}" for i in range(len(ended))) + ")",
            "ExpressionAttributeNames": {"#ipk": pk_attr, "#st": "status"},
            "ExpressionAttributeValues": {":ipk": {"S": pk_value}, **{f":e{i}": {"S": v} for i, v in enumerate(ended)}},
            "ProjectionExpression": "pk",
        }
        while True:
            page = self._ddb.query(**kwargs)
            for row in page.get("Items", []):
                yield row[c.PK]["S"].removeprefix(SWEEP_PREFIX)
            if "LastEvaluatedKey" not in page:
                return
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def update(self, sweep: Sweep, expected_version: int) -> bool:
        """Write `sweep` (its version + 1) if the stored one is still `expected_version`; False if not.
        A change of status writes its event in the same transaction (the version guards the sequence:
        every write that numbers an event also bumps the version)."""
        stored_item = self._ddb.get_item(TableName=self.table, Key=_meta_key(sweep.sweep_id), ConsistentRead=True).get("Item")
        if stored_item is None or int(stored_item["version"]["N"]) != expected_version:
            return False
        update: dict[str, Any] = {
            "TableName": self.table,
            "Key": _meta_key(sweep.sweep_id),
            "UpdateExpression": "SET #doc = :doc, #st = :st, #v = :new",
            "ConditionExpression": "#v = :expected",
            "ExpressionAttributeNames": {"#doc": "doc", "#st": "status", "#v": "version"},
            "ExpressionAttributeValues": {
                ":doc": {"S": _doc(sweep)},
                ":st": {"S": sweep.status.value},
                ":new": {"N": str(expected_version + 1)},
                ":expected": {"N": str(expected_version)},
            },
        }
        previous = SweepStatus(stored_item["status"]["S"])
        if previous == sweep.status:
            try:
                self._ddb.update_item(**update)
            except self._ddb.exceptions.ConditionalCheckFailedException:
                return False
            return True
        seq = outbox.stored_seq(stored_item) + 1
        update["UpdateExpression"] += ", #eseq = :eseq"
        update["ExpressionAttributeNames"]["#eseq"] = outbox.SEQ_ATTR
        update["ExpressionAttributeValues"][":eseq"] = {"N": str(seq)}
        detail = outbox.sweep_state_detail(sweep, previous, sequence=seq, at=sweep.updated_at, dashboard_url=self._dashboard_url)
        writes = [
            {"Update": update},
            {"Put": {"TableName": self.table, "Item": outbox.outbox_item(et.SWEEP_STATE_CHANGE, et.SUBJECT_SWEEP, sweep.sweep_id, detail)}},
        ]
        try:
            self._ddb.transact_write_items(TransactItems=writes)
        except self._ddb.exceptions.TransactionCanceledException as exc:
            if (exc.response.get("CancellationReasons") or [{}])[0].get("Code") == "ConditionalCheckFailed":
                return False
            raise
        return True

    def delete(self, sweep_id: str, expected_version: int) -> bool:
        try:
            self._ddb.delete_item(
                TableName=self.table,
                Key=_meta_key(sweep_id),
                ConditionExpression="#v = :expected",
                ExpressionAttributeNames={"#v": "version"},
                ExpressionAttributeValues={":expected": {"N": str(expected_version)}},
            )
        except self._ddb.exceptions.ConditionalCheckFailedException:
            return False
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": {"S": SWEEP_PREFIX + sweep_id}},
            "ProjectionExpression": "pk, sk",
        }
        while True:
            page = self._ddb.query(**kwargs)
            keys = [{c.PK: r[c.PK], c.SK: r[c.SK]} for r in page.get("Items", [])]
            batch.delete_keys(self._ddb, self.table, keys, f"sweep {sweep_id}")
            if "LastEvaluatedKey" not in page:
                return True
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    # --- trials ----------------------------------------------------------------------------------

    def claim_trial(self, sweep_id: str, trial: Trial) -> Literal["claimed", "taken", "not_running"]:
        """Create trial N while the sweep is RUNNING, in one transaction: "taken" when another decision
        created it first (its TRIAL# item exists, or it already ended and sits in its block),
        "not_running" when the sweep was paused or ended meanwhile."""
        item = {
            **_trial_key(sweep_id, trial.number),
            "doc": {"S": _trial_doc(trial)},
            "version": {"N": str(trial.version)},
            "iv": {"M": {}},
            "entity": {"S": "TRIAL"},
        }
        writes = [
            {
                "ConditionCheck": {
                    "TableName": self.table,
                    "Key": _meta_key(sweep_id),
                    "ConditionExpression": "#st = :running",
                    "ExpressionAttributeNames": {"#st": "status"},
                    "ExpressionAttributeValues": {":running": {"S": SweepStatus.RUNNING.value}},
                }
            },
            {"Put": {"TableName": self.table, "Item": item, "ConditionExpression": "attribute_not_exists(pk)"}},
            {
                "ConditionCheck": {
                    "TableName": self.table,
                    "Key": _block_key(sweep_id, trial.number),
                    "ConditionExpression": "attribute_not_exists(#t)",
                    "ExpressionAttributeNames": {"#t": _entry_attr(trial.number)},
                }
            },
        ]
        try:
            self._ddb.transact_write_items(TransactItems=writes)
        except self._ddb.exceptions.TransactionCanceledException as exc:
            reasons = exc.response.get("CancellationReasons") or []
            codes = [r.get("Code") for r in reasons]
            if codes and codes[0] == "ConditionalCheckFailed":
                return "not_running"
            if "ConditionalCheckFailed" in codes[1:]:
                return "taken"
            raise
        return "claimed"

    def update_trial(self, sweep_id: str, trial: Trial, expected_version: int) -> bool:
        """Write the trial's doc (never its reported values) if its version is still `expected_version`;
        a trial that ended is moved into its block (`end_trial`)."""
        if trial.state in TRIAL_ENDED:
            return self.end_trial(sweep_id, trial, expected_version)
        values: dict[str, Any] = {
            ":doc": {"S": _trial_doc(trial)},
            ":new": {"N": str(expected_version + 1)},
            ":expected": {"N": str(expected_version)},
        }
        update = "SET #doc = :doc, #v = :new"
        if trial.job_id is not None:
            update += ", #job = :job"  # what record_value's condition compares with
            values[":job"] = {"S": trial.job_id}
        try:
            self._ddb.update_item(
                TableName=self.table,
                Key=_trial_key(sweep_id, trial.number),
                UpdateExpression=update,
                ConditionExpression="#v = :expected",
                ExpressionAttributeNames={"#doc": "doc", "#v": "version", **({"#job": JOB_ATTR} if trial.job_id is not None else {})},
                ExpressionAttributeValues=values,
            )
        except self._ddb.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def end_trial(self, sweep_id: str, trial: Trial, expected_version: int) -> bool:
        """Move an ended trial into its block, in one transaction: its TRIAL# item is deleted if its version
        is still `expected_version` and it holds exactly the steps `trial` holds (a value reported since
        the decision read it refuses the move: the decision reads again), and its block entry is set if
        not set yet. False when either condition failed."""
        entry = _entry(trial, expected_version + 1)
        apart = len(entry.encode()) > ENTRY_MAX_BYTES
        writes: list[dict[str, Any]] = [
            {
                "Delete": {
                    "TableName": self.table,
                    "Key": _trial_key(sweep_id, trial.number),
                    "ConditionExpression": "#v = :expected AND (size(#iv) = :steps OR attribute_not_exists(#iv))",
                    "ExpressionAttributeNames": {"#v": "version", "#iv": "iv"},
                    "ExpressionAttributeValues": {
                        ":expected": {"N": str(expected_version)},
                        ":steps": {"N": str(len(trial.intermediate_values))},
                    },
                }
            },
            {
                "Update": {
                    "TableName": self.table,
                    "Key": _block_key(sweep_id, trial.number),
                    "UpdateExpression": "SET #t = :entry, #e = :block",
                    "ConditionExpression": "attribute_not_exists(#t)",
                    "ExpressionAttributeNames": {"#t": _entry_attr(trial.number), "#e": "entity"},
                    "ExpressionAttributeValues": {":entry": {"S": APART if apart else entry}, ":block": {"S": "TRIAL_BLOCK"}},
                }
            },
        ]
        if apart:
            item = {**_ended_key(sweep_id, trial.number), "doc": {"S": entry}, "entity": {"S": "TRIAL"}}
            writes.append({"Put": {"TableName": self.table, "Item": item, "ConditionExpression": "attribute_not_exists(pk)"}})
        try:
            self._ddb.transact_write_items(TransactItems=writes)
        except self._ddb.exceptions.TransactionCanceledException as exc:
            codes = [r.get("Code") for r in exc.response.get("CancellationReasons") or []]
            if "ConditionalCheckFailed" in codes:
                return False
            raise
        return True

    def record_value(self, sweep_id: str, number: int, job_id: str, step: int, value: float) -> bool:
        """The metric at `step` of trial `number`, reported by `job_id` (overwrites: a resumed attempt
        reporting it again counts once). False, and nothing written, unless `job_id` is the trial's job:
        a condition of the write, not a read before it. A trial written before the native `job_id`
        existed names its job in its doc only (compact JSON: the exact `"job_id":"<id>"`)."""
        try:
            self._ddb.update_item(
                TableName=self.table,
                Key=_trial_key(sweep_id, number),
                UpdateExpression="SET iv.#s = :v",
                ConditionExpression="#job = :job OR (attribute_not_exists(#job) AND contains(#doc, :in_doc))",
                ExpressionAttributeNames={"#s": str(step), "#job": JOB_ATTR, "#doc": "doc"},
                ExpressionAttributeValues={
                    ":v": {"N": repr(float(value))},
                    ":job": {"S": job_id},
                    ":in_doc": {"S": json.dumps({"job_id": job_id}, separators=(",", ":"))[1:-1]},
                },
            )
        except self._ddb.exceptions.ConditionalCheckFailedException:
            return False
        return True


def _sweep(item: Mapping[str, Any]) -> Sweep:
    # As stored: the submit-time rules (trainer hyperparameters...) are not applied again on read.
    sweep = Sweep.model_validate_json(item["doc"]["S"], context=STORED)
    return sweep.model_copy(update={"version": int(item["version"]["N"])})


def _trial(item: Mapping[str, Any]) -> Trial:
    data = json.loads(item["doc"]["S"])
    data["version"] = int(item["version"]["N"])
    data["intermediate_values"] = {int(k): float(v["N"]) for k, v in item.get("iv", {}).get("M", {}).items()}
    return Trial.model_validate(data)


def _from_entry(text: str) -> Trial:
    data = json.loads(text)
    data["intermediate_values"] = {int(k): float(v) for k, v in data.pop("iv", {}).items()}
    return Trial.model_validate(data)


def _listing(owner: str | None) -> tuple[str, str, str, str]:
    if owner is None:
        return c.GSI_ALL, c.GSI_ALL_PK, c.GSI_ALL_SK, ALL_SWEEPS
    return c.GSI_OWNER, c.GSI_OWNER_PK, c.GSI_OWNER_SK, OWNER_PREFIX + owner
