"""The event outbox on the jobs table, and the deployment's EventBridge bus (issue 23, docs/EVENTS.md).

Writers (the job, sweep and policy repositories) put an outbox item in the SAME transaction as the
change it reports, numbered by a counter on the subject's own item (`event_seq`) that the same
transaction moves from n to n + 1 under a condition: a subject's sequence has no gap and no double.

The publisher (functions/service/event_publisher.py) reads them two ways, with the same code: the
cloud's DynamoDB stream hands it each new outbox item (functions/handlers/event_publisher.py), and a
drain (local mode's loop; in the cloud, a scheduled sweep for what the stream could not deliver) reads
the outbox partition. An item is deleted only after PutEvents accepted it: a publisher killed anywhere
leaves it to be sent again (a duplicate, same event_id), never lost.

| Item | pk | sk | attributes |
|---|---|---|---|
| Outbox event | `OUTBOX` | `<at>#<subject>#<id>#<sequence:09>` | `entity=OUTBOX`, `event_id`, `detail_type`, |
|  |  |  | `subject_id`, `sequence`, `detail` (JSON) |

One partition: DynamoDB takes ~1000 writes/s on it, far above a control plane's transitions; shard
it (OUTBOX#<n>) if that ever changes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from functions import constants as c
from functions.adapters import dynamodb_items as items
from functions.adapters.aws import AwsClients
from functions.adapters.dynamodb_batch import delete_keys
from functions.catalog import own_events as et
from functions.service.ports import GpuIdle, Reclaim
from schemas.events import (
    CheckpointSaved,
    EventDetail,
    IdleDevice,
    JobGpusIdle,
    JobReclaimed,
    JobStateChange,
    OutboxRecord,
    PlacementSummary,
    PolicyState,
    RetrainingPolicyStateChange,
    SweepStateChange,
    clip,
    event_id,
)
from schemas.job import Job
from schemas.retraining import RetrainingPolicy
from schemas.sweeps import Sweep, SweepStatus

OUTBOX_PK = et.OUTBOX_PK
ENTITY = et.OUTBOX_ENTITY
SEQ_ATTR = "event_seq"  # on the subject's own item: the sequence of its last event
GPU_IDLE_ATTR = "gpu_idle_reported"  # on the job's item: the mark (GpuIdle.mark) of the last idle period reported
PUT_EVENTS_MAX_ENTRIES = 10  # PutEvents takes at most 10 entries (and 256 KB) per call


def outbox_item(event_type: et.EventType, subject: str, subject_id: str, detail: EventDetail) -> dict[str, Any]:
    body = detail.model_dump_json(exclude_none=False)
    key = f"{items.time_key(detail.at)}#{subject}#{subject_id}#{detail.sequence:09d}"
    return {
        c.PK: {"S": OUTBOX_PK},
        c.SK: {"S": key},
        "entity": {"S": ENTITY},
        "event_id": {"S": detail.event_id},
        "detail_type": {"S": event_type.detail_type},
        "subject_id": {"S": subject_id},
        "sequence": {"N": str(detail.sequence)},
        "detail": {"S": body},
    }


def record_from_item(item: Mapping[str, Any]) -> OutboxRecord:
    return OutboxRecord(
        key=item[c.SK]["S"],
        event_id=item["event_id"]["S"],
        detail_type=item["detail_type"]["S"],
        subject_id=item["subject_id"]["S"],
        sequence=int(item["sequence"]["N"]),
        detail=item["detail"]["S"],
    )


def is_outbox_item(item: Mapping[str, Any]) -> bool:
    return item.get("entity", {}).get("S") == ENTITY and item.get(c.PK, {}).get("S") == OUTBOX_PK


def stored_seq(item: Mapping[str, Any] | None) -> int:
    """The subject's last event sequence as stored (0: none yet, e.g. an item written before events)."""
    if not item or SEQ_ATTR not in item:
        return 0
    return int(item[SEQ_ATTR]["N"])


def seq_condition(current: int) -> tuple[str, dict[str, str], dict[str, Any]]:
    """The condition that the stored sequence is still `current`, for the write that takes current + 1."""
    names = {"#eseq": SEQ_ATTR}
    if current == 0:
        return "attribute_not_exists(#eseq)", names, {}
    return "#eseq = :eseq", names, {":eseq": {"N": str(current)}}


