"""metrics.jsonl, progress/ETA, SageMaker metric lines, and the max_runtime_seconds stop."""

from __future__ import annotations

import io
import itertools
import re
from pathlib import Path

import pytest
import trainer.__main__ as entry
from trainer import storage
from trainer.events import Events
from trainer.metrics import MetricsLog, Progress, report
from trainer.signals import StopRequest

from schemas.api import MetricsPoint
from schemas.trainer import METRIC_DEFINITIONS, ExitCode, TrainerEvent, TrainerEventKind
from tests.trainer.runs import make_spec, run_in_process


@pytest.fixture
def s3(s3_bucket):
    storage.reset_client()
    yield s3_bucket
    storage.reset_client()


def test_metric_lines_match_the_declared_sagemaker_regexes(tmp_path: Path) -> None:
    # Given one training point reported
    out = io.StringIO()
    point = MetricsPoint(step=10, epoch=0.5, loss=1.2345, learning_rate=2e-4, grad_norm=0.75, tokens_per_second=123456.7, attempt=1)
    report(Events(out), MetricsLog(tmp_path / "m.jsonl", None, attempt=1), point, Progress(total_steps=40))

    # Then the metric line on stdout yields every value through the regex the launcher declares
    line = next(line for line in out.getvalue().splitlines() if line.startswith("trainplane_metrics"))
    found = {d["Name"]: float(m.group(1)) for d in METRIC_DEFINITIONS if (m := re.search(d["Regex"], line))}
    assert found == {
        "train:loss": pytest.approx(1.2345),
        "train:learning_rate": pytest.approx(2e-4),
        "train:grad_norm": pytest.approx(0.75),
        "train:tokens_per_second": pytest.approx(123457, rel=1e-5),
        "train:epoch": pytest.approx(0.5),
    }
    # and the events carry the point and the progress
    events = [e for line in out.getvalue().splitlines() if (e := TrainerEvent.from_line(line))]
    assert [e.kind for e in events] == [TrainerEventKind.METRICS, TrainerEventKind.PROGRESS]
    assert events[1].data["percent"] == 25.0 and events[1].data["total_steps"] == 40
    eval_line = io.StringIO()
    report(Events(eval_line), MetricsLog(tmp_path / "e.jsonl", None, attempt=1), MetricsPoint(step=3, eval_loss=0.5), None)
    assert re.search(next(d["Regex"] for d in METRIC_DEFINITIONS if d["Name"] == "validation:loss"), eval_line.getvalue())


def test_progress_eta_from_recent_steps() -> None:
    progress = Progress(total_steps=100, start_step=50)
    assert progress.eta_seconds(50) is None
    for seconds in (2.0, 1.0, 1.0):
        progress.record(seconds)
    assert progress.percent(60) == 60.0 and progress.eta_seconds(60) == pytest.approx(40 * 4 / 3, abs=0.1)


def test_metrics_jsonl_on_s3_keeps_earlier_attempts(s3, tmp_path: Path) -> None:
    client, bucket = s3
    uri = f"s3://{bucket}/jobs/j/metrics.jsonl"
    # Given attempt 1 wrote two points
    first = MetricsLog(tmp_path / "a1" / "metrics.jsonl", uri, attempt=1, sync_seconds=0)
    first.append(MetricsPoint(step=1, loss=2.0, attempt=1))
    first.append(MetricsPoint(step=2, loss=1.5, attempt=1))
    # When attempt 2 (another host) appends
    second = MetricsLog(tmp_path / "a2" / "metrics.jsonl", uri, attempt=2, sync_seconds=3600)
    second.append(MetricsPoint(step=3, loss=1.0, attempt=2))
    second.sync()
    # Then the object in S3 holds all three points in order
    lines = client.get_object(Bucket=bucket, Key="jobs/j/metrics.jsonl")["Body"].read().decode().splitlines()
    assert [MetricsPoint.model_validate_json(line).step for line in lines] == [1, 2, 3]


def test_stop_request_budget_counts_the_next_step_and_the_checkpoint() -> None:
    now = [0.0]
    stop = StopRequest(max_runtime_seconds=100, clock=lambda: now[0])
    now[0] = 80.0
    assert not stop.should_stop(next_step_seconds=5, checkpoint_seconds=10)
    now[0] = 86.0
    assert stop.should_stop(next_step_seconds=5, checkpoint_seconds=10) and stop.reason == "max_runtime_seconds"
    manual = StopRequest()
    manual.request("SIGTERM")
    assert manual.should_stop() and manual.reason == "SIGTERM"


def test_max_runtime_seconds_stops_with_a_checkpoint(tmp_path: Path, monkeypatch, capsys) -> None:
    # Given a long job with max_runtime_seconds 12, on a clock that moves one second per reading
    ticks = itertools.count()

    class TickingStop(StopRequest):
        def __init__(self, **kwargs) -> None:
            super().__init__(clock=lambda: float(next(ticks)), **kwargs)

    monkeypatch.setattr(entry, "StopRequest", TickingStop)
    spec = make_spec(tmp_path, hyperparameters={"max_steps": "1000"}, max_runtime_seconds=12)

    # When it runs
    outcome = run_in_process(tmp_path, spec, monkeypatch, capsys)

    # Then it stopped early, like a SIGTERM: checkpoint at the last step, exit 75
    assert outcome.code == ExitCode.STOPPED_WITH_CHECKPOINT, outcome.stdout[-2000:]
    last = max(outcome.losses())
    assert 0 < last < 1000
    assert outcome.checkpoints()[-1].step == last
    assert "stopped (max_runtime_seconds)" in outcome.stderr


def test_every_event_names_its_job_and_attempt_and_carries_an_increasing_seq(monkeypatch: pytest.MonkeyPatch) -> None:
    from schemas.trainer import ENV_ATTEMPT, ENV_JOB_ID, TrainerEvent, TrainerPhase

    # Given the launcher's environment (job and attempt), then the run spec's
    monkeypatch.setenv(ENV_JOB_ID, "job-1")
    monkeypatch.setenv(ENV_ATTEMPT, "2")
    out = io.StringIO()
    events = Events(out)
    events.set_phase(TrainerPhase.PREPARING)
    events.bind("job-1", 3)
    for _ in range(50):
        events.emit(TrainerEventKind.PROGRESS, {"step": 1})
    parsed = [TrainerEvent.from_line(line) for line in out.getvalue().splitlines()]
    # Then each names its job and attempt, and the seqs increase strictly (reports are ordered by them)
    assert [(e.job_id, e.attempt) for e in parsed[:2] if e] == [("job-1", 2), ("job-1", 3)]
    seqs = [e.seq for e in parsed if e is not None and e.seq is not None]
    assert len(seqs) == 51 and all(a < b for a, b in itertools.pairwise(seqs))
