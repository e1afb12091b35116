"""Dashboard users signed in through the Cognito identity pool share one role and one session name: each
is still a principal of their own (functions/service/principal.py caller_arn), never seeing another's jobs."""

from __future__ import annotations

from functions.service.principal import caller_arn
from tests.helpers.api_lambda import Api
from tests.helpers.events import DASHBOARD_SESSION as SESSION
from tests.helpers.events import dashboard_user
from tests.helpers.jobs import request_body

ANA = "us-east-1:11111111-2222-3333-4444-555555555555"
BEN = "us-east-1:99999999-8888-7777-6666-555555555555"
ana, ben = dashboard_user("ana", ANA), dashboard_user("ben", BEN)


def test_each_signed_in_person_is_a_principal_of_their_own(call: Api) -> None:
    ana_job = call.route("POST", "/jobs", caller=ana, body=request_body(name="ana-job"))
    assert ana_job.status == 201 and ana_job.body["owner"] == f"arn:aws:sts::123456789012:assumed-role/trainplane-dev-dashboard-users/{ANA}"
    ben_job = call.route("POST", "/jobs", caller=ben, body=request_body(name="ben-job"))
    assert ben_job.status == 201 and ben_job.body["owner"] != ana_job.body["owner"]
    # Ben lists only his job; Ana's is "not found" for him
    listing = call.route("GET", "/jobs", caller=ben)
    assert listing.status == 200 and [j["job_id"] for j in listing.body["jobs"]] == [ben_job.body["job_id"]]
    assert call.route("GET", "/jobs/{job_id}", {"job_id": ana_job.body["job_id"]}, caller=ben).status == 404


def test_caller_arn_changes_only_authenticated_identity_pool_sessions() -> None:
    assert caller_arn(SESSION, ANA, "authenticated").endswith(f"/trainplane-dev-dashboard-users/{ANA}")  # type: ignore[union-attr]
    user = "arn:aws:iam::123456789012:user/alice"
    assert caller_arn(user, None, None) == user
    assert caller_arn(user, ANA, "authenticated") == user  # not a role session: unchanged
    assert caller_arn(SESSION, ANA, "unauthenticated") == SESSION
    assert caller_arn(None, ANA, "authenticated") is None
