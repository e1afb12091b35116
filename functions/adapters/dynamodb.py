"""The JobRepository on one DynamoDB table (key design: TABLE_DESIGN.md). Query only, never Scan.

Every status change is one TransactWriteItems: the job's conditional update (status AND version,
checked against TRANSITIONS first), its history entry and the status counters. A lost race is a
ConcurrentModification, a move the table forbids an IllegalTransition; the stored item that made the
condition fail (ReturnValuesOnConditionCheckFailure) tells the two apart.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from functions import constants as c
from functions.adapters import dynamodb_batch as batch
from functions.adapters import dynamodb_items as items
from functions.adapters import dynamodb_listing as listing
from functions.adapters import outbox
from functions.adapters.aws import AwsClients
from functions.catalog import own_events as et
from functions.errors import ConcurrentModification, IllegalTransition, JobNotFound, NameTaken, TooLarge
from functions.service.ports import GpuIdle, JobQuery, NameClaim, Reclaim, Transition
from schemas.configs import STORED
from schemas.job import CheckpointRef, Job, Progress, StatusEvent
from schemas.status import TRANSITIONS, JobStatus, sources_of

# Fields a caller may not change through `changes`: they are the item's identity or owned by transition().
_PROTECTED = frozenset({"job_id", "owner", "status", "version", "created_at", "updated_at"})
_JOB_FIELDS = frozenset(Job.model_fields)
# A job item must stay under DynamoDB's 400 KB: keep at most this many checkpoint refs (newest
# first wins). The manifests on S3 remain the full record.
MAX_CHECKPOINT_REFS = 200
_TRANSACTION_ATTEMPTS = 6


def _utcnow() -> datetime:
    return datetime.now(UTC)


class DynamoJobRepository:
    def __init__(
        self,
        clients: AwsClients,
        table_name: str = c.JOBS_TABLE,
        *,
        clock: Callable[[], datetime] = _utcnow,
        dashboard_url: str | None = None,
    ) -> None:
        self._clients = clients
        self.table = table_name
        self._clock = clock
        self._dashboard_url = dashboard_url  # events link to the job's page there (functions/adapters/outbox.py)

    @property
    def _ddb(self) -> Any:
        return self._clients.dynamodb()

    # --- reads -----------------------------------------------------------------------------------

    def get(self, job_id: str) -> Job:
        item = self._get_item(job_id)
        if item is None:
            raise JobNotFound(job_id)
        return items.job_from_item(item)

    def get_many(self, job_ids: Iterable[str]) -> dict[str, Job]:
        # BatchGetItem: a pass reads every running holder, 100 a call instead of one GetItem each.
        keys = [{c.PK: {"S": items.job_pk(job_id)}, c.SK: {"S": items.META}} for job_id in dict.fromkeys(job_ids)]
        jobs = (items.job_from_item(row) for row in batch.get_keys(self._ddb, self.table, keys))
        return {job.job_id: job for job in jobs}

    def _get_item(self, job_id: str) -> dict[str, Any] | None:
        key = {c.PK: {"S": items.job_pk(job_id)}, c.SK: {"S": items.META}}
        return self._ddb.get_item(TableName=self.table, Key=key, ConsistentRead=True).get("Item")

    def history(self, job_id: str) -> list[StatusEvent]:
        rows = self._query_all(
            KeyConditionExpression="#pk = :pk AND begins_with(#sk, :ev)",
            ExpressionAttributeNames={"#pk": c.PK, "#sk": c.SK},
            ExpressionAttributeValues={":pk": {"S": items.job_pk(job_id)}, ":ev": {"S": items.EVENT_PREFIX}},
            ConsistentRead=True,
        )
        return [items.event_from_item(r) for r in rows]

    def queued(self, queue: str, limit: int = 100) -> list[Job]:
        # The sparse index holds only QUEUED jobs; it is eventually consistent, so the scheduler's
        # conditional transition (QUEUED at version v) remains the decision.
        rows = self._query_all(
            IndexName=c.GSI_QUEUE,
            KeyConditionExpression="#pk = :pk",
            ExpressionAttributeNames={"#pk": c.GSI_QUEUE_PK},
            ExpressionAttributeValues={":pk": {"S": items.queue_pk(queue)}},
            ScanIndexForward=True,
            max_items=limit,
        )
        return [items.job_from_item(r) for r in rows]

    def queued_of_team(self, team: str, gpu_type: str, limit: int = 100) -> list[Job]:
        # The per-team twin of by-queue (sparse too, eventually consistent too): a team's head is one Query
        # away however many other teams' jobs queue before it. A job queued before this index existed has no
        # key in it until its next write; the by-queue head still finds it.
        rows = self._query_all(
            IndexName=c.GSI_TEAM_QUEUE,
            KeyConditionExpression="#pk = :pk",
            ExpressionAttributeNames={"#pk": c.GSI_TEAM_QUEUE_PK},
            ExpressionAttributeValues={":pk": {"S": items.team_queue_pk(team, gpu_type)}},
            ScanIndexForward=True,
            max_items=limit,
        )
        return [items.job_from_item(r) for r in rows]

    def counts(self, owner: str | None) -> dict[JobStatus, int]:
        keys = [items.owner_counter_key(owner)] if owner is not None else items.all_counter_keys()
        rows = batch.get_keys(self._ddb, self.table, keys)
        totals = dict.fromkeys(JobStatus, 0)
        for row in rows:
            for status in JobStatus:
                if status.value in row:
                    totals[status] += int(row[status.value]["N"])
        return totals

    def list_jobs(self, query: JobQuery) -> tuple[list[Job], str | None]:
        return listing.list_jobs(self._ddb, self.table, query)

    def _query_all(self, *, max_items: int | None = None, **kwargs: Any) -> list[dict[str, Any]]:
        return listing.query_all(self._ddb, self.table, max_items=max_items, **kwargs)

    # --- writes ----------------------------------------------------------------------------------

    def name_holder(self, key: str) -> str | None:
        item = self._ddb.get_item(TableName=self.table, Key=items.claim_key(key), ConsistentRead=True).get("Item")
        return item["job_id"]["S"] if item else None

    def create(self, job: Job, first_event: StatusEvent, claim: NameClaim | None = None) -> None:
        item = items.job_item(job)
        _check_submitted_size(item)
        item[outbox.SEQ_ATTR] = {"N": "1"}
        detail = outbox.job_state_detail(
            job, None, sequence=1, at=first_event.at, reason=first_event.reason, actor=first_event.actor, dashboard_url=self._dashboard_url
        )
        writes = [
            {
                "Put": {
                    "TableName": self.table,
                    "Item": item,
                    "ConditionExpression": "attribute_not_exists(#pk)",
                    "ExpressionAttributeNames": {"#pk": c.PK},
                }
            },
            {"Put": {"TableName": self.table, "Item": items.event_item(job.job_id, first_event, job.version)}},
            *self._counter_updates(job, add=job.status),
            {"Put": {"TableName": self.table, "Item": outbox.outbox_item(et.JOB_STATE_CHANGE, et.SUBJECT_JOB, job.job_id, detail)}},
        ]
        if claim is not None:
            writes.append({"Put": _claim_put(self.table, claim, job.job_id)})
        reasons = self._transact(writes)
        if reasons is None:
            return
        if claim is not None and reasons[-1].get("Code") == "ConditionalCheckFailed":  # the claim is the last write
            stored = reasons[-1].get("Item") or {}
            raise NameTaken(claim.key, stored.get("job_id", {}).get("S"))
        raise ConcurrentModification(job.job_id, "a job with this id already exists")

    def transition(self, t: Transition) -> Job:
        if t.to_status not in TRANSITIONS[t.from_status]:
            raise IllegalTransition(t.job_id, t.from_status, f"move to {t.to_status}", sources_of(t.to_status))
        _check_changes(t.changes)
        for _attempt in range(_TRANSACTION_ATTEMPTS):
            item = self._get_item(t.job_id)
            if item is None:
                raise JobNotFound(t.job_id)
            current = items.job_from_item(item)
            if current.status != t.from_status or current.version != t.expected_version:
                raise _lost(t, current)
            new, writes = self._transition_writes(t, current, outbox.stored_seq(item))
            reasons = self._transact(writes)
            if reasons is None:
                return new
            stored = reasons[0].get("Item")
            if stored is None:
                raise JobNotFound(t.job_id)
            stored_job = items.job_from_item(stored)
            if stored_job.status != t.from_status or stored_job.version != t.expected_version:
                raise _lost(t, stored_job)
            # Only the job's event counter moved (a checkpoint was recorded meanwhile): the decision stands.
        raise ConcurrentModification(t.job_id, "its events kept changing")

    def _transition_writes(self, t: Transition, current: Job, seq: int) -> tuple[Job, list[dict[str, Any]]]:
        """The status change, its history entry, the counters and its event (sequence seq + 1), as one transaction."""
        now = self._clock()
        new = _apply(current, {**t.changes, "status": t.to_status, "version": current.version + 1, "updated_at": now})
        event = StatusEvent(at=now, from_status=t.from_status, to_status=t.to_status, reason=t.reason, actor=t.actor)
        update = _update_expression(new, [*t.changes, "status", "version", "updated_at"], reindex=True)
        update.update(
            TableName=self.table,
            Key=_meta_key(t.job_id),
            ConditionExpression="#status = :from AND #version = :expected",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
        update["ExpressionAttributeNames"].update({"#status": "status", "#version": "version"})
        update["ExpressionAttributeValues"].update({":from": {"S": t.from_status.value}, ":expected": {"N": str(t.expected_version)}})
        sequence = outbox.take_sequence(update, seq)
        detail = outbox.job_state_detail(
            new, current, sequence=sequence, at=now, reason=t.reason, actor=t.actor, dashboard_url=self._dashboard_url
        )
        writes = [
            {"Update": update},
            {"Put": {"TableName": self.table, "Item": items.event_item(t.job_id, event, new.version)}},
            *self._counter_updates(current, add=t.to_status, remove=t.from_status),
            {"Put": {"TableName": self.table, "Item": outbox.outbox_item(et.JOB_STATE_CHANGE, et.SUBJECT_JOB, t.job_id, detail)}},
        ]
        return new, writes

    def update(
        self,
        job_id: str,
        expected_version: int,
        changes: Mapping[str, Any],
        allowed: frozenset[JobStatus] | None = None,
        *,
        event: StatusEvent | None = None,
        action: str = "update",
        reclaim: Reclaim | None = None,
    ) -> Job:
        _check_changes(changes)
        stored_item = self._get_item(job_id)
        if stored_item is None:
            raise JobNotFound(job_id)
        current = items.job_from_item(stored_item)
        if allowed is not None and current.status not in allowed:
            raise IllegalTransition(job_id, current.status, action, allowed)
        if current.version != expected_version:
            raise ConcurrentModification(job_id, f"expected version {expected_version}, found {current.version}")
        now = self._clock()
        new = _apply(current, {**changes, "version": current.version + 1, "updated_at": now})
        if set(changes) & items.SUBMITTED_FIELDS:
            _check_submitted_size(items.job_item(new))  # a PATCH grows what was submitted
        update = _update_expression(new, [*changes, "version", "updated_at"], reindex=True)
        update.update(TableName=self.table, Key=_meta_key(job_id), ConditionExpression="#version = :expected")
        update["ExpressionAttributeNames"]["#version"] = "version"
        update["ExpressionAttributeValues"][":expected"] = {"N": str(expected_version)}
        if event is None and reclaim is None:
            try:
                self._ddb.update_item(**update)
            except self._ddb.exceptions.ConditionalCheckFailedException as exc:
                raise ConcurrentModification(job_id, "changed while being edited") from exc
            return new
        update["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
        writes: list[dict[str, Any]] = [{"Update": update}]
        if event is not None:
            writes.append({"Put": {"TableName": self.table, "Item": items.event_item(job_id, event, new.version)}})
        if reclaim is not None:  # its event goes with the decision, or not at all
            sequence = outbox.take_sequence(update, outbox.stored_seq(stored_item))
            detail = outbox.reclaim_detail(new, reclaim, sequence=sequence, at=now, dashboard_url=self._dashboard_url)
            writes.append({"Put": {"TableName": self.table, "Item": outbox.outbox_item(et.JOB_RECLAIMED, et.SUBJECT_JOB, job_id, detail)}})
        reasons = self._transact(writes)
        if reasons is not None:
            stored = reasons[0].get("Item")
            if stored is None:
                raise JobNotFound(job_id)
            status = items.job_from_item(stored).status
            if allowed is not None and status not in allowed:
                raise IllegalTransition(job_id, status, action, allowed)
            raise ConcurrentModification(job_id, "changed while being edited")
        return new

    def annotate(self, job_id: str, changes: Mapping[str, Any]) -> None:
        _check_changes(changes)
        if not changes:
            return
        current = self.get(job_id)
        new = _apply(current, changes)
        update = _update_expression(new, list(changes), reindex=False)
        update.update(TableName=self.table, Key=_meta_key(job_id), ConditionExpression="attribute_exists(#pk)")
        update["ExpressionAttributeNames"]["#pk"] = c.PK
        if not update["ExpressionAttributeValues"]:
            # Only REMOVEs: DynamoDB refuses an empty ExpressionAttributeValues.
            del update["ExpressionAttributeValues"]
        self._update_existing(job_id, update)

    def record_progress(self, job_id: str, progress: Progress) -> bool:
        # Reports arrive at least once and out of order: the write is conditional on the stored progress
        # being older (Progress.supersedes). The progress document is packed, so the order lives beside it
        # as one string that sorts like (attempt, step, percent): a late or repeated report changes nothing.
        names = {"#progress": "progress", "#pk": c.PK}
        values = {":p": items.field_attr("progress", progress.model_dump(mode="json", exclude_none=True))}
        update = "SET #progress = :p"
        condition = "attribute_exists(#pk)"
        if progress.attempt is not None:
            names["#order"] = PROGRESS_ORDER_ATTR
            values[":order"] = {"S": progress_order(progress)}
            update += ", #order = :order"
            condition += " AND (attribute_not_exists(#order) OR #order < :order)"
        try:
            self._ddb.update_item(
                TableName=self.table,
                Key=_meta_key(job_id),
                UpdateExpression=update,
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
            )
            return True
        except self._ddb.exceptions.ConditionalCheckFailedException:
            self.get(job_id)  # JobNotFound if that was why
            return False

    def add_checkpoint(
        self, job_id: str, ref: CheckpointRef, *, best_checkpoint_id: str | None = None, keep: list[str] | None = None
    ) -> Job:
        # Unversioned (never a 409 for the engine), but still no lost append: the write is conditional
        # on the list it was computed from, and recomputed if another append got there first.
        for _attempt in range(_TRANSACTION_ATTEMPTS):
            item = self._get_item(job_id)
            if item is None:
                raise JobNotFound(job_id)
            current = items.job_from_item(item)
            refs = [r for r in current.checkpoints if r.checkpoint_id != ref.checkpoint_id and (keep is None or r.checkpoint_id in keep)]
            refs.append(ref)
            refs.sort(key=lambda r: r.step)  # in step order, whatever order the reports came in
            best = best_checkpoint_id or current.best_checkpoint_id
            if best is not None and best not in {r.checkpoint_id for r in refs}:
                best = None
            if len(refs) > MAX_CHECKPOINT_REFS:
                others = [r for r in refs if r.checkpoint_id != best][-(MAX_CHECKPOINT_REFS - 1) :]
                refs = [r for r in refs if r.checkpoint_id == best] + others
            # The newest by step, whatever order the reports came in (at-least-once, unordered delivery).
            latest = max(refs, key=lambda r: r.step).checkpoint_id
            new = _apply(current, {"checkpoints": refs, "latest_checkpoint_id": latest, "best_checkpoint_id": best})
            update = _update_expression(new, ["checkpoints", "latest_checkpoint_id", "best_checkpoint_id"], reindex=False)
            update.update(TableName=self.table, Key=_meta_key(job_id))
            update["ExpressionAttributeNames"]["#checkpoints"] = "checkpoints"
            if "checkpoints" in item:
                update["ConditionExpression"] = "#checkpoints = :old"
                update["ExpressionAttributeValues"][":old"] = item["checkpoints"]
            else:
                update["ConditionExpression"] = "attribute_exists(#pk) AND attribute_not_exists(#checkpoints)"
                update["ExpressionAttributeNames"]["#pk"] = c.PK
            if any(r.checkpoint_id == ref.checkpoint_id for r in current.checkpoints):
                # A repeated report of a recorded checkpoint (at-least-once delivery): no new event.
                try:
                    self._ddb.update_item(**update)
                    return new
                except self._ddb.exceptions.ConditionalCheckFailedException:
                    continue
            if self._transact(self._with_checkpoint_event(update, new, ref.checkpoint_id, outbox.stored_seq(item))) is None:
                return new
        raise ConcurrentModification(job_id, "checkpoint list kept changing")

    def report_gpus_idle(self, job_id: str, idle: GpuIdle) -> bool:
        # The period's mark and the event go together; the event sequence's condition makes two racing
        # reporters write one event: the loser re-reads, finds the mark, and writes nothing.
        for _attempt in range(_TRANSACTION_ATTEMPTS):
            item = self._get_item(job_id)
            if item is None:
                raise JobNotFound(job_id)
            if item.get(outbox.GPU_IDLE_ATTR, {}).get("S") == idle.mark:
                return False
            update: dict[str, Any] = {"TableName": self.table, "Key": _meta_key(job_id), "UpdateExpression": "SET #gidle = :gidle"}
            update.update(ConditionExpression="attribute_exists(#pk)", ExpressionAttributeValues={":gidle": {"S": idle.mark}})
            update["ExpressionAttributeNames"] = {"#gidle": outbox.GPU_IDLE_ATTR, "#pk": c.PK}
            sequence = outbox.take_sequence(update, outbox.stored_seq(item))
            detail = outbox.gpu_idle_detail(
                items.job_from_item(item), idle, sequence=sequence, at=self._clock(), dashboard_url=self._dashboard_url
            )
            event = {"Put": {"TableName": self.table, "Item": outbox.outbox_item(et.JOB_GPUS_IDLE, et.SUBJECT_JOB, job_id, detail)}}
            if self._transact([{"Update": update}, event]) is None:
                return True
        raise ConcurrentModification(job_id, "its events kept changing")

    def _with_checkpoint_event(self, update: dict[str, Any], new: Job, checkpoint_id: str, seq: int) -> list[dict[str, Any]]:
        """The checkpoint's write and its Checkpoint Saved event (sequence seq + 1), as one transaction."""
        sequence = outbox.take_sequence(update, seq)
        detail = outbox.checkpoint_detail(new, checkpoint_id, sequence=sequence, at=self._clock(), dashboard_url=self._dashboard_url)
        return [
            {"Update": update},
            {"Put": {"TableName": self.table, "Item": outbox.outbox_item(et.CHECKPOINT_SAVED, et.SUBJECT_JOB, new.job_id, detail)}},
        ]

    def append_event(self, job_id: str, event: StatusEvent) -> None:
        # A sequence number nobody else uses for this job: the microseconds since the epoch.
        seq = int(time.time() * 1_000_000) % 1_000_000_000
        self._ddb.put_item(TableName=self.table, Item=items.event_item(job_id, event, seq))

    def delete(self, job_id: str, expected_version: int | None = None) -> None:
        current = self.get(job_id)
        if expected_version is not None and current.version != expected_version:
            raise ConcurrentModification(job_id, f"expected version {expected_version}, found {current.version}")
        # The job item and its counter contribution go together; history items follow. If we die in
        # between, the orphaned history is unreachable (no job item) and harmless.
        writes = [
            {
                "Delete": {
                    "TableName": self.table,
                    "Key": _meta_key(job_id),
                    "ConditionExpression": "#version = :v",
                    "ExpressionAttributeNames": {"#version": "version"},
                    "ExpressionAttributeValues": {":v": {"N": str(current.version)}},
                }
            },
            *self._counter_updates(current, remove=current.status),
        ]
        if self._transact(writes) is not None:
            raise ConcurrentModification(job_id, "changed while being deleted")
        rest = self._query_all(
            KeyConditionExpression="#pk = :pk",
            ExpressionAttributeNames={"#pk": c.PK},
            ExpressionAttributeValues={":pk": {"S": items.job_pk(job_id)}},
            ProjectionExpression="#pk, sk",
        )
        batch.delete_keys(self._ddb, self.table, [{c.PK: r[c.PK], c.SK: r[c.SK]} for r in rest], f"the history of job {job_id}")

    # --- helpers ---------------------------------------------------------------------------------

    def _counter_updates(self, job: Job, *, add: JobStatus | None = None, remove: JobStatus | None = None) -> list[dict[str, Any]]:
        parts, names, values = [], {}, {}
        if add is not None:
            parts.append("#add :one")
            names["#add"] = add.value
            values[":one"] = {"N": "1"}
        if remove is not None:
            parts.append("#rm :minus")
            names["#rm"] = remove.value
            values[":minus"] = {"N": "-1"}
        return [
            {
                "Update": {
                    "TableName": self.table,
                    "Key": key,
                    "UpdateExpression": "ADD " + ", ".join(parts),
                    "ExpressionAttributeNames": names,
                    "ExpressionAttributeValues": values,
                }
            }
            for key in items.counter_keys(job.owner, job.job_id)
        ]

    def _transact(self, writes: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        """Run the transaction; None on success, else the cancellation reasons of a failed condition.

        TransactionConflict (another transaction on one of our items, e.g. a counter shard) is
        retried with jittered backoff: the conditions are re-evaluated, so no decision is made twice.
        """
        for attempt in range(_TRANSACTION_ATTEMPTS):
            try:
                self._ddb.transact_write_items(TransactItems=writes)
                return None
            except self._ddb.exceptions.TransactionCanceledException as exc:
                reasons = exc.response.get("CancellationReasons", [])
                codes = {r.get("Code") for r in reasons}
                if "ConditionalCheckFailed" in codes:
                    return reasons
                if "TransactionConflict" in codes and attempt < _TRANSACTION_ATTEMPTS - 1:
                    time.sleep(random.uniform(0, 0.02 * 2**attempt))
                    continue
                raise
        raise AssertionError("unreachable")

    def _update_existing(self, job_id: str, update: dict[str, Any]) -> None:
        try:
            self._ddb.update_item(**update)
        except self._ddb.exceptions.ConditionalCheckFailedException as exc:
            raise JobNotFound(job_id) from exc


def _claim_put(table: str, claim: NameClaim, job_id: str) -> dict[str, Any]:
    """The claim item now naming `job_id`, written only if it still names the holder the caller read."""
    put: dict[str, Any] = {
        "TableName": table,
        "Item": {**items.claim_key(claim.key), "job_id": {"S": job_id}, "entity": {"S": "CLAIM"}},
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }
    if claim.previous_job_id is None:
        put["ConditionExpression"] = "attribute_not_exists(#pk)"
        put["ExpressionAttributeNames"] = {"#pk": c.PK}
    else:
        put["ConditionExpression"] = "#holder = :previous"
        put["ExpressionAttributeNames"] = {"#holder": "job_id"}
        put["ExpressionAttributeValues"] = {":previous": {"S": claim.previous_job_id}}
    return put


def _check_submitted_size(item: Mapping[str, Any]) -> None:
    size = items.submitted_size(item)
    if size > items.SUBMITTED_JOB_MAX_BYTES:
        raise TooLarge(
            "body",
            f"the job takes {size:,} bytes as stored; a job's request may take at most {items.SUBMITTED_JOB_MAX_BYTES:,} bytes "
            f"(DynamoDB's item limit is {items.MAX_ITEM_BYTES:,} bytes, the rest is kept for what its runs record)",
        )


def _meta_key(job_id: str) -> dict[str, Any]:
    return {c.PK: {"S": items.job_pk(job_id)}, c.SK: {"S": items.META}}


PROGRESS_ORDER_ATTR = "progress_order"  # not a Job field: the order of the stored progress (record_progress)


def progress_order(progress: Progress) -> str:
    """(attempt, step, percent) as a string DynamoDB compares in the same order (Progress.supersedes)."""
    return f"{progress.attempt or 0:06d}:{progress.step:012d}:{progress.percent:07.3f}"


def _check_changes(changes: Mapping[str, Any]) -> None:
    unknown = set(changes) - _JOB_FIELDS
    if unknown:
        raise ValueError(f"not fields of a Job: {sorted(unknown)}")
    protected = set(changes) & _PROTECTED
    if protected:
        raise ValueError(f"cannot be changed this way: {sorted(protected)}")


def _apply(job: Job, changes: Mapping[str, Any]) -> Job:
    """The job with `changes` applied, validated as a whole (a bad value fails here, before writing)."""
    document = job.model_dump()
    document.update(changes)
    # As stored: what a caller submits or patches was checked in full before (service layer).
    return Job.model_validate(document, context=STORED)


def _update_expression(new: Job, fields: list[str], *, reindex: bool) -> dict[str, Any]:
    """SET the named fields to their values in `new` (REMOVE those that are None), plus index keys."""
    doc = items.job_document(new)
    sets, removes, names, values = [], [], {}, {}
    for i, name in enumerate(dict.fromkeys(fields)):
        names[f"#f{i}"] = name
        if name in doc:
            sets.append(f"#f{i} = :f{i}")
            values[f":f{i}"] = items.field_attr(name, doc[name])
        else:
            removes.append(f"#f{i}")
    if reindex:
        # The sparse queue index follows the status; its sort key follows priority/queue (PATCH).
        index = items.index_attrs(new)
        for attr in (c.GSI_QUEUE_PK, c.GSI_QUEUE_SK, c.GSI_TEAM_QUEUE_PK, c.GSI_TEAM_QUEUE_SK):
            names[f"#{attr}"] = attr
            if attr in index:
                sets.append(f"#{attr} = :{attr}")
                values[f":{attr}"] = index[attr]
            else:
                removes.append(f"#{attr}")
    expression = ("SET " + ", ".join(sets) if sets else "") + (" REMOVE " + ", ".join(removes) if removes else "")
    result: dict[str, Any] = {"UpdateExpression": expression.strip(), "ExpressionAttributeNames": names}
    result["ExpressionAttributeValues"] = values
    return result


def _lost(t: Transition, stored: Job) -> Exception:
    """Why a transition's condition failed: the stored status forbids the move, or a newer write won."""
    if t.to_status not in TRANSITIONS[stored.status]:
        return IllegalTransition(t.job_id, stored.status, f"move to {t.to_status}", sources_of(t.to_status))
    found = f"expected {t.from_status} at version {t.expected_version}, found {stored.status} at {stored.version}"
    return ConcurrentModification(t.job_id, found)
