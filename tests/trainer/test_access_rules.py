"""The trainer's access check, rule by rule, called directly (fast; the runs in test_access.py show the
refusal end to end): read versus write places, the walk under local directories, the W&B secret, the
job's own prefix and the export marker (docs/SECURITY.md)."""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from trainer import access, storage
from trainer.failures import UserError

from schemas.access import EXPORT_MARKER
from schemas.trainer import RunSpec
from tests.trainer.runs import make_spec

ALICE = "arn:aws:iam::123456789012:user/alice"
BOB = "arn:aws:iam::123456789012:user/bob"
SECRET = "arn:aws:secretsmanager:us-east-1:123456789012:secret:trainplane/{}/wandb-AbCdEf"


def _spec(tmp_path: Path, *, read: list[Path] | None = None, secrets: list[str] | None = None, **fields: Any) -> RunSpec:
    """alice's job under tmp_path/job, allowed to write there and to read `read`."""
    root = tmp_path / "job"
    spec = make_spec(root, **fields)
    spec["access"] = {
        "owner": ALICE,
        "read": [os.path.realpath(p) for p in (read or [])],
        "write": [os.path.realpath(root)],
        "secrets": secrets or [],
    }
    return RunSpec.model_validate(spec)


def _place(path: Path, files: int = 1) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        (path / f"part-{i}.jsonl").write_text('{"text": "x"}\n')
    return path


def _refusal(spec: RunSpec) -> str:
    with pytest.raises(UserError) as refused:
        access.enforce(spec)
    return str(refused.value)


def test_a_place_the_job_may_only_read_is_refused_as_a_write_place_and_named_so(tmp_path: Path) -> None:
    shared = _place(tmp_path / "shared")
    spec = _spec(tmp_path, read=[shared], checkpoint_uri=str(shared / "checkpoints"))
    assert _refusal(spec).startswith(f"checkpoint_uri: this job may not write {shared / 'checkpoints'} (outside")


def test_a_place_the_job_may_only_read_is_read(tmp_path: Path) -> None:
    shared = _place(tmp_path / "shared", files=2)
    spec = _spec(tmp_path, read=[shared], data_config={"sources": [{"path": str(shared)}]})
    access.enforce(spec)  # no refusal: a read-only grant is enough to read


def test_a_data_source_outside_the_grants_is_refused_as_a_read_and_named_so(tmp_path: Path) -> None:
    bobs = _place(tmp_path / "bob")
    spec = _spec(tmp_path, data_config={"sources": [{"path": str(bobs / "part-0.jsonl")}]})
    assert _refusal(spec).startswith(f"data_config.sources[0].path: this job may not read {bobs / 'part-0.jsonl'} (outside")


def test_a_link_under_a_place_the_job_writes_may_not_lead_outside_it(tmp_path: Path) -> None:
    # Given a link planted in the job's own checkpoint directory (by an earlier attempt's script) to bob's files
    bobs = _place(tmp_path / "bob")
    spec = _spec(tmp_path)
    checkpoints = Path(spec.checkpoint_uri)
    checkpoints.mkdir(parents=True)
    (checkpoints / "step-000001").symlink_to(bobs)
    # Then the run is refused: a resume would read, and a save would write, through it
    message = _refusal(spec)
    assert message.startswith("checkpoint_uri: ") and f"links to {os.path.realpath(bobs)}" in message and "may not write" in message


def test_a_link_under_a_place_the_job_writes_may_not_lead_to_a_place_it_only_reads(tmp_path: Path) -> None:
    shared = _place(tmp_path / "shared")
    spec = _spec(tmp_path, read=[shared])
    checkpoints = Path(spec.checkpoint_uri)
    checkpoints.mkdir(parents=True)
    (checkpoints / "step-000001").symlink_to(shared)
    assert f"links to {os.path.realpath(shared)}, which this job may not write" in _refusal(spec)


