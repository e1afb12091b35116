"""The SDK against the stand-in API: signing, error mapping, pagination, verbs and waiting."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from botocore.credentials import Credentials

from schemas.configs import ResourceConfig
from schemas.job import SubmitJobRequest
from schemas.status import JobStatus
from tests.unit import test_client_standin
from tests.unit.test_client_standin import ACCESS_KEY, MINIMAL_REQUEST, SECRET_KEY, StandInApi
from trainplane import Client
from trainplane.errors import (
    AuthError,
    Conflict,
    ConnectionFailed,
    NotFound,
    ServerError,
    TrainplaneError,
    ValidationFailed,
    WaitTimeout,
    error_from_response,
)

standin = test_client_standin.standin  # the fixture, shared with the CLI tests


def client_for(api: StandInApi, secret: str = SECRET_KEY) -> Client:
    return Client(api.url, credentials=Credentials(ACCESS_KEY, secret), region="us-east-1")


def test_every_request_carries_a_sigv4_signature_the_server_verifies(standin: StandInApi) -> None:
    # Given a client with explicit keys
    client = client_for(standin)
    # When it sends a body, a query with characters that need encoding, and a plain GET
    job = client.submit(MINIMAL_REQUEST)
    list(client.list(labels={"team": "a b/c+d", "exp": "x=y&z"}, name="ti ny", status=JobStatus.PENDING))
    client.get(job.job_id)
    # Then each arrived with an execute-api SigV4 Authorization header that the stand-in's own
    # verifier accepted (it answers 403 otherwise, which the client would have raised)
    assert len(standin.requests) == 3
    for recorded in standin.requests:
        auth = recorded.headers["authorization"]
        assert auth.startswith(f"AWS4-HMAC-SHA256 Credential={ACCESS_KEY}/")
        assert "/us-east-1/execute-api/aws4_request" in auth
        assert "x-amz-date" in recorded.headers
    # And the filters arrived decoded exactly as given
    query = dict(standin.calls("GET", "/jobs")[0].query)
    assert query["labels.team"] == "a b/c+d"
    assert query["labels.exp"] == "x=y&z"
    assert query["name"] == "ti ny"
    assert query["status"] == "PENDING"


def test_a_wrong_secret_is_an_auth_error_with_the_server_message(standin: StandInApi) -> None:
    # Given a client whose secret the server does not know
    client = client_for(standin, secret="wrong")
    # When it calls the API
    with pytest.raises(AuthError) as caught:
        client.summary()
    # Then the error carries the 403 and the server's message
    assert caught.value.status == 403
    assert "signature" in caught.value.message


def test_submit_accepts_a_model_and_sends_secrets_and_only_the_fields_set(standin: StandInApi) -> None:
    # Given a request model with a hub token and only training_config.priority set
    request = SubmitJobRequest.model_validate(
        {
            **MINIMAL_REQUEST,
            "training_config": {**MINIMAL_REQUEST["training_config"], "priority": 9},
            "output_config": {"push_to_hub": True, "hub_repo_id": "me/tiny", "hub_token": "hf_secret"},
        }
    )
    # When it is submitted
    job = client_for(standin).submit(request)
    # Then the body holds the real token (not its mask) and no scheduling_config the user never set
    sent = standin.calls("POST", "/jobs")[0].body
    assert sent["output_config"]["hub_token"] == "hf_secret"
    assert "scheduling_config" not in sent
    assert sent["training_config"]["priority"] == 9
    assert job.status == JobStatus.PENDING
    assert job.name == "tiny"


def test_idempotency_key_is_sent_and_a_repeat_returns_the_same_job(standin: StandInApi) -> None:
    # Given a client
    client = client_for(standin)
    # When the same request is submitted twice with one key, and once without
    first = client.submit(MINIMAL_REQUEST, idempotency_key="k-1")
    second = client.submit(MINIMAL_REQUEST, idempotency_key="k-1")
    third = client.submit(MINIMAL_REQUEST)
    # Then the key travelled as the Idempotency-Key header and the repeat is the same job
    assert standin.calls("POST", "/jobs")[0].headers["idempotency-key"] == "k-1"
    assert first.job_id == second.job_id != third.job_id


def test_invalid_input_raises_validation_failed_naming_each_field(standin: StandInApi) -> None:
    # Given a request with a bad priority and an unknown field
    bad: dict[str, Any] = {**MINIMAL_REQUEST, "scheduling_config": {"priority": 11}, "colour": "red"}
    # When it is submitted
    with pytest.raises(ValidationFailed) as caught:
        client_for(standin).submit(bad)
    # Then the error is the 422 with one field error per bad field
    fields = {e.field for e in caught.value.errors}
    assert caught.value.status == 422
    assert {"scheduling_config.priority", "colour"} <= fields
    assert "scheduling_config.priority" in str(caught.value)


def test_unknown_job_is_not_found_and_a_forbidden_verb_is_a_conflict(standin: StandInApi) -> None:
    # Given a queued job
    client = client_for(standin)
    job = standin.add_job(status=JobStatus.QUEUED)
    # When an unknown job is read, and the queued job is paused or deleted
    # Then the 404 and the 409s map to NotFound and Conflict with the server's messages
    with pytest.raises(NotFound, match="job-nope not found"):
        client.get("job-nope")
    with pytest.raises(Conflict, match="allowed from TRAINING"):
        client.pause(job.job_id)
    with pytest.raises(Conflict):
        client.delete(job.job_id)


@pytest.mark.parametrize(
    ("status", "body", "cls", "message", "fields"),
    [
        (400, {"message": "bad json"}, ValidationFailed, "bad json", []),
        (401, {}, AuthError, "Unauthorized", []),
        (404, "not json at all", NotFound, "not json at all", []),
        (
            422,
            {"detail": [{"loc": ["body", "data_config", "batch_size"], "msg": "too small", "type": "x"}]},
            ValidationFailed,
            "Unprocessable",
            ["data_config.batch_size"],
        ),
        (409, {"message": "lost a race", "errors": []}, Conflict, "lost a race", []),
        (503, {"Message": "throttled"}, ServerError, "throttled", []),
        (418, {"message": "teapot"}, TrainplaneError, "teapot", []),
    ],
)
def test_error_bodies_map_to_classes(status: int, body: Any, cls: type[TrainplaneError], message: str, fields: list[str]) -> None:
    # Given an error answer  When it is turned into an exception
    error = error_from_response(status, body, reason="Unauthorized" if status == 401 else "Unprocessable")
    # Then the class, message and field names follow the status and body
    assert type(error) is cls
    assert error.status == status
    assert error.message == message
    assert [e.field for e in error.errors] == fields


def test_list_is_a_lazy_iterator_over_pages_newest_first(standin: StandInApi) -> None:
    # Given seven jobs
    ids = [standin.add_job(name=f"job-{i}").job_id for i in range(7)]
    client = client_for(standin)
    # When they are listed three to a page
    jobs = client.list(page_size=3)
    first_two = [next(jobs).job_id, next(jobs).job_id]
    # Then only one page was fetched for the first two
    assert len(standin.calls("GET", "/jobs")) == 1
    rest = [j.job_id for j in jobs]
    # And the whole iteration follows next_token to the end, newest first, nothing twice
    assert first_two + rest == list(reversed(ids))
    pages = standin.calls("GET", "/jobs")
    assert len(pages) == 3
    assert [dict(p.query).get("next_token") for p in pages] == [None, "3", "6"]
    assert all(dict(p.query)["limit"] == "3" for p in pages)


def test_list_filters_reach_the_server(standin: StandInApi) -> None:
    # Given jobs in two queues with labels
    standin.add_job(name="a", labels={"team": "x"}, scheduling_config={"queue": "gpu"})
    standin.add_job(name="b", labels={"team": "y"}, scheduling_config={"queue": "gpu"})
    standin.add_job(name="c", labels={"team": "x"})
    # When filtered by queue and label
    names = [j.name for j in client_for(standin).list(queue="gpu", labels={"team": "x"})]
    # Then only the matching job comes back
    assert names == ["a"]


def test_lifecycle_verbs_send_their_bodies_and_return_the_job(standin: StandInApi) -> None:
    # Given a training job
    client = client_for(standin)
    job = standin.add_job(status=JobStatus.TRAINING)
    # When it is paused, resumed, cancelled and retried on new resources
    paused = client.pause(job.job_id, save_checkpoint=False)
    resumed = client.resume(job.job_id, checkpoint_id="step-000010")
    cancelled = client.cancel(job.job_id, reason="enough")
    child = client.retry(job.job_id, checkpoint_id="step-000010", new_resource_config=ResourceConfig(gpu_count=0, cpu_cores=2))
    # Then each verb posted the contract's body and returned the job as it now stands
    bodies = {r.path.rsplit("/", 1)[-1]: r.body for r in standin.calls("POST", f"/jobs/{job.job_id}/")}
    assert bodies["pause"] == {"save_checkpoint": False}
    assert bodies["resume"] == {"checkpoint_id": "step-000010"}
    assert bodies["cancel"] == {"reason": "enough"}
    assert bodies["retry"]["modify_resources"] is True
    assert bodies["retry"]["new_resource_config"]["cpu_cores"] == 2
    assert (paused.status, resumed.status, cancelled.status) == (JobStatus.PAUSED, JobStatus.QUEUED, JobStatus.CANCELLED)
    # And retry's answer is the child, pointing at its parent, on the new resources
    assert child.parent_job_id == job.job_id
    assert child.job_id != job.job_id
    assert child.resource_config.cpu_cores == 2


def test_retry_without_new_resources_keeps_the_parents(standin: StandInApi) -> None:
    # Given a failed job
    job = standin.add_job(status=JobStatus.FAILED)
    # When it is retried with no resource change
    client_for(standin).retry(job.job_id)
    # Then modify_resources is false and no config is sent
    assert standin.calls("POST", "/jobs/")[-1].body == {"checkpoint_id": "", "modify_resources": False, "new_resource_config": None}


def test_patch_and_delete(standin: StandInApi) -> None:
    # Given a queued job and a completed one
    client = client_for(standin)
    queued = standin.add_job(status=JobStatus.QUEUED)
    done = standin.add_job(status=JobStatus.COMPLETED)
    # When the first is renamed and the second deleted
    renamed = client.patch(queued.job_id, {"name": "renamed"})
    client.delete(done.job_id)
    # Then the rename shows and the deleted job is gone
    assert renamed.name == "renamed"
    with pytest.raises(NotFound):
        client.get(done.job_id)


def test_wait_returns_at_the_wanted_status_and_reports_each_poll(standin: StandInApi) -> None:
    # Given a job whose next reads walk through the lifecycle
    job = standin.add_job(status=JobStatus.QUEUED)
    standin.script[job.job_id] = [JobStatus.SCHEDULING, JobStatus.TRAINING, JobStatus.COMPLETED]
    seen: list[JobStatus] = []
    # When waiting with the default statuses
    final = client_for(standin).wait(job.job_id, timeout=10, poll=0.01, on_update=lambda j: seen.append(j.status))
    # Then it stops at COMPLETED after seeing each status once
    assert final.status == JobStatus.COMPLETED
    assert seen == [JobStatus.SCHEDULING, JobStatus.TRAINING, JobStatus.COMPLETED]


def test_wait_stops_at_paused_by_default_and_at_named_statuses(standin: StandInApi) -> None:
    # Given a paused job and a training one
    client = client_for(standin)
    paused = standin.add_job(status=JobStatus.PAUSED)
    training = standin.add_job(status=JobStatus.TRAINING)
    # When waiting by default, and for TRAINING by name
    # Then both return at once
    assert client.wait(paused.job_id, timeout=1, poll=0.01).status == JobStatus.PAUSED
    assert client.wait(training.job_id, until=["TRAINING"], timeout=1, poll=0.01).status == JobStatus.TRAINING


def test_wait_timeout_names_the_last_status(standin: StandInApi) -> None:
    # Given a job that stays TRAINING
    job = standin.add_job(status=JobStatus.TRAINING)
    # When waiting for it with a short timeout
    with pytest.raises(WaitTimeout) as caught:
        client_for(standin).wait(job.job_id, timeout=0.2, poll=0.05)
    # Then a TimeoutError says which status it was stuck in
    assert isinstance(caught.value, TimeoutError)
    assert caught.value.last_status == "TRAINING"
    assert "last status TRAINING" in str(caught.value)
    assert job.job_id in str(caught.value)


def test_create_and_wait(standin: StandInApi) -> None:
    # Given the stand-in  When a job is created and waited for until QUEUED or later
    client = client_for(standin)
    submitted_ids: list[str] = []

    def script_next(job: Any) -> None:
        submitted_ids.append(job.job_id)
        standin.script.setdefault(job.job_id, [JobStatus.QUEUED])

    job = client.create_and_wait(MINIMAL_REQUEST, until={JobStatus.QUEUED}, timeout=5, poll=0.01, on_update=script_next)
    # Then the submitted job is returned at the wanted status
    assert job.status == JobStatus.QUEUED
    assert job.job_id == submitted_ids[0]


def test_events_metrics_summary(standin: StandInApi) -> None:
    # Given a job that trained and left metrics
    client = client_for(standin)
    job = standin.add_job(status=JobStatus.QUEUED)
    standin.set_status(job.job_id, JobStatus.SCHEDULING)
    standin.metrics[job.job_id] = [{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.5, "perplexity": 4.4}]
    # When its history, metrics and the summary are read
    events = client.events(job.job_id)
    points = client.metrics(job.job_id)
    summary = client.summary()
    # Then they parse into the schema models, extra metric names kept
    assert [(e.from_status, e.to_status) for e in events] == [(None, JobStatus.QUEUED), (JobStatus.QUEUED, JobStatus.SCHEDULING)]
    assert [p.loss for p in points] == [2.0, 1.5]
    assert points[1].model_extra == {"perplexity": 4.4}
    assert summary.total == 1
    assert summary.counts[JobStatus.SCHEDULING] == 1


def test_logs_pages_and_follow_stops_when_the_job_stops(standin: StandInApi) -> None:
    # Given a completed job with five log lines (the stand-in pages them two at a time)
    job = standin.add_job(status=JobStatus.COMPLETED)
    standin.logs[job.job_id] = [{"timestamp": 100.0 + i, "attempt": 1, "message": f"line {i}"} for i in range(5)]
    client = client_for(standin)
    # When they are read, followed, and read from a time on
    plain = [line.message for line in client.logs(job.job_id)]
    followed = [line.message for line in client.logs(job.job_id, follow=True, poll=0.01)]
    later = [line.message for line in client.logs(job.job_id, since=102.0)]
    # Then every line comes once, in order, and follow ends because the job has stopped
    assert plain == followed == [f"line {i}" for i in range(5)]
    assert later == ["line 3", "line 4"]


def test_an_unreachable_endpoint_is_a_connection_error() -> None:
    # Given a port nobody listens on
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = Client(f"http://127.0.0.1:{port}", credentials=Credentials("a", "b"), region="us-east-1", timeout=2, max_retries=0)
    # When the client calls it
    with pytest.raises(ConnectionFailed, match="cannot reach"):
        client.summary()


def test_job_ids_cannot_escape_the_jobs_path(standin: StandInApi) -> None:
    # Given a client  When an id with a slash is used  Then it is refused before any request
    with pytest.raises(ValueError, match="not a job id"):
        client_for(standin).get("../summary")
    assert standin.requests == []


def test_follow_picks_up_new_lines_once_even_when_stamps_repeat(standin: StandInApi) -> None:
    # Given a training job with three lines, two sharing a stamp
    job = standin.add_job(status=JobStatus.TRAINING)
    standin.logs[job.job_id] = [{"timestamp": t, "attempt": 1, "message": m} for t, m in [(1.0, "a"), (2.0, "b"), (2.0, "c")]]
    follower = client_for(standin).logs(job.job_id, follow=True, poll=0.01)
    # When the follower has read them, more lines arrive (one with the same stamp) and the job completes
    first = [next(follower).message for _ in range(3)]
    standin.logs[job.job_id] += [{"timestamp": 2.0, "attempt": 1, "message": "d"}, {"timestamp": 3.0, "attempt": 2, "message": "e"}]
    standin.set_status(job.job_id, JobStatus.COMPLETED)
    rest = [line.message for line in follower]
    # Then every line came exactly once, in order, and the follower ended with the job
    assert first + rest == ["a", "b", "c", "d", "e"]


def test_reads_are_retried_through_throttling_and_gateway_errors(standin: StandInApi, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a job and a server that answers 429 then 503 before serving again
    monkeypatch.setattr("trainplane.transport.RETRY_BASE_SECONDS", 0.0)
    job = standin.add_job()
    standin.fail_next = [429, 503]
    # When the job is read
    got = client_for(standin).get(job.job_id)
    # Then the third attempt, signed afresh, returned it
    assert got.job_id == job.job_id
    assert len(standin.calls("GET")) == 3


def test_a_submit_is_repeated_only_with_an_idempotency_key(standin: StandInApi, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a server that fails the next request with 503
    monkeypatch.setattr("trainplane.transport.RETRY_BASE_SECONDS", 0.0)
    client = client_for(standin)
    standin.fail_next = [503]
    # When a submit without a key meets it  Then it is not repeated (it might have created a job)
    with pytest.raises(ServerError):
        client.submit(MINIMAL_REQUEST)
    assert len(standin.calls("POST")) == 1
    # When a keyed submit meets the same  Then it is repeated and creates exactly one job
    standin.fail_next = [503]
    job = client.submit(MINIMAL_REQUEST, idempotency_key="again")
    assert len(standin.calls("POST")) == 3
    assert list(standin.jobs) == [job.job_id]


def test_retries_give_up_with_the_last_error(standin: StandInApi, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a server that keeps answering 503
    monkeypatch.setattr("trainplane.transport.RETRY_BASE_SECONDS", 0.0)
    standin.fail_next = [503] * 10
    # When a read is made with one retry allowed  Then two attempts were made and the 503 surfaces
    client = Client(standin.url, credentials=Credentials(ACCESS_KEY, SECRET_KEY), region="us-east-1", max_retries=1)
    with pytest.raises(ServerError) as caught:
        client.summary()
    assert caught.value.status == 503
    assert len(standin.calls("GET")) == 2
