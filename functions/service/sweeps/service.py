"""Hyperparameter sweeps: create, read, list, pause, resume, cancel, delete (docs/SWEEPS.md).

This module never imports Optuna: it runs in the API Lambda. What a sweep does next (which trial to
start, which to prune, when it is done) is decided by the sweep controller (controller.py, its
own Lambda), woken through a `SweepWaker` after every change made here and by the trainer-event hook
(hooks.py). A sweep's trials are ordinary jobs of its owner, labelled sweep_id and trial,
submitted through the same JobService.submit as POST /jobs.
"""

from __future__ import annotations

import itertools
import logging
import random
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from functions.errors import ConcurrentModification, DomainError, IllegalTransition, InvalidRequest, SweepNotFound, Unsupported
from functions.service.feature_ports import SweepRepository, SweepWaker
from functions.service.jobs import JobService
from functions.service.principal import Principal
from schemas.configs import FrameworkType, TrainingType
from schemas.job import SubmitJobRequest
from schemas.retraining import set_target, target_problem
from schemas.status import PAUSABLE, TERMINAL, JobStatus
from schemas.sweeps import (
    HYPERPARAMETERS,
    SWEEP_LABEL,
    SWEEP_TERMINAL,
    TRIAL_ENDED,
    TRIAL_LABEL,
    BestTrial,
    Goal,
    ParameterSpec,
    ParameterType,
    Scalar,
    Sweep,
    SweepCounts,
    SweepList,
    SweepMethod,
    SweepRequest,
    SweepStatus,
    Trial,
    TrialState,
    TuningConfig,
    target_of,
)

logger = logging.getLogger(__name__)

MAX_LIST_LIMIT = 200
_ATTEMPTS = 8


class NoWaker:
    """No controller to wake (a deployment without sweeps): the sweep reconciler still decides."""

    def wake(self, sweep_id: str) -> None:
        logger.debug("no sweep controller to wake for %s", sweep_id)


def new_sweep_id() -> str:
    return f"swp-{uuid.uuid4().hex[:16]}"