def test_a_link_under_a_place_the_job_writes_may_lead_to_what_it_writes(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    checkpoints = Path(spec.checkpoint_uri)
    own = _place(tmp_path / "job" / "kept")
    checkpoints.mkdir(parents=True)
    (checkpoints / "step-000001").symlink_to(own)
    access.enforce(spec)


def test_a_link_to_a_readable_directory_is_followed_so_a_link_inside_it_cannot_escape(tmp_path: Path) -> None:
    # Given data/ -> other/ (both readable), and other/ holding a link to bob's files
    data, other, bobs = _place(tmp_path / "data"), _place(tmp_path / "other"), _place(tmp_path / "bob")
    (data / "more").symlink_to(other)
    (data / "also.jsonl").symlink_to(data / "part-0.jsonl")  # a link to a file: nothing more to walk there
    (other / "sneaky.jsonl").symlink_to(bobs / "part-0.jsonl")
    spec = _spec(tmp_path, read=[data, other], data_config={"sources": [{"path": str(data)}]})
    assert "sneaky.jsonl links to" in _refusal(spec)


def test_a_denied_directory_inside_a_data_directory_is_refused(tmp_path: Path) -> None:
    home = _place(tmp_path / "home")
    _place(home / ".state" / "journal")
    spec = _spec(tmp_path, read=[home], data_config={"sources": [{"path": str(home)}]})
    spec = spec.model_copy(update={"access": spec.access.model_copy(update={"deny": [os.path.realpath(home / ".state")]})})  # type: ignore[union-attr]
    assert f"{home / '.state'} is a place this job may not read" in _refusal(spec)


def test_a_link_cycle_is_walked_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a data directory holding two links back to itself (followed, they would nest without end)
    data = _place(tmp_path / "data")
    (data / "a").symlink_to(data)
    (data / "b").symlink_to(data)
    monkeypatch.setattr(access, "MAX_TREE_ENTRIES", 5)
    spec = _spec(tmp_path, read=[data], data_config={"sources": [{"path": str(data)}]})
    access.enforce(spec)  # one directory walked, well under the bound


def test_the_walk_counts_directories_up_to_its_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = _place(tmp_path / "data")
    _place(data / "one")
    _place(data / "two")
    monkeypatch.setattr(access, "MAX_TREE_ENTRIES", 3)
    spec = _spec(tmp_path, read=[data], data_config={"sources": [{"path": str(data)}]})
    access.enforce(spec)  # exactly the bound: data, one, two
    _place(data / "three")
    assert "holds too many directories to check" in _refusal(spec)


def _with_wandb(tmp_path: Path, principal: str) -> RunSpec:
    tracking = {"config": {"wandb": {"project": "p", "api_key_secret_arn": SECRET.format(principal)}}, "job_name": "j"}
    return _spec(tmp_path, secrets=["trainplane/alice/"], tracking=tracking)


def test_the_wandb_secret_must_be_the_jobs_own_principals(tmp_path: Path) -> None:
    access.enforce(_with_wandb(tmp_path, "alice"))
    message = _refusal(_with_wandb(tmp_path, "bob"))
    assert message.startswith("output_config.tracking.wandb.api_key_secret_arn: ") and SECRET.format("bob") in message


@pytest.mark.parametrize(
    ("fields", "prefix"),
    [
        ({"checkpoint_uri": "s3://b/jobs/j1/checkpoints"}, "s3://b/jobs/j1"),
        ({"checkpoint_uri": "s3://b/jobs/j1/checkpoints/"}, "s3://b/jobs/j1"),
        ({"checkpoint_uri": "/data/jobs/j1/checkpoints/"}, "/data/jobs/j1"),
        ({"checkpoint_uri": "s3://b/jobs/X/X"}, "s3://b/jobs/X"),
        ({"checkpoint_uri": "s3://b/jobs/j1/checkpoints 2"}, "s3://b/jobs/j1"),
        # No layout: the checkpoints' parent, whatever metrics_uri says
        ({"checkpoint_uri": "s3://b/jobs/j1/checkpoints", "metrics_uri": "s3://b/elsewhere/m/metrics.jsonl"}, "s3://b/jobs/j1"),
        # A deepfinery layout: the parent of metrics_uri (checkpoints in the run's root)
        (
            {"checkpoint_uri": "s3://b/jobs/j1", "metrics_uri": "s3://b/jobs/j1/metrics.jsonl/", "layout_uri": "s3://b/l.json"},
            "s3://b/jobs/j1",
        ),
        ({"checkpoint_uri": "/r/jobs/j1", "metrics_uri": "/r/jobs/X/X", "layout_uri": "/r/l.json"}, "/r/jobs/X"),
        ({"checkpoint_uri": "/r/jobs/j1", "metrics_uri": "/r/jobs/j1/metrics 1.jsonl", "layout_uri": "/r/l.json"}, "/r/jobs/j1"),
    ],
)
def test_own_prefix_is_the_parent_of_the_checkpoints_or_with_a_layout_of_the_metrics(
    tmp_path: Path, fields: dict[str, str], prefix: str
) -> None:
    spec = make_spec(tmp_path / "job")
    spec.update(fields)
    assert access.own_prefix(RunSpec.model_validate(spec)) == prefix


def _marker(place: Path) -> dict[str, Any]:
    return dict(json.loads((place / EXPORT_MARKER).read_text()))


def _export_spec(tmp_path: Path, job_id: str = "job-2", attempt: int = 3) -> RunSpec:
    spec = make_spec(tmp_path / "job", job_id=job_id, attempt=attempt)
    spec["access"] = {"owner": ALICE, "write": [str(tmp_path)]}
    return RunSpec.model_validate(spec)


def test_the_marker_names_the_owner_job_attempt_and_when(tmp_path: Path) -> None:
    place = tmp_path / "empty"
    access.claim_export(str(place), _export_spec(tmp_path))
    marker = _marker(place)
    assert {k: marker[k] for k in ("owner", "job_id", "attempt")} == {"owner": ALICE, "job_id": "job-2", "attempt": 3}
    assert datetime.fromisoformat(marker["at"]).utcoffset() is not None  # an aware time, comparable across hosts


def test_a_reexport_over_the_owners_earlier_export_refreshes_the_marker(tmp_path: Path) -> None:
    place = tmp_path / "model"
    place.mkdir()
    (place / "model.safetensors").write_bytes(b"old")
    storage.write_text(str(place / EXPORT_MARKER), json.dumps({"owner": ALICE, "job_id": "job-1", "attempt": 1}))
    access.claim_export(str(place), _export_spec(tmp_path))
    assert (_marker(place)["job_id"], _marker(place)["attempt"]) == ("job-2", 3)


def test_the_jobs_own_prefix_may_hold_its_files_before_the_export(tmp_path: Path) -> None:
    # Given a place under the job's own prefix (tmp_path/job) already holding its files, with no marker yet
    spec = _export_spec(tmp_path)
    place = _place(tmp_path / "job" / "model")
    # Then the export claims it; the same files outside the job's prefix are foreign and refused
    access.claim_export(str(place), spec)
    assert _marker(place)["owner"] == ALICE
    foreign = _place(tmp_path / "jobX" / "model")
    with pytest.raises(UserError, match="already holds objects"):
        access.claim_export(str(foreign), spec)


def test_a_claim_lost_to_the_same_principal_goes_on_and_writes_its_marker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given alice's other export claiming the place between this one's check and its create-only write
    place = tmp_path / "model"
    real_create = storage.create_text

    def claimed_first(uri: str, text: str) -> bool:
        real_create(uri, json.dumps({"owner": ALICE, "job_id": "job-9", "attempt": 1}))
        return real_create(uri, text)

    monkeypatch.setattr(storage, "create_text", claimed_first)
    # Then this export goes on (same owner) and the marker is its own
    access.claim_export(str(place), _export_spec(tmp_path))
    assert (_marker(place)["owner"], _marker(place)["job_id"]) == (ALICE, "job-2")


@pytest.mark.parametrize("code", ["NoSuchKey", "404"])
def test_an_s3_answer_that_the_marker_is_missing_means_no_marker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: str) -> None:
    def missing(uri: str) -> str:
        raise ClientError({"Error": {"Code": code, "Message": "missing"}}, "GetObject")

    monkeypatch.setattr(storage, "read_text", missing)
    assert access._marker_owner(str(tmp_path / "model" / EXPORT_MARKER)) is None


def test_any_other_failure_to_read_the_marker_is_raised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(uri: str) -> str:
        raise PermissionError(uri)

    monkeypatch.setattr(storage, "read_text", broken)
    with pytest.raises(PermissionError):
        access._marker_owner(str(tmp_path / "model" / EXPORT_MARKER))
