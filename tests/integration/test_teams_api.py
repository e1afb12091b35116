"""/teams through the API Lambda (issue 24): admins define teams, the server decides each caller's team from
its identity, and a submit outside the team's rules is a 422 naming the field."""

from __future__ import annotations

from typing import Any

from functions import composition
from tests.fakes import RecordingWorkflow
from tests.helpers.api_lambda import Api
from tests.helpers.aws import fresh_resources
from tests.helpers.events import DASHBOARD_SESSION, Caller, dashboard_user
from tests.helpers.jobs import ADMIN, ALICE, BOB, request_body

ADMIN_CALLER = Caller("admin", ADMIN, unique_id="AIDAEXAMPLEADMIN")
ALICE_CALLER = Caller("alice", ALICE, unique_id="AIDAEXAMPLEALICE")
BOB_CALLER = Caller("bob", BOB, unique_id="AIDAEXAMPLEBOB")
ANA = dashboard_user("ana", "us-east-1:11111111-2222-3333-4444-555555555555")
RESEARCH: dict[str, Any] = {
    "members": {"arns": [ALICE, f"{DASHBOARD_SESSION.rpartition('/')[0]}/us-east-1:1111*"]},
    "quotas": {"H100": {"nominal": 4, "borrow_limit": "50%"}, "cpu": {"nominal": 2}},
    "weight": 2,
    "max_priority": 6,
    "queues": ["default", "research"],
}


def _put(call: Api, name: str, body: dict[str, Any], caller: Caller = ADMIN_CALLER) -> Any:
    return call.route("PUT", "/teams/{team}", {"team": name}, caller=caller, body=body)


def test_only_admins_define_teams_and_each_caller_sees_only_its_own(call: Api) -> None:
    # Non-admins may not define or delete a team
    assert _put(call, "research", RESEARCH, ALICE_CALLER).status == 403
    assert call.route("DELETE", "/teams/{team}", {"team": "default"}, caller=BOB_CALLER).status == 403

    # An admin defines one; PUT again replaces it (a new version)
    created = _put(call, "research", RESEARCH)
    assert created.status == 200 and created.body["version"] == 1 and created.body["updated_by"] == ADMIN
    again = _put(call, "research", {**RESEARCH, "weight": 3})
    assert again.status == 200 and again.body["version"] == 2 and again.body["weight"] == 3

    # Admins list every team (the default one from the settings too)
    listed = call.route("GET", "/teams", caller=ADMIN_CALLER).body["teams"]
    assert [t["name"] for t in listed] == ["default", "research"]

    # Alice (by ARN) and Ana (a dashboard user, by pattern) are in research, without seeing who else is; Bob is in default
    for member in (ALICE_CALLER, ANA):
        mine = call.route("GET", "/teams", caller=member).body["teams"]
        assert [t["name"] for t in mine] == ["research"] and mine[0]["members"] == {"arns": [], "cognito_groups": []}
    assert [t["name"] for t in call.route("GET", "/teams", caller=BOB_CALLER).body["teams"]] == ["default"]

    # A team's view: its own members and admins; another's is not found
    view = call.route("GET", "/teams/{team}", {"team": "research"}, caller=ALICE_CALLER)
    assert view.status == 200 and view.body["fair_share"] == 1.0
    assert {r["gpu_type"]: r["nominal"] for r in view.body["types"]} == {"H100": 4, "cpu": 2}
    assert call.route("GET", "/teams/{team}", {"team": "research"}, caller=BOB_CALLER).status == 404
    assert call.route("GET", "/teams/{team}", {"team": "research"}, caller=ADMIN_CALLER).status == 200

    # Deleting: its members fall back to the default team
    assert call.route("DELETE", "/teams/{team}", {"team": "research"}, caller=ADMIN_CALLER).status == 204
    assert call.route("DELETE", "/teams/{team}", {"team": "research"}, caller=ADMIN_CALLER).status == 404
    assert [t["name"] for t in call.route("GET", "/teams", caller=ALICE_CALLER).body["teams"]] == ["default"]


def test_a_bad_team_is_a_422_naming_the_field(call: Api) -> None:
    cases: dict[str, dict[str, Any]] = {
        "quotas.H200": {"quotas": {"H200": {"nominal": 1}}},
        "quotas.H100.borrow_limit": {"quotas": {"H100": {"nominal": 1, "borrow_limit": "150%"}}},
        "weight": {"weight": 0},
        "members.arns": {"members": {"arns": ["alice"]}},
        "max_priority": {"max_priority": 11},
    }
    for field, body in cases.items():
        reply = _put(call, "research", body)
        assert reply.status == 422, (field, reply.body)
        assert any(e["field"].startswith(field.split(".H")[0]) for e in reply.body["errors"]), (field, reply.body)
    assert _put(call, "Bad Name", {}).status == 422


def test_a_job_records_its_team_and_a_submit_outside_the_teams_rules_is_a_422(call: Api) -> None:
    assert _put(call, "research", RESEARCH).status == 200

    # A priority above the team's ceiling, a queue it may not use: 422 naming the field
    high = call.route("POST", "/jobs", caller=ALICE_CALLER, body=request_body(scheduling_config={"priority": 9}))
    assert high.status == 422 and high.body["errors"][0]["field"] == "scheduling_config.priority", high.body
    elsewhere = call.route("POST", "/jobs", caller=ALICE_CALLER, body=request_body(scheduling_config={"queue": "prod"}))
    assert elsewhere.status == 422 and elsewhere.body["errors"][0]["field"] == "scheduling_config.queue", elsewhere.body

    # Within its rules: the job records the team the server decided (a body cannot name one)
    ok = call.route("POST", "/jobs", caller=ALICE_CALLER, body=request_body(scheduling_config={"priority": 6, "queue": "research"}))
    assert ok.status == 201 and ok.body["team"] == "research", ok.body
    forged = call.route("POST", "/jobs", caller=BOB_CALLER, body={**request_body(), "team": "research"})
    assert forged.status == 422 and forged.body["errors"][0]["field"] == "team"
    bob = call.route("POST", "/jobs", caller=BOB_CALLER, body=request_body(scheduling_config={"priority": 9}))
    assert bob.status == 201 and bob.body["team"] == "default"

    # Raising the priority above the ceiling later is refused the same way
    patched = call.route("PATCH", "/jobs/{job_id}", {"job_id": ok.body["job_id"]}, caller=ALICE_CALLER, body={"priority": 8})
    assert patched.status == 422 and patched.body["errors"][0]["field"] == "priority", patched.body


def test_an_emulated_gpu_the_machine_never_has_is_a_422_at_submit(aws: Any) -> None:
    settings = fresh_resources(aws, admin_arns=(ADMIN,), local_gpu_inventory="H100=4,A100=8")
    composition.configure(settings=settings, clients=aws, workflow=RecordingWorkflow())
    try:
        call = Api(aws, RecordingWorkflow(), settings)
        for resources, field in (
            ({"gpu_count": 1, "gpu_type": "L4"}, "resource_config.gpu_type"),
            ({"gpu_count": 1}, "resource_config.gpu_type"),
            ({"gpu_count": 8, "gpu_type": "H100"}, "resource_config.gpu_count"),
        ):
            reply = call.route("POST", "/jobs", caller=ALICE_CALLER, body=request_body(resource_config=resources))
            assert reply.status == 422 and reply.body["errors"][0]["field"] == field, (resources, reply.body)
        fits = call.route("POST", "/jobs", caller=ALICE_CALLER, body=request_body(resource_config={"gpu_count": 4, "gpu_type": "H100"}))
        assert fits.status == 201, fits.body
    finally:
        composition.reset()
