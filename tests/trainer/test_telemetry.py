"""GPU telemetry (issue 27.3), the trainer's half: NVML sampled into `system` reports and the attempt's
system file, driven by a fake NVML and a fake clock (no sleeps, no GPU)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from trainer import telemetry
from trainer.events import Events
from trainer.telemetry import GpuSampler, SystemMonitor, SystemRecorder

from schemas.telemetry import IDLE_SECONDS, SystemSample, idle_long_enough, parse_system_file_name, system_file_uri
from schemas.trainer import ExitCode, TrainerEvent, TrainerEventKind
from tests.fake_nvml import FakeNvml
from tests.trainer.runs import make_spec, run_in_process


class Clock:
    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _gpu(util: float, *, power_mw: int | None = 350_000) -> dict[str, Any]:
    return {"name": "NVIDIA H100 80GB HBM3", "util": util, "used_mib": 40_000, "power_mw": power_mw, "sm_mhz": 1980}


def _monitor(tmp_path: Path, nvml: Any, clock: Clock, stream: io.StringIO, uri: str | None = None) -> SystemMonitor:
    events = Events(stream)
    events.bind("job-1", 2)
    sampler = GpuSampler(lambda: nvml, clock=clock)
    target = uri or str(tmp_path / "run" / "system" / "002-000.jsonl")
    return SystemMonitor(sampler, SystemRecorder(events, target, tmp_path / "staging.jsonl", clock=clock), attempt=2, node=0)


def _reports(stream: io.StringIO) -> list[SystemSample]:
    events = [TrainerEvent.from_line(line) for line in stream.getvalue().splitlines()]
    return [SystemSample.model_validate(e.data) for e in events if e is not None and e.kind == TrainerEventKind.SYSTEM]


def test_each_tick_reports_every_device_and_appends_to_the_attempts_file(tmp_path: Path) -> None:
    # Given two GPUs, one without a power sensor
    nvml, clock, stream = FakeNvml([_gpu(97.0), _gpu(12.0, power_mw=None)]), Clock(), io.StringIO()
    monitor = _monitor(tmp_path, nvml, clock, stream)

    # When it samples twice, 10 s apart
    monitor.tick()
    clock.now += 10
    monitor.tick()
    monitor.close()

    # Then each sample is a `system` report naming job and attempt, with every device's readings
    reports = _reports(stream)
    assert [r.time for r in reports] == [1_700_000_000.0, 1_700_000_010.0]
    first = reports[0]
    assert first.available and first.attempt == 2 and first.node == 0
    assert first.devices[0].model_dump() == {
        "index": 0,
        "name": "NVIDIA H100 80GB HBM3",
        "utilization_pct": 97.0,
        "memory_used_mib": 40_000.0,
        "memory_total_mib": 81_920.0,
        "power_w": 350.0,
        "sm_clock_mhz": 1980.0,
    }
    assert first.devices[1].power_w is None and first.devices[1].utilization_pct == 12.0
    assert first.idle_since is None  # one device is busy
    # and the same samples are the lines of this attempt's and node's file
    lines = (tmp_path / "run" / "system" / "002-000.jsonl").read_text().splitlines()
    assert [SystemSample.model_validate_json(line) for line in lines] == reports
    assert nvml.shut


def test_idle_since_starts_at_the_first_idle_sample_and_resets_when_a_gpu_works(tmp_path: Path) -> None:
    nvml, clock, stream = FakeNvml([_gpu(5.0), _gpu(19.9)]), Clock(), io.StringIO()
    monitor = _monitor(tmp_path, nvml, clock, stream)
    started = clock.now
    for _ in range(int(IDLE_SECONDS / 10)):
        sample = monitor.tick()
        assert sample.idle_since == started
        assert not idle_long_enough(sample)
        clock.now += 10
    # 15 minutes after the first idle sample, the rule holds
    assert idle_long_enough(monitor.tick())
    # one busy sample breaks the run of idle ones; the next idle one starts a new period
    nvml.devices[1]["util"] = 20.0
    assert monitor.tick().idle_since is None
    nvml.devices[1]["util"] = 3.0
    clock.now += 10
    assert monitor.tick().idle_since == clock.now


def test_a_device_whose_utilization_is_unknown_never_counts_as_idle(tmp_path: Path) -> None:
    gpu = _gpu(0.0)
    gpu["util"] = None
    sample = _monitor(tmp_path, FakeNvml([gpu]), Clock(), io.StringIO()).tick()
    assert sample.devices[0].utilization_pct is None and sample.idle_since is None


def test_without_nvml_one_report_says_so_and_sampling_stops(tmp_path: Path) -> None:
    def no_nvml() -> Any:
        raise OSError("libnvidia-ml.so.1: cannot open shared object file")

    stream, clock = io.StringIO(), Clock()
    events = Events(stream)
    events.bind("job-1", 1)
    sampler = GpuSampler(no_nvml, clock=clock)
    monitor = SystemMonitor(sampler, SystemRecorder(events, str(tmp_path / "system" / "001-000.jsonl"), tmp_path / "s"), attempt=1, node=0)

    # When the monitor's thread runs (it stops by itself after the one sample: joined, no sleep)
    monitor.start()
    assert monitor._thread is not None
    monitor._thread.join()
    monitor.close()

    # Then exactly one sample, available false, with the reason
    (report,) = _reports(stream)
    assert not report.available and report.devices == []
    assert report.reason == "NVML is not available on this host (OSError: libnvidia-ml.so.1: cannot open shared object file)"


def test_an_s3_system_file_is_uploaded_at_most_every_minute_and_at_the_end(tmp_path: Path, monkeypatch) -> None:
    uploads: list[tuple[str, str]] = []
    monkeypatch.setattr(telemetry.storage, "upload_file", lambda path, uri: uploads.append((uri, Path(path).read_text())))
    clock = Clock(100.0)
    uri = "s3://bucket/jobs/job-1/system/002-000.jsonl"
    monitor = _monitor(tmp_path, FakeNvml([_gpu(50.0)]), clock, io.StringIO(), uri=uri)
    for _ in range(7):  # 0, 10, ..., 60 s
        monitor.tick()
        clock.now += 10
    assert [len(body.splitlines()) for _, body in uploads] == [1, 7]  # the first sample, then 60 s later
    monitor.tick()
    monitor.close()
    assert [len(body.splitlines()) for _, body in uploads] == [1, 7, 8] and {u for u, _ in uploads} == {uri}


def test_file_names_are_per_attempt_and_node_beside_metrics() -> None:
    assert system_file_uri("s3://b/jobs/j/metrics.jsonl", 3, 1) == "s3://b/jobs/j/system/003-001.jsonl"
    assert parse_system_file_name("jobs/j/system/003-001.jsonl") == (3, 1)
    assert parse_system_file_name("jobs/j/system/notes.txt") is None


@pytest.mark.slow
def test_a_cpu_run_reports_that_it_had_no_nvml(tmp_path: Path, monkeypatch, capsys) -> None:
    # Given a real (tiny) run on this GPU-less host, NVML unreachable
    monkeypatch.setattr(telemetry, "load_nvml", _raise_no_library)
    outcome = run_in_process(tmp_path, make_spec(tmp_path, hyperparameters={"max_steps": "2"}), monkeypatch, capsys)
    assert outcome.code == ExitCode.COMPLETED

    # Then it reported one `system` sample saying so, and wrote it beside metrics.jsonl
    reports = [SystemSample.model_validate(e.data) for e in outcome.of_kind(TrainerEventKind.SYSTEM)]
    assert len(reports) == 1 and not reports[0].available and reports[0].attempt == 1
    stored = (tmp_path / "system" / "001-000.jsonl").read_text().splitlines()
    assert [json.loads(line)["available"] for line in stored] == [False]


def _raise_no_library() -> Any:
    raise RuntimeError("NVML Shared Library Not Found")
