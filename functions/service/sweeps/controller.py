"""The sweep controller: each decision rebuilds the Optuna study from DynamoDB and acts on it (ask-and-tell).

Nothing lives in the process: trials, their parameters, Optuna's per-trial system attributes (the grid
point, the asha rungs), intermediate and final values are all items of the sweep's partition
(functions/adapters/sweeps.py). A decision:

1. brings each unfinished trial up to date with its job (COMPLETED -> COMPLETE with the metric's last
   reported value; FAILED or CANCELLED -> FAIL, or PRUNED when the sweep stopped it; a PREEMPTED job that
   resumes is the same trial, counted once); a trial claimed but never submitted (its decision died)
   is taken over after SUBMIT_LEASE;
2. a PAUSED sweep pauses trial jobs that became pausable; an ended sweep cancels what still runs;
3. prunes running trials whose intermediate values lose (MedianPruner / SuccessiveHalvingPruner / HyperbandPruner),
   cancelling the job with a reason the job's history shows;
4. ends the sweep when maxTrials trials have ended, the target value is reached, N trials in a row did
   not improve, or maxFailedTrials failed;
5. starts trials up to max_parallel_trials and maxTrials: each new trial is sampled from a study rebuilt
   with every trial so far and a sampler seeded from (seed, trial number), so a sweep is reproducible
   whatever the timing of its wake-ups, and is created by a conditional write (one decision wins trial N).

This is the only module that imports Optuna (the controller Lambda's bundle, local mode).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial
from optuna.trial import TrialState as OptunaState

from functions.errors import DomainError, JobNotFound
from functions.service.feature_ports import SweepRepository
from functions.service.jobs import JobService
from functions.service.ports import JobQuery
from functions.service.sweeps.service import best_trial_record, cancel_trials, pause_trials, trial_labels, trial_request
from schemas.job import Job
from schemas.status import TERMINAL, JobStatus
from schemas.sweeps import (
    SWEEP_TERMINAL,
    TRIAL_ENDED,
    EarlyStoppingType,
    Goal,
    ParameterSpec,
    ParameterType,
    Scale,
    Sweep,
    SweepMethod,
    SweepStatus,
    Trial,
    TrialState,
    TuningConfig,
)

optuna.logging.set_verbosity(optuna.logging.WARNING)
logger = logging.getLogger(__name__)

SUBMIT_LEASE = timedelta(seconds=30)  # a trial claimed this long ago without a job belongs to a decision that died
_ATTEMPTS = 8
_STATE = {
    TrialState.SUBMITTING: OptunaState.RUNNING,
    TrialState.RUNNING: OptunaState.RUNNING,
    TrialState.COMPLETE: OptunaState.COMPLETE,
    TrialState.PRUNED: OptunaState.PRUNED,
    TrialState.FAIL: OptunaState.FAIL,
}


@dataclass
class Decision:
    sweep_id: str
    status: str = ""
    started: list[int] = field(default_factory=list)
    pruned: list[int] = field(default_factory=list)
    ended: list[int] = field(default_factory=list)
    detail: str = ""


def distributions(tuning: TuningConfig) -> dict[str, BaseDistribution]:
    return {name: _distribution(spec) for name, spec in tuning.parameters.items()}


def _distribution(spec: ParameterSpec) -> BaseDistribution:
    if spec.values is not None:
        return CategoricalDistribution(list(spec.values))
    assert spec.min is not None and spec.max is not None
    log = spec.scale == Scale.LOG
    if spec.type == ParameterType.INT:
        return IntDistribution(int(spec.min), int(spec.max), log=log, step=1 if log else int(spec.step or 1))
    return FloatDistribution(spec.min, spec.max, log=log, step=None if log else spec.step)


def trial_seed(seed: int, number: int) -> int:
    """The seed of trial `number`'s sampler: mixed (not seed + number), so that sweeps with neighbouring
    seeds do not share their trials shifted by one."""
    digest = hashlib.sha256(f"{seed}:{number}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def sampler_for(tuning: TuningConfig, number: int) -> optuna.samplers.BaseSampler:
    """The sampler that draws trial `number`, seeded from (seed, number): reproducible, restart-proof."""
    seed = trial_seed(tuning.seed or 0, number)
    if tuning.method == SweepMethod.GRID:
        space = {name: spec.grid_values() or [] for name, spec in tuning.parameters.items()}
        # The grid sampler's seed shuffles the grid that grid ids index: it must be the sweep's own, never per trial.
        return optuna.samplers.GridSampler(space, seed=tuning.seed or 0)
    if tuning.method == SweepMethod.RANDOM:
        return optuna.samplers.RandomSampler(seed=seed)
    startup = min(10, max(3, tuning.max_trials // 5))
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, constant_liar=True, multivariate=True)


def pruner_for(tuning: TuningConfig, trials: list[Trial] | None = None) -> optuna.pruners.BasePruner:
    stopping = tuning.early_stopping
    if stopping.type == EarlyStoppingType.MEDIAN:
        return optuna.pruners.MedianPruner(n_startup_trials=stopping.startup_trials, n_warmup_steps=stopping.warmup_steps)
    if stopping.type == EarlyStoppingType.ASHA:
        return optuna.pruners.SuccessiveHalvingPruner(
            min_resource=stopping.min_resource or "auto", reduction_factor=stopping.reduction_factor
        )
    if stopping.type == EarlyStoppingType.HYPERBAND:
        max_resource = stopping.max_resource or hyperband_max_resource(trials or [])
        if max_resource is None:
            return optuna.pruners.NopPruner()  # "auto" and no trial completed yet: nothing to compare with
        return optuna.pruners.HyperbandPruner(
            min_resource=stopping.min_resource or 1,
            max_resource=max(max_resource, stopping.min_resource or 1),
            reduction_factor=stopping.reduction_factor,
            bootstrap_count=stopping.bootstrap_count,
        )
    return optuna.pruners.NopPruner()


def hyperband_max_resource(trials: list[Trial]) -> int | None:
    """Hyperband's "auto" maxResource, fixed once and for all: the last step + 1 of the first trial that
    completed (Optuna sets it at the first pruning check after a trial completed and keeps it; a study
    rebuilt at every decision must not let it move, as its brackets are computed from it)."""
    done = [t for t in trials if t.state == TrialState.COMPLETE and t.intermediate_values]
    if not done:
        return None
    first = min(done, key=lambda t: (t.ended_at or t.created_at, t.number))
    return max(first.intermediate_values) + 1


def rebuild_study(tuning: TuningConfig, trials: list[Trial], number: int) -> optuna.Study:
    """An in-memory study holding every trial as stored, sampling with the sampler of trial `number`.

    The trials are built as FrozenTrials and added with one `add_trials` (no `create_trial` per trial;
    docs/BENCHMARKS.md). The study's name comes from the sweep's seed: Hyperband assigns a trial to its
    bracket by hashing (study name, trial number), so the same seed gives the same brackets."""
    direction = optuna.study.StudyDirection.MAXIMIZE if tuning.metric.goal == Goal.MAXIMIZE else optuna.study.StudyDirection.MINIMIZE
    study = optuna.create_study(
        study_name=f"sweep-{tuning.seed or 0}",
        direction=direction,
        sampler=sampler_for(tuning, number),
        pruner=pruner_for(tuning, trials),
    )
    dists = distributions(tuning)
    frozen = []
    for trial in trials:
        state = _STATE[trial.state]
        value = trial.value if state == OptunaState.COMPLETE else None
        if state == OptunaState.COMPLETE and value is None:
            state = OptunaState.FAIL
        frozen.append(
            FrozenTrial(
                number=trial.number,
                trial_id=trial.number,
                state=state,
                value=value,
                values=None,
                datetime_start=trial.created_at,
                datetime_complete=(trial.ended_at or trial.created_at) if state.is_finished() else None,
                params=dict(trial.params),
                distributions={k: dists[k] for k in trial.params if k in dists},
                user_attrs={},
                system_attrs=dict(trial.system_attrs),
                intermediate_values=dict(trial.intermediate_values),
            )
        )
    study.add_trials(frozen)
    return study


class SweepController:
    def __init__(
        self,
        sweeps: SweepRepository,
        jobs: JobService,
        *,
        clock: Callable[[], datetime] | None = None,
        submit_lease: timedelta = SUBMIT_LEASE,
    ) -> None:
        self.sweeps = sweeps
        self.jobs = jobs
        self.clock = clock or (lambda: datetime.now(UTC))
        self.submit_lease = submit_lease

    def reconcile(self) -> list[Decision]:
        """Decide for every sweep not yet ended (the reconciler: a wake-up that was lost changes nothing)."""
        decisions = []
        for sweep_id in list(self.sweeps.active_sweep_ids()):
            try:
                decisions.append(self.decide(sweep_id))
            except Exception:
                logger.exception("sweep %s: decision failed; next pass", sweep_id)
        return decisions

    def decide(self, sweep_id: str) -> Decision:
        decision = Decision(sweep_id)
        for _ in range(_ATTEMPTS):
            sweep, trials = self.sweeps.load(sweep_id)
            if self._refresh(sweep, trials, decision):
                continue  # a trial changed: decide on what is stored now
            decision.status = sweep.status.value
            if sweep.status in SWEEP_TERMINAL:
                cancel_trials(
                    self.jobs, self.sweeps, sweep_id, f"sweep {sweep_id} is {sweep.status.value}: {sweep.status_reason or ''}".rstrip(": ")
                )
                self._record_best(sweep, trials)
                return decision
            if sweep.status == SweepStatus.PAUSED:
                pause_trials(self.jobs, self.sweeps, sweep_id)
                return decision
            if self._prune(sweep, trials, decision):
                continue
            ending = self._ending(sweep.hyperparameter_tuning_config, trials)
            if ending is not None:
                status, reason = ending
                if self._end(sweep, trials, status, reason):
                    decision.status, decision.detail = status.value, reason
                    cancel_trials(self.jobs, self.sweeps, sweep_id, f"sweep {sweep_id} {status.value.lower()}: {reason}")
                    return decision
                continue
            outcome = self._start(sweep, trials, decision)
            if outcome == "retry":
                continue
            self._record_best(sweep, trials)
            return decision
        logger.warning("sweep %s kept changing during a decision; the next wake decides", sweep_id)
        return decision

    # --- 1. trials follow their jobs -------------------------------------------------------------

    def _refresh(self, sweep: Sweep, trials: list[Trial], decision: Decision) -> bool:
        """Write what each unfinished trial's job says; True when something was written (reload)."""
        wrote = False
        now = self.clock()
        for trial in trials:
            if trial.state in TRIAL_ENDED:
                continue
            if trial.job_id is None:
                if now - trial.created_at > self.submit_lease:
                    wrote |= self._take_over(sweep, trial)
                continue
            try:
                job = self.jobs.repo.get(trial.job_id)
            except JobNotFound:
                update = {"state": TrialState.FAIL, "reason": "its job was deleted", "ended_at": now}
            else:
                update = self._follow(sweep, trial, job, now)
            if not update:
                continue
            changed = trial.model_copy(update=update)
            if self.sweeps.update_trial(sweep.sweep_id, changed, trial.version) and changed.state in TRIAL_ENDED:
                decision.ended.append(trial.number)
                logger.info(
                    "sweep %s: trial %d %s (%s)", sweep.sweep_id, trial.number, changed.state.value, changed.reason or changed.value
                )
            wrote = True
        return wrote

    def _follow(self, sweep: Sweep, trial: Trial, job: Job, now: datetime) -> dict[str, Any]:
        status = job.status
        if status not in TERMINAL or (status == JobStatus.PREEMPTED and job.run_outcome == "resume_preempted"):
            return {"job_status": status.value, "state": TrialState.RUNNING} if trial.job_status != status.value else {}
        ended: dict[str, Any] = {"job_status": status.value, "ended_at": now}
        metric = sweep.hyperparameter_tuning_config.metric.name
        if status == JobStatus.COMPLETED:
            if not trial.intermediate_values:
                return {**ended, "state": TrialState.FAIL, "reason": f"the job completed without reporting the metric {metric!r}"}
            last = max(trial.intermediate_values)
            return {**ended, "state": TrialState.COMPLETE, "value": trial.intermediate_values[last], "reason": None}
        if status == JobStatus.CANCELLED and trial.prune_requested:
            return {**ended, "state": TrialState.PRUNED}
        why = job.error_message or (f"job {status.value}")
        return {**ended, "state": TrialState.FAIL, "reason": f"job {status.value}: {why}"}

    def _take_over(self, sweep: Sweep, trial: Trial) -> bool:
        """A trial claimed by a decision that died before recording its job: adopt the job if it was
        submitted (found by its labels), else submit it now."""
        owner = sweep.owner
        query = JobQuery(owner=owner, labels=trial_labels(sweep.sweep_id, trial.number), limit=5)
        found, _ = self.jobs.repo.list_jobs(query)
        if found:
            job = found[0]
            changed = trial.model_copy(update={"job_id": job.job_id, "state": TrialState.RUNNING, "job_status": job.status.value})
            self.sweeps.update_trial(sweep.sweep_id, changed, trial.version)
            return True
        # Renew the claim first (conditional): of two decisions taking over, one submits.
        renewed = trial.model_copy(update={"created_at": self.clock()})
        if not self.sweeps.update_trial(sweep.sweep_id, renewed, trial.version):
            return True
        self._submit(sweep, renewed.model_copy(update={"version": trial.version + 1}))
        return True

    # --- 3. pruning ------------------------------------------------------------------------------

    def _prune(self, sweep: Sweep, trials: list[Trial], decision: Decision) -> bool:
        tuning = sweep.hyperparameter_tuning_config
        if tuning.early_stopping.type == EarlyStoppingType.NONE:
            return False
        candidates = [t for t in trials if t.state == TrialState.RUNNING and t.intermediate_values and not t.prune_requested and t.job_id]
        if not candidates:
            return False
        study = rebuild_study(tuning, trials, len(trials))
        frozen = {t.number: t for t in study.get_trials(deepcopy=False)}
        wrote = False
        for trial in candidates:
            before: FrozenTrial = frozen[trial.number]
            attrs_before = dict(before.system_attrs)
            prune = study.pruner.prune(study, before)
            after = study._storage.get_trial(before._trial_id)  # asha records its rungs there
            attrs = dict(after.system_attrs)
            if not prune:
                if attrs != attrs_before:
                    self.sweeps.update_trial(sweep.sweep_id, trial.model_copy(update={"system_attrs": attrs}), trial.version)
                    wrote = True
                continue
            step = max(trial.intermediate_values)
            reason = (
                f"pruned by sweep {sweep.sweep_id} ({tuning.early_stopping.type.value} early stopping): "
                f"{tuning.metric.name}={trial.intermediate_values[step]:.6g} at step {step} loses to the other trials"
            )
            marked = trial.model_copy(update={"prune_requested": True, "reason": reason, "system_attrs": attrs})
            if not self.sweeps.update_trial(sweep.sweep_id, marked, trial.version):
                return True
            wrote = True
            decision.pruned.append(trial.number)
            logger.info("sweep %s: %s", sweep.sweep_id, reason)
            try:
                self.jobs.cancel(trial.job_id or "", self.jobs.principal(sweep.owner), reason)
            except DomainError as exc:
                logger.info("sweep %s: pruned trial %d not cancelled: %s", sweep.sweep_id, trial.number, exc)
        return wrote

    # --- 4. the end ------------------------------------------------------------------------------

    @staticmethod
    def _ending(tuning: TuningConfig, trials: list[Trial]) -> tuple[SweepStatus, str] | None:
        failed = [t for t in trials if t.state == TrialState.FAIL]
        done = [t for t in trials if t.state == TrialState.COMPLETE and t.value is not None]
        if tuning.max_failed_trials is not None and len(failed) >= tuning.max_failed_trials:
            return SweepStatus.FAILED, f"{len(failed)} trials failed (maxFailedTrials={tuning.max_failed_trials})"
        sign = 1.0 if tuning.metric.goal == Goal.MAXIMIZE else -1.0
        target = tuning.completion_criteria.target_value
        if target is not None:
            hit = next((t for t in done if sign * (t.value or 0.0) >= sign * target), None)
            if hit is not None:
                return SweepStatus.COMPLETED, f"trial {hit.number} reached the target {tuning.metric.name}={target:g} ({hit.value:.6g})"
        patience = tuning.completion_criteria.no_improvement_trials
        if patience is not None and done:
            ordered = sorted(done, key=lambda t: (t.ended_at or t.created_at, t.number))
            best_at, best = 0, sign * (ordered[0].value or 0.0)
            for i, t in enumerate(ordered):
                if sign * (t.value or 0.0) > best:
                    best_at, best = i, sign * (t.value or 0.0)
            if len(ordered) - 1 - best_at >= patience:
                return SweepStatus.COMPLETED, f"no improvement in the last {patience} finished trials"
        limit = tuning.effective_max_trials()
        if len(trials) >= limit and all(t.state in TRIAL_ENDED for t in trials):
            if not done:
                return SweepStatus.FAILED, f"all {len(trials)} trials ended and none completed with a value"
            return SweepStatus.COMPLETED, f"{len(trials)} trials ended (maxTrials={limit})"
        return None

    def _end(self, sweep: Sweep, trials: list[Trial], status: SweepStatus, reason: str) -> bool:
        now = self.clock()
        best = best_trial_record(self.jobs, sweep.hyperparameter_tuning_config, trials)
        ended = sweep.model_copy(update={"status": status, "status_reason": reason, "ended_at": now, "updated_at": now, "best_trial": best})
        if self.sweeps.update(ended, sweep.version):
            logger.info("sweep %s %s: %s", sweep.sweep_id, status.value, reason)
            return True
        return False

    def _record_best(self, sweep: Sweep, trials: list[Trial]) -> None:
        best = best_trial_record(self.jobs, sweep.hyperparameter_tuning_config, trials)
        if best != sweep.best_trial:
            self.sweeps.update(sweep.model_copy(update={"best_trial": best}), sweep.version)  # lost: the next decision writes it

    # --- 5. new trials ---------------------------------------------------------------------------

    def _start(self, sweep: Sweep, trials: list[Trial], decision: Decision) -> str:
        tuning = sweep.hyperparameter_tuning_config
        limit = tuning.effective_max_trials()
        dists = distributions(tuning)
        trials = list(trials)
        study: optuna.Study | None = None
        while sum(t.state not in TRIAL_ENDED for t in trials) < tuning.max_parallel_trials and len(trials) < limit:
            number = len(trials)
            if study is None:
                study = rebuild_study(tuning, trials, number)  # once per decision, not once per new trial
            else:
                study.sampler = sampler_for(tuning, number)  # the study already holds the trials started since
            asked = study.ask(dists)
            frozen = study._storage.get_trial(asked._trial_id)
            trial = Trial(
                number=number,
                state=TrialState.SUBMITTING,
                params=dict(asked.params),
                created_at=self.clock(),
                system_attrs=dict(frozen.system_attrs),
            )
            claimed = self.sweeps.claim_trial(sweep.sweep_id, trial)
            if claimed != "claimed":
                return "retry"  # another decision took trial N, or the sweep was paused/ended: decide again
            started = self._submit(sweep, trial)
            if started.state == TrialState.FAIL:
                study.tell(asked, state=OptunaState.FAIL)  # as a study rebuilt from the table would hold it
            trials.append(started)
            decision.started.append(number)
        return "done"

    def _submit(self, sweep: Sweep, trial: Trial) -> Trial:
        tuning = sweep.hyperparameter_tuning_config
        try:
            request = trial_request(sweep.job_template, tuning, sweep.sweep_id, trial.number, trial.params)
            owner = self.jobs.principal(sweep.owner)
            job = self.jobs.submit(
                request,
                owner,
                owner=sweep.owner,
                reason=f"trial {trial.number} of sweep {sweep.name} ({sweep.sweep_id})",
                labels=trial_labels(sweep.sweep_id, trial.number),
            )
        except DomainError as exc:
            logger.warning("sweep %s: trial %d could not be submitted: %s", sweep.sweep_id, trial.number, exc)
            failed = trial.model_copy(update={"state": TrialState.FAIL, "reason": f"not submitted: {exc}", "ended_at": self.clock()})
            self.sweeps.update_trial(sweep.sweep_id, failed, trial.version)
            return failed.model_copy(update={"version": trial.version + 1})
        started = trial.model_copy(update={"job_id": job.job_id, "state": TrialState.RUNNING, "job_status": job.status.value})
        self.sweeps.update_trial(sweep.sweep_id, started, trial.version)
        logger.info("sweep %s: trial %d started as %s with %s", sweep.sweep_id, trial.number, job.job_id, trial.params)
        return started.model_copy(update={"version": trial.version + 1})
