"""The pieces of path confinement (docs/SECURITY.md): principal keys, normalisation, prefix matching."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from functions.service.paths import data_prefix, named_paths, principal_key, valid_checkpoint_id
from functions.settings import Settings
from schemas.access import AccessSet, BucketGrant, PathError, normalize, under
from schemas.job import SubmitJobRequest
from tests.helpers.jobs import request_body


@pytest.mark.parametrize(
    ("arn", "key"),
    [
        ("arn:aws:iam::123456789012:user/alice", "123456789012/user/alice"),
        ("arn:aws:iam::123456789012:user/division/team/alice", "123456789012/user/alice"),
        ("arn:aws:sts::123456789012:assumed-role/Trainer/alice-laptop", "123456789012/role/Trainer/alice-laptop"),
        ("arn:aws:iam::123456789012:role/ml/Trainer", "123456789012/role/Trainer"),
        ("arn:aws:sts::123456789012:federated-user/bob", "123456789012/federated/bob"),
        ("arn:aws:iam::123456789012:root", "123456789012/root"),
        ("arn:aws:iam::123456789012:user/..", "123456789012/user/%2E%2E"),
    ],
)
def test_principal_keys(arn: str, key: str) -> None:
    assert principal_key(arn) == key
    assert data_prefix(arn) == f"data/{key}/"


def test_an_arn_without_a_key_gets_a_data_area_no_key_matches() -> None:
    with pytest.raises(ValueError):
        principal_key("alice")
    assert "//" in data_prefix("alice")  # a key can never hold an empty segment: nothing is under it


def test_normalisation(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    assert normalize(f"file://{tmp_path}/link/x") == os.path.realpath(real / "x")
    assert normalize(f"{tmp_path}/a/../real") == os.path.realpath(real)
    assert normalize("s3://bucket/data/x/") == "s3://bucket/data/x/" and normalize("s3://bucket") == "s3://bucket"
    for bad in ("relative/x", "./x", "s3://b/a/../c", "s3://b/a//c", "s3://b/./c", "https://x/y", "s3:///k", "channel://train"):
        with pytest.raises(PathError):
            normalize(bad)


def test_under_is_a_path_prefix_not_a_string_prefix() -> None:
    assert under("s3://b/data/alice/x", "s3://b/data/alice/") and under("s3://b/data/alice", "s3://b/data/alice/")
    assert not under("s3://b/data/alice2/x", "s3://b/data/alice/") and not under("s3://bb/x", "s3://b")
    assert under("/home/me/x", "/home/me") and not under("/home/meow", "/home/me")


def test_the_access_set_denies_over_grants() -> None:
    access = AccessSet(owner="a", read=["/home/me"], write=["/home/me/out"], deny=["/home/me/.state"])
    assert access.can_read("/home/me/data.jsonl") and access.can_write("/home/me/out/model")
    assert not access.can_read("/home/me/.state/credentials.json") and not access.can_write("/home/me/data.jsonl")


def test_named_paths_lists_every_path_field_and_skips_hub_ids_and_builtins() -> None:
    body = request_body()
    body["training_config"]["base_model"]["tokenizer_id"] = "s3://b/tok/"
    body["training_config"]["resume_from_checkpoint"] = "s3://b/jobs/j/checkpoints/step-1"
    body["training_config"]["framework"] = {"type": "CUSTOM", "custom_script_path": "s3://b/data/x/train.py"}
    body["data_config"]["preprocess"] = {"tokenizer": "/opt/tok"}
    body["output_config"] = {"output_path": "s3://b/data/x/out"}
    fields = [(p.field, p.write) for p in named_paths(SubmitJobRequest.model_validate(body))]
    assert fields == [
        ("data_config.sources[0].path", False),
        ("training_config.base_model.tokenizer_id", False),
        ("data_config.preprocess.tokenizer", False),
        ("training_config.resume_from_checkpoint", False),
        ("training_config.framework.custom_script_path", False),
        ("output_config.output_path", True),
    ]
    plain = request_body()  # a config-built model with the byte tokenizer names no model or tokenizer path
    assert [p.field for p in named_paths(SubmitJobRequest.model_validate(plain))] == ["data_config.sources[0].path"]


def test_checkpoint_ids_are_one_segment() -> None:
    assert valid_checkpoint_id("step-000500")
    assert not any(valid_checkpoint_id(bad) for bad in ("", ".", "..", "a/b", "step 1"))


def test_settings_read_grants_and_local_dirs_from_the_environment() -> None:
    env = {
        "TRAINPLANE_BUCKET_GRANTS": '[{"uri": "s3://team/x/", "access": "read-write", "principals": ["arn:aws:iam::1:user/a"]}]',
        "TRAINPLANE_LOCAL_ALLOWED_DIRS": os.pathsep.join(["/data/a", "/data/b"]),
        "TRAINPLANE_LOCAL_STATE_DIR": "/data/a/.state",
    }
    settings = Settings.from_env(env)
    assert settings.bucket_grants == (BucketGrant(uri="s3://team/x/", access="read-write", principals=("arn:aws:iam::1:user/a",)),)
    assert settings.local_allowed_dirs == ("/data/a", "/data/b") and settings.local_mode
    assert not Settings.from_env({}).local_mode


def test_local_mode_allows_the_given_directories_resolved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from trainplane.local.up import allowed_dirs

    monkeypatch.chdir(tmp_path)
    (tmp_path / "examples").mkdir()
    dirs = allowed_dirs([Path("examples")], os.pathsep.join(["/data/a", "", "/data/a"]))
    assert dirs == [(tmp_path / "examples").resolve(), Path("/data/a")]