def take_sequence(update: dict[str, Any], current: int) -> int:
    """Make an Update (of a TransactWriteItems) also move the subject's `event_seq` from `current` to the
    next number, conditioned on it still being `current`; returns that number (the event's sequence)."""
    check, names, values = seq_condition(current)
    condition = update.get("ConditionExpression")
    update["ConditionExpression"] = f"{condition} AND {check}" if condition else check
    expression = update["UpdateExpression"]
    assignment = "#eseq = :eseqnew"
    update["UpdateExpression"] = (
        f"SET {assignment}, {expression[4:]}" if expression.startswith("SET ") else f"SET {assignment} {expression}"
    )
    update["ExpressionAttributeNames"].update(names)
    update.setdefault("ExpressionAttributeValues", {}).update({":eseqnew": {"N": str(current + 1)}, **values})
    return current + 1


def _job_envelope(job: Job, *, sequence: int, at: datetime, actor: str, reason: str, dashboard_url: str | None) -> dict[str, Any]:
    """The fields every job event carries (its id and sequence, owner, labels, who and why, the link, the job's
    name and state): one place, so no detail type drifts from the others."""
    return {
        "event_id": event_id(et.SUBJECT_JOB, job.job_id, sequence),
        "sequence": sequence,
        "at": at,
        "owner": job.owner,
        "labels": job.labels,
        "actor": actor,
        "reason": reason,
        "dashboard_url": job_link(dashboard_url, job.job_id),
        "job_id": job.job_id,
        "job_name": job.name,
        "state": job.status,
    }


def job_state_detail(
    job: Job, previous: Job | None, *, sequence: int, at: datetime, reason: str, actor: str, dashboard_url: str | None
) -> EventDetail:
    return JobStateChange(
        **_job_envelope(job, sequence=sequence, at=at, actor=actor, reason=clip(reason) or "", dashboard_url=dashboard_url),
        previous_state=previous.status if previous is not None else None,
        error_type=job.error_type,
        error_message=clip(job.error_message),
        attempt=job.attempt,
        parent_job_id=job.parent_job_id,
        cost_usd=job.cost.estimated_cost_usd,
        checkpoint_id=job.latest_checkpoint_id,
        placement=placement_summary(job),
    )


def placement_summary(job: Job) -> PlacementSummary | None:
    """The attempt's try of the job's placement record, with the record's totals (None without candidates)."""
    record = job.placement
    current = next((t for t in reversed(record.tries) if t.attempt == job.attempt), None) if record else None
    if record is None or current is None:
        return None
    last = record.recoveries[-1].seconds if record.recoveries else None
    return PlacementSummary(
        candidate=current.candidate,
        pool=current.pool,
        outcome=current.outcome,
        work_lost_steps=current.work_lost_steps,
        pools_blocked=record.pools_blocked,
        recoveries=len(record.recoveries),
        last_recovery_seconds=last,
        dollars_saved_usd=record.dollars_saved_usd,
    )


def reclaim_detail(job: Job, reclaim: Reclaim, *, sequence: int, at: datetime, dashboard_url: str | None) -> EventDetail:
    reason = clip(job.pending_reason) or ""
    return JobReclaimed(
        **_job_envelope(job, sequence=sequence, at=at, actor="scheduler", reason=reason, dashboard_url=dashboard_url),
        attempt=job.attempt,
        team=reclaim.team,
        gpu_type=reclaim.gpu_type,
        gpus=reclaim.gpus,
        beneficiary_job_id=reclaim.beneficiary_job_id,
        beneficiary_team=reclaim.beneficiary_team,
        rule=reclaim.rule,
        work_lost_gpu_seconds=reclaim.work_lost_gpu_seconds,
        checkpoint_id=job.latest_checkpoint_id,
        reclaims=job.reclaims,
    )


def gpu_idle_detail(job: Job, idle: GpuIdle, *, sequence: int, at: datetime, dashboard_url: str | None) -> EventDetail:
    reason = f"every GPU of node {idle.node} under {idle.threshold_pct:g}% utilization for {idle.idle_seconds / 60:.0f} minutes"
    return JobGpusIdle(
        **_job_envelope(job, sequence=sequence, at=at, actor="trainer", reason=reason, dashboard_url=dashboard_url),
        attempt=idle.attempt,
        node=idle.node,
        idle_since=datetime.fromtimestamp(idle.idle_since, tz=UTC),
        idle_seconds=idle.idle_seconds,
        threshold_pct=idle.threshold_pct,
        devices=[IdleDevice(index=index, name=name, utilization_pct=util) for index, name, util in idle.devices],
    )


