"""The doctor's adapters for the two services moto does not model, over botocore's Stubber (the request
each sends and how each reads the answer): IAM policy simulation and Service Quotas."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from botocore.stub import Stubber

from trainplane.doctor.aws import AwsSession, IamSimulator, ServiceQuotas

ACCOUNT = "123456789012"
RESOURCE = f"arn:aws:execute-api:eu-west-1:{ACCOUNT}:abc/v1/GET/deployment"


@pytest.fixture
def session() -> Iterator[AwsSession]:
    yield AwsSession(region="eu-west-1")


def test_an_assumed_role_is_simulated_as_its_role_with_its_path(session: AwsSession) -> None:
    # Given a caller signed in through a role that lives under a path
    iam = session.client("iam")
    with Stubber(iam) as stub:
        stub.add_response(
            "get_role",
            {
                "Role": {
                    "Path": "/ml/",
                    "RoleName": "Trainer",
                    "RoleId": "AROAEXAMPLEEXAMPLE01",
                    "Arn": f"arn:aws:iam::{ACCOUNT}:role/ml/Trainer",
                    "CreateDate": "2026-01-01T00:00:00Z",
                    "AssumeRolePolicyDocument": "{}",
                }
            },
            {"RoleName": "Trainer"},
        )
        stub.add_response(
            "simulate_principal_policy",
            {"EvaluationResults": [{"EvalActionName": "execute-api:Invoke", "EvalDecision": "implicitDeny"}]},
            {
                "PolicySourceArn": f"arn:aws:iam::{ACCOUNT}:role/ml/Trainer",
                "ActionNames": ["execute-api:Invoke"],
                "ResourceArns": [RESOURCE],
            },
        )
        # When the doctor asks whether it may call the API  Then IAM was asked about the role, and the denial comes back
        denied = IamSimulator(session).denied_actions(
            f"arn:aws:sts::{ACCOUNT}:assumed-role/Trainer/alice", ["execute-api:Invoke"], RESOURCE
        )
        assert denied == ["execute-api:Invoke"]
        stub.assert_no_pending_responses()


def test_an_allowed_user_has_nothing_denied(session: AwsSession) -> None:
    iam = session.client("iam")
    with Stubber(iam) as stub:
        stub.add_response(
            "simulate_principal_policy",
            {"EvaluationResults": [{"EvalActionName": "execute-api:Invoke", "EvalDecision": "allowed"}]},
            {"PolicySourceArn": f"arn:aws:iam::{ACCOUNT}:user/bob", "ActionNames": ["execute-api:Invoke"], "ResourceArns": [RESOURCE]},
        )
        assert IamSimulator(session).denied_actions(f"arn:aws:iam::{ACCOUNT}:user/bob", ["execute-api:Invoke"], RESOURCE) == []


def test_quotas_are_aws_defaults_overridden_by_what_the_account_was_granted(session: AwsSession) -> None:
    # Given AWS's default of 0 for a GPU type and an increase the account was granted for another
    def quota(code: str, name: str, value: float) -> dict[str, object]:
        return {"ServiceCode": "sagemaker", "QuotaCode": code, "QuotaName": name, "Value": value}

    client = session.client("service-quotas")
    with Stubber(client) as stub:
        stub.add_response(
            "list_aws_default_service_quotas",
            {
                "Quotas": [
                    quota("L-1", "ml.g5.xlarge for training job usage", 0.0),
                    quota("L-2", "ml.m5.large for training job usage", 0.0),
                ]
            },
            {"ServiceCode": "sagemaker"},
        )
        stub.add_response(
            "list_service_quotas", {"Quotas": [quota("L-2", "ml.m5.large for training job usage", 4.0)]}, {"ServiceCode": "sagemaker"}
        )
        # When the doctor reads the account's SageMaker quotas  Then the granted value wins, the default stays
        values = {q.name: q.value for q in ServiceQuotas(session).quotas("sagemaker")}
    assert values == {"ml.g5.xlarge for training job usage": 0.0, "ml.m5.large for training job usage": 4.0}
