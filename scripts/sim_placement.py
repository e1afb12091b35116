"""Placement simulator (issue 26): the real placement service (functions/service/placement.py: candidate
order, pool health and its blocks, the deadline policy) on a fake clock, against synthetic seeded on/off
capacity traces per spot pool, compared with the offline optimum computed by dynamic programming over the
same trace. Prints figures (docs/BENCHMARKS.md, "Placement"); exits non-zero only when a goal is missed.

The model, in ticks of 5 minutes (a scheduler pass):
- candidates: A100 x8 spot (p4d), H100 x8 spot (p5), A100-80GB x8 spot (p4de), A100 x8 on-demand, over 3
  availability zones: 9 spot pools with a trace each, on-demand always there. Work is counted in training
  steps (the global batch is the same on every candidate, so a step is the same work everywhere); a
  candidate does steps per tick in proportion to its relative throughput (functions/catalog/instances.py
  GPU_THROUGHPUT x world size): A100 x8 2 steps a tick, H100 x8 5.
- a spot pool's trace is a two-state Markov chain (mean up 2-8 h, mean down 20 min-2 h, per pool); one pool
  in five (--dry) is dry (never up). A launch into a down pool is a capacity error; a running placement whose pool
  goes down is preempted and loses the steps since its last checkpoint (every SAVE_STEPS steps).
- every (re)start costs 2 ticks (10 minutes, catalog RESTART_OVERHEAD_SECONDS) of paid time without work.
- jobs need 2-8 hours of work on candidate 0 and the on-demand fallback (A100 x8; 0.8-3.2 h on H100 x8); the deadline leaves
  1.3x-3x that (--slack); one spot pool in five is dry (--dry).
- price per tick: the catalog's (functions/catalog/pricing.py: spot at its estimate, on-demand in full).
The optimum knows the whole trace: it runs any up pool (or on-demand) each tick, pays the same restart
overhead on every start, and loses nothing to preemptions (it leaves before them).

    .venv/bin/python scripts/sim_placement.py [--traces 1000] [--seed 1] [--slack 1.3 3.0] [--dry 0.2]
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from functions.catalog import placement as rules
from functions.errors import InvalidRequest
from functions.service.placement import PlacementService, current_try, placement_fields
from functions.service.ports import RunDescription, RunState
from schemas.job import CheckpointRef, ErrorType, Job, Progress
from tests.lifecycle_support import make_job, make_request
from tests.placement_support import InMemoryPoolHealth

TICK = 300  # seconds per scheduler pass
RESTART = rules.RESTART_OVERHEAD_SECONDS // TICK  # ticks of start-up per placement
SAVE_STEPS = 4  # steps between checkpoints (output_config.checkpoint.save_steps): 2 ticks on A100, under 1 on H100
ZONES = ["us-east-1a", "us-east-1b", "us-east-1c"]
T0 = datetime(2026, 11, 26, tzinfo=UTC)
CANDIDATES = [
    {"gpu_type": "A100", "gpus_per_node": 8, "purchase": "spot"},
    {"gpu_type": "H100", "gpus_per_node": 8, "purchase": "spot"},
    {"gpu_type": "A100-80GB", "gpus_per_node": 8, "purchase": "spot"},
    {"gpu_type": "A100", "gpus_per_node": 8, "purchase": "on_demand"},
]
# Steps a tick per unit of relative throughput (rules.throughput: A100 x8 = 8 -> 2 steps, H100 x8 = 20 -> 5).
STEPS_PER_THROUGHPUT = 0.25
GOAL_RATIO = 1.1


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


@dataclass
class Trace:
    work: int  # steps of work
    fallback_ticks: int  # ticks the work takes on the on-demand fallback
    deadline: int  # ticks from the start
    up: dict[str, np.ndarray]  # spot pool -> bool per tick


@dataclass
class Outcome:
    cost: float
    finished: int | None  # tick the work was done, None if never
    preemptions: int
    capacity_errors: int
    on_demand_ticks: int


def job_for(work: int, deadline: int) -> Job:
    placement = {
        "candidates": CANDIDATES,
        "availability_zones": ZONES,
        "deadline": (T0 + timedelta(seconds=deadline * TICK)).isoformat(),
    }
    request = make_request(resource_config={"gpu_count": 8, "placement": placement}, max_steps=work, save_steps=SAVE_STEPS)
    return make_job(request, created_at=T0)


@dataclass
class Pools:
    spot: list[str]  # in the order the service tries them
    on_demand: str  # the fallback's pool
    price: dict[str, float]  # per tick
    steps: dict[str, int]  # steps per tick (the candidate's relative throughput)


def pools_of(job: Job) -> Pools:
    rc = job.resource_config
    assert rc.placement is not None
    pools = Pools([], "", {}, {})
    for candidate, zone in rules.order(rules.resolve(rc), [], [], ZONES):
        pool = rules.pool_key(candidate.spec.platform, candidate.choice.instance_type, zone, candidate.spec.purchase)
        pools.price[pool] = candidate.hourly_usd * TICK / 3600
        rate = rules.throughput(candidate.spec) * STEPS_PER_THROUGHPUT
        assert rate == int(rate) and rate > 0, f"{candidate.spec.label()}: {rate} steps a tick"
        pools.steps[pool] = int(rate)
        if candidate.spec.purchase == "spot":
            pools.spot.append(pool)
        elif not pools.on_demand:
            pools.on_demand = pool
    return pools


def make_trace(rng: np.random.Generator, pools: Pools, slack: tuple[float, float], dry: float) -> Trace:
    fallback_ticks = int(rng.integers(24, 97))
    work = fallback_ticks * pools.steps[pools.on_demand]
    deadline = int(fallback_ticks * rng.uniform(*slack))
    spot = pools.spot
    up = {}
    for pool in spot:
        if rng.random() < dry:
            up[pool] = np.zeros(deadline + 1, dtype=bool)
            continue
        mean_up, mean_down = rng.uniform(24, 96), rng.uniform(4, 24)
        state = rng.random() < mean_up / (mean_up + mean_down)
        row = np.empty(deadline + 1, dtype=bool)
        for t in range(deadline + 1):
            row[t] = state
            state = rng.random() >= 1 / mean_up if state else rng.random() < 1 / mean_down
        up[pool] = row
    return Trace(work, fallback_ticks, deadline, up)


def _with(job: Job, changes: dict) -> Job:
    return job.model_copy(update=placement_fields(changes))


def online(trace: Trace, pools: Pools) -> Outcome:
    """The control plane's policy, tick by tick: the service picks, the trace answers."""
    clock = Clock()
    service = PlacementService(InMemoryPoolHealth(), clock)
    job = job_for(trace.work, trace.deadline)
    done = saved = startup = 0
    running: str | None = None
    rate = pools.steps[pools.spot[0]]  # steps a tick where the trainer last measured (candidate 0 before any)
    cost, preemptions, capacity_errors, od_ticks = 0.0, 0, 0, 0
    horizon = trace.deadline + 48  # a miss is counted, not looped on
    for t in range(horizon):
        clock.now = T0 + timedelta(seconds=t * TICK)
        job = job.model_copy(
            update={
                "progress": Progress(step=done, total_steps=trace.work, eta_seconds=(trace.work - done) / rate * TICK),
                "checkpoints": [CheckpointRef(checkpoint_id=f"step-{saved:06d}", step=saved, uri="s3://sim/ckpt")] if saved else [],
            }
        )
        if running is not None and running in trace.up and not trace.up[running][min(t, trace.deadline)]:
            job = _with(job, service.on_run_end(job, RunDescription(RunState.PREEMPTED, ErrorType.PREEMPTED, "spot reclaimed")))
            running, done, preemptions = None, saved, preemptions + 1
        elif running is not None and service.should_leave_spot(job):
            # The checkpointed pause path: save, stop, place again (on-demand now).
            saved = done
            job = _with(job, service.on_run_end(job, RunDescription(RunState.STOPPED, None, "deadline: moving to on-demand")))
            running = None
        if running is None:
            for _ in range(len(pools.price)):  # every capacity error and the next candidate within this one tick
                job = job.model_copy(update={"attempt": job.attempt + 1})
                job = _with(job, service.choose(job, job.attempt))
                current = current_try(job)
                assert current is not None
                if current.pool not in trace.up or trace.up[current.pool][min(t, trace.deadline)]:
                    running, startup = current.pool, RESTART
                    rate = pools.steps[running]
                    job = _with(job, service.on_training(job))
                    break
                capacity_errors += 1
                job = _with(job, service.on_run_end(job, RunDescription(RunState.FAILED, ErrorType.CAPACITY, "no capacity")))
            if running is None:
                continue
        cost += pools.price[running]
        od_ticks += running not in trace.up
        if startup:
            startup -= 1
        else:
            done = min(done + pools.steps[running], trace.work)
            saved = max(saved, done - done % SAVE_STEPS if done < trace.work else done)
        if done >= trace.work:
            return Outcome(cost, t + 1, preemptions, capacity_errors, od_ticks)
    return Outcome(cost, None, preemptions, capacity_errors, od_ticks)


