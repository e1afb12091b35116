"""The seed's waits (trainplane/waits.py) against the stand-in API: what each one waits out, resumes,
raises, and that followed logs come exactly once. The same waits over real HTTP, a dropping proxy and
rotated keys: tests/e2e/test_waits_e2e.py."""

from __future__ import annotations

import asyncio
import concurrent.futures
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.credentials import Credentials, RefreshableCredentials

from schemas.job import Job, PendingAction
from schemas.status import JobStatus
from tests.unit import test_client_standin
from tests.unit.test_client_standin import ACCESS_KEY, MINIMAL_REQUEST, SECRET_KEY, StandInApi
from trainplane import AsyncClient, Client
from trainplane.errors import JobFailed, WaitTimeout
from trainplane.waits import Action, Goal, Target, decide


def run_async(coro: Any) -> Any:
    """asyncio.run in a thread of its own: a browser test's session (Playwright's sync API) may keep an event
    loop running in this thread, where asyncio.run refuses to start."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


standin = test_client_standin.standin

S = JobStatus


def client_for(api: StandInApi) -> Client:
    return Client(api.url, credentials=Credentials(ACCESS_KEY, SECRET_KEY), region="us-east-1")


def async_client_for(api: StandInApi) -> AsyncClient:
    return AsyncClient(api.url, credentials=Credentials(ACCESS_KEY, SECRET_KEY), region="us-east-1")


def _job(status: JobStatus, **changes: Any) -> Job:
    return StandInApi().add_job(status=status).model_copy(update=changes)


# --- decide: the seed's meanings on our states ------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "changes", "goal", "action"),
    [
        (S.QUEUED, {}, Goal.of("training"), Action.WAIT),
        (S.PREPARING, {}, Goal.of("completed"), Action.WAIT),
        (S.TRAINING, {}, Goal.of("training"), Action.DONE),
        (S.EXPORTING, {}, Goal.of("training"), Action.DONE),
        (S.TRAINING, {}, Goal.of("completed"), Action.WAIT),
        (S.COMPLETED, {}, Goal.of("training"), Action.DONE),
        (S.COMPLETED, {}, Goal.of("completed"), Action.DONE),
        (S.FAILED, {}, Goal.of("training", resume=True), Action.FAIL),
        (S.CANCELLED, {}, Goal.of("completed"), Action.FAIL),
        (S.PAUSED, {}, Goal.of("completed"), Action.FAIL),
        (S.PAUSED, {}, Goal.of("training", resume=True), Action.RESUME),
        (S.PREEMPTED, {}, Goal.of("training", resume=True), Action.RETRY),
        (S.PREEMPTED, {"run_outcome": "resume_preempted"}, Goal.of("training", resume=True), Action.SETTLING),
        (S.PREEMPTED, {}, Goal.of("completed"), Action.FAIL),
        (S.TRAINING, {"pending_action": PendingAction.PAUSE}, Goal.of("training", resume=True), Action.SETTLING),
        (S.TRAINING, {"pending_action": PendingAction.PAUSE}, Goal.of("completed"), Action.WAIT),
        (S.QUEUED, {}, Goal.of([S.QUEUED]), Action.DONE),
        (S.COMPLETED, {}, Goal.of([S.TRAINING]), Action.FAIL),
    ],
)
def test_decide_maps_the_seeds_states_onto_ours(status: JobStatus, changes: dict[str, Any], goal: Goal, action: Action) -> None:
    assert decide(_job(status, **changes), goal) is action


def test_an_unknown_target_is_refused() -> None:
    with pytest.raises(ValueError, match="until must be"):
        Goal.of("running")
    assert Goal.of(None, default=Target.TRAINING).target is Target.TRAINING


# --- the sync waits -----------------------------------------------------------------------------


def _lines(n: int, start: int = 0, attempt: int = 1) -> list[dict[str, Any]]:
    return [{"timestamp": 1000.0 + i, "attempt": attempt, "message": f"line {i}"} for i in range(start, start + n)]


@pytest.mark.parametrize("cursor", [True, False], ids=["cursor", "since-fallback"])
def test_create_and_wait_follows_every_line_once_until_completed(standin: StandInApi, cursor: bool) -> None:
    # Given a job that walks QUEUED -> TRAINING -> TRAINING -> COMPLETED, writing lines as it goes
    standin.log_cursor = cursor
    client = client_for(standin)
    seen: list[str] = []
    written = {"n": 0}

    def on_update(job: Job) -> None:
        standin.script.setdefault(job.job_id, [S.TRAINING, S.TRAINING, S.COMPLETED])
        standin.logs.setdefault(job.job_id, [])
        standin.logs[job.job_id] += _lines(3, start=written["n"])  # new lines between polls, pages of 2
        written["n"] += 3

    # When it is created and waited for with the log followed
    job = client.create_and_wait(
        MINIMAL_REQUEST,
        poll_interval_s=0.01,
        timeout_s=10,
        follow_logs=True,
        on_log=lambda line: seen.append(line.message),
        on_update=on_update,
    )
    # Then it returns COMPLETED and every line came exactly once, in order
    assert job.status == S.COMPLETED
    assert seen == [f"line {i}" for i in range(written["n"])]
    if cursor:  # and each round asked from the cursor, never from the start again
        asked = [dict(r.query).get("next_token") for r in standin.calls("GET", f"/jobs/{job.job_id}/logs")]
        assert asked[0] is None and all(t is not None for t in asked[1:])


def test_a_failed_job_raises_job_failed_with_its_error_and_last_log_lines(standin: StandInApi) -> None:
    # Given a training job that will fail, with 30 lines of log
    job = standin.add_job(status=S.TRAINING)
    standin.logs[job.job_id] = _lines(30)
    standin.script[job.job_id] = [S.TRAINING, S.FAILED]
    standin.set_status(job.job_id, S.TRAINING, error_type="OUT_OF_MEMORY", error_message="CUDA out of memory at step 7")
    # When waited for (logs not followed)
    with pytest.raises(JobFailed) as caught:
        client_for(standin).wait_for_existing(job.job_id, poll_interval_s=0.01, timeout_s=10)
    # Then the error carries the job's error and the last 20 lines
    failed = caught.value
    assert failed.job_status == "FAILED"
    assert failed.error_type == "OUT_OF_MEMORY"
    assert failed.error_message == "CUDA out of memory at step 7"
    assert failed.last_log_lines == [f"line {i}" for i in range(10, 30)]
    assert "line 29" in str(failed) and "OUT_OF_MEMORY" in str(failed)


def test_waiting_for_completion_of_a_paused_job_says_it_waits_to_be_resumed(standin: StandInApi) -> None:
    job = standin.add_job(status=S.PAUSED)
    with pytest.raises(JobFailed, match="waits to be resumed"):
        client_for(standin).wait_for_existing(job.job_id, poll_interval_s=0.01, timeout_s=5)


def test_wait_timeout_names_what_was_waited_for(standin: StandInApi) -> None:
    job = standin.add_job(status=S.QUEUED)
    with pytest.raises(WaitTimeout) as caught:
        client_for(standin).wait_for_existing(job.job_id, until="training", poll_interval_s=0.02, timeout_s=0.2)
    assert caught.value.last_status == "QUEUED"
    assert "training" in str(caught.value)
    assert caught.value.job is not None and caught.value.job.job_id == job.job_id


def test_resume_and_wait_resumes_a_paused_job_and_returns_when_it_trains(standin: StandInApi) -> None:
    # Given a PAUSED job (resume -> QUEUED, then the engine schedules it)
    job = standin.add_job(status=S.PAUSED)
    standin.script[job.job_id] = []
    client = client_for(standin)

    def on_update(j: Job) -> None:
        if j.status == S.QUEUED and not standin.script[job.job_id]:
            standin.script[job.job_id] = [S.SCHEDULING, S.TRAINING]

    # When resumed and waited for
    final = client.resume_and_wait(job.job_id, poll_interval_s=0.01, timeout_s=10, on_update=on_update)
    # Then it was resumed once and is training, with the same id
    assert final.job_id == job.job_id and final.status == S.TRAINING
    assert len(standin.calls("POST", f"/jobs/{job.job_id}/resume")) == 1


def test_reconnect_and_wait_retries_a_job_preempted_for_good_and_follows_the_child(standin: StandInApi) -> None:
    # Given a job PREEMPTED with its budget spent (the control plane will not resume it)
    job = standin.add_job(status=S.PREEMPTED)
    client = client_for(standin)

    def on_update(j: Job) -> None:
        if j.parent_job_id == job.job_id:
            standin.script.setdefault(j.job_id, [S.SCHEDULING, S.PREPARING, S.TRAINING])

    # When reconnected
    final = client.reconnect_and_wait(job.job_id, poll_interval_s=0.01, timeout_s=10, max_wait_for_resumable_s=5, on_update=on_update)
    # Then a child (retry from the latest checkpoint) trains, and only one was made
    assert final.parent_job_id == job.job_id and final.status == S.TRAINING
    assert len(standin.calls("POST", f"/jobs/{job.job_id}/retry")) == 1


def test_reconnect_and_wait_follows_a_child_made_by_a_retry_whose_answer_was_lost(standin: StandInApi) -> None:
    # Given a PREEMPTED job that already has a child (a retry whose response never arrived)
    job = standin.add_job(status=S.PREEMPTED)
    child = standin._create(job.submit_request(), S.QUEUED, parent=job.job_id)
    standin.script[child.job_id] = [S.TRAINING]
    # When reconnected  Then it follows that child and makes no second one
    final = client_for(standin).reconnect_and_wait(job.job_id, poll_interval_s=0.01, timeout_s=10)
    assert final.job_id == child.job_id
    assert standin.calls("POST", f"/jobs/{job.job_id}/retry") == []


def test_reconnect_and_wait_bounds_the_wait_for_a_resumable_state(standin: StandInApi) -> None:
    # Given a job whose pause never completes
    job = standin.add_job(status=S.TRAINING)
    standin.set_status(job.job_id, S.TRAINING, pending_action="pause")
    # When reconnected with a short max_wait_for_resumable_s
    with pytest.raises(WaitTimeout, match="resumable state"):
        client_for(standin).reconnect_and_wait(job.job_id, poll_interval_s=0.02, timeout_s=10, max_wait_for_resumable_s=0.2)


def test_reconnect_and_wait_waits_for_the_control_planes_own_resume(standin: StandInApi) -> None:
    # Given a job PREEMPTED that the control plane is resuming by itself
    job = standin.add_job(status=S.PREEMPTED)
    standin.set_status(job.job_id, S.PREEMPTED, run_outcome="resume_preempted")
    standin.script[job.job_id] = [S.PREEMPTED, S.QUEUED, S.TRAINING]
    # When reconnected  Then it neither retries nor resumes, and returns when it trains
    final = client_for(standin).reconnect_and_wait(job.job_id, poll_interval_s=0.01, timeout_s=10)
    assert final.job_id == job.job_id and final.status == S.TRAINING
    assert standin.calls("POST", f"/jobs/{job.job_id}/retry") == [] == standin.calls("POST", f"/jobs/{job.job_id}/resume")


def test_a_wait_rides_out_server_errors(standin: StandInApi) -> None:
    job = standin.add_job(status=S.QUEUED)
    standin.script[job.job_id] = [S.TRAINING, S.COMPLETED]
    standin.fail_next = [503, 502, 503, 500, 503]  # more than the client's own retries
    final = client_for(standin).wait_for_existing(job.job_id, poll_interval_s=0.01, timeout_s=10)
    assert final.status == S.COMPLETED


def test_a_wait_fetches_rotated_keys_after_a_403(standin: StandInApi) -> None:
    # Given refreshable credentials, and a key rotated away mid-wait (the old key is refused from now on)
    job = standin.add_job(status=S.QUEUED)
    standin.script[job.job_id] = [S.TRAINING, S.TRAINING, S.COMPLETED]
    keys = iter([("AKIDOLD", "old-secret"), ("AKIDNEW", "new-secret")])
    standin.secrets = {"AKIDOLD": "old-secret"}
    far = (datetime.now(UTC) + timedelta(hours=2)).isoformat()

    def refresh() -> dict[str, str]:
        access, secret = next(keys)
        return {"access_key": access, "secret_key": secret, "token": "", "expiry_time": far}

    credentials = RefreshableCredentials.create_from_metadata(refresh(), refresh, "test")
    client = Client(standin.url, credentials=credentials, region="us-east-1")

    def rotate(j: Job) -> None:
        standin.secrets = {"AKIDNEW": "new-secret"}

    # When the wait goes on
    final = client.wait_for_existing(job.job_id, poll_interval_s=0.01, timeout_s=10, on_update=rotate)
    # Then it saw a 403, refreshed, and finished signed with the new key
    assert final.status == S.COMPLETED
    signed_with = [r.headers["authorization"].split("Credential=")[1].split("/")[0] for r in standin.requests]
    assert "AKIDOLD" in signed_with and signed_with[-1] == "AKIDNEW"


def test_a_second_403_in_a_row_is_raised(standin: StandInApi) -> None:
    from trainplane.errors import AuthError

    job = standin.add_job(status=S.QUEUED)
    client = Client(standin.url, credentials=Credentials("AKIDNOBODY", "x"), region="us-east-1")
    with pytest.raises(AuthError):
        client.wait_for_existing(job.job_id, poll_interval_s=0.01, timeout_s=5)


# --- the async client has the same surface -----------------------------------------------------------


def test_async_client_has_the_same_waits(standin: StandInApi) -> None:
    sync_waits = {"create_and_wait", "wait_for_existing", "resume_and_wait", "reconnect_and_wait", "get", "submit", "logs"}
    assert sync_waits <= set(dir(AsyncClient))


def test_async_create_and_wait_follows_logs_and_raises_job_failed(standin: StandInApi) -> None:
    standin.log_cursor = True
    seen: list[str] = []

    async def scenario() -> tuple[Job, JobFailed]:
        async with async_client_for(standin) as client:

            def on_update(job: Job) -> None:
                standin.script.setdefault(job.job_id, [S.TRAINING, S.COMPLETED])
                standin.logs.setdefault(job.job_id, []).extend(_lines(1, start=len(standin.logs.get(job.job_id, []))))

            done = await client.create_and_wait(
                MINIMAL_REQUEST,
                poll_interval_s=0.01,
                timeout_s=10,
                follow_logs=True,
                on_log=lambda line: seen.append(line.message),
                on_update=on_update,
            )
            doomed = standin.add_job(status=S.TRAINING)
            standin.set_status(doomed.job_id, S.FAILED, error_type="USER_ERROR", error_message="boom")
            standin.logs[doomed.job_id] = _lines(3)
            try:
                await client.wait_for_existing(doomed.job_id, poll_interval_s=0.01, timeout_s=5)
            except JobFailed as exc:
                return done, exc
            raise AssertionError("no JobFailed")

    done, failed = run_async(scenario())
    assert done.status == S.COMPLETED
    assert seen == [f"line {i}" for i in range(len(seen))] and len(seen) >= 3
    assert failed.error_type == "USER_ERROR" and failed.last_log_lines == ["line 0", "line 1", "line 2"]


def test_async_reconnect_and_wait_resumes_a_paused_job(standin: StandInApi) -> None:
    job = standin.add_job(status=S.PAUSED)
    standin.script[job.job_id] = []

    def on_update(j: Job) -> None:
        if j.status == S.QUEUED and not standin.script[job.job_id]:
            standin.script[job.job_id] = [S.TRAINING]

    async def scenario() -> Job:
        async with async_client_for(standin) as client:
            return await client.reconnect_and_wait(job.job_id, poll_interval_s=0.01, timeout_s=10, on_update=on_update)

    final = run_async(scenario())
    assert final.status == S.TRAINING
    assert len(standin.calls("POST", f"/jobs/{job.job_id}/resume")) == 1
