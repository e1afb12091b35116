"""What IAM enforces of path confinement (docs/SECURITY.md): the trainer roles reach only the artifacts
bucket's jobs/, data/, shared/ and datasets/ prefixes and the granted buckets, write only jobs/, data/ and
read-write grants; the control plane's functions read data/ (submit's output checks), never write it."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.infra.conftest import PROD, Synth, resolve_ref
from tests.infra.test_checks import function_roles, role_actions

WRITE_ACTIONS = {"s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"}


def _text(value: Any, bucket_id: str) -> str:
    """A CloudFormation resource value as text, the artifacts bucket's ARN as `artifacts`."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return separator.join(_text(p, bucket_id) for p in parts)
    if isinstance(value, dict) and resolve_ref(value) == bucket_id:
        return "artifacts"
    if isinstance(value, dict) and "Ref" in value:
        return "${" + str(value["Ref"]) + "}"
    return json.dumps(value)


def _bucket_id(synth: Synth, stage: str) -> str:
    buckets = synth.resources(stage, "AWS::S3::Bucket")
    return next(k for k in buckets if "Artifacts" in k)


def _role_id(synth: Synth, stage: str, name: str) -> str:
    return next(k for k in synth.resources(stage, "AWS::IAM::Role") if name in k)


def _s3_objects(synth: Synth, stage: str, role_id: str) -> dict[str, set[str]]:
    """S3 object action -> the object resources (as text) the role may use it on."""
    bucket = _bucket_id(synth, stage)
    found: dict[str, set[str]] = {}
    for action, statements in role_actions(synth.templates[stage], role_id).items():
        if not action.startswith("s3:") or action == "s3:ListBucket":
            continue
        for statement in statements:
            resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
            found.setdefault(action, set()).update(_text(r, bucket) for r in resources)
    return found


@pytest.mark.parametrize("stage", ["dev", "prod"])
@pytest.mark.parametrize("role", ["SageMakerExecutionRole", "InstanceRole"])
def test_trainer_roles_reach_only_the_confinement_layout_and_the_grants(synth: Synth, stage: str, role: str) -> None:
    objects = _s3_objects(synth, stage, _role_id(synth, stage, role))
    reads = objects["s3:GetObject"]
    expected_reads = {"artifacts/jobs/*", "artifacts/data/*", "artifacts/shared/*", "artifacts/datasets/*"}
    grants = {"arn:aws:s3:::team-datasets/llm/*", "arn:aws:s3:::team-models/out/*"}
    assert reads == (expected_reads | grants if stage == "prod" else expected_reads)
    # Writes: a job's own prefix (jobs/), exports into data areas (data/), a read-write grant; never shared/
    writes = objects["s3:PutObject"]
    assert writes == ({"artifacts/jobs/*", "artifacts/data/*"} | ({"arn:aws:s3:::team-models/out/*"} if stage == "prod" else set()))
    assert objects["s3:DeleteObject"] == {"artifacts/jobs/*"}  # checkpoint retention only
    assert not any(r.endswith(("artifacts/*", "artifacts")) for rs in objects.values() for r in rs)  # never the whole bucket


@pytest.mark.parametrize("stage", ["dev", "prod"])
@pytest.mark.parametrize("role", ["SageMakerExecutionRole", "InstanceRole"])
def test_trainer_roles_read_only_trainplane_secrets(synth: Synth, stage: str, role: str) -> None:
    # The trainer reads a job's W&B API key (docs/SECURITY.md): GetSecretValue on secret:trainplane/* only
    actions = role_actions(synth.templates[stage], _role_id(synth, stage, role))
    secrets = {a: s for a, s in actions.items() if a.startswith("secretsmanager:")}
    assert set(secrets) == {"secretsmanager:GetSecretValue"}
    resources = {_text(r, "") for statement in secrets["secretsmanager:GetSecretValue"] for r in _as_list(statement["Resource"])}
    (resource,) = resources  # the stage's own account and region (concrete, or the stack's tokens), nothing else
    partition, region, account = r"(aws|\$\{AWS::Partition\})", r"([a-z0-9-]+|\$\{AWS::Region\})", r"([0-9]{12}|\$\{AWS::AccountId\})"
    own = rf"arn:{partition}:secretsmanager:{region}:{account}:secret:trainplane/\*"
    assert re.fullmatch(own, resource), resource


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


@pytest.mark.parametrize("stage", ["dev", "prod"])
def test_control_plane_functions_read_data_areas_but_never_write_them(synth: Synth, stage: str) -> None:
    roles = function_roles(synth, stage)
    for name in ("api", "retraining") if synth.retraining else ("api",):
        objects = _s3_objects(synth, stage, roles[name])
        assert "artifacts/data/*" in objects["s3:GetObject"], name
        assert not any("data/" in r for action in WRITE_ACTIONS for r in objects.get(action, set())), name


def test_the_functions_get_the_bucket_grants_as_settings(synth: Synth) -> None:
    from functions.settings import Settings

    for function in synth.resources("prod", "AWS::Lambda::Function").values():
        env = function["Properties"]["Environment"]["Variables"]
        grants = Settings.from_env({"TRAINPLANE_BUCKET_GRANTS": env["TRAINPLANE_BUCKET_GRANTS"]}).bucket_grants
        uris = {(g.uri, g.access, g.principals) for g in grants}
        assert uris == {
            ("s3://team-models/out/", "read-write", PROD["bucket_grants"][0]["principals"]),
            ("s3://team-datasets/llm/", "read", ("*",)),
        }


def test_bucket_grants_come_from_cdk_context_as_json() -> None:
    from infra.config import ConfigError, StageConfig

    config = StageConfig.parse(
        {"bucket_grants": '[{"uri": "s3://team/x/", "access": "read-write"}]', "training_data_uris": "s3://data-bucket/llm"}
    )
    assert [(g.uri, g.access, g.principals) for g in config.all_bucket_grants()] == [
        ("s3://team/x/", "read-write", ("*",)),
        ("s3://data-bucket/llm", "read", ("*",)),
    ]
    for bad in ('[{"uri": "https://x"}]', '[{"uri": "s3://b/../c"}]', "not json"):
        with pytest.raises(ConfigError, match="bucket_grants"):
            StageConfig.parse({"bucket_grants": bad})


@pytest.mark.parametrize("role", ["SageMakerExecutionRole", "InstanceRole"])
def test_trainer_roles_pull_jobs_own_images_only_from_the_allowed_ecr_repositories(synth: Synth, role: str) -> None:
    # prod allows ECR repositories under ml-team/ (pulled with the role) and ghcr.io/ml-team (anonymous: no grant)
    pulls = set()
    for stage in ("dev", "prod"):
        for statement in role_actions(synth.templates[stage], _role_id(synth, stage, role)).get("ecr:BatchGetImage", []):
            resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
            pulls.update((stage, _text(r, "")) for r in resources if "ml-team" in _text(r, ""))
    assert pulls == {
        ("prod", "arn:aws:ecr:eu-west-1:111122223333:repository/ml-team"),
        ("prod", "arn:aws:ecr:eu-west-1:111122223333:repository/ml-team/*"),
    }


def test_the_api_knows_which_repositories_jobs_images_may_come_from(synth: Synth) -> None:
    variables = [
        f["Properties"]["Environment"]["Variables"]
        for f in synth.resources("prod", "AWS::Lambda::Function").values()
        if f["Properties"].get("Handler") == "functions.handlers.api.lambda_handler"
    ]
    assert variables and all(
        v.get("TRAINPLANE_CUSTOM_IMAGE_REPOSITORIES") == ",".join(PROD["custom_image_repositories"]) for v in variables
    )
