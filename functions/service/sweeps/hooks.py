"""Where a trial's job wakes its sweep: the lifecycle calls these on trainer reports and run ends.

No Optuna here (the lifecycle Lambda imports this): the metric's value at a step is written on the
trial (one SET of that step: a resumed attempt reporting it again counts once), on the condition that
the reporting job is the trial's recorded job; then the controller is woken. The labels only say where
to look (no request may set them, schemas/job.py); the condition decides. A report that comes before
the trial records its job (between the submit and the trial's write, or until a take-over adopts the
job of a decision that died) is not counted.
Jobs without a sweep_id label cost one dict lookup.
"""

from __future__ import annotations

import logging
import threading

from functions.errors import DomainError
from functions.service.feature_ports import SweepRepository, SweepWaker
from functions.service.sweeps.service import NoWaker
from schemas.job import Job
from schemas.sweeps import SWEEP_LABEL, TRIAL_LABEL
from schemas.trainer import TrainerEvent, TrainerEventKind

logger = logging.getLogger(__name__)

_WAKING = frozenset({TrainerEventKind.PHASE, TrainerEventKind.DONE, TrainerEventKind.FAILURE})


class SweepHooks:
    def __init__(self, sweeps: SweepRepository, waker: SweepWaker | None = None) -> None:
        self.sweeps = sweeps
        self.waker = waker or NoWaker()
        self._metrics: dict[str, str] = {}  # sweep_id -> metric name (a sweep's config never changes)
        self._lock = threading.Lock()

    def on_trainer_event(self, job: Job, event: TrainerEvent) -> None:
        sweep_id = job.labels.get(SWEEP_LABEL)
        if not sweep_id:
            return
        try:
            recorded = self._record(job, sweep_id, event)
        except DomainError:
            return  # the sweep was deleted: its jobs go on as ordinary jobs
        except Exception:
            logger.exception("sweep %s: the metric of %s was not recorded", sweep_id, job.job_id)
            recorded = False
        if recorded or event.kind in _WAKING:
            self.waker.wake(sweep_id)

    def on_job_changed(self, job: Job) -> None:
        sweep_id = job.labels.get(SWEEP_LABEL)
        if sweep_id:
            self.waker.wake(sweep_id)

    def _record(self, job: Job, sweep_id: str, event: TrainerEvent) -> bool:
        if event.kind not in (TrainerEventKind.METRICS, TrainerEventKind.PROGRESS, TrainerEventKind.CHECKPOINT):
            return False
        metric = self._metric(sweep_id)
        data = event.data
        value = data.get(metric)
        if value is None and event.kind == TrainerEventKind.CHECKPOINT:
            value = (data.get("metrics") or {}).get(metric)
        step = data.get("step")
        if not isinstance(value, int | float) or isinstance(value, bool) or not isinstance(step, int):
            return False
        number = job.labels.get(TRIAL_LABEL, "")
        if not number.isdigit():
            return False
        return self.sweeps.record_value(sweep_id, int(number), job.job_id, step, float(value))

    def _metric(self, sweep_id: str) -> str:
        with self._lock:
            known = self._metrics.get(sweep_id)
        if known is None:
            known = self.sweeps.get(sweep_id).hyperparameter_tuning_config.metric.name
            with self._lock:
                self._metrics[sweep_id] = known
        return known
