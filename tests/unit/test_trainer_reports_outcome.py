"""TrainerLogReports.handle on a recording port: what it hands the lifecycle, in which order, and the
applied / ignored / jobs it answers with, line by line (each count pinned, not only their sum)."""

from __future__ import annotations

from dataclasses import dataclass, field

from functions.errors import JobNotFound
from functions.service.trainer_reports import LogLine, TrainerLogReports, stream_ref
from schemas.trainer import TrainerEvent, TrainerEventKind

JOB = "job-20260101-0123456789ab"
OTHER = "job-20260101-ba9876543210"
K = TrainerEventKind


@dataclass
class Recording:
    """The TrainerReports port: records each report; a job it does not know raises JobNotFound."""

    known: set[str] = field(default_factory=lambda: {JOB, OTHER})
    got: list[tuple[str, int, str, int | None]] = field(default_factory=list)
    asked: list[tuple[str | None, int | None]] = field(default_factory=list)  # every call, known job or not

    def on_trainer_event(self, job_id: str, attempt: int, event: TrainerEvent) -> None:
        self.asked.append((job_id, attempt))
        if job_id not in self.known:
            raise JobNotFound(job_id)
        step = event.data.get("step") if event.kind == K.PROGRESS else event.data.get("n")
        self.got.append((job_id, attempt, str(event.kind), step))


def report(kind: K, *, job_id: str | None = JOB, attempt: int | None = 1, seq: int | None = None, **data: object) -> str:
    return "2026-01-01T00:00:00Z " + TrainerEvent(kind=kind, time=0, data=data, job_id=job_id, attempt=attempt, seq=seq).to_line()


def lines(*messages: str, times: list[int] | None = None) -> list[LogLine]:
    return [LogLine(str(i), (times or list(range(len(messages))))[i], m) for i, m in enumerate(messages)]


def test_plain_lines_are_ignored_one_each_and_the_reports_after_them_still_count() -> None:
    port = Recording()
    outcome = TrainerLogReports(port).handle(
        "/g", "", lines("loading", report(K.PHASE, seq=1, n=1), "plain", "more", report(K.METRICS, seq=2, n=2))
    )
    assert (outcome.applied, outcome.ignored, outcome.jobs) == (2, 3, [JOB])
    assert port.got == [(JOB, 1, "phase", 1), (JOB, 1, "metrics", 2)]


def test_only_the_last_progress_of_an_attempt_is_applied_the_others_counted_as_ignored() -> None:
    port = Recording()
    messages = [report(K.PROGRESS, seq=s, step=s) for s in (3, 1, 2)] + [report(K.PHASE, seq=4, n=9)]
    outcome = TrainerLogReports(port).handle("/g", "", lines(*messages))
    assert port.got == [(JOB, 1, "progress", 3), (JOB, 1, "phase", 9)]
    assert (outcome.applied, outcome.ignored) == (2, 2)


def test_reports_are_applied_by_seq_then_by_arrival() -> None:
    port = Recording()
    messages = [report(K.METRICS, seq=20, n=3), report(K.METRICS, seq=10, n=1), report(K.METRICS, seq=10, n=2)]
    TrainerLogReports(port).handle("/g", "", lines(*messages, times=[1, 2, 3]))
    assert [g[3] for g in port.got] == [1, 2, 3]


def test_reports_without_seq_are_ordered_by_their_line_time() -> None:
    # Without seq a report sorts at its line's time in microseconds: after a seq'd report of an earlier
    # millisecond, before one of a later millisecond
    port = Recording()
    messages = [report(K.METRICS, n=2), report(K.METRICS, seq=1_000_500, n=1), report(K.METRICS, seq=1_001_500, n=3)]
    TrainerLogReports(port).handle("/g", "", lines(*messages, times=[1001, 5, 6]))
    assert [g[3] for g in port.got] == [1, 2, 3]


def test_a_report_without_a_job_or_attempt_from_a_stream_that_names_none_is_ignored() -> None:
    port = Recording()
    outcome = TrainerLogReports(port).handle(
        "/g", "not-a-trainer-stream", lines(report(K.PHASE, job_id=None, n=1), report(K.PHASE, attempt=None, n=2), "x")
    )
    assert (outcome.applied, outcome.ignored, outcome.jobs, port.asked) == (0, 3, [], [])


def test_reports_naming_another_job_than_their_stream_are_ignored_and_the_rest_applied() -> None:
    port = Recording()
    stream = f"{JOB}/001/trainer"
    messages = [report(K.PHASE, job_id=OTHER, seq=1, n=1), report(K.PHASE, seq=2, n=2), report(K.PHASE, attempt=2, seq=3, n=3)]
    outcome = TrainerLogReports(port).handle("/g", stream, lines(*messages))
    assert (outcome.applied, outcome.ignored, outcome.jobs) == (1, 2, [JOB])
    assert port.got == [(JOB, 1, "phase", 2)]


def test_an_unknown_jobs_reports_are_all_ignored_and_the_next_jobs_still_applied() -> None:
    port = Recording(known={OTHER})
    messages = ["plain", report(K.PHASE, seq=1, n=1), report(K.METRICS, seq=2, n=2), report(K.PHASE, job_id=OTHER, seq=3, n=3)]
    outcome = TrainerLogReports(port).handle("/g", "", lines(*messages))
    assert (outcome.applied, outcome.ignored, outcome.jobs) == (1, 3, [OTHER])
    assert port.got == [(OTHER, 1, "phase", 3)]
    assert outcome.as_dict() == {"action": "reports", "applied": 1, "ignored": 3, "jobs": [OTHER]}


def test_stream_ref_reads_only_the_first_segment_of_a_sagemaker_stream() -> None:
    assert stream_ref(f"tp-{JOB}-a3/algo-1-1767225600") == (JOB, 3)
    assert stream_ref(f"tp-{JOB}-a3/algo-1/extra") == (JOB, 3)
    assert stream_ref(f"tp-{JOB}-a3") == (JOB, 3)
