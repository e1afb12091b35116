"""The API Lambda driven by recorded API Gateway events (tests/events/api_*.json), on moto.

The real composition: DynamoJobRepository and S3ArtifactStore on moto, a RecordingWorkflow as the
engine. Every response is also checked against the committed OpenAPI document: a status code the
route does not document fails the test that got it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from functions import composition, constants
from functions.adapters.aws import AwsClients
from functions.handlers import api
from functions.handlers.errors import IdempotencyInProgress
from functions.handlers.openapi import COMMITTED, render
from schemas.job import CheckpointRef
from schemas.status import JobStatus
from tests.fakes import RecordingWorkflow
from tests.helpers.api_lambda import DOCUMENT, Api
from tests.helpers.aws import fresh_resources
from tests.helpers.events import FakeLambdaContext, api_event
from tests.helpers.jobs import ADMIN, ALICE, BOB, request_body

S = JobStatus


# --- submit ------------------------------------------------------------------------------------------


def test_submit_returns_201_with_the_job_and_masks_the_hub_token(call: Api) -> None:
    # Given a request that pushes to the hub with a token
    body = request_body(output_config={"push_to_hub": True, "hub_repo_id": "org/m", "hub_token": "hf_secret"})
    # When alice posts it (the recorded event carries an Idempotency-Key)
    reply = call("api_submit_job", body=body)
    # Then it is created PENDING, hers, started, and the token never comes back
    assert reply.status == 201
    job = reply.body
    assert job["status"] == "PENDING" and job["owner"] == ALICE and job["execution_arn"]
    assert job["output_config"]["hub_token"] == "**********"
    assert call.workflow.methods() == ["start"]
    # But storage kept it, for the trainer's hub push
    item = call.clients.dynamodb().get_item(
        TableName=call.settings.jobs_table, Key={"pk": {"S": f"JOB#{job['job_id']}"}, "sk": {"S": "META"}}
    )["Item"]
    assert json.loads(item["output_config"]["B"])["hub_token"] == "hf_secret"
    assert call("api_get_job", job_id=job["job_id"]).body["output_config"]["hub_token"] == "**********"


def test_the_same_idempotency_key_returns_the_same_job(call: Api) -> None:
    # Given a submitted job
    first = call("api_submit_job")
    # When the very same request is repeated, and then the key is reused with another body
    again = call("api_submit_job")
    other = call("api_submit_job", body=request_body(name="something-else"))
    # Then the repeat is the same job (one job exists), the reuse is refused naming the header
    assert again.status == 201 and again.body["job_id"] == first.body["job_id"]
    assert call("api_list_jobs", query={}).body["jobs"] == [call("api_get_job", job_id=first.body["job_id"]).body]
    assert other.status == 422 and other.body["errors"][0]["field"] == "Idempotency-Key"
    # And keys are per caller: bob's request with the same key is his own new job
    bobs = call("api_submit_job", user_arn=BOB)
    assert bobs.status == 201 and bobs.body["job_id"] != first.body["job_id"]


def test_a_repeat_while_the_first_request_is_still_running_is_refused(call: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a submit that, while it runs, sees the same key and body arrive again (a client retrying
    # early; in AWS that is another execution environment, so here it goes straight to the idempotent
    # path rather than through the same resolver instance)
    service = composition.current().jobs
    real_submit = service.submit
    raised: list[Exception] = []

    def submit_with_a_racing_repeat(request: Any, principal: Any, **kwargs: Any) -> Any:
        try:
            api._submit_once(principal, "7d9f3c52-submit-1", request)
        except Exception as exc:
            raised.append(exc)
        return real_submit(request, principal, **kwargs)

    monkeypatch.setattr(service, "submit", submit_with_a_racing_repeat)
    # When the first request completes
    first = call("api_submit_job")
    # Then the repeat was refused as in progress (a 409 telling to retry shortly), and one job exists
    assert first.status == 201
    assert [type(e) for e in raised] == [IdempotencyInProgress]
    assert len(call("api_list_jobs", query={}).body["jobs"]) == 1
    # And that refusal reaches the client as 409 with a clear message

    def in_progress(*_: Any) -> Any:
        raise IdempotencyInProgress()

    monkeypatch.setattr(api, "_submit_once", in_progress)
    reply = call("api_submit_job")
    assert reply.status == 409 and "still being processed" in reply.body["message"]


def test_malformed_json_is_400(call: Api) -> None:
    reply = call("api_submit_job", raw_body='{"name": ')
    assert reply.status == 400 and reply.body["errors"] == [{"field": "body", "message": "not valid JSON", "type": "json_invalid"}]


@pytest.mark.parametrize(
    ("change", "field", "fragment"),
    [
        (lambda b: b["training_config"]["base_model"].update(colour="blue"), "training_config.base_model.colour", "unknown field"),
        (lambda b: b["training_config"]["base_model"].pop("model_id"), "training_config.base_model.model_id", "Field required"),
        (lambda b: b.setdefault("scheduling_config", {}).update(priority=11), "scheduling_config.priority", "less than or equal to 10"),
        (lambda b: b["data_config"].update(validation_split=1.5), "data_config.validation_split", "less than or equal to 1"),
        (lambda b: b["resource_config"].update(gpu_count=-1), "resource_config.gpu_count", "greater than or equal to 0"),
        (lambda b: b["training_config"].update(training_type="RLHF"), "training_config.rlhf", "RLHF needs the rlhf block"),
        (lambda b: b["training_config"]["framework"].update(type="MEGATRON"), "body", "MEGATRON framework is not supported"),
        (lambda b: b["training_config"].update(training_type="QLORA"), "body", "QLORA needs a GPU"),
        (lambda b: b["labels"].update(sweep_id="swp-x"), "labels.sweep_id", "label 'sweep_id' is reserved: a sweep sets it"),
        (lambda b: b["labels"].update(trial="0"), "labels.trial", "label 'trial' is reserved: a sweep sets it"),
    ],
)
def test_schema_errors_are_422_naming_the_field(call: Api, change: Callable[[dict[str, Any]], Any], field: str, fragment: str) -> None:
    # Given a request with one thing wrong
    body = request_body()
    body["training_config"].setdefault("framework", {})
    change(body)
    # When it is submitted
    reply = call("api_submit_job", body=body, headers={"Idempotency-Key": ""})
    # Then it is a 422 whose error names the field and says why, and nothing was created
    assert reply.status == 422, reply.body
    assert any(e["field"] == field and fragment in e["message"] for e in reply.body["errors"]), reply.body
    assert fragment in reply.body["message"]
    assert call("api_list_jobs", query={}).body["jobs"] == []


def test_patch_sets_no_labels_so_not_the_reserved_ones(call: Api) -> None:
    job = call.submit()
    reply = call("api_patch_job", job_id=job["job_id"], body={"labels": {"sweep_id": "swp-x", "trial": "0"}})
    assert reply.status == 422 and reply.body["errors"][0]["field"] == "labels", reply.body
    assert call("api_get_job", job_id=job["job_id"]).body["labels"] == job["labels"]


def test_a_missing_body_is_422(call: Api) -> None:
    reply = call("api_submit_job", body=None)
    assert reply.status == 422 and reply.body["errors"][0]["field"] == "body"


def test_an_unstartable_lifecycle_is_503_and_the_job_is_failed(call: Api) -> None:
    call.workflow.fail_on.add("start")
    reply = call("api_submit_job")
    assert reply.status == 503 and "recorded as FAILED" in reply.body["message"]
    [job] = call("api_list_jobs", query={}).body["jobs"]
    assert job["status"] == "FAILED" and job["error_type"] == "INTERNAL"


# --- reads and ownership -------------------------------------------------------------------------------


def test_another_principals_job_is_404_and_admins_see_it(call: Api) -> None:
    job = call.submit()
    assert call("api_get_job", job_id=job["job_id"], user_arn=BOB).status == 404
    assert call("api_job_events", job_id=job["job_id"], user_arn=BOB).status == 404
    assert call("api_cancel_job", job_id=job["job_id"], user_arn=BOB).status == 404
    assert call("api_get_job", job_id=job["job_id"], user_arn=ADMIN).body["job_id"] == job["job_id"]
    assert call("api_get_job", job_id="job-unknown").status == 404


def test_a_request_without_an_iam_caller_is_403(call: Api) -> None:
    reply = call("api_list_jobs", user_arn="")
    assert reply.status == 403 and "AWS_IAM" in reply.body["message"]


def test_list_filters_page_and_validate_the_query(call: Api) -> None:
    # Given alice's jobs with labels, one queued, and bob's job
    ids = [call.submit(name=f"run-{i}", labels={"team": "a" if i % 2 else "b", "exp": "x"})["job_id"] for i in range(5)]
    call.submit(user=BOB)
    call.move(ids[1], S.QUEUED)
    # When alice lists with filters
    by_label = call("api_list_jobs", query={"labels.team": "a", "labels.exp": "x"}).body["jobs"]
    queued = call("api_list_jobs", query={"status": "QUEUED", "queue": "default"}).body["jobs"]
    named = call("api_list_jobs", query={"name": "run-4"}).body["jobs"]
    # Then each filter applies, newest first
    assert [j["name"] for j in by_label] == ["run-3", "run-1"]
    assert [j["job_id"] for j in queued] == [ids[1]]
    assert [j["name"] for j in named] == ["run-4"]
    # And pages of 2 follow one another without repeats, bob's job never among them
    seen, token = [], None
    while True:
        reply = call("api_list_jobs", query={"limit": "2", **({"next_token": token} if token else {})})
        seen += [j["job_id"] for j in reply.body["jobs"]]
        token = reply.body["next_token"]
        if not token:
            break
    assert seen == list(reversed(ids))
    # And a bad query is a 422 naming the parameter
    for query, field in [
        ({"limit": "0"}, "limit"),
        ({"priority_min": "11"}, "priority_min"),
        ({"priority_max": "-1"}, "priority_max"),
        ({"priority_min": "high"}, "priority_min"),
        ({"priority_min": "8", "priority_max": "7"}, "priority_min"),
        ({"status": "DONE"}, "status"),
        ({"staus": "QUEUED"}, "staus"),
        ({"next_token": "x"}, "next_token"),
    ]:
        reply = call("api_list_jobs", query=query)
        assert reply.status == 422 and reply.body["errors"][0]["field"] == field, (query, reply.body)


def test_the_priority_filter_pages_over_every_match(call: Api) -> None:
    # Given 7 jobs of alice, priorities 0..6 (newest last), and a high-priority job of bob's
    ids = [call.submit(name=f"prio-{p}", scheduling_config={"priority": p})["job_id"] for p in range(7)]
    call.submit(user=BOB, scheduling_config={"priority": 5})
    # When alice lists the Medium band (4-6) one job a page
    seen, token = [], None
    while True:
        query = {"priority_min": "4", "priority_max": "6", "limit": "1", **({"next_token": token} if token else {})}
        reply = call("api_list_jobs", query=query)
        assert reply.status == 200, reply.body
        seen += [(j["job_id"], j["scheduling_config"]["priority"]) for j in reply.body["jobs"]]
        token = reply.body["next_token"]
        if not token:
            break
    # Then exactly her jobs of priority 4, 5 and 6 came back, newest first
    assert seen == [(ids[6], 6), (ids[5], 5), (ids[4], 4)]
    assert [j["name"] for j in call("api_list_jobs", query={"priority_max": "1"}).body["jobs"]] == ["prio-1", "prio-0"]


def test_summary_counts_the_callers_jobs(call: Api) -> None:
    ids = [call.submit()["job_id"] for _ in range(3)]
    call.submit(user=BOB)
    call.move(ids[0], S.QUEUED, S.SCHEDULING)
    mine = call("api_summary").body
    assert (mine["total"], mine["running"], mine["queued"], mine["counts"]["SCHEDULING"]) == (3, 1, 2, 1)
    assert call("api_summary", user_arn=ADMIN).body["total"] == 4


def test_events_metrics_and_logs(call: Api) -> None:
    # Given a job with history, metrics and two attempts' logs on S3
    job_id = call.submit()["job_id"]
    call.move(job_id, S.QUEUED)
    s3, bucket = call.clients.s3(), call.settings.artifacts_bucket
    metrics = "\n".join(json.dumps({"step": s, "loss": 3.0 / s, "attempt": 1}) for s in (1, 2, 3))
    s3.put_object(Bucket=bucket, Key=constants.metrics_key(job_id), Body=metrics.encode())
    s3.put_object(Bucket=bucket, Key=f"{constants.logs_prefix(job_id)}attempt-001.log", Body=b"1767225600 loading\n1767225601 step 1")
    s3.put_object(Bucket=bucket, Key=f"{constants.logs_prefix(job_id)}attempt-002.log", Body=b"1767225700 resumed")
    # When they are read
    events = call("api_job_events", job_id=job_id).body["events"]
    points = call("api_job_metrics", job_id=job_id).body["points"]
    page = call("api_job_logs", job_id=job_id, query={"limit": "2"}).body
    rest = call("api_job_logs", job_id=job_id, query={"next_token": page["next_token"]}).body
    since = call("api_job_logs", job_id=job_id, query={"since": "1767225600.5"}).body
    # Then the history has from/to/actor, the points their steps, the logs every line once in order
    assert [(e["from"], e["to"], e["actor"]) for e in events] == [(None, "PENDING", "user"), ("PENDING", "QUEUED", "system")]
    assert [p["step"] for p in points] == [1, 2, 3] and points[0]["loss"] == 3.0
    assert [line["message"] for line in page["lines"] + rest["lines"]] == ["1767225600 loading", "1767225601 step 1", "1767225700 resumed"]
    assert rest["next_token"] is None and [line["attempt"] for line in since["lines"]] == [1, 2]
    assert call("api_job_logs", job_id=job_id, query={"tail": "5"}).status == 422
    # And each line says its stream (a local log's untagged line is stdout); a stream filter is validated
    assert {line["stream"] for line in page["lines"]} == {"stdout"}
    assert call("api_job_logs", job_id=job_id, query={"stream": "stderr"}).body["lines"] == []
    bad = call("api_job_logs", job_id=job_id, query={"stream": "both"})
    assert bad.status == 422 and bad.body["errors"][0]["field"] == "stream"


def test_metrics_are_reduced_to_max_points_keeping_the_curves_shape(call: Api) -> None:
    # Given a job whose metrics.jsonl holds 5,000 points with a spike at step 3210, and a torn line
    job_id = call.submit()["job_id"]
    lines = [json.dumps({"step": s, "loss": 50.0 if s == 3210 else 3.0 / s, "attempt": 1}) for s in range(1, 5001)]
    lines.insert(100, '{"step": 100, "lo')
    call.clients.s3().put_object(Bucket=call.settings.artifacts_bucket, Key=constants.metrics_key(job_id), Body="\n".join(lines).encode())
    # When the points are read whole and for a chart of ~100 pixels
    whole = call("api_job_metrics", job_id=job_id).body
    reply = call("api_job_metrics", job_id=job_id, query={"max_points": "200"})
    # Then the reduction keeps at most 200 points, the ends and the spike, and says how many there are
    assert reply.status == 200 and whole["total_points"] == reply.body["total_points"] == 5000 and len(whole["points"]) == 5000
    steps = [p["step"] for p in reply.body["points"]]
    assert len(steps) <= 200 and steps == sorted(steps) and steps[0] == 1 and steps[-1] == 5000 and 3210 in steps
    # And a bad max_points, or an unknown parameter, is a 422 naming it
    for query, field in [({"max_points": "9"}, "max_points"), ({"max_points": "many"}, "max_points"), ({"points": "5"}, "points")]:
        bad = call("api_job_metrics", job_id=job_id, query=query)
        assert bad.status == 422 and bad.body["errors"][0]["field"] == field, (query, bad.body)


def _system_line(attempt: int, node: int, time: float, utils: list[float | None]) -> str:
    devices = [
        {"index": i, "name": "NVIDIA H100", "utilization_pct": u, "memory_used_mib": 1000.0 * (i + 1), "memory_total_mib": 81559.0,
         "power_w": 300.0, "sm_clock_mhz": 1980.0}
        for i, u in enumerate(utils)
    ]  # fmt: skip
    return json.dumps({"time": time, "attempt": attempt, "node": node, "available": True, "devices": devices})


def test_system_metrics_give_each_attempts_devices_their_samples_in_time_order(call: Api) -> None:
    # Given a job whose trainer stored NVML samples: attempt 1 on two nodes (two GPUs each, lines out of
    # order, one torn), and attempt 2 on a host without NVML
    job_id = call.submit()["job_id"]
    s3, bucket = call.clients.s3(), call.settings.artifacts_bucket
    prefix = f"{constants.job_prefix(job_id)}system/"
    node0 = [_system_line(1, 0, 20.0, [90.0, 80.0]), _system_line(1, 0, 10.0, [50.0, None]), '{"time": 30, "att']
    s3.put_object(Bucket=bucket, Key=f"{prefix}001-000.jsonl", Body="\n".join(node0).encode())
    s3.put_object(Bucket=bucket, Key=f"{prefix}001-001.jsonl", Body=_system_line(1, 1, 10.0, [70.0, 71.0]).encode())
    none = {"time": 40.0, "attempt": 2, "node": 0, "available": False, "reason": "NVML is not available on this host"}
    s3.put_object(Bucket=bucket, Key=f"{prefix}002-000.jsonl", Body=json.dumps(none).encode())

    # When the system series are read
    reply = call("api_job_system_metrics", job_id=job_id)

    # Then per attempt, per (node, device), the samples oldest first; attempt 2 says it had no NVML
    assert reply.status == 200
    first, second = reply.body["attempts"]
    assert first["attempt"] == 1 and first["available"] is True and first["reason"] is None
    assert [(d["node"], d["index"]) for d in first["devices"]] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert [s["time"] for s in first["devices"][0]["samples"]] == [10.0, 20.0]
    assert [s["utilization_pct"] for s in first["devices"][1]["samples"]] == [None, 80.0]
    reading = {"utilization_pct": 90.0, "memory_used_mib": 1000.0, "memory_total_mib": 81559.0, "power_w": 300.0, "sm_clock_mhz": 1980.0}
    assert first["devices"][0]["samples"][1] == {"time": 20.0, **reading}
    assert second == {"attempt": 2, "available": False, "reason": "NVML is not available on this host", "devices": []}
    assert reply.body["sample_seconds"] == 10.0
    # And another principal gets a 404, a bad or unknown parameter a 422 naming it
    assert call("api_job_system_metrics", job_id=job_id, user_arn=BOB).status == 404
    for query, field in [({"max_samples": "9"}, "max_samples"), ({"points": "5"}, "points")]:
        bad = call("api_job_system_metrics", job_id=job_id, query=query)
        assert bad.status == 422 and bad.body["errors"][0]["field"] == field, (query, bad.body)


def test_long_system_series_are_averaged_down_to_max_samples(call: Api) -> None:
    job_id = call.submit()["job_id"]
    lines = [_system_line(1, 0, float(10 * t), [float(t % 2) * 100.0]) for t in range(100)]
    key = f"{constants.job_prefix(job_id)}system/001-000.jsonl"
    call.clients.s3().put_object(Bucket=call.settings.artifacts_bucket, Key=key, Body="\n".join(lines).encode())
    samples = call("api_job_system_metrics", job_id=job_id, query={"max_samples": "10"}).body["attempts"][0]["devices"][0]["samples"]
    # 100 samples alternating 0 and 100 %: ten groups of ten, each averaging 50 %, stamped with its first time
    assert [s["time"] for s in samples] == [float(100 * g) for g in range(10)]
    assert {s["utilization_pct"] for s in samples} == {50.0}


# --- edit and delete ------------------------------------------------------------------------------------


def test_patch_edits_editable_jobs_only(call: Api) -> None:
    job_id = call.submit()["job_id"]
    edited = call("api_patch_job", job_id=job_id)  # recorded body: priority 8, learning_rate
    assert edited.status == 200
    assert edited.body["scheduling_config"]["priority"] == 8
    assert edited.body["training_config"]["hyperparameters"] == {"max_steps": "4", "learning_rate": "0.0005"}
    assert call("api_patch_job", job_id=job_id, body={"colour": "x"}).status == 422
    assert call("api_patch_job", job_id=job_id, body={}).status == 422
    call.move(job_id, S.QUEUED, S.SCHEDULING)
    refused = call("api_patch_job", job_id=job_id)
    assert refused.status == 409 and "allowed from FAILED, PENDING, QUEUED" in refused.body["message"]


def test_delete_only_terminal_jobs_with_their_objects(call: Api) -> None:
    # Given a pending job and a cancelled job, each with objects on S3
    pending, done = call.submit()["job_id"], call.submit()["job_id"]
    assert call("api_cancel_job", job_id=done).status == 200
    s3, bucket = call.clients.s3(), call.settings.artifacts_bucket
    for job_id in (pending, done):
        s3.put_object(Bucket=bucket, Key=f"jobs/{job_id}/checkpoints/step-000002/manifest.json", Body=b"{}")
    # When both are deleted
    refused = call("api_delete_job", job_id=pending)
    deleted = call("api_delete_job", job_id=done)
    # Then only the terminal one goes, with its objects; the other keeps its objects
    assert refused.status == 409 and deleted.status == 204 and deleted.body is None
    assert call("api_get_job", job_id=done).status == 404
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert keys == [f"jobs/{pending}/checkpoints/step-000002/manifest.json"]


# --- lifecycle verbs ------------------------------------------------------------------------------------


def test_cancel_pause_resume_retry(call: Api) -> None:
    repo = composition.current().repository
    # Given a training job with a checkpoint
    job_id = call.submit()["job_id"]
    call.move(job_id, S.QUEUED, S.SCHEDULING, S.PREPARING, S.TRAINING)
    uri = f"s3://{call.settings.artifacts_bucket}/jobs/{job_id}/checkpoints/step-000002"
    repo.add_checkpoint(job_id, CheckpointRef(checkpoint_id="step-000002", step=2, uri=uri))
    # When it is paused: 202, pause pending; a resume now is a 409 naming PAUSED
    paused = call("api_pause_job", job_id=job_id)
    assert paused.status == 202 and paused.body["pending_action"] == "pause" and paused.body["status"] == "TRAINING"
    assert call("api_resume_job", job_id=job_id).status == 409
    # And once the engine has paused it, resume from an unknown checkpoint is 422, from the latest 200
    call.move(job_id, S.PAUSED)
    unknown = call("api_resume_job", job_id=job_id, body={"checkpoint_id": "step-999999"})
    assert unknown.status == 422 and unknown.body["errors"][0]["field"] == "checkpoint_id"
    resumed = call("api_resume_job", job_id=job_id, body=None)
    assert resumed.status == 200 and resumed.body["status"] == "QUEUED" and resumed.body["resume_checkpoint_id"] == "step-000002"
    # And cancel (recorded reason) then retry gives a started child from that checkpoint
    cancelled = call("api_cancel_job", job_id=job_id)
    assert cancelled.status == 200 and cancelled.body["status"] == "CANCELLED"
    assert call("api_job_events", job_id=job_id).body["events"][-1]["reason"] == "wrong dataset"
    assert call("api_cancel_job", job_id=job_id).status == 409
    child = call("api_retry_job", job_id=job_id)
    assert child.status == 201 and child.body["parent_job_id"] == job_id
    assert child.body["training_config"]["resume_from_checkpoint"].endswith("/step-000002")
    assert call.workflow.methods()[-1] == "start"
    bad = call("api_retry_job", job_id=job_id, body={"modify_resources": True})
    assert bad.status == 422 and "new_resource_config" in bad.body["message"]


# --- the document and the edges ------------------------------------------------------------------------


def test_openapi_is_served_and_the_committed_copy_has_not_drifted(call: Api) -> None:
    # Given the document generated from the code now
    # Then the committed copy is identical (run `make openapi` after changing routes or models)
    assert COMMITTED.read_text() == render(), "schemas/openapi.json is stale: run `make openapi`"
    served = call("api_openapi")
    assert served.status == 200 and served.body == DOCUMENT
    # And it is a valid OpenAPI document with every route of the contract (and others' routers)
    from openapi_spec_validator import validate

    validate(DOCUMENT)
    assert set(DOCUMENT["paths"]) >= {
        "/jobs", "/jobs/{job_id}", "/jobs/{job_id}/cancel", "/jobs/{job_id}/pause", "/jobs/{job_id}/resume",
        "/jobs/{job_id}/retry", "/jobs/{job_id}/events", "/jobs/{job_id}/metrics", "/jobs/{job_id}/logs",
        "/summary", "/openapi.json",
    }  # fmt: skip


def test_every_documented_error_uses_the_error_shape() -> None:
    for path, operations in DOCUMENT["paths"].items():
        for method, operation in operations.items():
            for code, response in operation["responses"].items():
                if int(code) >= 400:
                    schema = response["content"]["application/json"]["schema"]
                    assert schema == {"$ref": "#/components/schemas/ErrorResponse"}, (path, method, code)


def test_unknown_routes_are_404_and_crashes_are_a_generic_500(call: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    event = api_event("api_summary")
    event["path"] = event["resource"] = "/nope"
    raw = api.lambda_handler(event, FakeLambdaContext())
    assert raw["statusCode"] == 404 and json.loads(raw["body"])["message"].startswith("no route")

    def explode(*_: Any, **__: Any) -> Any:
        raise RuntimeError("secret internals")

    monkeypatch.setattr(type(composition.current().jobs), "summary", explode)
    reply = call("api_summary")
    assert reply.status == 500 and "secret" not in json.dumps(reply.body) and reply.body["errors"] == []


def test_the_configured_dashboard_origin_gets_cors_headers_on_every_response(aws: AwsClients) -> None:
    # Given an API configured for one dashboard origin
    settings = fresh_resources(aws, admin_arns=(ADMIN,)).model_copy(update={"cors_origin": "https://dash.example.com"})
    composition.configure(settings=settings, clients=aws, workflow=RecordingWorkflow())
    try:

        def origin_header(name: str, origin: str, **changes: Any) -> Any:
            raw = api.lambda_handler(api_event(name, headers={"Origin": origin}, **changes), FakeLambdaContext())
            headers = raw.get("multiValueHeaders") or raw.get("headers") or {}
            value = headers.get("Access-Control-Allow-Origin")
            return (raw["statusCode"], value[0] if isinstance(value, list) else value)

        # When the dashboard reads a job that exists and one that does not
        # Then both the success and the error carry the origin
        assert origin_header("api_summary", "https://dash.example.com") == (200, "https://dash.example.com")
        assert origin_header("api_get_job", "https://dash.example.com", job_id="job-missing") == (404, "https://dash.example.com")
        # And another origin gets no CORS header
        assert origin_header("api_summary", "https://evil.example.com") == (200, None)
    finally:
        composition.reset()


# --- training shapes ----------------------------------------------------------------------------------


def test_training_shapes_are_listed_and_read_by_name_and_version(call: Api) -> None:
    # Given the deployment's shapes (the defaults)  When they are listed and one is read
    listed = call("api_list_training_shapes")
    one = call("api_get_training_shape")
    pinned = call("api_get_training_shape", query={"version": "1"})
    # Then every version is listed, and the named one comes back as its latest version
    assert listed.status == 200
    refs = {(s["name"], s["training_shape_version"]) for s in listed.body["shapes"]}
    assert ("a100-80gb-8x", 1) in refs and ("cpu", 1) in refs
    assert one.status == 200 and one.body["name"] == "a100-80gb-8x"
    assert one.body["instance_types"] == {"sagemaker": "ml.p4de.24xlarge", "ec2": "p4de.24xlarge"}
    assert pinned.body == one.body
    # And a misspelt parameter is named, not ignored
    misspelt = call("api_get_training_shape", query={"verison": "1"})
    assert misspelt.status == 422 and misspelt.body["errors"][0]["field"] == "verison"


def test_an_unknown_training_shape_or_version_is_404(call: Api) -> None:
    missing = call("api_get_training_shape", query={"version": "9"})
    event = api_event("api_get_training_shape")
    event["path"] = event["requestContext"]["path"] = "/training-shapes/tpu-v5"
    event["pathParameters"] = {"name": "tpu-v5"}
    unknown = api.lambda_handler(event, FakeLambdaContext())
    assert missing.status == 404 and "a100-80gb-8x@9" in missing.body["message"]
    assert unknown["statusCode"] == 404


def test_submit_with_a_training_shape_records_it_and_a_conflict_names_the_field(call: Api) -> None:
    # Given a job that names the CPU shape
    job = call.submit(resource_config={"training_shape": "cpu"})
    # Then the job carries the resolved profile, with its version
    assert job["training_shape"]["name"] == "cpu" and job["training_shape"]["training_shape_version"] == 1
    assert job["resource_config"]["training_shape"] == "cpu@1" and job["resource_config"]["gpu_count"] == 0
    assert call("api_get_job", job_id=job["job_id"]).body["training_shape"] == job["training_shape"]
    # And a job that also sets a field the shape owns is refused, naming it
    reply = call(
        "api_submit_job", body=request_body(resource_config={"training_shape": "cpu", "gpu_count": 2}), headers={"Idempotency-Key": ""}
    )
    assert reply.status == 422
    assert reply.body["errors"][0]["field"] == "resource_config.gpu_count"
