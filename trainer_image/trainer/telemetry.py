"""GPU telemetry (issue 27.3): NVML sampled every 10 s on each node's local rank 0, for the whole run.

Each sample (schemas/telemetry.py SystemSample: per device utilization, memory used/total, power, SM
clock) is a `system` report on stdout (the channel of every report; on a node other than rank 0's, this
node's own stream) and a line of this attempt's and node's file beside metrics.jsonl (S3: the whole
object re-uploaded at most every `sync_seconds` and at the end). Without NVML (no GPU, no driver, no
pynvml) one sample says `available: false` and why, and sampling stops.

The sampler tracks since when every device has been under the idle threshold (`idle_since`), so the
control plane decides "idle for 15 minutes" from any one report, whichever were lost.
NVML, the clock and the wait between samples are injected: tests drive a fake NVML without sleeping.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from schemas.telemetry import SAMPLE_SECONDS, DeviceReading, SystemSample, is_idle, system_file_uri
from schemas.trainer import TrainerEventKind
from trainer import storage
from trainer.events import Events, log

MIB = 1024 * 1024


def load_nvml() -> ModuleType:
    """pynvml (the nvidia-ml-py package), NVML initialised; raises when there is none on this host."""
    import pynvml

    pynvml.nvmlInit()
    return pynvml


class GpuSampler:
    """One node's GPUs through NVML. `available` False (and `reason`) when NVML could not be opened."""

    def __init__(self, open_nvml: Callable[[], Any] | None = None, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        open_nvml = open_nvml or load_nvml
        self.nvml: Any = None
        self.reason: str | None = None
        self.idle_since: float | None = None
        try:
            self.nvml = open_nvml()
            self._handles = [self.nvml.nvmlDeviceGetHandleByIndex(i) for i in range(self.nvml.nvmlDeviceGetCount())]
        except Exception as exc:  # ImportError, NVMLError (no driver, no library), OSError
            self.nvml, self.reason = None, f"NVML is not available on this host ({type(exc).__name__}: {exc})"
            return
        if not self._handles:
            self.reason = "NVML sees no GPU on this host"
            self.close()

    @property
    def available(self) -> bool:
        return self.nvml is not None

    def sample(self, attempt: int, node: int) -> SystemSample:
        now = self.clock()
        if self.nvml is None:
            return SystemSample(time=now, attempt=attempt, node=node, available=False, reason=self.reason)
        devices = [self._read(index, handle) for index, handle in enumerate(self._handles)]
        sample = SystemSample(time=now, attempt=attempt, node=node, available=True, devices=devices)
        if not is_idle(sample):
            self.idle_since = None
        elif self.idle_since is None:
            self.idle_since = now
        sample.idle_since = self.idle_since
        return sample

    def _read(self, index: int, handle: Any) -> DeviceReading:
        nvml = self.nvml

        def field(read: Callable[[], Any]) -> Any:
            try:
                return read()
            except Exception:  # NVMLError_NotSupported and friends: that field is unknown for this device
                return None

        memory = field(lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
        utilization = field(lambda: nvml.nvmlDeviceGetUtilizationRates(handle))
        power_mw = field(lambda: nvml.nvmlDeviceGetPowerUsage(handle))
        name = field(lambda: nvml.nvmlDeviceGetName(handle))
        return DeviceReading(
            index=index,
            name=name.decode() if isinstance(name, bytes) else name,
            utilization_pct=float(utilization.gpu) if utilization is not None else None,
            memory_used_mib=round(memory.used / MIB, 1) if memory is not None else None,
            memory_total_mib=round(memory.total / MIB, 1) if memory is not None else None,
            power_w=round(power_mw / 1000.0, 1) if power_mw is not None else None,
            sm_clock_mhz=field(lambda: float(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM))),
        )

    def close(self) -> None:
        if self.nvml is not None:
            with contextlib.suppress(Exception):
                self.nvml.nvmlShutdown()
            self.nvml = None


class SystemRecorder:
    """The attempt's and node's system file (local, or staged and uploaded to S3) and the reports."""

    def __init__(
        self, events: Events, uri: str | None, staging: Path, *, sync_seconds: float = 60.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.events, self.uri, self.sync_seconds, self.clock = events, uri, sync_seconds, clock
        self.to_s3 = bool(uri) and storage.is_s3(uri or "")
        self.file = staging if self.to_s3 or not uri else storage.local_path(uri)
        self.file.parent.mkdir(parents=True, exist_ok=True)
        self._last_sync: float | None = None
        self._dirty = False

    def record(self, sample: SystemSample) -> None:
        self.events.emit(TrainerEventKind.SYSTEM, sample.model_dump(mode="json", exclude_none=True))
        with self.file.open("a", encoding="utf-8") as handle:
            handle.write(sample.model_dump_json(exclude_none=True) + "\n")
        self._dirty = True
        if self._last_sync is None or self.clock() - self._last_sync >= self.sync_seconds:
            self.sync()

    def sync(self) -> None:
        if not (self.to_s3 and self._dirty and self.uri):
            return
        try:
            storage.upload_file(self.file, self.uri)
        except Exception as exc:  # telemetry never fails a run; the next sync tries again
            log(f"WARNING: system metrics not uploaded to {self.uri}: {type(exc).__name__}: {exc}")
            return
        self._dirty = False
        self._last_sync = self.clock()


class SystemMonitor:
    """Samples every `interval` seconds on a daemon thread until closed; `tick` is one sample (tests call it)."""

    def __init__(self, sampler: GpuSampler, recorder: SystemRecorder, *, attempt: int, node: int, interval: float = SAMPLE_SECONDS) -> None:
        self.sampler, self.recorder, self.attempt, self.node, self.interval = sampler, recorder, attempt, node, interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def tick(self) -> SystemSample:
        sample = self.sampler.sample(self.attempt, self.node)
        self.recorder.record(sample)
        return sample

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="trainplane-nvml", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            if not self.tick().available:
                return  # said once why there is none; nothing more to sample
            while not self._stop.wait(self.interval):
                self.tick()
        except Exception as exc:  # telemetry never fails a run
            log(f"WARNING: GPU telemetry stopped: {type(exc).__name__}: {exc}")

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval + 5)
        self.recorder.sync()
        self.sampler.close()


@contextlib.contextmanager
def monitored(
    events: Events, *, metrics_uri: str | None, staging_dir: Path, job_id: str, attempt: int, node: int, local_rank: int, is_main: bool
) -> Iterator[SystemMonitor | None]:
    """The run's GPU telemetry on this node's local rank 0 (None elsewhere), closed when the run ends."""
    if local_rank != 0 or not metrics_uri:
        yield None
        return
    emitter = events
    if not is_main:
        # Another node's local rank 0: its reports go to its own stream (SageMaker: algo-<n>), named as rank 0's.
        emitter = Events()
        emitter.bind(job_id, attempt)
    uri = system_file_uri(metrics_uri, attempt, node)
    monitor = SystemMonitor(GpuSampler(), SystemRecorder(emitter, uri, staging_dir / Path(uri).name), attempt=attempt, node=node)
    monitor.start()
    try:
        yield monitor
    finally:
        monitor.close()
