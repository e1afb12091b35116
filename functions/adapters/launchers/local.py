"""LocalLauncher: one attempt of a job as a child process on this machine (local mode).

The child gets the same contract as the SageMaker container (schemas/trainer.py): the run spec URI,
the checkpoint/model/output/failure paths moved under the state directory, the emulated S3 endpoint.
A monitor thread per run reads its stdout and stderr (two pipes, one reader each): TRAINPLANE_EVENT
lines go to the observer (on_trainer_event), every line goes to jobs/<id>/logs/attempt-NNN.log in
the bucket, stderr lines tagged as such (constants.tag_log_line), and the exit goes to
on_run_finished. Stops are SIGTERM (the trainer checkpoints and exits 75), a grace period,
then SIGKILL, always to the child's whole process group (data-loader workers included); the child is
told so (ENV_STOP_SIGNALS_GROUP), and the trainer forwards no second SIGTERM to a CUSTOM script.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol

from functions import constants
from functions.errors import InvalidRequest
from functions.service.ports import LaunchHandle, LaunchRequest, RunDescription, RunState
from schemas.bounds import denied_env
from schemas.job import ErrorType
from schemas.trainer import (
    ENV_ATTEMPT,
    ENV_CHECKPOINT_DIR,
    ENV_FAILURE_FILE,
    ENV_GRACE_SECONDS,
    ENV_INPUT_CONFIG_DIR,
    ENV_JOB_ID,
    ENV_MODEL_DIR,
    ENV_OUTPUT_DATA_DIR,
    ENV_RUN_SPEC,
    ENV_S3_ENDPOINT,
    ENV_SM_HYPERPARAMETERS,
    ENV_STOP_SIGNALS_GROUP,
    EVENT_PREFIX,
    EXIT_CODE_ERRORS,
    FAILURE_REASON_ERRORS,
    ExitCode,
    TrainerEvent,
    TrainerEventKind,
)

logger = logging.getLogger(__name__)

NAME = "local"
DEFAULT_COMMAND: tuple[str, ...] = (sys.executable, "-m", "trainer")


class RunObserver(Protocol):
    def on_trainer_event(self, job_id: str, attempt: int, event: TrainerEvent) -> None: ...

    def on_run_finished(self, job_id: str, attempt: int, run: RunDescription) -> None: ...

    def on_run_alive(self, job_id: str, attempt: int) -> None: ...


LogUploader = Callable[[str, bytes], None]  # (key in the artifacts bucket, whole log so far)


@dataclass
class _Run:
    request: LaunchRequest
    process: subprocess.Popen[str]
    log_path: Path
    failure_file: Path
    started: float = field(default_factory=time.monotonic)
    stop_requested: bool = False
    timed_out: bool = False
    description: RunDescription | None = None
    done: threading.Event = field(default_factory=threading.Event)


class LocalLauncher:
    name = NAME

    def __init__(
        self,
        work_dir: Path,
        *,
        command: Sequence[str] = DEFAULT_COMMAND,
        env: Mapping[str, str] | None = None,
        s3_endpoint_url: str | None = None,
        upload_log: LogUploader | None = None,
        stop_grace_seconds: float = 30.0,
        tick_seconds: float = 5.0,
    ) -> None:
        self.work_dir = Path(work_dir)
        self.command = list(command)
        self.env = dict(env or {})
        self.s3_endpoint_url = s3_endpoint_url
        self.upload_log = upload_log
        self.stop_grace_seconds = stop_grace_seconds
        self.tick_seconds = tick_seconds
        self.observer: RunObserver | None = None
        self._runs: dict[str, _Run] = {}
        self._lock = threading.Lock()

    # --- Launcher port ------------------------------------------------------------------------
    def launch(self, request: LaunchRequest) -> LaunchHandle:
        if request.run_spec.training_config.image:
            # Submit refuses it (functions/catalog/images.py); never run our trainer in its place.
            raise InvalidRequest("training_config.image", "the local launcher runs processes, not container images")
        denied = denied_env(request.run_spec.training_config.environment)
        if denied:  # submit refuses it; a job stored before the rule never gets it into a process
            raise InvalidRequest(*denied)
        run_dir = self.work_dir / request.job_id / f"attempt-{request.attempt:03d}"
        for sub in ("checkpoints", "model", "output", "config"):
            (run_dir / sub).mkdir(parents=True, exist_ok=True)
        failure_file = run_dir / "output" / "failure"
        failure_file.unlink(missing_ok=True)
        env = {**os.environ, **self.env, **request.run_spec.training_config.environment}
        env.update(
            {
                ENV_RUN_SPEC: request.run_spec_uri,
                ENV_JOB_ID: request.job_id,
                ENV_ATTEMPT: str(request.attempt),
                ENV_CHECKPOINT_DIR: str(run_dir / "checkpoints"),
                ENV_MODEL_DIR: str(run_dir / "model"),
                ENV_OUTPUT_DATA_DIR: str(run_dir / "output" / "data"),
                ENV_FAILURE_FILE: str(failure_file),
                ENV_INPUT_CONFIG_DIR: str(run_dir / "config"),
                ENV_SM_HYPERPARAMETERS: str(run_dir / "config" / "hyperparameters.json"),
                ENV_GRACE_SECONDS: str(int(self.stop_grace_seconds)),
                ENV_STOP_SIGNALS_GROUP: "1",  # _signal_group: the trainer need not forward them to its child
                "PYTHONUNBUFFERED": "1",
            }
        )
        if self.s3_endpoint_url:
            env[ENV_S3_ENDPOINT] = self.s3_endpoint_url
        log_path = run_dir / constants.log_file_name(request.attempt)
        process = subprocess.Popen(
            self.command,
            env=env,
            cwd=run_dir,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,  # its own pipe: each log line knows its stream
            stdin=subprocess.DEVNULL,
            text=True,
            bufsize=1,
            start_new_session=True,  # its own process group: a stop reaches every process it started
        )
        run = _Run(request=request, process=process, log_path=log_path, failure_file=failure_file)
        with self._lock:
            self._runs[_key(request.job_id, process.pid)] = run
        threading.Thread(target=self._monitor, args=(run,), name=f"run-{request.job_id}-{request.attempt}", daemon=True).start()
        threading.Thread(target=self._ticker, args=(run,), name=f"tick-{request.job_id}-{request.attempt}", daemon=True).start()
        logger.info("launched %s attempt %d as pid %d", request.job_id, request.attempt, process.pid)
        return LaunchHandle(launcher=NAME, run_id=str(process.pid), attempt=request.attempt, extra={"job_id": request.job_id})

    def stop(self, handle: LaunchHandle, *, graceful: bool = True) -> None:
        run = self._run_of(handle)
        if run is None:
            _kill_orphan(handle)
            return
        if run.done.is_set():
            return
        run.stop_requested = True
        if not graceful:
            _signal_group(run.process, signal.SIGKILL)
            return
        _signal_group(run.process, signal.SIGTERM)
        threading.Thread(target=self._kill_after_grace, args=(run,), daemon=True).start()

    def describe(self, handle: LaunchHandle) -> RunDescription:
        run = self._run_of(handle)
        if run is None:
            return RunDescription(state=RunState.UNKNOWN, message="the trainer process is not known to this control plane (restarted?)")
        if run.description is not None:
            return run.description
        return RunDescription(state=RunState.STOPPING if run.stop_requested else RunState.RUNNING)

    def log_path(self, handle: LaunchHandle) -> Path:
        """Where the run's output (every stdout/stderr line, as read; constants.untag_log_line reads a line's stream) is written."""
        job_id, attempt = handle.extra.get("job_id", ""), handle.attempt
        return self.work_dir / job_id / f"attempt-{attempt:03d}" / f"attempt-{attempt:03d}.log"

    # --- local mode lifecycle -------------------------------------------------------------------
    def shutdown(self, timeout: float | None = None) -> None:
        """Stop every run with a checkpoint and wait; reports are not delivered (the reconciler resumes them)."""
        self.observer = None
        with self._lock:
            runs = list(self._runs.values())
        for run in runs:
            if not run.done.is_set():
                run.stop_requested = True
                _signal_group(run.process, signal.SIGTERM)
        deadline = time.monotonic() + (self.stop_grace_seconds if timeout is None else timeout)
        for run in runs:
            if not run.done.wait(max(0.0, deadline - time.monotonic())):
                _signal_group(run.process, signal.SIGKILL)

    def active(self) -> list[tuple[str, int]]:
        with self._lock:
            return [(r.request.job_id, r.request.attempt) for r in self._runs.values() if not r.done.is_set()]

    # --- internals -----------------------------------------------------------------------------
    def _run_of(self, handle: LaunchHandle) -> _Run | None:
        job_id = handle.extra.get("job_id", "")
        with self._lock:
            return self._runs.get(_key(job_id, int(handle.run_id))) if handle.run_id.isdigit() else None

    def _kill_after_grace(self, run: _Run) -> None:
        if not run.done.wait(self.stop_grace_seconds):
            logger.warning("%s did not stop within %.0fs of SIGTERM: SIGKILL", run.request.job_id, self.stop_grace_seconds)
            _signal_group(run.process, signal.SIGKILL)

    def _monitor(self, run: _Run) -> None:
        """Reads the child's output; a second thread delivers the events, so a slow control plane never
        slows the trainer down (a full pipe would block its prints) and a backlog is coalesced."""
        request = run.request
        assert run.process.stdout is not None and run.process.stderr is not None
        pending: queue.SimpleQueue[TrainerEvent | None] = queue.SimpleQueue()
        deliverer = threading.Thread(target=self._deliver, args=(run, pending), name=f"events-{request.job_id}", daemon=True)
        deliverer.start()
        writing = threading.Lock()  # one line at a time into the shared file, whole
        with run.log_path.open("a", encoding="utf-8") as log:
            errors = threading.Thread(
                target=_read_pipe, args=(run.process.stderr, "stderr", log, writing, pending), name=f"stderr-{request.job_id}", daemon=True
            )
            errors.start()
            _read_pipe(run.process.stdout, "stdout", log, writing, pending)
            errors.join()
        code = run.process.wait()
        pending.put(None)
        deliverer.join()  # every event of the run is delivered before its end
        run.description = self._describe_exit(run, code)
        self._upload_log(run)
        run.done.set()
        observer = self.observer
        if observer is not None:
            try:
                observer.on_run_finished(request.job_id, request.attempt, run.description)
            except Exception:
                logger.exception("end of run of %s not recorded; the reconciler will retry", request.job_id)

    def _deliver(self, run: _Run, pending: queue.SimpleQueue[TrainerEvent | None]) -> None:
        request = run.request
        finished = False
        while not finished:
            batch = [pending.get()]
            while True:
                try:
                    batch.append(pending.get_nowait())
                except queue.Empty:
                    break
            finished = batch[-1] is None
            for event in coalesce([e for e in batch if e is not None]):
                observer = self.observer
                if observer is None:
                    continue
                try:
                    observer.on_trainer_event(request.job_id, request.attempt, event)
                except Exception:
                    logger.exception("trainer event of %s not recorded", request.job_id)

    def _ticker(self, run: _Run) -> None:
        """Uploads the log now and then, keeps the run's wait alive, enforces max_runtime_seconds."""
        limit = run.request.max_runtime_seconds
        while not run.done.wait(self.tick_seconds):
            self._upload_log(run)
            if limit and not run.stop_requested and time.monotonic() - run.started > limit:
                run.timed_out = True
                self.stop(LaunchHandle(NAME, str(run.process.pid), run.request.attempt, {"job_id": run.request.job_id}), graceful=True)
            observer = self.observer
            if observer is not None:
                try:
                    observer.on_run_alive(run.request.job_id, run.request.attempt)
                except Exception:
                    logger.exception("heartbeat of %s failed", run.request.job_id)

    def _upload_log(self, run: _Run) -> None:
        if self.upload_log is None or not run.log_path.exists():
            return
        key = constants.log_key(run.request.job_id, run.request.attempt)
        try:
            self.upload_log(key, run.log_path.read_bytes())
        except Exception as exc:
            logger.warning("log upload of %s failed: %s", run.request.job_id, exc)

    def _describe_exit(self, run: _Run, code: int) -> RunDescription:
        seconds = time.monotonic() - run.started
        failure_type, failure_message = _read_failure(run.failure_file)
        if run.timed_out:
            message = f"stopped after scheduling_config.max_runtime_seconds={run.request.max_runtime_seconds}"
            return RunDescription(state=RunState.FAILED, error_type=ErrorType.TIMEOUT, message=message, run_seconds=seconds)
        if code == ExitCode.COMPLETED:
            return RunDescription(state=RunState.COMPLETED, run_seconds=seconds)
        if code == ExitCode.STOPPED_WITH_CHECKPOINT:
            return RunDescription(state=RunState.STOPPED, message="stopped with a checkpoint", run_seconds=seconds)
        if code < 0:
            name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
            if run.stop_requested:
                return RunDescription(state=RunState.STOPPED, message=f"stopped by {name}", run_seconds=seconds)
            return RunDescription(
                state=RunState.PREEMPTED,
                error_type=ErrorType.PREEMPTED,
                message=f"the trainer process was killed by {name}",
                run_seconds=seconds,
            )
        error_type = failure_type or EXIT_CODE_ERRORS.get(code, ErrorType.USER_ERROR)
        message = failure_message or f"the trainer exited with code {code}"
        return RunDescription(state=RunState.FAILED, error_type=error_type, message=message, run_seconds=seconds)