class SweepService:
    def __init__(
        self,
        sweeps: SweepRepository,
        jobs: JobService,
        waker: SweepWaker | None = None,
        *,
        clock: Callable[[], datetime] | None = None,
        ids: Callable[[], str] = new_sweep_id,
    ) -> None:
        self.sweeps = sweeps
        self.jobs = jobs
        self.deployed = waker is not None  # no controller: nothing would ever decide, so sweeps are refused
        self.waker = waker or NoWaker()
        self.clock = clock or jobs.clock
        self.ids = ids

    def principal(self, arn: str) -> Principal:
        return self.jobs.principal(arn)

    # --- create and read -------------------------------------------------------------------------

    def create(self, request: SweepRequest, principal: Principal) -> Sweep:
        if not self.deployed:
            raise Unsupported(
                "sweeps need the sweep controller, which this deployment does not run "
                "(settings.sweep_controller_function is unset; local mode runs it in-process)"
            )
        tuning = request.hyperparameter_tuning_config
        self._check(request, principal)
        if tuning.seed is None:
            tuning = tuning.model_copy(update={"seed": random.SystemRandom().randrange(2**31)})
        now = self.clock()
        sweep = Sweep(
            sweep_id=self.ids(),
            owner=principal.arn,
            name=request.name,
            description=request.description,
            job_template=request.job_template,
            hyperparameter_tuning_config=tuning,
            status=SweepStatus.RUNNING,
            created_at=now,
            updated_at=now,
        )
        self.sweeps.create(sweep)
        logger.info("sweep %s created: %s, %d trials", sweep.sweep_id, tuning.method.value, tuning.effective_max_trials())
        self.waker.wake(sweep.sweep_id)
        return sweep

    def get(self, sweep_id: str, principal: Principal, *, with_trials: bool = True) -> Sweep:
        sweep, trials = self.sweeps.load(sweep_id)
        if not (principal.is_admin or sweep.owner == principal.arn):
            raise SweepNotFound(sweep_id)  # never 403: another principal's ids are not disclosed
        return view(sweep, trials, with_trials=with_trials)

    def list_sweeps(self, principal: Principal, *, limit: int = 50, next_token: str | None = None) -> SweepList:
        if not 1 <= limit <= MAX_LIST_LIMIT:
            raise InvalidRequest("limit", f"must be between 1 and {MAX_LIST_LIMIT}")
        sweeps, token = self.sweeps.list_sweeps(principal.owner_scope, limit, next_token or None)
        return SweepList(sweeps=sweeps, next_token=token)

    # --- lifecycle -------------------------------------------------------------------------------

    def pause(self, sweep_id: str, principal: Principal, reason: str | None = None) -> Sweep:
        """No new trials; running trials are paused with a checkpoint (queued ones when they start)."""
        self._set_status(sweep_id, principal, "pause", {SweepStatus.RUNNING}, SweepStatus.PAUSED, reason or "paused by request")
        pause_trials(self.jobs, self.sweeps, sweep_id)
        self.waker.wake(sweep_id)
        return self.get(sweep_id, principal)

    def resume(self, sweep_id: str, principal: Principal, reason: str | None = None) -> Sweep:
        self._set_status(sweep_id, principal, "resume", {SweepStatus.PAUSED}, SweepStatus.RUNNING, reason or "resumed by request")
        _, trials = self.sweeps.load(sweep_id)
        owner = self.jobs.principal(self.sweeps.get(sweep_id).owner)
        for trial in trials:
            if trial.job_id and trial.state == TrialState.RUNNING:
                try:
                    job = self.jobs.repo.get(trial.job_id)
                    if job.status == JobStatus.PAUSED:
                        self.jobs.resume(job.job_id, owner)
                except DomainError as exc:
                    logger.info("sweep %s: trial %d not resumed: %s", sweep_id, trial.number, exc)
        self.waker.wake(sweep_id)
        return self.get(sweep_id, principal)

    def cancel(self, sweep_id: str, principal: Principal, reason: str | None = None) -> Sweep:
        why = reason or "cancelled by request"
        self._set_status(sweep_id, principal, "cancel", {SweepStatus.RUNNING, SweepStatus.PAUSED}, SweepStatus.CANCELLED, why)
        cancel_trials(self.jobs, self.sweeps, sweep_id, f"sweep {sweep_id} cancelled: {why}")
        self.waker.wake(sweep_id)
        return self.get(sweep_id, principal)

    def delete(self, sweep_id: str, principal: Principal) -> None:
        """A finished sweep's record and trials (the trial jobs stay: they are ordinary jobs)."""
        sweep = self.get(sweep_id, principal, with_trials=False)
        if sweep.status not in SWEEP_TERMINAL:
            raise SweepConflict(sweep_id, f"cannot delete sweep {sweep_id} while it is {sweep.status}; cancel it first")
        if not self.sweeps.delete(sweep_id, sweep.version):
            raise SweepConflict(sweep_id, f"sweep {sweep_id} changed while being deleted; reload and retry")

    def _set_status(
        self, sweep_id: str, principal: Principal, action: str, allowed: set[SweepStatus], to: SweepStatus, reason: str
    ) -> Sweep:
        for _ in range(_ATTEMPTS):
            sweep = self.get(sweep_id, principal, with_trials=False)
            if sweep.status not in allowed:
                raise SweepConflict(
                    sweep_id, f"cannot {action} sweep {sweep_id} while it is {sweep.status}; allowed from {', '.join(sorted(allowed))}"
                )
            now = self.clock()
            changed = sweep.model_copy(
                update={"status": to, "status_reason": reason, "updated_at": now, "ended_at": now if to in SWEEP_TERMINAL else None}
            )
            if self.sweeps.update(changed, sweep.version):
                return changed
        raise SweepConflict(sweep_id, f"sweep {sweep_id} kept changing; retry")

    # --- validation ------------------------------------------------------------------------------

    def _check(self, request: SweepRequest, principal: Principal) -> None:
        """The template passes POST /jobs' validation for this principal; every target exists, and the
        job of each parameter's extreme values is a valid job too (a trial never fails for a reason
        known now)."""
        self._validate_job(request.job_template, principal, "job_template")
        tuning = request.hyperparameter_tuning_config
        document = request.job_template.model_dump(mode="python")
        for name, spec in tuning.parameters.items():
            target = target_of(name, spec)
            problem = target_problem(document, target)
            if problem:
                raise InvalidRequest(f"hyperParameterTuningConfig.parameters.{name}.target", f"{target!r}: {problem}")
        problem = metric_problem(request.job_template, tuning)
        if problem:
            raise InvalidRequest("hyperParameterTuningConfig.metric.name", problem)
        for values in trial_values(tuning):
            self._validate_job(trial_request(request.job_template, tuning, "swp-check", 0, values), principal, "job_template", values)

    def _validate_job(self, request: SubmitJobRequest, principal: Principal, where: str, values: dict[str, Scalar] | None = None) -> None:
        at = f" with {values}" if values else ""
        try:
            self.jobs.validate_submit(request, principal)
        except InvalidRequest as exc:
            raise InvalidRequest(f"{where}.{exc.field}", f"a trial's job would be refused{at}: {exc.message}") from exc
        except DomainError as exc:
            raise InvalidRequest(where, f"a trial's job would be refused{at}: {exc}") from exc


