"""Trainer reports through CloudWatch Logs: a subscription filter's batch -> the TrainerReports port.

The trainer prints every report as a `TRAINPLANE_EVENT {json}` line on stdout (schemas/trainer.py).
On SageMaker that stdout is the training job's stream in /aws/sagemaker/TrainingJobs
(`<training job name>/algo-<n>-<epoch>`); on EC2 the user data's docker awslogs driver writes it to
the stage's trainer log group (`<job id>/<attempt:03d>/trainer`). A subscription filter on the
`TRAINPLANE_EVENT` lines of that group invokes the events Lambda with a batch of one stream's lines
(infra/constructs/events.py); local mode delivers the same payload from the emulated CloudWatch Logs.

A batch is applied in report order (seq), with only its last progress report per attempt (the
lifecycle writes progress every few seconds at most anyway). Each report names its job and attempt;
the stream name says the same for reports that do not (an older trainer, a CUSTOM script's own
lines), and a report whose names disagree with its stream's is ignored. A report of a job this
deployment does not have (the SageMaker group is the account's, shared by every stage) is ignored.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from functions.catalog.job_names import parse_training_job_name
from functions.errors import JobNotFound
from functions.service.ports import TrainerReports
from schemas.trainer import TrainerEvent, TrainerEventKind

logger = logging.getLogger(__name__)

_EC2_STREAM = re.compile(r"^(?P<job_id>.+)/(?P<attempt>\d{3,})/trainer$")


@dataclass(frozen=True)
class LogLine:
    """One log event of a subscription batch."""

    id: str
    timestamp_ms: int
    message: str


@dataclass
class ReportsOutcome:
    applied: int = 0
    ignored: int = 0
    jobs: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"action": "reports", "applied": self.applied, "ignored": self.ignored, "jobs": self.jobs}


def stream_ref(log_stream: str) -> tuple[str, int] | None:
    """(job id, attempt) a trainer log stream belongs to, by its name; None for anything else."""
    match = _EC2_STREAM.match(log_stream)
    if match:
        return match.group("job_id"), int(match.group("attempt"))
    return parse_training_job_name(log_stream.split("/", 1)[0])


class TrainerLogReports:
    def __init__(self, reports: TrainerReports) -> None:
        self.reports = reports

    def handle(self, log_group: str, log_stream: str, lines: Sequence[LogLine]) -> ReportsOutcome:
        outcome = ReportsOutcome()
        by_stream = stream_ref(log_stream)
        found: dict[tuple[str, int], list[tuple[int, int, TrainerEvent]]] = {}
        index = 0  # the order reports were read in: lines, then reports within a line (all_in: two may share one)
        for line in lines:
            events = TrainerEvent.all_in(line.message)
            if not events:
                outcome.ignored += 1
            for event in events:
                index += 1
                job_id = event.job_id or (by_stream[0] if by_stream else None)
                attempt = event.attempt or (by_stream[1] if by_stream else None)
                if job_id is None or attempt is None or (by_stream is not None and by_stream != (job_id, attempt)):
                    logger.warning("report in %s/%s names %s/%s: ignored", log_group, log_stream, event.job_id, event.attempt)
                    outcome.ignored += 1
                    continue
                key = event.seq if event.seq is not None else line.timestamp_ms * 1000
                found.setdefault((job_id, attempt), []).append((key, index, event))
        for (job_id, attempt), reports in found.items():
            ordered = [event for _, _, event in sorted(reports, key=lambda r: (r[0], r[1]))]
            last_progress = max((i for i, e in enumerate(ordered) if e.kind == TrainerEventKind.PROGRESS), default=-1)
            try:
                for i, event in enumerate(ordered):
                    if event.kind == TrainerEventKind.PROGRESS and i != last_progress:
                        outcome.ignored += 1
                        continue
                    self.reports.on_trainer_event(job_id, attempt, event)
                    outcome.applied += 1
            except JobNotFound:
                outcome.ignored += len(ordered)
                continue
            outcome.jobs.append(job_id)
        return outcome
