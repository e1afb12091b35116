"""/budgets and POST /jobs?dry_run=true through the API Lambda on moto (issue 25; docs/BUDGETS.md)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from functions import composition
from functions.adapters.outbox import DynamoOutbox
from functions.catalog import own_events as et
from functions.catalog.gpu_types import unit_hourly_usd
from functions.service.ports import JobQuery
from schemas.events import BudgetOverride, BudgetThresholdCrossed
from schemas.job import ErrorType
from schemas.status import JobStatus
from tests.helpers.api_lambda import Api
from tests.helpers.events import Caller
from tests.helpers.jobs import ADMIN, ALICE, BOB, request_body
from tests.integration.conftest import composed_api

ADMIN_CALLER = Caller("admin", ADMIN, unique_id="AIDAEXAMPLEADMIN")
ALICE_CALLER = Caller("alice", ALICE, unique_id="AIDAEXAMPLEALICE")
BOB_CALLER = Caller("bob", BOB, unique_id="AIDAEXAMPLEBOB")


@pytest.fixture
def call(aws: Any) -> Iterator[Api]:
    with composed_api(aws, local_gpu_inventory="H100=4") as api:
        yield api


def _create(call: Api, caller: Caller, **spec: Any) -> Any:
    body = {"name": "cap", "amount_usd": 1.0, **spec}
    return call.route("POST", "/budgets", caller=caller, body=body)


def _ids(call: Api, caller: Caller) -> set[str]:
    return {b["budget_id"] for b in call.route("GET", "/budgets", caller=caller).body["budgets"]}


def test_who_may_budget_what_and_no_one_sees_anothers_budget(call: Api) -> None:
    # Given: Alice budgets herself and her own team (default); an admin budgets Alice and the deployment
    mine = _create(call, ALICE_CALLER, scope={"kind": "principal", "value": ALICE})
    team = _create(call, ALICE_CALLER, scope={"kind": "team", "value": "default"}, period="weekly")
    capped = _create(call, ADMIN_CALLER, scope={"kind": "principal", "value": ALICE}, amount_usd=5)
    everyone = _create(call, ADMIN_CALLER, scope={"kind": "deployment"}, period="lifetime")
    label = _create(call, ADMIN_CALLER, scope={"kind": "label", "value": "project=llama-ft"})
    assert {r.status for r in (mine, team, capped, everyone, label)} == {201}
    assert mine.body["thresholds"] == [
        {"percent": 50.0, "action": "notify"},
        {"percent": 80.0, "action": "notify"},
        {"percent": 100.0, "action": "hold_new"},
        {"percent": 100.0, "action": "pause_running"},
    ]
    assert mine.body["left_usd"] == 1.0 and mine.body["spent_usd"] == 0.0

    # Then: a non-admin may not budget another principal, a label, the deployment or another team
    for scope in (
        {"kind": "principal", "value": BOB},
        {"kind": "label", "value": "a=b"},
        {"kind": "deployment"},
        {"kind": "team", "value": "x"},
    ):
        assert _create(call, ALICE_CALLER, scope=scope).status == 403

    # Each sees its own, its team's and the deployment's; Bob (also in default) never sees Alice's own
    assert _ids(call, ALICE_CALLER) == {b.body["budget_id"] for b in (mine, team, capped, everyone)}
    assert _ids(call, BOB_CALLER) == {team.body["budget_id"], everyone.body["budget_id"]}
    assert len(_ids(call, ADMIN_CALLER)) == 5
    alices = {"budget_id": mine.body["budget_id"]}
    assert call.route("GET", "/budgets/{budget_id}", alices, caller=BOB_CALLER).status == 404
    assert call.route("PATCH", "/budgets/{budget_id}", alices, caller=BOB_CALLER, body={"amount_usd": 9}).status == 404
    assert call.route("DELETE", "/budgets/{budget_id}", alices, caller=BOB_CALLER).status == 404

    # Alice may not raise or delete the admin's cap on her; she may change her own
    admins = {"budget_id": capped.body["budget_id"]}
    assert call.route("PATCH", "/budgets/{budget_id}", admins, caller=ALICE_CALLER, body={"amount_usd": 50}).status == 403
    assert call.route("DELETE", "/budgets/{budget_id}", admins, caller=ALICE_CALLER).status == 403
    raised = call.route("PATCH", "/budgets/{budget_id}", alices, caller=ALICE_CALLER, body={"amount_usd": 2})
    assert raised.status == 200 and raised.body["amount_usd"] == 2 and raised.body["version"] == 2
    assert call.route("DELETE", "/budgets/{budget_id}", alices, caller=ALICE_CALLER).status == 204
    assert call.route("GET", "/budgets/{budget_id}", alices, caller=ALICE_CALLER).status == 404


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"scope": {"kind": "principal", "value": "bob"}}, "scope"),
        ({"scope": {"kind": "deployment", "value": "x"}}, "scope"),
        ({"scope": {"kind": "label", "value": "no-equals"}}, "scope"),
        ({"amount_usd": 0}, "amount_usd"),
        ({"amount_usd": 0.001}, "amount_usd"),
        ({"thresholds": [{"percent": 0.5, "action": "notify"}]}, "thresholds.0.percent"),
        ({"period": "custom"}, "body"),
        ({"period": "monthly", "starts_at": "2026-01-01T00:00:00Z"}, "body"),
        ({"thresholds": [{"percent": 80, "action": "notify"}, {"percent": 80, "action": "notify"}]}, "thresholds"),
        ({"thresholds": [{"percent": 80, "action": "kill"}]}, "thresholds.0.action"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_a_bad_budget_is_a_422_naming_the_field(call: Api, changes: dict[str, Any], field: str) -> None:
    reply = _create(call, ADMIN_CALLER, **{"scope": {"kind": "deployment"}, **changes})
    assert reply.status == 422, reply.body
    assert reply.body["errors"][0]["field"].startswith(field), reply.body


def test_the_job_list_says_a_queued_job_waits_for_its_budget_as_its_own_page_does(call: Api) -> None:
    # Given: a one-cent deployment budget, and Alice's 1 x H100 job queued (its forecast far over what is left)
    _create(call, ADMIN_CALLER, scope={"kind": "deployment"}, amount_usd=0.01, period="lifetime")
    held = call.route("POST", "/jobs", caller=ALICE_CALLER, body=request_body(resource_config={"gpu_count": 1, "gpu_type": "H100"}))
    assert held.status == 201, held.body
    other = call.route("POST", "/jobs", caller=ALICE_CALLER, body=request_body(name="not queued")).body
    call.move(held.body["job_id"], JobStatus.QUEUED)
    # When: she lists her jobs
    listed = {j["job_id"]: j for j in call.route("GET", "/jobs", caller=ALICE_CALLER).body["jobs"]}
    # Then: the queued job carries why it waits, its position and estimated wait, exactly as GET /jobs/{id} shows them
    one = call.route("GET", "/jobs/{job_id}", {"job_id": held.body["job_id"]}, caller=ALICE_CALLER).body
    wait = ("wait_reason", "queue_position", "estimated_wait_seconds")
    assert [listed[one["job_id"]][k] for k in wait] == [one[k] for k in wait] == ["BUDGET", 0, 0.0]
    # And: a job that is not queued carries none
    assert [listed[other["job_id"]][k] for k in wait] == [None, None, None]


def test_a_dry_run_creates_nothing_and_answers_the_forecast(call: Api) -> None:
    # Given: a lifetime budget on Alice of 1 USD
    _create(call, ADMIN_CALLER, scope={"kind": "principal", "value": ALICE}, amount_usd=1.0, period="lifetime")
    body = request_body(resource_config={"gpu_count": 2, "gpu_type": "H100"}, scheduling_config={"max_runtime_seconds": 600})

    # When: Alice asks for the price of a 2 x H100 job capped at 10 minutes
    reply = call.route("POST", "/jobs", caller=ALICE_CALLER, body=body, query={"dry_run": "true"})

    # Then: the forecast, from the price table; and nothing was created or started
    assert reply.status == 200, reply.body
    rate = 2 * unit_hourly_usd("H100")
    forecast = reply.body
    assert forecast["dry_run"] is True and forecast["basis"] == "max_runtime_seconds"
    assert forecast["hourly_usd"] == pytest.approx(rate) and forecast["total_high_usd"] == pytest.approx(rate / 6)
    assert forecast["queue_position"] == 0 and forecast["shape"] == "H100x2/LORA/<1M"
    [left] = forecast["budgets"]
    assert left["left_usd"] == 1.0 and left["left_after_usd"] == pytest.approx(1.0 - rate / 6)
    assert left["would_hold"] is (rate / 6 > 1.0)
    jobs, _ = composition.current().repository.list_jobs(JobQuery(owner=None))
    assert jobs == [] and call.workflow.calls == []


@pytest.mark.parametrize(
    "body",
    [
        request_body(resource_config={"gpu_count": 8, "gpu_type": "H100"}),  # more than the emulated inventory
        request_body(resource_config={"gpu_count": 1, "gpu_type": "A100"}),  # a type it lacks
        request_body(scheduling_config={"priority": 11}),
        {**request_body(), "colour": "red"},
        {"name": "no-config"},
    ],
)
def test_a_dry_run_refuses_exactly_what_a_submit_refuses(call: Api, body: dict[str, Any]) -> None:
    dry = call.route("POST", "/jobs", caller=ALICE_CALLER, body=body, query={"dry_run": "true"})
    real = call.route("POST", "/jobs", caller=ALICE_CALLER, body=body)
    assert dry.status == real.status == 422
    assert dry.body == real.body
    assert composition.current().repository.list_jobs(JobQuery(owner=None))[0] == []


def test_an_unknown_query_parameter_on_submit_is_a_422(call: Api) -> None:
    reply = call.route("POST", "/jobs", caller=ALICE_CALLER, body=request_body(), query={"dryrun": "true"})
    assert reply.status == 422 and reply.body["errors"][0]["field"] == "dryrun"


def test_an_admin_lets_one_paused_job_run_over_its_budget_with_a_reason(call: Api) -> None:
    # Given: Alice's job, paused, and a budget on Alice (set by an admin)
    job_id = call.submit()["job_id"]
    call.move(job_id, JobStatus.QUEUED, JobStatus.SCHEDULING, JobStatus.PREPARING, JobStatus.TRAINING, JobStatus.PAUSED)
    capped = _create(call, ADMIN_CALLER, scope={"kind": "principal", "value": ALICE}).body["budget_id"]
    other = _create(call, ADMIN_CALLER, scope={"kind": "principal", "value": BOB}).body["budget_id"]
    path = {"budget_id": capped}
    body = {"job_id": job_id, "reason": "the paper deadline"}

    # Then: Alice may not; a job the budget does not cover is a 422; an unknown job a 404
    assert call.route("POST", "/budgets/{budget_id}/resume", path, caller=ALICE_CALLER, body=body).status == 403
    uncovered = call.route("POST", "/budgets/{budget_id}/resume", {"budget_id": other}, caller=ADMIN_CALLER, body=body)
    assert uncovered.status == 422 and uncovered.body["errors"][0]["field"] == "job_id"
    missing = {"job_id": "job-missing", "reason": "x"}
    assert call.route("POST", "/budgets/{budget_id}/resume", path, caller=ADMIN_CALLER, body=missing).status == 404

    # When: the admin lets it run over the budget
    reply = call.route("POST", "/budgets/{budget_id}/resume", path, caller=ADMIN_CALLER, body=body)

    # Then: the job is resumed (QUEUED again, the same id), and an event records who and why
    assert reply.status == 200 and reply.body["overrides"] == {job_id: "the paper deadline"}
    assert composition.current().repository.get(job_id).status == JobStatus.QUEUED
    outbox = DynamoOutbox(call.clients, call.settings.jobs_table).pending()
    [record] = [r for r in outbox if r.detail_type == et.BUDGET_OVERRIDE.detail_type]
    detail = BudgetOverride.model_validate_json(record.detail)
    assert (detail.job_id, detail.reason, detail.actor, detail.budget_id) == (job_id, "the paper deadline", ADMIN, capped)


def test_a_cancel_threshold_cancels_the_covered_jobs_through_the_cancel_path(call: Api) -> None:
    # Given: an admin's budget on Alice that cancels (asked for: not in the default ladder), Alice's 1 x H100 job
    # training for an hour (far past 0.05 USD), another of hers queued, and Bob's queued job
    thresholds = [{"percent": 80, "action": "notify"}, {"percent": 100, "action": "cancel"}]
    created = _create(call, ADMIN_CALLER, scope={"kind": "principal", "value": ALICE}, amount_usd=0.05, thresholds=thresholds)
    assert created.status == 201 and created.body["thresholds"][-1] == {"percent": 100.0, "action": "cancel"}
    h100 = {"resource_config": {"gpu_count": 1, "gpu_type": "H100"}}
    running = call.submit(**h100)["job_id"]
    call.move(running, JobStatus.QUEUED, JobStatus.SCHEDULING, JobStatus.PREPARING, JobStatus.TRAINING)
    repo = composition.current().repository
    repo.annotate(running, {"run_started_at": repo.get(running).created_at - timedelta(hours=1)})
    queued = call.submit(**h100)["job_id"]
    call.move(queued, JobStatus.QUEUED)
    bobs = call.submit(user=BOB, **h100)["job_id"]
    call.move(bobs, JobStatus.QUEUED)

    # When: the meter ticks
    result = composition.current().budget_meter.tick()

    # Then: Alice's jobs are CANCELLED by the job's own cancel: the run stopped, the execution's wait answered,
    # reason BUDGET and actor system in the timeline, error_type BUDGET; Bob's job is not covered
    assert sorted(result.cancelled or []) == sorted([running, queued])
    for job_id in (running, queued):
        job = repo.get(job_id)
        assert job.status == JobStatus.CANCELLED and job.error_type == ErrorType.BUDGET
        last = repo.history(job_id)[-1]
        assert last.reason.startswith("BUDGET: budget 'cap'") and last.actor == "system", last
    assert [(c.method, c.kwargs["graceful"]) for c in call.workflow.calls if c.job_id == running and c.method == "stop_run"] == [
        ("stop_run", False)
    ]
    assert {c.job_id for c in call.workflow.calls if c.method == "answer_wait"} == {running, queued}
    assert repo.get(bobs).status == JobStatus.QUEUED
    # And the events, written with the changes: the budget's cancel threshold naming them, each job's CANCELLED
    outbox = DynamoOutbox(call.clients, call.settings.jobs_table).pending()
    crossed = [BudgetThresholdCrossed.model_validate_json(r.detail) for r in outbox if r.detail_type == et.BUDGET_THRESHOLD.detail_type]
    assert [(e.percent, e.action) for e in crossed] == [(80.0, "notify"), (100.0, "cancel")]
    assert sorted(crossed[-1].cancelled_job_ids) == sorted([running, queued])
    changes = [json.loads(r.detail) for r in outbox if r.detail_type == et.JOB_STATE_CHANGE.detail_type]
    ended = {c["job_id"]: c for c in changes if c["state"] == "CANCELLED"}
    assert set(ended) == {running, queued} and {c["error_type"] for c in ended.values()} == {"BUDGET"}


def test_on_exceed_is_answered_by_its_name_its_former_name_is_accepted_and_both_are_a_422(call: Api) -> None:
    # Given a job submitted with the deprecated former name
    former = call.submit(scheduling_config={"max_cost_usd": 1.0, "max_cost_on_exceed": "fail"})
    # Then it is stored and answered under on_exceed only
    assert former["scheduling_config"]["on_exceed"] == "fail" and "max_cost_on_exceed" not in former["scheduling_config"]
    assert composition.current().repository.get(former["job_id"]).scheduling_config.on_exceed == "fail"
    # And both names at once are a 422 naming the former one, which says the new name
    both = request_body(scheduling_config={"on_exceed": "pause", "max_cost_on_exceed": "fail"})
    reply = call.route("POST", "/jobs", caller=ALICE_CALLER, body=both)
    assert reply.status == 422 and reply.body["errors"][0]["field"] == "scheduling_config.max_cost_on_exceed", reply.body
    assert "send on_exceed only" in reply.body["errors"][0]["message"]