class SweepConflict(ConcurrentModification):
    """The sweep's status does not allow the action, or another request changed it first (409)."""

    def __init__(self, sweep_id: str, message: str) -> None:
        DomainError.__init__(self, message)
        self.job_id = sweep_id
        self.sweep_id = sweep_id


# --- shared with the controller ------------------------------------------------------------------


def trial_request(
    template: SubmitJobRequest, tuning: TuningConfig, sweep_id: str, number: int, params: dict[str, Scalar]
) -> SubmitJobRequest:
    """The template with the trial's parameters set at their targets (its job's labels sweep_id and trial are
    not part of a request, which may not carry them: `trial_labels`, handed to JobService.submit)."""
    document = template.model_dump(mode="json", context={"reveal_secrets": True})
    for name, value in params.items():
        spec = tuning.parameters[name]
        target = target_of(name, spec)
        set_target(document, target, _for_target(target, value))
    document["name"] = f"{template.name}-t{number}"[:128]
    try:
        return SubmitJobRequest.model_validate(document)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "job"
        message = str(first.get("msg", "invalid")).removeprefix("Value error, ")
        raise InvalidRequest(f"job_template.{where}", f"a trial's job is invalid with {params}: {message}") from exc


def trial_labels(sweep_id: str, number: int) -> dict[str, str]:
    """The labels the sweep sets on trial `number`'s job (reserved: no request carries them)."""
    return {SWEEP_LABEL: sweep_id, TRIAL_LABEL: str(number)}


def _for_target(target: str, value: Scalar) -> Any:
    # Hyperparameters, labels and environment are string maps (the trainer parses hyperparameters).
    if target.startswith((HYPERPARAMETERS + ".", "labels.", "training_config.environment.")):
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, float):
            return format(value, ".10g")
        return str(value)
    return value


def trial_values(tuning: TuningConfig) -> list[dict[str, Scalar]]:
    """Every value a trial can be given, each checked as a job at create (a middle categorical value that
    names another principal's path was once accepted, and its trial failed later):
    - a grid: every point (at most maxTrials);
    - otherwise each parameter at every value of its list and at both ends of its range, the others at
      their lowest (a continuous range's inner values are numbers between two checked ones)."""
    if tuning.method == SweepMethod.GRID:
        names = list(tuning.parameters)
        lists = [tuning.parameters[name].grid_values() or [] for name in names]
        return [dict(zip(names, point, strict=True)) for point in itertools.product(*lists)]
    lows = {name: _extremes(spec)[0] for name, spec in tuning.parameters.items()}
    found = [lows]
    for name, spec in tuning.parameters.items():
        for value in spec.values if spec.values is not None else _extremes(spec):
            if value != lows[name]:
                found.append({**lows, name: value})
    return found


def metric_problem(template: SubmitJobRequest, tuning: TuningConfig) -> str | None:
    """Why no trial of `template` can ever report the sweep's metric, or None. Our trainer reports eval_*
    metrics only from validation data (a sweep on eval_loss without it once ran every trial to FAILED);
    a CUSTOM script reports what it likes."""
    name = tuning.metric.name
    tc, dc = template.training_config, template.data_config
    if not name.startswith("eval_") or tc.framework.type == FrameworkType.CUSTOM:
        return None
    if tc.training_type == TrainingType.RLHF:
        return f"RLHF has no evaluation pass: its trials never report {name}; choose a training metric (loss, reward)"
    if any(target_of(n, spec).startswith("data_config") for n, spec in tuning.parameters.items()):
        return None  # a parameter may give the trials their validation data
    if dc.validation_split > 0 or any(source.split == "validation" for source in dc.sources):
        return None
    return (
        f"the template has no validation data (data_config.validation_split is 0 and no source has split 'validation'): "
        f"its trials never report {name}"
    )


