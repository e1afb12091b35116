"""Synthesize once per session: two stacks (dev defaults, and a prod stage with every option on) in one
app, with cdk-nag's AwsSolutions checks, into a temporary cloud assembly the tests read."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
os.environ.setdefault("CDK_DISABLE_VERSION_CHECK", "1")

PROD_ACCOUNT = "111122223333"
PROD = {
    "stage": "prod",
    "account": PROD_ACCOUNT,
    "region": "eu-west-1",
    "admin_arns": ("arn:aws:iam::111122223333:role/platform-admin",),
    "api_allowed_account_ids": ("444455556666",),
    "api_allowed_org_id": "o-abcdefghij",
    "cors_origin": "https://dashboard.example.com",
    "waf_web_acl_arn": "arn:aws:wafv2:eu-west-1:111122223333:regional/webacl/trainplane/0123",
    "trainer_image_uri": "111122223333.dkr.ecr.eu-west-1.amazonaws.com/trainplane-trainer:1.0",
    "custom_image_repositories": ("111122223333.dkr.ecr.eu-west-1.amazonaws.com/ml-team/", "ghcr.io/ml-team"),
    "training_data_uris": ("s3://team-datasets/llm/",),
    "bucket_grants": ({"uri": "s3://team-models/out/", "access": "read-write", "principals": ("arn:aws:iam::111122223333:role/ml-team",)},),
    "vpc_id": "vpc-0123456789abcdef0",
    "subnet_ids": ("subnet-0123456789abcdef0", "subnet-0fedcba9876543210"),
    "alarm_email": "oncall@example.com",
    "compute": "ec2",
    "log_retention_days": 365,
    "gpu_quotas": "default:H100=16, research:*=8",
}


@dataclass
class Synth:
    outdir: Path
    templates: dict[str, dict[str, Any]]  # stage -> CloudFormation template
    metadata: dict[str, dict[str, Any]]  # stage -> construct path -> metadata entries
    bundle: Any
    retraining: bool  # the bundle has the retraining dispatcher (issue 7), so the stacks deploy it

    def resources(self, stage: str, kind: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.templates[stage]["Resources"].items() if v["Type"] == kind}


_failed: list[BaseException] = []


@pytest.fixture(scope="session")
def synth(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    # pytest retries a session fixture that raised for every test that uses it; a synth takes tens
    # of seconds, so a failure is remembered and reported again instead of re-synthesized.
    if _failed:
        pytest.fail(f"the session's synth failed: {_failed[0]!r}", pytrace=False)
    try:
        return _synthesize(tmp_path_factory)
    except Exception as exc:
        _failed.append(exc)
        raise


DEV_BASE_IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.13.0-gpu-py312-cu128-ubuntu22.04-sagemaker"


def _synthesize(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    import aws_cdk as cdk

    from infra.app import add_stack, cdk_json_context, check, stack_name
    from infra.bundling import build_bundle
    from infra.config import StageConfig

    outdir = tmp_path_factory.mktemp("cdk.out")
    # cdk.json's feature flags, as `make synth` and `cdk deploy` see them.
    app = cdk.App(context=cdk_json_context(), outdir=str(outdir))
    bundle = build_bundle()
    sweeps_bundle = build_bundle(sweeps=True)
    # dev builds the trainer image (on a Deep Learning Container base); prod deploys a prebuilt one
    configs = {"dev": StageConfig(trainer_base_image=DEV_BASE_IMAGE, trainer_torch_version="2.13.0"), "prod": StageConfig.parse(PROD)}
    for config in configs.values():
        add_stack(app, config, bundle, sweeps_bundle)
    check(app)
    app.synth()  # raises on any unacknowledged cdk-nag finding
    templates, metadata = {}, {}
    for stage, config in configs.items():
        name = stack_name(config)
        templates[stage] = json.loads((outdir / f"{name}.template.json").read_text())
        metadata[stage] = json.loads((outdir / f"{name}.metadata.json").read_text())
    from infra.constructs.retraining import RETRAINING

    return Synth(outdir=outdir, templates=templates, metadata=metadata, bundle=bundle, retraining=RETRAINING.defined_in(bundle.path))


def resolve_ref(value: Any) -> str | None:
    """The logical id a {"Ref"} or {"Fn::GetAtt"} points at."""
    if isinstance(value, dict):
        if "Ref" in value:
            return str(value["Ref"])
        if "Fn::GetAtt" in value:
            return str(value["Fn::GetAtt"][0])
    return None
