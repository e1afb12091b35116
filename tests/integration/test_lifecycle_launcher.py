"""LocalLauncher: the container contract for a child process, its reports, exits and stops.

The fake trainer runs with a local checkpoint directory (no S3 needed), as a real trainer may.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from functions import constants
from functions.adapters.launchers.local import LocalLauncher, coalesce
from functions.service.ports import LaunchHandle, LaunchRequest, RunDescription, RunState
from schemas.job import ErrorType
from schemas.trainer import RunSpec, TrainerEvent, TrainerEventKind
from tests.lifecycle_support import FAKE_TRAINER, REPO_ROOT, make_job, make_request, wait_until

pytestmark = pytest.mark.slow


class Observer:
    def __init__(self) -> None:
        self.events: list[TrainerEvent] = []
        self.finished: list[RunDescription] = []
        self.alive = 0
        self.done = threading.Event()

    def on_trainer_event(self, job_id: str, attempt: int, event: TrainerEvent) -> None:
        self.events.append(event)

    def on_run_finished(self, job_id: str, attempt: int, run: RunDescription) -> None:
        self.finished.append(run)
        self.done.set()

    def on_run_alive(self, job_id: str, attempt: int) -> None:
        self.alive += 1

    def steps(self) -> list[int]:
        return [e.data["step"] for e in self.events if e.kind == TrainerEventKind.PROGRESS]


def _launcher(tmp_path: Path, uploads: dict[str, bytes] | None = None, **kwargs: Any) -> tuple[LocalLauncher, Observer]:
    launcher = LocalLauncher(
        tmp_path / "runs",
        command=kwargs.pop("command", FAKE_TRAINER),
        env={"PYTHONPATH": str(REPO_ROOT)},
        upload_log=(lambda key, body: uploads.__setitem__(key, body)) if uploads is not None else None,
        stop_grace_seconds=kwargs.pop("grace", 5.0),
        tick_seconds=kwargs.pop("tick", 0.2),
    )
    observer = Observer()
    launcher.observer = observer
    return launcher, observer


def _request(tmp_path: Path, *, attempt: int = 1, max_runtime: int | None = None, **kwargs: Any) -> LaunchRequest:
    job = make_job(make_request(**kwargs))
    spec = RunSpec(
        job_id=job.job_id,
        attempt=attempt,
        training_config=job.training_config,
        data_config=job.data_config,
        output_config=job.output_config,
        resource_config=job.resource_config,
        checkpoint_uri=str(tmp_path / "ckpt" / job.job_id),
        output_uri=str(tmp_path / "model" / job.job_id),
        max_runtime_seconds=max_runtime,
    )
    path = tmp_path / f"{job.job_id}-run.json"
    path.write_text(spec.model_dump_json())
    return LaunchRequest(
        job_id=job.job_id, attempt=attempt, owner=job.owner, run_spec=spec, run_spec_uri=str(path), max_runtime_seconds=max_runtime
    )


def test_a_completed_run_reports_its_events_in_order_and_uploads_its_log(tmp_path: Path) -> None:
    uploads: dict[str, bytes] = {}
    launcher, observer = _launcher(tmp_path, uploads)
    request = _request(tmp_path, max_steps=5, save_steps=2)
    # When the run is launched
    handle = launcher.launch(request)
    assert handle.launcher == "local" and handle.extra["job_id"] == request.job_id and handle.attempt == 1
    assert observer.done.wait(20)
    # Then its end is COMPLETED, after every checkpoint and the last progress were delivered
    assert observer.finished == [RunDescription(state=RunState.COMPLETED, run_seconds=observer.finished[0].run_seconds)]
    kinds = [e.kind for e in observer.events]
    assert kinds[0] == TrainerEventKind.PHASE and kinds[-1] == TrainerEventKind.DONE
    assert [e.data["checkpoint_id"] for e in observer.events if e.kind == TrainerEventKind.CHECKPOINT] == ["step-000002", "step-000004"]
    assert observer.steps()[-1] == 5
    assert launcher.describe(handle).state == RunState.COMPLETED
    # And the whole log is in the bucket under the job's logs/ prefix
    log = uploads[f"jobs/{request.job_id}/logs/attempt-001.log"].decode()
    assert "starting at step 0 of 5" in log and "TRAINPLANE_EVENT" in log


def test_each_log_line_keeps_its_stream_and_events_come_from_either_pipe(tmp_path: Path) -> None:
    # Given a trainer printing on both pipes: plain lines, a line that looks like the stream tag,
    # a stderr line without its newline at exit, and one event on stderr
    event = TrainerEvent(kind=TrainerEventKind.PROGRESS, time=1.0, data={"step": 3}).to_line()
    script = (
        "import sys\n"
        "for i in range(200):\n"
        "    print(f'out {i}', flush=True); print(f'err {i}', file=sys.stderr, flush=True)\n"
        "print('\\x02E\\x03 not a tag: printed on stdout', flush=True)\n"
        f"print({event!r}, file=sys.stderr, flush=True)\n"
        "sys.stderr.write('last words'); sys.stdout.write('no newline either')\n"
    )
    uploads: dict[str, bytes] = {}
    launcher, observer = _launcher(tmp_path, uploads, command=[sys.executable, "-c", script])
    request = _request(tmp_path)
    launcher.launch(request)
    assert observer.done.wait(20)
    # When the uploaded log is read back line by line
    stored = uploads[constants.log_key(request.job_id, 1)].decode().splitlines()
    lines = [constants.untag_log_line(line) for line in stored]
    # Then every line is whole and says its stream; each stream keeps its own order
    odd = "\x02E\x03 not a tag: printed on stdout"
    assert [m for s, m in lines if s == "stdout"] == [f"out {i}" for i in range(200)] + [odd, "no newline either"]
    assert [m for s, m in lines if s == "stderr"] == [f"err {i}" for i in range(200)] + [event, "last words"]
    # And the event printed on stderr was delivered, as when the two pipes were one
    assert [e.data.get("step") for e in observer.events] == [3]


def test_the_child_gets_the_container_contract(tmp_path: Path) -> None:
    dump = (
        "import json, os; print(json.dumps({k: v for k, v in os.environ.items() if k.startswith(('TRAINPLANE_', 'SM_', 'AWS_ENDPOINT'))}))"
    )
    launcher, observer = _launcher(tmp_path, command=[sys.executable, "-c", dump])
    launcher.s3_endpoint_url = "http://127.0.0.1:9"
    request = _request(tmp_path, attempt=3, training_config={"environment": {"MY_FLAG": "1"}})
    launcher.launch(request)
    assert observer.done.wait(20)
    run_dir = tmp_path / "runs" / request.job_id / "attempt-003"
    env = json.loads((run_dir / "attempt-003.log").read_text().splitlines()[0])
    assert env["TRAINPLANE_RUN_SPEC"] == request.run_spec_uri and env["TRAINPLANE_JOB_ID"] == request.job_id
    assert env["TRAINPLANE_ATTEMPT"] == "3" and env["AWS_ENDPOINT_URL_S3"] == "http://127.0.0.1:9"
    assert env["TRAINPLANE_CHECKPOINT_DIR"] == str(run_dir / "checkpoints") and env["SM_MODEL_DIR"] == str(run_dir / "model")
    assert env["TRAINPLANE_FAILURE_FILE"] == str(run_dir / "output" / "failure")
    assert env["TRAINPLANE_STOP_GRACE_SECONDS"] == "5"
    # Its stops signal the whole process group, so the trainer forwards none to its CUSTOM child (test_custom.py)
    assert env["TRAINPLANE_STOP_SIGNALS_GROUP"] == "1"


def test_two_reports_on_one_line_are_both_delivered_before_the_end(tmp_path: Path) -> None:
    # Given a trainer whose stop report was printed twice on one line and which then exits 75: what a CUSTOM
    # script's SIGTERM handler prints when the signal reaches it twice (its process group, then the trainer's
    # forward) and the second run of the handler lands inside the first one's print, after the report's text
    # and before its newline (the line the sweep pause e2e test once lost: tests/e2e/test_sweeps_e2e.py)
    saved = TrainerEvent(kind=TrainerEventKind.CHECKPOINT, time=1.0, data={"checkpoint_id": "step-000001", "step": 1}).to_line()
    done = TrainerEvent(kind=TrainerEventKind.DONE, time=2.0, data={"exit_code": 75, "stopped": True}).to_line()
    script = f"import sys\nsys.stdout.write({saved!r}); sys.stdout.write({saved!r} + '\\n'); print({done!r})\nsys.exit(75)\n"
    launcher, observer = _launcher(tmp_path, command=[sys.executable, "-c", script])
    launcher.launch(_request(tmp_path))
    # When the run ends
    assert observer.done.wait(20)
    # Then both reports of that line were delivered before the end (the lifecycle records the checkpoint
    # once; the run is STOPPED, so a pause lands PAUSED with it)
    assert [e.kind for e in observer.events] == [TrainerEventKind.CHECKPOINT, TrainerEventKind.CHECKPOINT, TrainerEventKind.DONE]
    assert observer.finished[0].state == RunState.STOPPED


def test_graceful_stop_checkpoints_and_exits_75(tmp_path: Path) -> None:
    launcher, observer = _launcher(tmp_path)
    request = _request(tmp_path, max_steps=500, save_steps=1000, step_seconds=0.05)
    handle = launcher.launch(request)
    wait_until(lambda: len(observer.steps()) >= 3, 20, what="progress")
    # When stopped gracefully
    launcher.stop(handle, graceful=True)
    assert launcher.describe(handle).state in {RunState.STOPPING, RunState.STOPPED}
    assert observer.done.wait(20)
    # Then it saved a checkpoint and ended STOPPED
    assert observer.finished[0].state == RunState.STOPPED
    assert [e for e in observer.events if e.kind == TrainerEventKind.CHECKPOINT]
    launcher.stop(handle, graceful=True)  # idempotent


@pytest.mark.parametrize(
    ("hp", "expected"),
    [
        ({"fake_fail_at_step": "1", "fake_exit_code": "65", "fake_failure": "DataError: bad row 3"}, (ErrorType.DATA_ERROR, "bad row 3")),
        (
            {"fake_fail_at_step": "1", "fake_exit_code": "71", "fake_failure": "OutOfMemory: CUDA out of memory"},
            (ErrorType.OUT_OF_MEMORY, "CUDA out of memory"),
        ),
        ({"fake_fail_at_step": "1", "fake_exit_code": "70", "fake_failure": "something odd"}, (ErrorType.INTERNAL, "something odd")),
        ({"fake_fail_at_step": "1", "fake_exit_code": "3", "fake_failure": ""}, (ErrorType.USER_ERROR, "the trainer exited with code 3")),
    ],
)
def test_failures_map_exit_codes_and_the_failure_file(tmp_path: Path, hp: dict[str, str], expected: tuple[ErrorType, str]) -> None:
    launcher, observer = _launcher(tmp_path)
    launcher.launch(_request(tmp_path, max_steps=5, hyperparameters=hp))
    assert observer.done.wait(20)
    run = observer.finished[0]
    assert run.state == RunState.FAILED and (run.error_type, run.message) == expected


def test_killed_from_outside_is_preempted_but_killed_by_us_is_stopped(tmp_path: Path) -> None:
    launcher, observer = _launcher(tmp_path)
    outside = launcher.launch(_request(tmp_path, max_steps=500))
    wait_until(lambda: observer.steps(), 20, what="progress")
    os.killpg(int(outside.run_id), signal.SIGKILL)
    assert observer.done.wait(20)
    assert observer.finished[0].state == RunState.PREEMPTED and "SIGKILL" in (observer.finished[0].message or "")
    # When we stop one hard ourselves, it is STOPPED, not a preemption
    launcher2, observer2 = _launcher(tmp_path)
    ours = launcher2.launch(_request(tmp_path, max_steps=500))
    wait_until(lambda: observer2.steps(), 20, what="progress")
    launcher2.stop(ours, graceful=False)
    assert observer2.done.wait(20)
    assert observer2.finished[0].state == RunState.STOPPED


def test_a_trainer_ignoring_sigterm_is_killed_after_the_grace_period(tmp_path: Path) -> None:
    launcher, observer = _launcher(tmp_path, grace=1.0)
    handle = launcher.launch(_request(tmp_path, max_steps=500, hyperparameters={"fake_ignore_sigterm": "true"}))
    wait_until(lambda: observer.steps(), 20, what="progress")
    started = time.monotonic()
    launcher.stop(handle, graceful=True)
    assert observer.done.wait(20)
    assert time.monotonic() - started >= 0.9
    assert observer.finished[0].state == RunState.STOPPED and "SIGKILL" in (observer.finished[0].message or "")


def test_max_runtime_stops_the_run_as_a_timeout_and_heartbeats_while_alive(tmp_path: Path) -> None:
    launcher, observer = _launcher(tmp_path, tick=0.2)
    launcher.launch(_request(tmp_path, max_steps=500, max_runtime=1))
    assert observer.done.wait(20)
    run = observer.finished[0]
    assert run.state == RunState.FAILED and run.error_type == ErrorType.TIMEOUT and "max_runtime_seconds=1" in (run.message or "")
    assert observer.alive >= 2


def test_unknown_runs_and_orphans(tmp_path: Path) -> None:
    launcher, _ = _launcher(tmp_path)
    # A handle from an earlier process: UNKNOWN, and stopping it is harmless
    stranger = LaunchHandle("local", str(os.getpid()), 1, {"job_id": "job-not-mine"})
    assert launcher.describe(stranger).state == RunState.UNKNOWN
    launcher.stop(stranger, graceful=True)  # our own pid does not carry that job id: nothing is signalled
    # A trainer left behind by an earlier `trainplane up` is stopped when its job id matches
    other, observer = _launcher(tmp_path)
    request = _request(tmp_path, max_steps=500)
    handle = other.launch(request)
    wait_until(lambda: observer.steps(), 20, what="progress")
    launcher.stop(handle, graceful=True)
    assert observer.done.wait(20) and observer.finished[0].state in {RunState.STOPPED, RunState.PREEMPTED}


def test_shutdown_stops_every_run_with_a_checkpoint_and_reports_nothing(tmp_path: Path) -> None:
    launcher, observer = _launcher(tmp_path)
    launcher.launch(_request(tmp_path, max_steps=500, save_steps=1000))
    wait_until(lambda: observer.steps(), 20, what="progress")
    launcher.shutdown(timeout=10)
    assert not launcher.active() and observer.finished == []
    assert list((tmp_path / "ckpt").rglob("manifest.json"))


def test_coalesce_keeps_checkpoints_and_the_last_progress() -> None:
    def ev(kind: TrainerEventKind, **data: Any) -> TrainerEvent:
        return TrainerEvent(kind=kind, time=0.0, data=data)

    backlog = [
        ev(TrainerEventKind.PROGRESS, step=1),
        ev(TrainerEventKind.PHASE, phase="CHECKPOINTING"),
        ev(TrainerEventKind.CHECKPOINT, checkpoint_id="step-000002"),
        ev(TrainerEventKind.PHASE, phase="TRAINING"),
        ev(TrainerEventKind.PHASE, phase="EVALUATING"),
        ev(TrainerEventKind.PROGRESS, step=3),
    ]
    kept = coalesce(backlog)
    assert [(e.kind.value, e.data) for e in kept] == [
        ("phase", {"phase": "CHECKPOINTING"}),
        ("checkpoint", {"checkpoint_id": "step-000002"}),
        ("phase", {"phase": "EVALUATING"}),
        ("progress", {"step": 3}),
    ]
