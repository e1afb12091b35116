"""Each branch of the lifecycle on moto's Step Functions engine, with the real ASL, the lifecycle handler
run in-process by localmode.moto_lambda, and LocalLauncher running tests/fake_trainer.py.

One engine per module (moto's server, the state machine, the Lambda function); every test uses its
own jobs and leaves none running.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from dataclasses import replace

import pytest

from functions.errors import ConcurrentModification, IllegalTransition
from functions.service.reconciler import Reconciler
from schemas.job import ErrorType
from schemas.status import TERMINAL, JobStatus
from tests.lifecycle_support import LocalEngine, make_request, wait_until

pytestmark = pytest.mark.slow
S = JobStatus


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalEngine]:
    with LocalEngine(tmp_path_factory.mktemp("engine"), cpu_slots=1, stop_grace_seconds=10) as eng:
        yield eng


@pytest.fixture(autouse=True)
def _no_leftovers(engine: LocalEngine) -> Iterator[None]:
    config = engine.service.config
    yield
    engine.service.config = config
    for job in list(engine.repository.jobs.values()):
        if job.status not in TERMINAL and job.status != S.PAUSED:
            with contextlib.suppress(ConcurrentModification, IllegalTransition):
                engine.controls.cancel(job.job_id)
    wait_until(lambda: not engine.launcher.active(), 20, what="no trainer left running")
    wait_until(lambda: not any(engine.ledger.holders(p) for p in engine.ledger.pools()), 10, what="all capacity released")


def _pid(engine: LocalEngine, job_id: str) -> int:
    job = wait_until(lambda: (j := engine.job(job_id)).run_handle and j, 20, what="a run handle")
    return int(job.run_handle["run_id"])


def _log(engine: LocalEngine, job_id: str, attempt: int) -> str:
    key = f"jobs/{job_id}/logs/attempt-{attempt:03d}.log"
    return wait_until(
        lambda: key in engine.artifacts.list_keys(f"jobs/{job_id}/logs/") and "\n".join(engine.artifacts.read_lines(key)), 10, what=key
    )


def test_happy_path_completes_in_few_transitions(engine: LocalEngine) -> None:
    # Given a small job
    job = engine.submit(max_steps=6, save_steps=2)
    # When it runs to the end
    done = engine.wait_status(job.job_id, S.COMPLETED, S.FAILED)
    # Then it completed through every lifecycle phase, with its checkpoints, run spec and log in the bucket
    assert done.status == S.COMPLETED, done.error_message
    statuses = [to for _, to in engine.history(job.job_id)]
    assert statuses[:5] == ["PENDING", "QUEUED", "SCHEDULING", "PREPARING", "TRAINING"]
    assert {"CHECKPOINTING", "EXPORTING"} <= set(statuses) and statuses[-1] == "COMPLETED"
    assert [c.checkpoint_id for c in done.checkpoints] == ["step-000002", "step-000004"]
    assert done.latest_checkpoint_id == "step-000004" and done.progress.step == 6
    assert f"jobs/{job.job_id}/config/run-001.json" in engine.artifacts.list_keys(f"jobs/{job.job_id}/config/")
    assert "starting at step 0 of 6" in _log(engine, job.job_id, 1)
    # And the execution succeeded within the transition budget, without waiting on a stale token
    execution = engine.wait_execution(job.job_id, "SUCCEEDED", "FAILED")
    assert execution["status"] == "SUCCEEDED"
    assert len(engine.transitions(job.job_id)) <= 25


def test_pause_then_resume_continues_from_the_paused_step(engine: LocalEngine) -> None:
    # Given a job training slowly, with no periodic checkpoint before the pause
    job = engine.submit(max_steps=30, save_steps=1000, step_seconds=0.1)
    wait_until(lambda: engine.job(job.job_id).progress.step >= 3, 20, what="a few steps")
    # When it is paused
    engine.controls.pause(job.job_id)
    paused = engine.wait_status(job.job_id, S.PAUSED, S.FAILED, S.PREEMPTED)
    # Then it is PAUSED with a checkpoint at the step it reached, its capacity is free, its execution waits
    assert paused.status == S.PAUSED
    step = paused.checkpoints[-1].step
    assert step >= 3 and paused.latest_checkpoint_id == f"step-{step:06d}"
    assert not any(engine.ledger.holders(p) for p in engine.ledger.pools())
    assert engine.execution(job.job_id)["status"] == "RUNNING"
    wait_until(lambda: engine.job(job.job_id).task_token_kind == "resume", 10, what="the resume wait")
    # When it is resumed
    engine.controls.resume(job.job_id)
    done = engine.wait_status(job.job_id, S.COMPLETED, S.FAILED, timeout=40)
    # Then the same job (same id, attempt 2) continued from that step, not from 0
    assert done.status == S.COMPLETED and done.attempt == 2
    assert f"starting at step {step} of 30" in _log(engine, job.job_id, 2)
    history = engine.history(job.job_id)
    assert ("TRAINING", "PAUSED") in history or ("CHECKPOINTING", "PAUSED") in history
    assert ("PAUSED", "QUEUED") in history
    assert engine.wait_execution(job.job_id, "SUCCEEDED", "FAILED")["status"] == "SUCCEEDED"


def test_cancel_while_queued_then_while_training(engine: LocalEngine) -> None:
    # Given a long job holding the only slot and a second job waiting for capacity
    running = engine.submit(max_steps=200, step_seconds=0.1)
    engine.wait_status(running.job_id, S.TRAINING)
    waiting = engine.submit(max_steps=2)
    wait_until(lambda: engine.job(waiting.job_id).task_token_kind == "capacity", 10, what="the capacity wait")
    # When the waiting job is cancelled
    engine.controls.cancel(waiting.job_id)
    # Then it is CANCELLED and its execution ends without ever scheduling it
    assert engine.wait_execution(waiting.job_id, "SUCCEEDED", "FAILED")["status"] == "SUCCEEDED"
    assert "SCHEDULING" not in [to for _, to in engine.history(waiting.job_id)]
    # When the training job is cancelled
    pid = _pid(engine, running.job_id)
    engine.controls.cancel(running.job_id)
    # Then its trainer is stopped, its execution ends and the slot is free
    assert engine.wait_execution(running.job_id, "SUCCEEDED", "FAILED")["status"] == "SUCCEEDED"
    wait_until(lambda: not engine.launcher.active(), 10, what="the trainer to stop")
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert engine.job(running.job_id).status == S.CANCELLED


def test_cancel_while_paused(engine: LocalEngine) -> None:
    # Given a paused job
    job = engine.submit(max_steps=100, save_steps=1000, step_seconds=0.1)
    wait_until(lambda: engine.job(job.job_id).progress.step >= 2, 20, what="a few steps")
    engine.controls.pause(job.job_id)
    engine.wait_status(job.job_id, S.PAUSED)
    wait_until(lambda: engine.job(job.job_id).task_token_kind == "resume", 10, what="the resume wait")
    # When it is cancelled
    engine.controls.cancel(job.job_id)
    # Then it is CANCELLED and its execution, which waited for a resume, ends
    assert engine.wait_execution(job.job_id, "SUCCEEDED", "FAILED")["status"] == "SUCCEEDED"
    assert engine.job(job.job_id).status == S.CANCELLED


def test_retryable_failure_is_retried_up_to_max_retries_then_fails(engine: LocalEngine) -> None:
    # Given a job whose trainer fails at step 2 every time, with one retry allowed
    request = make_request(
        max_steps=5, hyperparameters={"fake_fail_at_step": "2", "fake_failure": "UserError: boom"}, training_config={"max_retries": 1}
    )
    job = engine.submit(request)
    # When it runs
    failed = engine.wait_status(job.job_id, S.FAILED, S.COMPLETED, timeout=40)
    # Then it ran twice (one retry, back through QUEUED) and FAILED with the trainer's error
    assert failed.status == S.FAILED
    assert failed.error_type == ErrorType.USER_ERROR and failed.error_message == "boom"
    assert failed.retries_used == 1 and failed.attempt == 2
    assert ("TRAINING", "QUEUED") in engine.history(job.job_id)
    assert engine.wait_execution(job.job_id, "SUCCEEDED", "FAILED")["status"] == "FAILED"


def test_data_error_is_not_retried(engine: LocalEngine) -> None:
    # Given a job failing with a data error (exit 65), retries allowed
    hp = {"fake_fail_at_step": "1", "fake_exit_code": "65", "fake_failure": "DataError: row 7 has no text"}
    job = engine.submit(make_request(max_steps=5, hyperparameters=hp, training_config={"max_retries": 3}))
    # When it runs
    failed = engine.wait_status(job.job_id, S.FAILED, S.COMPLETED)
    # Then it fails at once with DATA_ERROR: retrying cannot fix the data
    assert failed.error_type == ErrorType.DATA_ERROR and failed.error_message == "row 7 has no text"
    assert failed.retries_used == 0 and failed.attempt == 1


def test_killed_trainer_is_preempted_and_resumed_without_spending_retries(engine: LocalEngine) -> None:
    # Given a job that has written a checkpoint
    job = engine.submit(max_steps=24, save_steps=3, step_seconds=0.1)
    wait_until(lambda: engine.job(job.job_id).latest_checkpoint_id, 20, what="a checkpoint")
    pid = _pid(engine, job.job_id)
    # When its trainer process is killed (not by us)
    os.killpg(pid, signal.SIGKILL)
    # Then it is PREEMPTED, resumed automatically from its latest checkpoint, and completes
    done = engine.wait_status(job.job_id, S.COMPLETED, S.FAILED, timeout=40)
    assert done.status == S.COMPLETED
    assert ("TRAINING", "PREEMPTED") in engine.history(job.job_id) or ("CHECKPOINTING", "PREEMPTED") in engine.history(job.job_id)
    assert ("PREEMPTED", "QUEUED") in engine.history(job.job_id)
    assert done.preemptions == 1 and done.retries_used == 0 and done.attempt == 2
    assert "starting at step 0" not in _log(engine, job.job_id, 2)


def test_preemption_budget_spent_leaves_the_job_preempted(engine: LocalEngine) -> None:
    # Given no automatic resume allowed
    engine.service.config = replace(engine.service.config, max_preemptions=0)
    job = engine.submit(max_steps=100, step_seconds=0.1)
    pid = _pid(engine, job.job_id)
    engine.wait_status(job.job_id, S.TRAINING)
    # When its trainer is killed
    os.killpg(pid, signal.SIGKILL)
    # Then it stays PREEMPTED (retryable by the user) and its execution ends
    assert engine.wait_execution(job.job_id, "SUCCEEDED", "FAILED")["status"] == "SUCCEEDED"
    stopped = engine.job(job.job_id)
    assert stopped.status == S.PREEMPTED and "budget" in (stopped.error_message or "")


def test_higher_priority_job_preempts_a_preemptible_one_which_requeues(engine: LocalEngine) -> None:
    # Given a low-priority preemptible job holding the only slot
    low = engine.submit(
        make_request("low", max_steps=40, save_steps=1000, step_seconds=0.1, scheduling_config={"priority": 2, "preemptible": True})
    )
    wait_until(lambda: engine.job(low.job_id).progress.step >= 2, 20, what="low to train")
    # When a higher-priority job arrives
    high = engine.submit(make_request("high", max_steps=4, scheduling_config={"priority": 8}))
    # Then the low one checkpoints and goes back to the queue (not FAILED), the high one runs first
    assert engine.wait_status(high.job_id, S.COMPLETED, S.FAILED, timeout=40).status == S.COMPLETED
    assert ("TRAINING", "QUEUED") in engine.history(low.job_id) or ("CHECKPOINTING", "QUEUED") in engine.history(low.job_id)
    # And the low one resumes from its checkpoint and completes
    done = engine.wait_status(low.job_id, S.COMPLETED, S.FAILED, timeout=60)
    assert done.status == S.COMPLETED and done.retries_used == 0 and done.preemptions == 0
    assert "starting at step 0" not in _log(engine, low.job_id, 2)


def test_max_runtime_is_enforced(engine: LocalEngine) -> None:
    # Given a job allowed 1 second that needs much longer
    job = engine.submit(make_request(max_steps=500, step_seconds=0.1, scheduling_config={"max_runtime_seconds": 1}))
    # When it runs
    failed = engine.wait_status(job.job_id, S.FAILED, S.COMPLETED, timeout=30)
    # Then it is stopped and FAILED with TIMEOUT
    assert failed.error_type == ErrorType.TIMEOUT and "max_runtime_seconds=1" in (failed.error_message or "")


def test_race_pause_vs_completion_completion_wins(engine: LocalEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a running job whose stop signal will arrive too late (the run completes first)
    monkeypatch.setattr(engine.launcher, "stop", lambda handle, graceful=True: None)
    job = engine.submit(max_steps=10, step_seconds=0.1)
    wait_until(lambda: engine.job(job.job_id).progress.step >= 1, 20, what="training")
    # When a pause is accepted but the trainer finishes anyway
    engine.controls.pause(job.job_id)
    done = engine.wait_status(job.job_id, S.COMPLETED, S.PAUSED, S.FAILED, timeout=30)
    # Then the completion is what the job records (the pause lost, no PAUSED), and nothing is pending
    assert done.status == S.COMPLETED and done.pending_action is None
    assert "PAUSED" not in [to for _, to in engine.history(job.job_id)]
    # And a pause now is refused
    with pytest.raises(IllegalTransition):
        engine.controls.pause(job.job_id)


def test_race_cancel_vs_launch_stops_what_was_launched(engine: LocalEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a launch that is slow to return
    launched, release = threading.Event(), threading.Event()
    real_launch = engine.launcher.launch

    def slow_launch(request):  # type: ignore[no-untyped-def]
        handle = real_launch(request)
        launched.set()
        release.wait(10)
        return handle

    monkeypatch.setattr(engine.launcher, "launch", slow_launch)
    job = engine.submit(max_steps=200, step_seconds=0.1)
    assert launched.wait(20)
    # When the job is cancelled while Launch has not yet recorded its run
    engine.controls.cancel(job.job_id)
    release.set()
    # Then Launch sees the cancel and stops the run it just started; the job stays CANCELLED
    assert engine.wait_execution(job.job_id, "SUCCEEDED", "FAILED")["status"] == "SUCCEEDED"
    wait_until(lambda: not engine.launcher.active(), 15, what="the launched trainer to be stopped")
    assert engine.job(job.job_id).status == S.CANCELLED


def test_race_resume_vs_cancel_exactly_one_wins(engine: LocalEngine) -> None:
    # Given a paused job
    job = engine.submit(max_steps=6, save_steps=1000, step_seconds=0.2)
    wait_until(lambda: engine.job(job.job_id).progress.step >= 1, 20, what="training")
    engine.controls.pause(job.job_id)
    engine.wait_status(job.job_id, S.PAUSED)
    # When resume and cancel arrive together
    outcomes: dict[str, str] = {}
    barrier = threading.Barrier(2)

    def attempt(name: str, verb) -> None:  # type: ignore[no-untyped-def]
        barrier.wait()
        try:
            verb(job.job_id)
            outcomes[name] = "won"
        except (ConcurrentModification, IllegalTransition):
            outcomes[name] = "lost"

    threads = [
        threading.Thread(target=attempt, args=("resume", engine.controls.resume)),
        threading.Thread(target=attempt, args=("cancel", engine.controls.cancel)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Then exactly one won, and the job ends the way the winner decided
    assert sorted(outcomes.values()) == ["lost", "won"]
    final = engine.wait_status(job.job_id, S.COMPLETED, S.CANCELLED, S.FAILED, timeout=30)
    assert final.status == (S.COMPLETED if outcomes["resume"] == "won" else S.CANCELLED)
    assert engine.wait_execution(job.job_id, "SUCCEEDED", "FAILED")["status"] == "SUCCEEDED"


def test_reconciler_reports_a_missed_run_end_and_recovers_a_lost_execution(engine: LocalEngine) -> None:
    reconciler = Reconciler(engine.repository, engine.service, engine.workflow, {"local": engine.launcher}, grace_seconds=0)
    # Given a job whose trainer dies while nobody listens (the end event is missed)
    job = engine.submit(max_steps=16, save_steps=2, step_seconds=0.1)
    wait_until(lambda: engine.job(job.job_id).latest_checkpoint_id, 20, what="a checkpoint")
    observer, engine.launcher.observer = engine.launcher.observer, None
    os.killpg(_pid(engine, job.job_id), signal.SIGKILL)
    wait_until(lambda: not engine.launcher.active(), 10, what="the trainer to die")
    engine.launcher.observer = observer
    assert engine.job(job.job_id).status in {S.TRAINING, S.CHECKPOINTING}
    # When the reconciler sweeps
    report = reconciler.run_once()
    # Then the run's end is reported: PREEMPTED, and the job resumes from its checkpoint and completes
    assert job.job_id in report.reported_ends
    done = engine.wait_status(job.job_id, S.COMPLETED, S.FAILED, timeout=40)
    assert done.status == S.COMPLETED and done.preemptions == 1

    # Given a training job whose execution is lost (its record points at an execution that does not exist)
    job = engine.submit(max_steps=16, save_steps=2, step_seconds=0.1)
    wait_until(lambda: engine.job(job.job_id).latest_checkpoint_id, 20, what="a checkpoint")
    old = engine.job(job.job_id).execution_arn
    engine.repository.annotate(job.job_id, {"execution_arn": old + "-lost"})
    # When the reconciler sweeps
    report = reconciler.run_once()
    # Then its run is stopped, it is PREEMPTED and a new execution resumes it to completion
    assert job.job_id in report.preempted and job.job_id in report.restarted
    done = engine.wait_status(job.job_id, S.COMPLETED, S.FAILED, timeout=40)
    assert done.status == S.COMPLETED and done.execution_arn not in {old, old + "-lost"}
    # And the superseded execution ends by itself instead of acting on the job
    engine.repository.annotate(job.job_id, {"execution_arn": done.execution_arn})