def coalesce(events: list[TrainerEvent]) -> list[TrainerEvent]:
    """A backlog of events, minus what later ones make moot: only the last progress report, and only the
    last of consecutive phase changes. Checkpoints, metrics and failures are all kept, in order."""
    last_progress = max((i for i, e in enumerate(events) if e.kind == TrainerEventKind.PROGRESS), default=-1)
    kept: list[TrainerEvent] = []
    for i, event in enumerate(events):
        if event.kind == TrainerEventKind.PROGRESS and i != last_progress:
            continue
        if event.kind == TrainerEventKind.PHASE and kept and kept[-1].kind == TrainerEventKind.PHASE:
            kept[-1] = event
            continue
        kept.append(event)
    return kept


def _read_pipe(pipe: IO[str], stream: str, log: IO[str], writing: threading.Lock, pending: queue.SimpleQueue[TrainerEvent | None]) -> None:
    """Every line of one of the child's pipes into the log, tagged with its stream; events to `pending`
    (from either pipe, as when the two were one; every report of a line, TrainerEvent.all_in: two can
    share one). A line is split where the log's readers split it (str.splitlines), so each piece they
    read carries its tag; the last line gets its newline."""
    for line in pipe:
        printed = line.rstrip("\n")
        with writing:
            log.write("".join(constants.tag_log_line(piece, stream) + "\n" for piece in printed.splitlines() or [""]))
            log.flush()
        if EVENT_PREFIX in printed:  # a malformed report is a log line, never a crash of the monitor
            for event in TrainerEvent.all_in(printed):
                pending.put(event)


def _key(job_id: str, pid: int) -> str:
    return f"{job_id}#{pid}"


def _read_failure(path: Path) -> tuple[ErrorType | None, str | None]:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip()[:1024]
    except OSError:
        return None, None
    if not text:
        return None, None
    reason, sep, message = text.partition(": ")
    if sep and reason in FAILURE_REASON_ERRORS:
        return FAILURE_REASON_ERRORS[reason], message
    return None, text


def _signal_group(process: subprocess.Popen[str], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


def _kill_orphan(handle: LaunchHandle) -> None:
    """A trainer left running by an earlier `trainplane up`: stop it only if it really is this job's."""
    job_id = handle.extra.get("job_id")
    if not (handle.run_id.isdigit() and job_id):
        return
    pid = int(handle.run_id)
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return
    if f"{ENV_JOB_ID}={job_id}".encode() in environ:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)