def optimum(trace: Trace, pools: Pools) -> float:
    """Least cost to finish by the deadline knowing the trace: DP over (tick, pool warm or none, steps done),
    each pool doing its own steps a tick."""
    inf = float("inf")
    names = [*pools.spot, pools.on_demand]
    price = np.array([pools.price[p] for p in names])
    steps = [pools.steps[p] for p in names]
    up = np.array([trace.up[p] for p in pools.spot] + [np.ones(trace.deadline + 1, dtype=bool)])
    q, w, d = len(names), trace.work, trace.deadline
    cost = np.full((q + 1, w + 1), inf)  # row 0: no placement; row 1 + i: warm on pools[i]
    cost[0, 0] = 0.0
    arrive = np.full((d + RESTART + 1, q + 1, w + 1), inf)
    best = inf
    for t in range(d + 1):
        cur = np.minimum(cost, arrive[t])
        best = min(best, float(cur[:, w].min()))
        if t == d:
            break
        nxt = np.full_like(cur, inf)
        any_state = cur.min(axis=0)
        nxt[0] = any_state
        for i in range(q):
            if up[i, t]:
                r = steps[i]
                nxt[1 + i, r:] = np.minimum(nxt[1 + i, r:], cur[1 + i, : w + 1 - r] + price[i])
                # The last tick may do fewer steps than the pool could: done is done.
                nxt[1 + i, w] = min(nxt[1 + i, w], float(cur[1 + i, w - r + 1 : w].min(initial=inf)) + price[i])
            if t + RESTART <= d and up[i, t : t + RESTART].all():
                arrive[t + RESTART, 1 + i] = np.minimum(arrive[t + RESTART, 1 + i], any_state + RESTART * price[i])
        cost = nxt
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--slack", type=float, nargs=2, default=(1.3, 3.0), help="deadline / work, drawn between these")
    parser.add_argument("--dry", type=float, default=0.2, help="share of spot pools never up")
    args = parser.parse_args()
    pools = pools_of(job_for(120, 96))
    on_demand = pools.price[pools.on_demand]
    started = time.perf_counter()
    ratios, met, refused, preemptions, capacity, od_share, all_od = [], 0, 0, 0, 0, [], []
    candidates = rules.resolve(job_for(48, 96).resource_config)
    for i in range(args.traces):
        trace = make_trace(np.random.default_rng(args.seed * 1_000_003 + i), pools, tuple(args.slack), args.dry)
        # expected_work_seconds is candidate 0's (H100 x8) time for the work
        work_seconds = int(trace.work / pools.steps[pools.spot[0]] * TICK)
        try:  # the submit check: a deadline the on-demand fallback cannot meet is a 422, not a job
            rules.check_deadline(candidates, trace.deadline * TICK, work_seconds, 0.0)
        except InvalidRequest:
            refused += 1
            continue
        ours = online(trace, pools)
        best = optimum(trace, pools)
        met += ours.finished is not None and ours.finished <= trace.deadline
        ratios.append(ours.cost / best)
        preemptions += ours.preemptions
        capacity += ours.capacity_errors
        od_share.append(ours.on_demand_ticks / max(ours.finished or 1, 1))
        all_od.append((trace.fallback_ticks + RESTART) * on_demand / best)
    elapsed = time.perf_counter() - started
    r = np.array(ratios)
    admitted = args.traces - refused
    print(
        f"placement simulator: {args.traces} traces, seed {args.seed}, {len(pools.spot)} spot pools + on-demand, tick {TICK} s, "
        f"deadline {args.slack[0]}-{args.slack[1]}x the work, {100 * args.dry:.0f}% of spot pools dry"
    )
    print(f"  refused at submit (422):  {refused} (work + restart overhead past the deadline)")
    print(f"  deadlines met:            {met}/{admitted} ({100 * met / max(admitted, 1):.1f}%)  [goal 100%]")
    print(f"  mean cost / optimum:      {r.mean():.3f}  [goal <= {GOAL_RATIO}]")
    print(f"  median / p95 / max:       {np.median(r):.3f} / {np.percentile(r, 95):.3f} / {r.max():.3f}")
    print(f"  all on-demand / optimum:  {np.mean(all_od):.3f} (what no spot would cost)")
    print(f"  preemptions, capacity errors per job: {preemptions / args.traces:.2f}, {capacity / args.traces:.2f}")
    print(f"  share of ticks on on-demand: {100 * float(np.mean(od_share)):.1f}%")
    print(f"  wall time: {elapsed:.1f} s")
    return 0 if met == admitted and r.mean() <= GOAL_RATIO else 1


if __name__ == "__main__":
    raise SystemExit(main())
