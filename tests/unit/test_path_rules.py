"""PathRules' decisions one by one, on in-memory fakes (no moto, no API): the run-time re-check of an S3
output (`_check_s3_write_area`, reached through `access_for`), job prefixes read only by their owner, the
export claims in the bucket and on disk, and the local-directory rules. The matrix through the API is
tests/integration/test_path_confinement.py; these pin each condition so that `make mutation` sees it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from functions.errors import InvalidRequest, JobNotFound
from functions.service import paths
from functions.service.paths import NamedPath, PathRules, data_prefix
from functions.service.principal import Principal
from functions.settings import Settings
from schemas.access import EXPORT_MARKER, BucketGrant

BUCKET = "artifacts"
ALICE = Principal("arn:aws:iam::123456789012:user/alice")
BOB = Principal("arn:aws:iam::123456789012:user/bob")
ADMIN = Principal("arn:aws:iam::123456789012:user/root-admin", is_admin=True)
A_AREA = data_prefix(ALICE.arn)  # data/123456789012/user/alice/
FIELD = "output_config.output_path"


class Store:
    """Keys -> lines; what PathRules asks of the artifact store."""

    def __init__(self, objects: dict[str, list[str]] | None = None) -> None:
        self.objects = dict(objects or {})
        self.probed: list[str] = []
        self.limits: list[int] = []

    def read_lines(self, key: str) -> list[str]:
        return list(self.objects.get(key, []))

    def first_keys(self, prefix: str, limit: int) -> list[str]:
        self.probed.append(prefix)
        self.limits.append(limit)
        return sorted(k for k in self.objects if k.startswith(prefix))[:limit]


class Repo:
    def __init__(self, owners: dict[str, str]) -> None:
        self.owners = owners
        self.asked: list[str] = []

    def get(self, job_id: str) -> Any:
        self.asked.append(job_id)
        if job_id not in self.owners:
            raise JobNotFound(job_id)
        return SimpleNamespace(job_id=job_id, owner=self.owners[job_id])


def marker(owner: Principal) -> list[str]:
    return [json.dumps({"owner": owner.arn, "job_id": "j"})]


def rules(store: Store | None = None, repo: Repo | None = None, **settings: Any) -> PathRules:
    grants = (
        BucketGrant(uri="s3://team-rw/", access="read-write"),
        BucketGrant(uri="s3://team-ro/", access="read"),
        BucketGrant(uri="s3://bobs-rw/", access="read-write", principals=(BOB.arn,)),
    )
    config = Settings(artifacts_bucket=BUCKET, bucket_grants=grants, **settings)
    return PathRules(config, repo or Repo({"j-alice": ALICE.arn, "j-bob": BOB.arn}), store or Store())  # type: ignore[arg-type]


def refused(call: Any, *args: Any) -> str:
    with pytest.raises(InvalidRequest) as caught:
        call(*args)
    assert caught.value.field == args[0]
    return caught.value.message


# --- the run-time re-check of an S3 output ----------------------------------------------------------


@pytest.mark.parametrize("uri", [f"s3://{BUCKET}", f"s3://{BUCKET}/jobs", f"s3://{BUCKET}/jobs/j-alice/out"])
@pytest.mark.parametrize("who", [ALICE, ADMIN])
def test_the_write_area_is_never_a_jobs_prefix_nor_the_bucket_root(uri: str, who: Principal) -> None:
    assert "inside the jobs/ prefixes" in refused(rules()._check_s3_write_area, FIELD, uri, who)


@pytest.mark.parametrize(
    ("uri", "who"),
    [
        (f"s3://{BUCKET}/{A_AREA}out", ALICE),
        (f"s3://{BUCKET}/{A_AREA.rstrip('/')}", ALICE),
        (f"s3://{BUCKET}/jobsx/out", ADMIN),  # a string prefix of jobs/ is not under it
        (f"s3://{BUCKET}/{data_prefix(BOB.arn)}out", ADMIN),
        ("s3://team-rw/alice/out", ALICE),
        ("s3://bobs-rw/out", BOB),
        ("s3://anywhere/out", ADMIN),
        ("s3://team-ro/out", ADMIN),
    ],
)
def test_the_write_area_allows_the_owners_area_read_write_grants_and_admins(uri: str, who: Principal) -> None:
    rules()._check_s3_write_area(FIELD, uri, who)


@pytest.mark.parametrize(
    ("uri", "who", "fragment"),
    [
        (f"s3://{BUCKET}/{data_prefix(BOB.arn)}out", ALICE, "not writable by you"),
        (f"s3://{BUCKET}/shared/out", ALICE, "not writable by you"),
        (f"s3://{BUCKET}/jobsx/out", ALICE, "not writable by you"),
        ("s3://team-ro/out", ALICE, "lets you write"),
        ("s3://bobs-rw/out", ALICE, "lets you write"),
        ("s3://nowhere/out", ALICE, "lets you write"),
    ],
)
def test_the_write_area_refuses_others_areas_read_only_and_foreign_buckets(uri: str, who: Principal, fragment: str) -> None:
    assert fragment in refused(rules()._check_s3_write_area, FIELD, uri, who)


# --- job prefixes are their owner's ------------------------------------------------------------------


@pytest.mark.parametrize("key", ["jobs/j-alice", "jobs/j-alice/checkpoints/step-1/x"])
def test_a_job_prefix_is_readable_by_its_owner(key: str) -> None:
    repo = Repo({"j-alice": ALICE.arn})
    rules(repo=repo)._check_s3_read("f", f"s3://{BUCKET}/{key}", ALICE)
    assert repo.asked == ["j-alice"]


@pytest.mark.parametrize("key", ["jobs/j-bob/x", "jobs/j-gone/x", "jobs/", "jobs//x"])
def test_a_job_prefix_of_another_or_of_no_job_is_refused(key: str) -> None:
    message = refused(rules()._check_s3_read, "f", f"s3://{BUCKET}/{key}", ALICE)
    assert message.startswith(f"s3://{BUCKET}/{key} is not under a job of yours")


def test_an_admin_reads_any_job_prefix_without_asking_the_repository() -> None:
    repo = Repo({})
    rules(repo=repo)._check_s3_read("f", f"s3://{BUCKET}/jobs/j-bob/x", ADMIN)
    assert repo.asked == []
    rules(repo=Repo({"j-bob": BOB.arn}))._owned_job("f", "u", "jobs/j-bob/x", ADMIN)


def test_an_empty_job_id_is_not_looked_up() -> None:
    repo = Repo({"": ALICE.arn})
    refused(rules(repo=repo)._owned_job, "f", "u", "jobs//x", ALICE)
    assert repo.asked == []


# --- export claims in the bucket ------------------------------------------------------------------------


def test_an_empty_place_in_the_owners_area_is_claimed() -> None:
    store = Store()
    rules(store)._check_s3_claim(FIELD, f"{A_AREA}out", ALICE)
    assert store.probed == [f"{A_AREA}out/"]
    assert store.limits == [paths.MAX_OUTPUT_PROBE]  # a bounded look: is anything there?


@pytest.mark.parametrize("depth", [1, 2, 4])
def test_another_principals_export_above_the_place_is_refused(depth: int) -> None:
    key = "a/b/c/d/out"
    above = "/".join(key.split("/")[:depth]) + "/"
    store = Store({above + EXPORT_MARKER: marker(BOB)})
    assert "inside another principal's export" in refused(rules(store)._check_s3_claim, FIELD, key, ALICE)


def test_ones_own_export_above_the_place_is_no_obstacle() -> None:
    store = Store({"a/" + EXPORT_MARKER: marker(ALICE)})
    rules(store)._check_s3_claim(FIELD, "a/b/out", ALICE)


@pytest.mark.parametrize("trailing", ["", "/"])
def test_a_place_holding_another_principals_export_is_refused_as_occupied(trailing: str) -> None:
    store = Store({"a/out/" + EXPORT_MARKER: marker(BOB), "a/out/model.bin": ["x"]})
    message = refused(rules(store)._check_s3_claim, FIELD, "a/out" + trailing, ALICE)
    assert "already holds objects" in message


def test_a_place_holding_foreign_objects_is_refused_and_ones_own_export_is_reused() -> None:
    assert "already holds objects" in refused(rules(Store({"a/out/x": ["x"]}))._check_s3_claim, FIELD, "a/out", ALICE)
    store = Store({"a/out/" + EXPORT_MARKER: marker(ALICE), "a/out/model.bin": ["x"]})
    rules(store)._check_s3_claim(FIELD, "a/out", ALICE)
    # a sibling with a longer name is another place
    rules(Store({"a/outer/x": ["x"]}))._check_s3_claim(FIELD, "a/out", ALICE)


def test_check_output_in_the_bucket_applies_the_area_and_the_claim() -> None:
    store = Store({f"{A_AREA}taken/x": ["x"]})
    rule = rules(store)
    assert rule.check_output(NamedPath(FIELD, f"s3://{BUCKET}/{A_AREA}new", write=True), ALICE) == f"s3://{BUCKET}/{A_AREA}new"
    assert "already holds objects" in refused(
        lambda f, u: rule.check_output(NamedPath(f, u, write=True), ALICE), FIELD, f"s3://{BUCKET}/{A_AREA}taken"
    )
    assert "inside the jobs/ prefixes" in refused(
        lambda f, u: rule.check_output(NamedPath(f, u, write=True), ADMIN), FIELD, f"s3://{BUCKET}/jobs"
    )
    assert "not writable by you" in refused(rules()._check_s3_write, FIELD, f"s3://{BUCKET}/{data_prefix(BOB.arn)}x", ALICE)
    rules()._check_s3_write(FIELD, f"s3://{BUCKET}/{data_prefix(BOB.arn)}x", ADMIN)
    rules()._check_s3_write(FIELD, "s3://team-rw/x", ALICE)
    assert "lets you write" in refused(rules()._check_s3_write, FIELD, "s3://team-ro/x", ALICE)


# --- local directories --------------------------------------------------------------------------------


@pytest.fixture
def local(tmp_path: Path) -> SimpleNamespace:
    allowed = tmp_path / "allowed"
    state = allowed / "state"
    state.mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    rule = rules(local_state_dir=str(state), local_allowed_dirs=(str(allowed), "relative/skipped"))
    return SimpleNamespace(rule=rule, allowed=allowed, state=state, outside=tmp_path / "outside")


def test_local_paths_outside_local_mode_are_refused(tmp_path: Path) -> None:
    message = refused(lambda f, v: rules()._check_local(NamedPath(f, v), v, write=False), "f", str(tmp_path))
    assert "only be named in local mode" in message


def test_local_reads_inside_allowed_directories_but_not_the_state_directory(local: SimpleNamespace) -> None:
    data = local.allowed / "data"
    data.mkdir()
    (data / "a.jsonl").write_text("{}")
    assert local.rule.check_read(NamedPath("f", str(data)), ALICE) == [str(data)]
    assert local.rule.allowed_dirs() == [str(local.allowed)]
    assert "state directory" in refused(lambda f, v: local.rule.check_read(NamedPath(f, v), ALICE), "f", str(local.state / "x"))
    message = refused(lambda f, v: local.rule.check_read(NamedPath(f, v), ALICE), "f", str(local.outside))
    assert "outside the directories local mode allows" in message and str(local.allowed) in message


def test_a_link_inside_a_read_directory_is_checked_where_it_points(local: SimpleNamespace) -> None:
    data = local.allowed / "data"
    data.mkdir()
    (data / "escape").symlink_to(local.outside)
    (data / "inside").symlink_to(local.allowed)
    message = refused(lambda f, v: local.rule.check_read(NamedPath(f, v), ALICE), "f", str(data))
    assert "(a link to" in message
    # a single file (directory=False) and a write place are not walked
    local.rule.check_read(NamedPath("f", str(data), directory=False), ALICE)
    local.rule.check_output(NamedPath(FIELD, str(data), write=True, claim=False), ALICE)


def test_a_linked_directory_is_walked_too_and_link_cycles_end(tmp_path: Path) -> None:
    # Given two allowed directories: data in the first links to a directory of the second, which links out
    first, second, outside = tmp_path / "first", tmp_path / "second", tmp_path / "outside"
    (first / "data").mkdir(parents=True)
    (second / "shared").mkdir(parents=True)
    outside.mkdir()
    (first / "data" / "shared").symlink_to(second / "shared")
    (first / "data" / "loop").symlink_to(first / "data")
    rule = rules(local_state_dir=str(tmp_path / "state"), local_allowed_dirs=(str(first), str(second)))
    # Then the tree reads while every link stays inside (the cycle is walked once)
    rule.check_read(NamedPath("f", str(first / "data")), ALICE)
    # And a link out, one linked directory down, is found
    (second / "shared" / "escape").symlink_to(outside)
    message = refused(lambda f, v: rule.check_read(NamedPath(f, v), ALICE), "f", str(first / "data"))
    assert f"a link to {outside}" in message


def test_a_local_tree_too_large_to_check_is_refused(local: SimpleNamespace, monkeypatch: pytest.MonkeyPatch) -> None:
    data = local.allowed / "data"
    data.mkdir()
    for n in range(3):
        (data / f"{n}.jsonl").write_text("{}")
    monkeypatch.setattr(paths, "MAX_TREE_ENTRIES", 3)
    local.rule.check_read(NamedPath("f", str(data)), ALICE)
    monkeypatch.setattr(paths, "MAX_TREE_ENTRIES", 2)
    assert "more than 2 entries" in refused(lambda f, v: local.rule.check_read(NamedPath(f, v), ALICE), "f", str(data))


def test_no_allowed_directory_says_how_to_allow_one(tmp_path: Path) -> None:
    rule = rules(local_state_dir=str(tmp_path / "state"))
    message = refused(lambda f, v: rule.check_read(NamedPath(f, v), ALICE), "f", str(tmp_path / "x"))
    hint = "none: start local mode with `trainplane up --allow-dir DIR`"
    assert message == f"{tmp_path / 'x'} resolves to {tmp_path / 'x'}, outside the directories local mode allows (allowed: {hint})"


def test_the_refusal_names_the_path_as_given_and_every_allowed_directory(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    rule = rules(local_state_dir=str(tmp_path / "state"), local_allowed_dirs=(str(tmp_path / "a"), str(tmp_path / "b")))
    given = str(tmp_path / "a" / ".." / "c")
    message = refused(lambda f, v: rule.check_read(NamedPath(f, v), ALICE), "f", given)
    assert message.startswith(f"{given} resolves to {tmp_path / 'c'},")
    assert message.endswith(f"(allowed: {tmp_path / 'a'}, {tmp_path / 'b'})")


def test_local_export_claims(local: SimpleNamespace) -> None:
    out = local.allowed / "exports" / "run"
    check = local.rule.check_output
    assert check(NamedPath(FIELD, str(out), write=True), ALICE) == str(out)  # not there yet
    out.mkdir(parents=True)
    check(NamedPath(FIELD, str(out), write=True), ALICE)  # empty
    (out / "model.bin").write_text("x")
    occupied = refused(lambda f, v: check(NamedPath(f, v, write=True), ALICE), FIELD, str(out))
    assert "already holds files" in occupied
    check(NamedPath(FIELD, str(out), write=True, claim=False), ALICE)  # a shared store is not claimed
    (out / EXPORT_MARKER).write_text(marker(ALICE)[0])
    check(NamedPath(FIELD, str(out), write=True), ALICE)  # one's own export again
    assert "already holds files" in refused(lambda f, v: check(NamedPath(f, v, write=True), BOB), FIELD, str(out))
    inner = out / "inner"
    assert "inside another principal's export" in refused(lambda f, v: check(NamedPath(f, v, write=True), BOB), FIELD, str(inner))
    check(NamedPath(FIELD, str(inner), write=True), ALICE)
    assert "is a file" in refused(lambda f, v: check(NamedPath(f, v, write=True), ALICE), FIELD, str(out / "model.bin"))


def test_local_writes_outside_allowed_directories_are_refused(local: SimpleNamespace) -> None:
    assert os.path.isdir(local.outside)
    message = refused(lambda f, v: local.rule.check_output(NamedPath(f, v, write=True), ALICE), FIELD, str(local.outside / "o"))
    assert "outside the directories local mode allows" in message


# --- reads in S3 ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("uri", "who"),
    [
        (f"s3://{BUCKET}/{A_AREA}train.jsonl", ALICE),
        (f"s3://{BUCKET}/{A_AREA.rstrip('/')}", ALICE),
        (f"s3://{BUCKET}/shared/models/x", ALICE),
        (f"s3://{BUCKET}/datasets/new.jsonl", ALICE),
        ("s3://team-ro/x", ALICE),
        ("s3://team-rw/x", ALICE),
        ("s3://bobs-rw/x", BOB),
        (f"s3://{BUCKET}/{data_prefix(BOB.arn)}x", ADMIN),
        ("s3://anywhere/x", ADMIN),
    ],
)
def test_reads_in_s3_the_owners_area_shared_areas_and_grants(uri: str, who: Principal) -> None:
    assert rules().check_read(NamedPath("data_config.sources[0].path", uri), who) == [uri]


@pytest.mark.parametrize(
    ("uri", "fragment"),
    [
        (f"s3://{BUCKET}/{data_prefix(BOB.arn)}x", "outside what you may read in the artifacts bucket"),
        (f"s3://{BUCKET}/sharedx/x", "outside what you may read in the artifacts bucket"),
        (f"s3://{BUCKET}/x", "outside what you may read in the artifacts bucket"),
        ("s3://bobs-rw/x", "not one this deployment allows you to use"),
        ("s3://nowhere/x", "not one this deployment allows you to use"),
    ],
)
def test_reads_in_s3_of_others_areas_and_ungranted_buckets_are_refused(uri: str, fragment: str) -> None:
    field = "data_config.sources[0].path"
    message = refused(lambda f, u: rules().check_read(NamedPath(f, u), ALICE), field, uri)
    assert fragment in message


def test_a_read_path_that_does_not_normalise_is_refused_naming_its_field() -> None:
    field = "training_config.base_model.model_id"
    refused(lambda f, u: rules().check_read(NamedPath(f, u), ALICE), field, f"s3://{BUCKET}/{A_AREA}../../x")
    rules().check_checkpoint_uri("training_config.resume_from_checkpoint", f"s3://{BUCKET}/jobs/j-alice/checkpoints/step-1", ALICE)
    refused(rules().check_checkpoint_uri, "training_config.resume_from_checkpoint", f"s3://{BUCKET}/jobs/j-bob/checkpoints/step-1", ALICE)


def test_a_place_is_its_exact_key_whatever_letters_it_ends_with() -> None:
    # "a/outX" is not "a/out": the objects of the one are not in the other
    rules(Store({"a/out/x": ["x"]}))._check_s3_claim(FIELD, "a/outX", ALICE)
    # and the segments above "a/XX" are "a/", whose export is bob's
    store = Store({"a/" + EXPORT_MARKER: marker(BOB)})
    assert "inside another principal's export" in refused(rules(store)._check_s3_claim, FIELD, "a/XX", ALICE)


def test_an_area_named_without_its_slash_is_the_area_whatever_letters_end_it() -> None:
    rex = Principal("arn:aws:iam::123456789012:user/REX")
    area = data_prefix(rex.arn).rstrip("/")
    assert area.endswith("REX")
    assert rules().check_read(NamedPath("f", f"s3://{BUCKET}/{area}"), rex) == [f"s3://{BUCKET}/{area}"]
