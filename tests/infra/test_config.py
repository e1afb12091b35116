"""Stage configuration from CDK context: precedence, parsing of -c strings, errors that name the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from infra.config import ConfigError, StageConfig

pytestmark = pytest.mark.infra

ROOT = Path(__file__).resolve().parents[2]


def _context(values: dict[str, Any]) -> Any:
    return values.get


def test_defaults_are_a_dev_stage_on_sagemaker() -> None:
    config = StageConfig.from_context(_context({}))
    assert config.stage == "dev" and config.is_dev and config.compute == "sagemaker"
    assert config.name("jobs") == "trainplane-dev-jobs"


def test_stage_block_then_single_flags_win() -> None:
    # Given a stage block (as in cdk.json) and a -c flag for one of its fields
    context = _context(
        {
            "stage": "prod",
            "trainplane": {"prod": {"log_retention_days": 365, "api_throttle_rate": 100}, "dev": {"log_retention_days": 7}},
            "api_throttle_rate": "250",
        }
    )
    # When the config is read
    config = StageConfig.from_context(context)
    # Then the prod block applies, and the single flag overrides it (parsed from its string)
    assert config.stage == "prod" and not config.is_dev
    assert config.log_retention_days == 365
    assert config.api_throttle_rate == 250.0


def test_command_line_strings_become_lists_and_objects() -> None:
    config = StageConfig.from_context(
        _context(
            {
                "admin_arns": "arn:aws:iam::123456789012:role/admin, arn:aws:iam::123456789012:user/alice",
                "api_allowed_account_ids": "111122223333",
                "reserved_concurrency": '{"api": 0, "lifecycle": 0, "events": 0, "retraining": 0}',
                "trainplane": json.dumps({"dev": {"cors_origin": "https://dash.example.com"}}),
            }
        )
    )
    assert config.admin_arns == ("arn:aws:iam::123456789012:role/admin", "arn:aws:iam::123456789012:user/alice")
    assert config.api_allowed_account_ids == ("111122223333",)
    assert config.reserved_concurrency.api == 0
    assert config.cors_origin == "https://dash.example.com"


def test_training_shapes_from_context_reach_the_functions_settings() -> None:
    from functions.catalog.shapes import catalog_from_json
    from functions.settings import Settings

    shape = {"name": "h100-8x", "training_shape_version": 2, "accelerator_type": "H100", "accelerator_count": 8}
    shape["instance_types"] = {"sagemaker": "ml.p5.48xlarge"}
    config = StageConfig.from_context(_context({"training_shapes": json.dumps([shape])}))
    assert config.training_shapes == [shape]
    # What the stack puts in the functions' environment is what the control plane reads
    settings = Settings.from_env({"TRAINPLANE_TRAINING_SHAPES": json.dumps(config.training_shapes)})
    assert catalog_from_json(settings.training_shapes).get("h100-8x").training_shape_version == 2


@pytest.mark.parametrize(
    ("field", "value", "complaint"),
    [
        ("account", "12345", "12-digit"),
        ("admin_arns", "alice", "not IAM user/role ARNs"),
        ("cors_origin", "*", "one origin"),
        ("log_retention_days", "10", "CloudWatch Logs accepts only"),
        ("api_allowed_org_id", "org-1", "api_allowed_org_id"),
        ("training_data_uris", "s3://bucket/*", "no wildcards"),
        ("custom_image_repositories", "ghcr.io/Team/../x", "not a registry or registry/repository prefix"),
        ("compute", "k8s", "compute"),
        ("gpu_quotas", "H100=8", "queue:gpu_type=count"),
        ("training_shapes", '[{"name": "big", "instance_types": {"ec2": "p9.big"}}]', "unknown ec2 instance type"),
        ("training_shapes", "[{", "not JSON"),
        ("stage", "Prod!", "stage"),
        ("no_such_field", "1", "no_such_field"),
    ],
)
def test_bad_values_are_refused_naming_the_field(field: str, value: str, complaint: str) -> None:
    # Given one bad value (no_such_field: an unknown key inside a stage block)
    context = {"trainplane": {"dev": {field: value}}} if field == "no_such_field" else {field: value}
    # When the config is read, Then it is refused with a message naming the field
    with pytest.raises(ConfigError, match=field) as info:
        StageConfig.from_context(_context(context))
    assert complaint in str(info.value)


def test_vpc_and_subnets_go_together() -> None:
    with pytest.raises(ConfigError, match="vpc_id and subnet_ids go together"):
        StageConfig.parse({"vpc_id": "vpc-0123456789abcdef0"})


@pytest.mark.parametrize("stage", ["dev", "prod"])
def test_cdk_json_stage_blocks_are_valid(stage: str) -> None:
    # Given the committed cdk.json
    context = json.loads((ROOT / "cdk.json").read_text())["context"]
    # When each stage it describes is read, Then it parses
    config = StageConfig.from_context(_context({**context, "stage": stage}))
    assert config.stage == stage
    # And a deploy with cdk.json alone never asks a new account for reserved concurrency it lacks
    if stage == "dev":
        assert config.reserved_concurrency.api == 0


def test_synth_without_a_dockerfile_or_image_says_what_to_do(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import aws_cdk as cdk

    from infra.app import cdk_json_context
    from infra.constructs import compute
    from infra.constructs.compute import Compute
    from infra.constructs.storage import Storage

    # Given a checkout without trainer_image/Dockerfile and no prebuilt image configured
    monkeypatch.setattr(compute, "REPO_ROOT", tmp_path)
    stack = cdk.Stack(cdk.App(context=cdk_json_context()), "S")
    config = StageConfig()
    # When the compute construct is built, Then it stops with the two ways forward
    with pytest.raises(ConfigError, match="trainer_image_uri"):
        Compute(stack, "Compute", config=config, storage=Storage(stack, "Storage", config=config))


def test_a_prebuilt_image_must_be_an_ecr_uri() -> None:
    import aws_cdk as cdk

    from infra.app import cdk_json_context
    from infra.constructs.compute import Compute
    from infra.constructs.storage import Storage

    stack = cdk.Stack(cdk.App(context=cdk_json_context()), "S")
    config = StageConfig.parse({"trainer_image_uri": "docker.io/library/python:3.12"})
    with pytest.raises(ConfigError, match="not an ECR image URI"):
        Compute(stack, "Compute", config=config, storage=Storage(stack, "Storage", config=config))


def test_app_arguments_as_the_cdk_cli_takes_them() -> None:
    from infra.app import parse_args

    assert parse_args(["--outdir", "cdk.out", "-c", "stage=prod", "--context", "account=111122223333"]) == (
        {"stage": "prod", "account": "111122223333"},
        "cdk.out",
    )
    with pytest.raises(SystemExit, match="unknown argument"):
        parse_args(["--profile", "x"])
