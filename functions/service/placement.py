"""Placement (docs/PLACEMENT.md): which candidate and pool each attempt of a job runs on, and what happened.

PREPARING asks `choose`: the job's candidates (resource_config.placement) in their order, narrowed by
required_capabilities, node_anti_affinity and, once a deadline leaves no slack for spot, to on-demand;
the first whose pool is healthy wins (pool health: functions/service/ports.py `PoolHealth`). A run that
ends in a capacity error or a preemption blocks its pool (`on_run_end`), so the requeued job's next
PREPARING, one scheduler tick later, takes the next healthy candidate. The choice is stored on the job
(`Job.placement`), so every later reading of the attempt (the run spec, the launch) is the same one.

The pure rules (candidates, adaptation, labels, block lengths) live in functions/catalog/placement.py.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from functions.catalog import placement as rules
from functions.errors import ConcurrentModification, IllegalTransition, InvalidRequest, JobNotFound
from functions.service.ports import JobRepository, PoolFailure, PoolHealth, PoolState, RunDescription, RunState, RunStopper
from schemas.job import ErrorType, Job, PendingAction
from schemas.placement import Adaptation, PlacementRecord, PlacementTry, Purchase, Recovery
from schemas.status import PAUSABLE
from schemas.trainer import RunSpec

logger = logging.getLogger(__name__)


def needs_on_demand(now: float, deadline: float, remaining_work: float, *, overhead: float, loss: float) -> bool:
    """The deadline policy: leave spot once the slack (time left minus work left) no longer covers one more
    restart plus the work a preemption could lose. Used by the service and the simulator alike."""
    return deadline - now - remaining_work < overhead + loss


class PlacementService:
    def __init__(self, health: PoolHealth, clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.health = health
        self.clock = clock

    # ------------------------------------------------------------------ choosing
    def choose(self, job: Job, attempt: int) -> dict[str, Any]:
        """The `placement` change of attempt `attempt` (empty for a job without candidates)."""
        rc = job.resource_config
        if rc.placement is None:
            return {}
        now = self.clock()
        record = job.placement or PlacementRecord(adaptations=_adaptations(job))
        pairs = self._allowed(job)
        on_demand = record.moved_to_on_demand or self._deadline_says_on_demand(job, now.timestamp())
        if on_demand or rc.placement.deadline is not None:
            # With a deadline: spot only while there is slack (a blocked spot pool is retried rather than
            # paying for on-demand early), then on-demand only. Without one: the user's order as given.
            wanted = Purchase.ON_DEMAND if on_demand else Purchase.SPOT
            only = [pair for pair in pairs if pair[0].spec.purchase == wanted]
            pairs = only or pairs
        pools = [rules.pool_key(c.spec.platform, c.choice.instance_type, zone, c.spec.purchase) for c, zone in pairs]
        states = self.health.states(pools)
        healthy = [i for i, pool in enumerate(pools) if _healthy(states.get(pool), now.timestamp())]
        if healthy:
            pick = healthy[0]
            at_risk = None
        else:
            # Every pool is blocked: the one whose block ends first (the launch may still find room).
            pick = min(range(len(pools)), key=lambda i: states[pools[i]].blocked_until)
            at_risk = "every candidate's pool is blocked after capacity errors or preemptions"
        at_risk = at_risk or _deadline_risk(job, now.timestamp())
        candidate = pairs[pick][0]
        preferences = _instance_preferences(candidate, [pairs[i][0] for i in healthy if i > pick])
        fleet = _fleet_pools(pairs[pick], [pairs[i] for i in healthy if i > pick])
        tried = PlacementTry(
            attempt=attempt,
            candidate=candidate.index,
            pool=pools[pick],
            instance_type=candidate.choice.instance_type,
            purchase=candidate.spec.purchase,
            started_at=now,
            outcome="running",
            hourly_usd=round(candidate.hourly_usd, 4),
            instance_preferences=preferences,
            fleet_pools=fleet,
        )
        tries = [t for t in record.tries if t.attempt != attempt] + [tried]
        blocked = [pool for pool in pools if not _healthy(states.get(pool), now.timestamp())]
        updated = record.model_copy(
            update={
                "tries": tries,
                "pools_blocked": sorted(set(record.pools_blocked) | set(blocked)),
                "moved_to_on_demand": on_demand,
                "at_risk": at_risk,
            }
        )
        return {"placement": updated.model_dump(mode="json")}

    def _allowed(self, job: Job) -> list[tuple[rules.Candidate, str]]:
        """The (candidate, zone) pairs in the order tried. ValueError naming the field when the rules checked at
        submit no longer hold (the deployment's instance table changed): PREPARING fails the job with it."""
        rc = job.resource_config
        assert rc.placement is not None
        zones = list(rc.placement.availability_zones)
        try:
            candidates = rules.resolve(rc, job.training_shape)
            able = rules.check_capabilities(job.scheduling_config.required_capabilities, [c.choice.spec for c in candidates])
            affinity = rules.parse_labels(rc.node_affinity, "resource_config.node_affinity", zones)
            anti = rules.parse_labels(rc.node_anti_affinity, "resource_config.node_anti_affinity", zones)
        except InvalidRequest as exc:
            raise ValueError(str(exc)) from exc
        pairs = rules.order([candidates[i] for i in able], affinity, anti, zones)
        if not pairs:
            raise ValueError("resource_config.placement: no candidate's pool is left by the job's capabilities and anti-affinity")
        return pairs

    def _deadline_says_on_demand(self, job: Job, now: float) -> bool:
        placement = job.resource_config.placement
        if placement is None or placement.deadline is None:
            return False
        return needs_on_demand(
            now,
            placement.deadline.timestamp(),
            remaining_on_fallback(job),
            overhead=rules.RESTART_OVERHEAD_SECONDS,
            loss=_checkpoint_loss(job),
        )

    def should_leave_spot(self, job: Job) -> bool:
        """While a spot attempt trains: has the deadline's slack run out (move through the pause path)?"""
        current = current_try(job)
        if current is None or current.purchase != Purchase.SPOT or (job.placement and job.placement.moved_to_on_demand):
            return False
        return self._deadline_says_on_demand(job, self.clock().timestamp())

    def check_deadline(self, job: Job, repository: JobRepository, runs: RunStopper) -> None:
        """A spot run whose deadline's slack ran out moves to on-demand through the checkpointed pause path:
        pending_action PREEMPT (requeued on its checkpoint), and the next placement is on-demand only."""
        placement = job.resource_config.placement
        if placement is None or placement.deadline is None or job.placement is None:
            return
        if job.pending_action is not None or not job.run_handle or not self.should_leave_spot(job):
            return
        reason = "deadline: the slack left no longer covers a spot restart; moving to on-demand with a checkpoint"
        record = job.placement.model_copy(update={"moved_to_on_demand": True}).model_dump(mode="json")
        changes = {"pending_action": PendingAction.PREEMPT, "pending_reason": reason, "placement": record}
        try:
            moved = repository.update(job.job_id, job.version, changes, allowed=PAUSABLE, action="preempt")
        except (ConcurrentModification, IllegalTransition, JobNotFound):
            return  # another stop or report won: the next report looks again
        logger.info("moving to on-demand for the deadline", extra={"job_id": job.job_id})
        runs.stop_run(moved, graceful=True, reason=reason)

    # ------------------------------------------------------------------ what happened
    def on_launched(self, job: Job, instance_type: str | None, zone: str | None, failures: Sequence[PoolFailure]) -> dict[str, Any]:
        """An EC2 Fleet answered: the pools it could not fill are blocked (capacity), and when it launched into
        another pool of the try's list than the first, the try (and the pool a later failure counts against)
        is that one. `instance_type` None: nothing launched (the run then ends as a capacity error)."""
        current = current_try(job)
        if job.placement is None or current is None or not (failures or instance_type):
            return {}
        now = self.clock()
        platform, _, _, purchase = current.pool.split("/")
        blocked = set(job.placement.pools_blocked)
        for failure in failures:
            pool = rules.pool_key(platform, failure.instance_type, failure.zone or "any", purchase)
            if pool == current.pool and instance_type is None:
                continue  # the run's end (a capacity error) counts the try's own pool, once
            state = self.health.record(pool, "capacity", now.timestamp(), f"{failure.code}: {failure.message}")
            self.health.block(pool, now.timestamp() + rules.block_seconds("capacity", state.capacity_errors))
            blocked.add(pool)
        changes: dict[str, Any] = {}
        if instance_type is not None:
            # The zone the instances landed in; a pool of the list without a zone ("any") when the job allows every zone.
            landed = [rules.pool_key(platform, instance_type, where, purchase) for where in (zone or "any", "any")]
            pool = next((p for p in landed if p in current.fleet_pools), landed[0])
            if pool != current.pool and pool in current.fleet_pools:
                candidate = _candidate_of(job, instance_type, current)
                changes = {
                    "pool": pool,
                    "instance_type": instance_type,
                    "candidate": candidate.index,
                    "hourly_usd": round(candidate.hourly_usd, 4),
                }
        tries = [t.model_copy(update=changes) if t.attempt == current.attempt else t for t in job.placement.tries]
        updated = job.placement.model_copy(update={"tries": tries, "pools_blocked": sorted(blocked)})
        return {"placement": updated.model_dump(mode="json")}

    def on_training(self, job: Job) -> dict[str, Any]:
        """The attempt reached TRAINING: closes an open recovery (PREEMPTED -> TRAINING) and times the first start."""
        if job.placement is None:
            return {}
        now = self.clock()
        recoveries = list(job.placement.recoveries)
        if recoveries and recoveries[-1].training_at is None:
            last = recoveries[-1]
            recoveries[-1] = last.model_copy(update={"training_at": now, "seconds": round((now - last.preempted_at).total_seconds(), 3)})
        first = job.placement.time_to_first_step_seconds
        if first is None:
            first = round((now - job.created_at).total_seconds(), 3)
        updated = job.placement.model_copy(update={"recoveries": recoveries, "time_to_first_step_seconds": first})
        return {"placement": updated.model_dump(mode="json")}

    def on_run_end(self, job: Job, run: RunDescription) -> dict[str, Any]:
        """Close the attempt's try; a capacity error or a preemption counts against its pool and blocks it."""
        current = current_try(job)
        if job.placement is None or current is None or current.ended_at is not None:
            return {}
        now = self.clock()
        kind = _failure_kind(run)
        record = job.placement
        changes: dict[str, Any] = {"ended_at": now, "outcome": _outcome(run, kind), "reason": run.message or None}
        if run.instance_type and current.instance_preferences and run.instance_type != current.instance_type:
            # SageMaker picked another type of the preference list: the try (and its pool's health) is that one's.
            platform, _, zone, purchase = current.pool.split("/")
            current = current.model_copy(
                update={"instance_type": run.instance_type, "pool": rules.pool_key(platform, run.instance_type, zone, purchase)}
            )
            changes.update(instance_type=current.instance_type, pool=current.pool)
        recoveries = list(record.recoveries)
        blocked = set(record.pools_blocked)
        if kind is not None:
            state = self.health.record(current.pool, kind, now.timestamp(), run.message or kind)
            repeats = state.preemptions if kind == "preempted" else state.capacity_errors
            self.health.block(current.pool, now.timestamp() + rules.block_seconds(kind, repeats))
            blocked.add(current.pool)
            if kind == "preempted":
                changes["work_lost_steps"] = _work_lost(job)
                recoveries.append(Recovery(preempted_at=now))
        tries = [t.model_copy(update=changes) if t.attempt == current.attempt else t for t in record.tries]
        updated = record.model_copy(
            update={
                "tries": tries,
                "pools_blocked": sorted(blocked),
                "recoveries": recoveries,
                "dollars_saved_usd": _saved(job, tries, now),
            }
        )
        return {"placement": updated.model_dump(mode="json")}


def placement_fields(changes: dict[str, Any]) -> dict[str, Any]:
    """A `placement` change as the Job field it becomes (for a job copy read before the write)."""
    return {"placement": PlacementRecord.model_validate(changes["placement"])} if changes else {}


def current_try(job: Job) -> PlacementTry | None:
    if job.placement is None:
        return None
    return next((t for t in reversed(job.placement.tries) if t.attempt == job.attempt), None)


def fleet_pools(job: Job) -> tuple[tuple[str, str | None], ...]:
    """The attempt's EC2 Fleet pools as (instance type, zone or None), in order; empty: one RunInstances."""
    current = current_try(job)
    if current is None:
        return ()
    pools = [pool.split("/") for pool in current.fleet_pools]
    return tuple((instance_type, None if zone == "any" else zone) for _, instance_type, zone, _ in pools)


def launch_choice(job: Job) -> tuple[bool, str | None, tuple[str, ...]]:
    """(spot?, zone, SageMaker instance preferences) of the attempt's placement; the job's own
    scheduling_config.preemptible without one."""
    current = current_try(job)
    if current is None:
        return job.scheduling_config.preemptible, None, ()
    zone = current.pool.split("/")[2]
    return current.purchase == Purchase.SPOT, None if zone == "any" else zone, tuple(current.instance_preferences)


def apply_to_run_spec(job: Job, spec: RunSpec) -> RunSpec:
    """The run spec on the attempt's candidate: its GPUs in resource_config, and the per-device batch and
    gradient accumulation that keep the global batch (the hyperparameter names the trainer reads)."""
    current = current_try(job)
    placement = job.resource_config.placement
    if current is None or placement is None or job.placement is None:
        return spec
    candidate = placement.candidates[current.candidate]
    adaptation = next((a for a in job.placement.adaptations if a.candidate == current.candidate), None)
    training, data = spec.training_config, spec.data_config
    if adaptation is not None:
        hyper = {
            **training.hyperparameters,
            "per_device_train_batch_size": str(adaptation.per_device_train_batch_size),
            "gradient_accumulation_steps": str(adaptation.gradient_accumulation_steps),
        }
        training = training.model_copy(update={"hyperparameters": hyper})
        data = data.model_copy(
            update={
                "batch_size": adaptation.per_device_train_batch_size,
                "gradient_accumulation_steps": adaptation.gradient_accumulation_steps,
            }
        )
    resources = rules.candidate_resources(spec.resource_config, candidate)
    # A training shape pins its instance types to its own GPUs only: on another candidate the launcher picks.
    shape = rules.shape_for(spec.training_shape, candidate)
    return spec.model_copy(update={"resource_config": resources, "training_config": training, "data_config": data, "training_shape": shape})


def remaining_work(job: Job) -> float:
    """Seconds of training left: the trainer's own estimate from its measured rate, else the job's declared
    work less the progress made."""
    placement = job.resource_config.placement
    if job.progress.eta_seconds is not None:
        return job.progress.eta_seconds
    declared = placement.expected_work_seconds if placement is not None else None
    if declared is None:
        return 0.0
    return declared * (1.0 - job.progress.percent / 100.0)


def remaining_on_fallback(job: Job) -> float:
    """Seconds of training left as the on-demand fallback would take them: the work left (`remaining_work`,
    measured on the candidate that last ran, or candidate 0's declared work) converted by the candidates'
    relative throughput (functions/catalog/instances.py GPU_THROUGHPUT): an H100 hour is 2.5 A100 hours."""
    placement = job.resource_config.placement
    work = remaining_work(job)
    if placement is None:
        return work
    fallback = rules.first_on_demand(placement.candidates)
    if fallback is None:
        return work
    return rules.work_on(work, placement.candidates[_measured_on(job)], placement.candidates[fallback])


def _measured_on(job: Job) -> int:
    """The candidate remaining_work's seconds are in: the latest try that trained (its trainer's rate), else 0."""
    if job.progress.eta_seconds is None or job.placement is None:
        return 0
    ran = [t for t in job.placement.tries if t.outcome != "capacity"]
    return ran[-1].candidate if ran else 0


def _adaptations(job: Job) -> list[Adaptation]:
    rows = rules.adaptations(job.resource_config, job.training_config, job.data_config)
    return [
        Adaptation(candidate=i, world_size=world, per_device_train_batch_size=per, gradient_accumulation_steps=acc, global_batch_size=glob)
        for i, (world, per, acc, glob) in enumerate(rows)
    ]


def _deadline_risk(job: Job, now: float) -> str | None:
    """Why the deadline may be missed even on on-demand from now, or None."""
    placement = job.resource_config.placement
    if placement is None or placement.deadline is None:
        return None
    left, work = placement.deadline.timestamp() - now, remaining_on_fallback(job)
    if work and work + rules.RESTART_OVERHEAD_SECONDS > left:
        return f"deadline at risk: {work:.0f} s of work left plus a {rules.RESTART_OVERHEAD_SECONDS} s start, {max(left, 0):.0f} s to go"
    return None


def _instance_preferences(chosen: rules.Candidate, healthy_after: list[rules.Candidate]) -> list[str]:
    """SageMaker on-demand: the chosen type, then the next healthy candidates of the same shape (GPUs per node,
    nodes: the same run spec and adaptation), at most InstancePreferences' 5; empty when there is no second."""
    if chosen.spec.platform != "sagemaker" or chosen.spec.purchase != Purchase.ON_DEMAND:
        return []
    types = [chosen.choice.instance_type]
    for other in healthy_after:
        same = (other.spec.platform, other.spec.purchase, other.spec.gpus_per_node, other.spec.nodes) == (
            "sagemaker",
            Purchase.ON_DEMAND,
            chosen.spec.gpus_per_node,
            chosen.spec.nodes,
        )
        if same and other.choice.instance_type not in types and len(types) < rules.MAX_INSTANCE_PREFERENCES:
            types.append(other.choice.instance_type)
    return types if len(types) > 1 else []


def _fleet_pools(chosen: tuple[rules.Candidate, str], healthy_after: list[tuple[rules.Candidate, str]]) -> list[str]:
    """EC2: the chosen pool, then the next healthy pools of the same shape and purchase (GPUs per node, nodes:
    the same run spec and adaptation on any), for one instant EC2 Fleet; empty when there is no second."""
    candidate, zone = chosen
    if candidate.spec.platform != "ec2":
        return []
    shape = (candidate.spec.purchase, candidate.spec.gpus_per_node, candidate.spec.nodes)
    pools = [rules.pool_key("ec2", candidate.choice.instance_type, zone, candidate.spec.purchase)]
    for other, other_zone in healthy_after:
        if other.spec.platform == "ec2" and (other.spec.purchase, other.spec.gpus_per_node, other.spec.nodes) == shape:
            pool = rules.pool_key("ec2", other.choice.instance_type, other_zone, other.spec.purchase)
            if pool not in pools:
                pools.append(pool)
    return pools if len(pools) > 1 else []


def _candidate_of(job: Job, instance_type: str, current: PlacementTry) -> rules.Candidate:
    """The candidate of the try's fleet list whose instance type EC2 launched (the try's own when several share it)."""
    candidates = rules.resolve(job.resource_config, job.training_shape)
    same = [c for c in candidates if c.choice.instance_type == instance_type and c.spec.purchase == current.purchase]
    same.sort(key=lambda c: c.index != current.candidate)
    return same[0] if same else candidates[current.candidate]


def _healthy(state: PoolState | None, now: float) -> bool:
    return state is None or state.blocked_until <= now


def _failure_kind(run: RunDescription) -> str | None:
    if run.state == RunState.PREEMPTED or run.error_type == ErrorType.PREEMPTED:
        return "preempted"
    if run.error_type == ErrorType.CAPACITY:
        return "capacity"
    return None


def _outcome(run: RunDescription, kind: str | None) -> str:
    if kind is not None:
        return kind
    return {RunState.COMPLETED: "completed", RunState.STOPPED: "stopped"}.get(run.state, "failed")


def _checkpoint_loss(job: Job) -> float:
    """Seconds a preemption may lose: the time between checkpoints, from the trainer's rate when known."""
    progress = job.progress
    save_steps = job.output_config.checkpoint.save_steps
    if progress.eta_seconds and progress.total_steps and progress.step < progress.total_steps:
        per_step = progress.eta_seconds / (progress.total_steps - progress.step)
        return per_step * save_steps
    return 0.0


def _work_lost(job: Job) -> int:
    """Steps done since the latest checkpoint: what the preemption threw away."""
    saved = max((ref.step for ref in job.checkpoints), default=0)
    return max(job.progress.step - saved, 0)


def _saved(job: Job, tries: list[PlacementTry], now: datetime) -> float:
    """Dollars saved against running each try's time on the first on-demand candidate."""
    placement = job.resource_config.placement
    if placement is None:
        return 0.0
    try:
        candidates = rules.resolve(job.resource_config, job.training_shape)
    except Exception:
        logger.exception("placement candidates of %s no longer resolve", job.job_id)
        return 0.0
    reference = next((c for c in candidates if c.spec.purchase == Purchase.ON_DEMAND), None)
    if reference is None:
        reference_hourly = max((c.choice.hourly_usd * c.choice.instance_count for c in candidates), default=0.0)
    else:
        reference_hourly = reference.hourly_usd
    saved = 0.0
    for t in tries:
        hours = ((t.ended_at or now) - t.started_at).total_seconds() / 3600
        saved += (reference_hourly - t.hourly_usd) * hours
    return round(saved, 4)