def checkpoint_detail(job: Job, checkpoint_id: str, *, sequence: int, at: datetime, dashboard_url: str | None) -> EventDetail:
    ref = next(r for r in job.checkpoints if r.checkpoint_id == checkpoint_id)
    reason = f"checkpoint {checkpoint_id} at step {ref.step}"
    return CheckpointSaved(
        **_job_envelope(job, sequence=sequence, at=at, actor="trainer", reason=reason, dashboard_url=dashboard_url),
        checkpoint_id=checkpoint_id,
        step=ref.step,
        attempt=ref.attempt,
        uri=ref.uri,
        metrics=ref.metrics,
        cost_usd=job.cost.estimated_cost_usd,
    )


def sweep_state_detail(
    sweep: Sweep, previous: SweepStatus | None, *, sequence: int, at: datetime, dashboard_url: str | None
) -> EventDetail:
    best = sweep.best_trial
    return SweepStateChange(
        event_id=event_id(et.SUBJECT_SWEEP, sweep.sweep_id, sequence),
        sequence=sequence,
        at=at,
        owner=sweep.owner,
        labels=sweep.job_template.labels,
        reason=clip(sweep.status_reason) or "",
        dashboard_url=_link(dashboard_url, "sweeps", sweep.sweep_id),
        sweep_id=sweep.sweep_id,
        sweep_name=sweep.name,
        previous_state=previous,
        state=sweep.status,
        trials_completed=sweep.counts.completed,
        trials_failed=sweep.counts.failed,
        best_trial_job_id=best.job_id if best is not None else None,
    )


def policy_state(policy: RetrainingPolicy | None) -> PolicyState:
    if policy is None:
        return "DELETED"
    return "ENABLED" if policy.enabled else "DISABLED"


def policy_state_detail(
    policy: RetrainingPolicy, previous: PolicyState | None, state: PolicyState, *, sequence: int, at: datetime, actor: str = "user"
) -> EventDetail:
    return RetrainingPolicyStateChange(
        event_id=event_id(et.SUBJECT_POLICY, policy.policy_id, sequence),
        sequence=sequence,
        at=at,
        owner=policy.owner,
        labels=policy.job_template.labels,
        actor=actor,
        reason="created" if previous is None else ("deleted" if state == "DELETED" else f"{previous.lower()} -> {state.lower()}"),
        policy_id=policy.policy_id,
        policy_name=policy.name,
        previous_state=previous,
        state=state,
    )


def job_link(dashboard_url: str | None, job_id: str) -> str | None:
    return _link(dashboard_url, "jobs", job_id)


def _link(dashboard_url: str | None, kind: str, subject_id: str) -> str | None:
    return f"{dashboard_url.rstrip('/')}/#/{kind}/{subject_id}" if dashboard_url else None


class DynamoOutbox:
    """The Outbox port (functions/service/event_publisher.py) on the jobs table's OUTBOX partition."""

    def __init__(self, clients: AwsClients, table_name: str = c.JOBS_TABLE) -> None:
        self._clients = clients
        self.table = table_name

    def pending(self, limit: int = 100) -> list[OutboxRecord]:
        response = self._clients.dynamodb().query(
            TableName=self.table,
            KeyConditionExpression="#pk = :pk",
            ExpressionAttributeNames={"#pk": c.PK},
            ExpressionAttributeValues={":pk": {"S": OUTBOX_PK}},
            ConsistentRead=True,
            Limit=limit,
        )
        return [record_from_item(i) for i in response.get("Items", [])]

    def remove(self, records: Sequence[OutboxRecord]) -> None:
        keys = [{c.PK: {"S": OUTBOX_PK}, c.SK: {"S": r.key}} for r in records]
        delete_keys(self._clients.dynamodb(), self.table, keys, "the published outbox records")


class EventBridgeBus:
    """The EventBus port: PutEvents on the deployment's own bus. Returns, per entry, None or its error code."""

    def __init__(self, clients: AwsClients, bus_name: str) -> None:
        self._clients = clients
        self.bus_name = bus_name

    def put(self, records: Sequence[OutboxRecord]) -> list[str | None]:
        if len(records) > PUT_EVENTS_MAX_ENTRIES:
            raise ValueError(f"PutEvents takes at most {PUT_EVENTS_MAX_ENTRIES} entries, not {len(records)}")
        entries = [
            {"Source": et.SOURCE, "DetailType": r.detail_type, "Detail": r.detail, "EventBusName": self.bus_name, "Resources": []}
            for r in records
        ]
        events = self._clients.client("events")
        response = events.put_events(Entries=entries)
        # A failed entry has an ErrorCode and no EventId; the others were accepted.
        return [(e.get("ErrorCode") or "Failed") if e.get("ErrorCode") or "EventId" not in e else None for e in response["Entries"]]