def _extremes(spec: ParameterSpec) -> tuple[Scalar, Scalar]:
    if spec.values is not None:
        return spec.values[0], spec.values[-1]
    assert spec.min is not None and spec.max is not None
    if spec.type == ParameterType.INT:
        return int(spec.min), int(spec.max)
    return float(spec.min), float(spec.max)


def counts_of(trials: list[Trial]) -> SweepCounts:
    return SweepCounts(
        total=len(trials),
        running=sum(t.state not in TRIAL_ENDED for t in trials),
        completed=sum(t.state == TrialState.COMPLETE for t in trials),
        pruned=sum(t.state == TrialState.PRUNED for t in trials),
        failed=sum(t.state == TrialState.FAIL for t in trials),
    )


def best_of(tuning: TuningConfig, trials: list[Trial]) -> Trial | None:
    done = [t for t in trials if t.state == TrialState.COMPLETE and t.value is not None]
    if not done:
        return None
    sign = 1.0 if tuning.metric.goal == Goal.MAXIMIZE else -1.0
    return max(done, key=lambda t: (sign * (t.value or 0.0), -t.number))


def view(sweep: Sweep, trials: list[Trial], *, with_trials: bool = True) -> Sweep:
    return sweep.model_copy(update={"counts": counts_of(trials), "trials": trials if with_trials else []})


def best_trial_record(jobs: JobService, tuning: TuningConfig, trials: list[Trial]) -> BestTrial | None:
    best = best_of(tuning, trials)
    if best is None or best.value is None:
        return None
    checkpoint_id = uri = None
    if best.job_id:
        try:
            job = jobs.repo.get(best.job_id)
            checkpoint_id = job.best_checkpoint_id or (job.checkpoints[-1].checkpoint_id if job.checkpoints else None)
            uri = next((c.uri for c in job.checkpoints if c.checkpoint_id == checkpoint_id), None)
        except DomainError:
            pass
    return BestTrial(
        number=best.number,
        value=best.value,
        params=best.params,
        job_id=best.job_id,
        best_checkpoint_id=checkpoint_id,
        best_checkpoint_uri=uri,
    )


def pause_trials(jobs: JobService, sweeps: SweepRepository, sweep_id: str) -> list[str]:
    """Pause (with a checkpoint) every trial job that can be paused now; the others when they can."""
    sweep, trials = sweeps.load(sweep_id)
    owner = jobs.principal(sweep.owner)
    paused = []
    for trial in trials:
        if not trial.job_id or trial.state in TRIAL_ENDED:
            continue
        try:
            job = jobs.repo.get(trial.job_id)
            if job.status in PAUSABLE and job.pending_action is None:
                jobs.pause(job.job_id, owner, True)
                paused.append(job.job_id)
        except DomainError as exc:
            logger.info("sweep %s: trial %d not paused now: %s", sweep_id, trial.number, exc)
    return paused


def cancel_trials(jobs: JobService, sweeps: SweepRepository, sweep_id: str, reason: str, *, only: set[int] | None = None) -> list[str]:
    sweep, trials = sweeps.load(sweep_id)
    owner = jobs.principal(sweep.owner)
    cancelled = []
    for trial in trials:
        if not trial.job_id or trial.state in TRIAL_ENDED or (only is not None and trial.number not in only):
            continue
        for _ in range(3):
            try:
                job = jobs.repo.get(trial.job_id)
                if job.status in TERMINAL and not _resuming(job.status, job.run_outcome):
                    break
                jobs.cancel(job.job_id, owner, reason)
                cancelled.append(job.job_id)
                break
            except (IllegalTransition, SweepNotFound):
                break
            except ConcurrentModification:
                continue
            except DomainError as exc:
                logger.info("sweep %s: trial %d not cancelled: %s", sweep_id, trial.number, exc)
                break
    return cancelled


def _resuming(status: JobStatus, run_outcome: str | None) -> bool:
    """PREEMPTED is terminal only once its preemption budget is spent; before that it resumes (same trial)."""
    return status == JobStatus.PREEMPTED and run_outcome == "resume_preempted"
