"""The cloud dashboard (infra/constructs/dashboard.py): CloudFront with OAC, TLS and security headers in
front of a private bucket; Cognito sign-in whose role may only invoke the API; CORS for its origin."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.infra.conftest import Synth, resolve_ref
from tests.infra.test_checks import STAGES, function_roles, role_actions

pytestmark = pytest.mark.infra


def one(synth: Synth, stage: str, kind: str) -> tuple[str, dict[str, Any]]:
    (found,) = synth.resources(stage, kind).items()
    return found


def dashboard_resources(synth: Synth, stage: str, kind: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in synth.resources(stage, kind).items() if k.startswith("Dashboard")}


@pytest.mark.parametrize("stage", STAGES)
def test_the_page_is_served_by_cloudfront_over_https_from_a_private_bucket(synth: Synth, stage: str) -> None:
    distribution_id, distribution = one(synth, stage, "AWS::CloudFront::Distribution")
    config = distribution["Properties"]["DistributionConfig"]
    behavior = config["DefaultCacheBehavior"]
    assert behavior["ViewerProtocolPolicy"] == "redirect-to-https" and config["DefaultRootObject"] == "index.html"
    assert sorted(behavior["AllowedMethods"]) == ["GET", "HEAD"]
    (origin,) = config["Origins"]
    assert origin["S3OriginConfig"]["OriginAccessIdentity"] == "" and resolve_ref(origin["OriginAccessControlId"])
    assert config["Logging"]["Bucket"]
    # Origin access control: only this distribution reads the bucket; the bucket is private and SSL-only
    (oac_id,) = synth.resources(stage, "AWS::CloudFront::OriginAccessControl")
    assert resolve_ref(origin["OriginAccessControlId"]) == oac_id
    bucket_id = next(k for k in dashboard_resources(synth, stage, "AWS::S3::Bucket") if "Assets" in k)
    bucket = synth.templates[stage]["Resources"][bucket_id]["Properties"]
    assert all(
        bucket["PublicAccessBlockConfiguration"][k]
        for k in ("BlockPublicAcls", "BlockPublicPolicy", "IgnorePublicAcls", "RestrictPublicBuckets")
    )
    policy = next(
        p for p in synth.resources(stage, "AWS::S3::BucketPolicy").values() if resolve_ref(p["Properties"]["Bucket"]) == bucket_id
    )
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    reads = [s for s in statements if s["Effect"] == "Allow"]
    assert reads and all(s["Principal"] == {"Service": "cloudfront.amazonaws.com"} for s in reads)
    assert all(distribution_id in json.dumps(s["Condition"]) for s in reads)
    assert any(s["Effect"] == "Deny" and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}} for s in statements)


@pytest.mark.parametrize("stage", STAGES)
def test_security_headers(synth: Synth, stage: str) -> None:
    distribution = one(synth, stage, "AWS::CloudFront::Distribution")[1]
    policy_id = resolve_ref(distribution["Properties"]["DistributionConfig"]["DefaultCacheBehavior"]["ResponseHeadersPolicyId"])
    headers = synth.templates[stage]["Resources"][policy_id]["Properties"]["ResponseHeadersPolicyConfig"]["SecurityHeadersConfig"]
    csp = json.dumps(headers["ContentSecurityPolicy"]["ContentSecurityPolicy"])
    assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp and "cognito-identity." in csp and "execute-api." in csp
    assert "unsafe-eval" not in csp and "script-src 'self';" in csp
    assert headers["StrictTransportSecurity"]["AccessControlMaxAgeSec"] >= 31_536_000
    assert headers["FrameOptions"]["FrameOption"] == "DENY" and headers["ContentTypeOptions"]["Override"]
    assert headers["ReferrerPolicy"]["ReferrerPolicy"] == "no-referrer"


@pytest.mark.parametrize("stage", STAGES)
def test_sign_in_is_invite_only_with_mfa_and_its_role_may_only_invoke_the_api(synth: Synth, stage: str) -> None:
    pool = one(synth, stage, "AWS::Cognito::UserPool")[1]["Properties"]
    assert pool["AdminCreateUserConfig"]["AllowAdminCreateUserOnly"] is True and pool["MfaConfiguration"] == "ON"
    assert pool["Policies"]["PasswordPolicy"]["MinimumLength"] >= 12
    client = one(synth, stage, "AWS::Cognito::UserPoolClient")[1]["Properties"]
    assert client.get("GenerateSecret", False) is False and client["AllowedOAuthFlows"] == ["code"]
    distribution_id = one(synth, stage, "AWS::CloudFront::Distribution")[0]
    assert distribution_id in json.dumps(client["CallbackURLs"])  # back to the dashboard, nowhere else
    identity_id, identity = one(synth, stage, "AWS::Cognito::IdentityPool")
    assert identity["Properties"]["AllowUnauthenticatedIdentities"] is False
    attachment = one(synth, stage, "AWS::Cognito::IdentityPoolRoleAttachment")[1]["Properties"]
    assert set(attachment["Roles"]) == {"authenticated"}
    role_id = resolve_ref(attachment["Roles"]["authenticated"])
    role = synth.templates[stage]["Resources"][role_id]["Properties"]
    (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Action"] == "sts:AssumeRoleWithWebIdentity" and trust["Principal"] == {"Federated": "cognito-identity.amazonaws.com"}
    assert resolve_ref(trust["Condition"]["StringEquals"]["cognito-identity.amazonaws.com:aud"]) == identity_id
    assert trust["Condition"]["ForAnyValue:StringLike"]["cognito-identity.amazonaws.com:amr"] == "authenticated"
    actions = role_actions(synth.templates[stage], role_id)
    assert set(actions) == {"execute-api:Invoke"}
    (statement,) = actions["execute-api:Invoke"]
    rest_api_id = one(synth, stage, "AWS::ApiGateway::RestApi")[0]
    assert rest_api_id in json.dumps(statement["Resource"]) and "/v1/*/*" in json.dumps(statement["Resource"])
    assert not role.get("ManagedPolicyArns")


def test_cors_allows_the_dashboard_origin_or_the_configured_one(synth: Synth) -> None:
    for stage, expected in (("dev", None), ("prod", "https://dashboard.example.com")):
        template = synth.templates[stage]
        distribution_id = one(synth, stage, "AWS::CloudFront::Distribution")[0]
        options = [m for m in synth.resources(stage, "AWS::ApiGateway::Method").values() if m["Properties"]["HttpMethod"] == "OPTIONS"]
        assert options
        for method in options:
            origin = method["Properties"]["Integration"]["IntegrationResponses"][0]["ResponseParameters"][
                "method.response.header.Access-Control-Allow-Origin"
            ]
            if expected:
                assert origin == f"'{expected}'"
            else:
                assert distribution_id in json.dumps(origin)  # 'https://<the distribution's domain>'
        api_function = next(
            f
            for f in synth.resources(stage, "AWS::Lambda::Function").values()
            if f["Properties"].get("Handler") == "functions.handlers.api.lambda_handler"
        )
        env = api_function["Properties"]["Environment"]["Variables"]["TRAINPLANE_CORS_ORIGIN"]
        assert (env == expected) if expected else distribution_id in json.dumps(env)
        outputs = template["Outputs"]
        assert {"DashboardUrl", "DashboardBucketName", "DashboardDistributionId", "DashboardConfig", "DashboardUserPoolId"} <= set(outputs)
        config = json.dumps(outputs["DashboardConfig"]["Value"])
        assert "cognito" in config and "identity_pool_id" in config and "api_url" in config


@pytest.mark.parametrize("stage", STAGES)
def test_who_submits_for_a_dashboard_user_reads_their_groups_in_this_pool_alone(synth: Synth, stage: str) -> None:
    # Team membership by Cognito group (docs/TEAMS.md): the API, the retraining dispatcher and the sweep
    # controller look a person's groups up; exactly the two reads, on the dashboard's user pool only.
    (pool_id,) = dashboard_resources(synth, stage, "AWS::Cognito::UserPool")
    roles = function_roles(synth, stage)
    readers = {"api", "retraining", "sweeps_controller"} & set(roles)
    assert "api" in readers
    for short, role in roles.items():
        assert role is not None, short
        actions = role_actions(synth.templates[stage], role)
        reads = {a: s for a, s in actions.items() if a.startswith("cognito-idp:")}
        if short not in readers:
            assert not reads, short
            continue
        assert set(reads) == {"cognito-idp:ListUsers", "cognito-idp:AdminListGroupsForUser"}, short
        for statements in reads.values():
            assert all(resolve_ref(s["Resource"]) == pool_id and s["Resource"]["Fn::GetAtt"][1] == "Arn" for s in statements)
    # Every function knows the pool (TRAINPLANE_DASHBOARD_USER_POOL_ID), so a stored owner resolves as a request would
    api = next(
        f for f in synth.resources(stage, "AWS::Lambda::Function").values() if f["Properties"]["Handler"].endswith("api.lambda_handler")
    )
    assert resolve_ref(api["Properties"]["Environment"]["Variables"]["TRAINPLANE_DASHBOARD_USER_POOL_ID"]) == pool_id
