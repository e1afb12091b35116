"""The trainer's own path check: a run spec made by hand (the control plane's check bypassed) that names a
path outside its AccessSet is refused before anything is read or written (docs/SECURITY.md)."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from trainer import access, storage
from trainer.failures import UserError

from schemas.access import EXPORT_MARKER, AccessSet
from schemas.trainer import ExitCode, FailureReason, RunSpec, TrainerEventKind
from tests.trainer.runs import make_spec, run_in_process

ALICE = "arn:aws:iam::123456789012:user/alice"
BOB = "arn:aws:iam::123456789012:user/bob"


def _confined(spec: dict[str, Any], root: Path, *, read: list[str] | None = None, deny: list[str] | None = None) -> dict[str, Any]:
    """The spec with an AccessSet as the control plane writes one: the job's own place read-write, plus `read`."""
    own = os.path.realpath(root)
    spec["access"] = {"owner": ALICE, "read": [os.path.realpath(p) for p in (read or [])], "write": [own], "deny": deny or []}
    return spec


def _refused(outcome: Any, field: str) -> None:
    assert outcome.code == ExitCode.USER_ERROR, outcome.stdout[-2000:]
    failure = outcome.of_kind(TrainerEventKind.FAILURE)[-1].data
    assert failure["reason"] == FailureReason.USER_ERROR.value and field in failure["message"], failure
    # Nothing was trained or written: no checkpoint, no metrics, no export.
    assert not outcome.of_kind(TrainerEventKind.CHECKPOINT) and not (outcome.root / "metrics.jsonl").exists()


def test_a_confined_run_that_names_only_allowed_paths_trains_and_exports(tmp_path: Path, monkeypatch, capsys) -> None:
    # Given a hand-made spec whose data, checkpoints, metrics and export are all inside its access set
    root = tmp_path / "job"
    spec = _confined(make_spec(root, output_config={"output_path": str(root / "export")}), root)
    # When it runs
    outcome = run_in_process(root, spec, monkeypatch, capsys)
    # Then it completes, and its export carries the marker naming its owner
    assert outcome.code == ExitCode.COMPLETED, outcome.stdout[-2000:]
    assert json.loads((root / "export" / EXPORT_MARKER).read_text())["owner"] == ALICE


def test_a_data_source_outside_the_access_set_is_refused_before_it_is_read(tmp_path: Path, monkeypatch, capsys) -> None:
    # Given bob's data beside alice's job, and a spec for alice that names it (no control plane in between)
    root = tmp_path / "alice-job"
    secret = tmp_path / "bob" / "secret.jsonl"
    secret.parent.mkdir(parents=True)
    secret.write_text('{"text": "bob only"}\n')
    spec = _confined(make_spec(root), root)
    spec["data_config"]["sources"] = [{"path": str(secret)}]
    # When the trainer runs it, then it refuses naming the field, having read and written nothing
    _refused(run_in_process(root, spec, monkeypatch, capsys), "data_config.sources[0].path")


@pytest.mark.parametrize("escape", ["dotdot", "symlink_file", "symlink_in_dir", "file_url"])
def test_dotdot_and_symlink_escapes_are_refused(tmp_path: Path, monkeypatch, capsys, escape: str) -> None:
    # Given an allowed data directory and a file outside it
    root = tmp_path / "job"
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    outside = tmp_path / "outside" / "x.jsonl"
    outside.parent.mkdir()
    outside.write_text('{"text": "not yours"}\n')
    spec = _confined(make_spec(root), root, read=[str(allowed)])
    if escape == "dotdot":
        path = f"{allowed}/../outside/x.jsonl"
    elif escape == "symlink_file":
        (allowed / "link.jsonl").symlink_to(outside)
        path = str(allowed / "link.jsonl")
    elif escape == "symlink_in_dir":
        (allowed / "real.jsonl").write_text('{"text": "fine"}\n')
        (allowed / "sneaky.jsonl").symlink_to(outside)
        path = str(allowed)
    else:
        path = f"file://{allowed}/../outside/x.jsonl"
    spec["data_config"]["sources"] = [{"path": path}]
    # Then the run is refused before reading
    _refused(run_in_process(root, spec, monkeypatch, capsys), "data_config.sources[0].path")


def test_the_state_directory_is_refused_even_inside_an_allowed_directory(tmp_path: Path, monkeypatch, capsys) -> None:
    allowed = tmp_path / "home"
    state = allowed / ".state"
    (state / "journal").mkdir(parents=True)
    (state / "journal" / "x.jsonl").write_text('{"text": "secrets"}\n')
    root = tmp_path / "job"
    spec = _confined(make_spec(root), root, read=[str(allowed)], deny=[os.path.realpath(state)])
    spec["data_config"]["sources"] = [{"path": str(state / "journal" / "x.jsonl")}]
    _refused(run_in_process(root, spec, monkeypatch, capsys), "data_config.sources[0].path")


@pytest.mark.parametrize(
    ("field", "change"),
    [
        ("training_config.base_model.model_id", {"training_config.base_model": {"model_id": "/etc", "source": "local"}}),
        ("training_config.resume_from_checkpoint", {"training_config.resume_from_checkpoint": "/tmp/other-job/checkpoints/step-1"}),
        (
            "training_config.framework.custom_script_path",
            {"training_config.framework": {"type": "CUSTOM", "custom_script_path": "/bin/true"}},
        ),
        (
            "training_config.framework.command[1]",
            {"training_config.framework": {"type": "CUSTOM", "command": ["python", "/tmp/elsewhere/train.py"]}},
        ),
        (
            "training_config.rlhf.reward_model",
            {"training_config.training_type": "RLHF", "training_config.rlhf": {"reward_model": "/etc", "num_generations": 4}},
        ),
        (
            "training_config.rlhf.reward_script_path",
            {"training_config.training_type": "RLHF", "training_config.rlhf": {"reward_script_path": "/tmp/elsewhere/rewards.py"}},
        ),
        ("output_config.output_path", {"output_config.output_path": "/tmp/elsewhere/model"}),
        ("checkpoint_uri", {"checkpoint_uri": "/tmp/elsewhere/checkpoints"}),
        ("metrics_uri", {"metrics_uri": "/tmp/elsewhere/metrics.jsonl"}),
        ("resume_from", {"resume_from": "s3://artifacts/jobs/bobs-job/checkpoints/step-000002"}),
    ],
)
def test_every_path_field_of_the_spec_is_checked(tmp_path: Path, monkeypatch, capsys, field: str, change: dict[str, Any]) -> None:
    root = tmp_path / "job"
    spec = _confined(make_spec(root), root)
    for dotted, value in change.items():
        target = spec
        *parents, last = dotted.split(".")
        for name in parents:
            target = target[name]
        target[last] = {**target[last], **value} if isinstance(value, dict) and isinstance(target.get(last), dict) else value
    outcome = run_in_process(root, spec, monkeypatch, capsys)
    assert outcome.code == ExitCode.USER_ERROR, outcome.stdout[-2000:]
    assert field in outcome.of_kind(TrainerEventKind.FAILURE)[-1].data["message"]


def test_s3_paths_outside_the_access_set_are_refused_and_admins_read_any_s3() -> None:
    own = "s3://artifacts/jobs/job-a"
    confined = AccessSet(owner=ALICE, read=["s3://artifacts/data/123456789012/user/alice/", "s3://artifacts/shared/"], write=[own])
    assert confined.can_read("s3://artifacts/data/123456789012/user/alice/train.jsonl")
    assert confined.can_read(f"{own}/checkpoints/step-1") and confined.can_write(f"{own}/model")
    assert not confined.can_read("s3://artifacts/jobs/job-b/model")  # another job's prefix
    assert not confined.can_read("s3://artifacts/data/123456789012/user/alicex/t.jsonl")  # a prefix, not a string prefix
    assert not confined.can_read("s3://artifacts/data/123456789012/user/alice/../bob/t.jsonl")  # '..' segment
    assert not confined.can_write("s3://artifacts/shared/x")  # read-only
    assert not confined.can_read("s3://other-bucket/x") and not confined.can_read("https://example.com/x")
    admin = AccessSet(owner=BOB, read_any_s3=True, write=[own])
    assert admin.can_read("s3://anything/at/all") and not admin.can_write("s3://anything/at/all")


def _spec_for(tmp_path: Path, owner: str) -> RunSpec:
    spec = make_spec(tmp_path / "job")
    spec["access"] = {"owner": owner, "write": [str(tmp_path)]}
    return RunSpec.model_validate(spec)


def test_an_export_never_overwrites_another_principals_export_or_foreign_files(tmp_path: Path) -> None:
    # Given bob's export, alice's earlier export, foreign files, and an empty place
    bobs, alices, foreign, empty = (tmp_path / n for n in ("bobs", "alices", "foreign", "empty"))
    for place, owner in ((bobs, BOB), (alices, ALICE)):
        place.mkdir()
        (place / "model.safetensors").write_bytes(b"weights of " + owner.encode())
        storage.write_text(str(place / EXPORT_MARKER), json.dumps({"owner": owner}))
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    spec = _spec_for(tmp_path, ALICE)
    # Then alice's job may not export over bob's export nor the foreign files, whose bytes stay
    with pytest.raises(UserError, match="another principal's export"):
        access.claim_export(str(bobs), spec)
    with pytest.raises(UserError, match="already holds objects"):
        access.claim_export(str(foreign), spec)
    assert (bobs / "model.safetensors").read_bytes() == b"weights of " + BOB.encode()
    assert json.loads((bobs / EXPORT_MARKER).read_text())["owner"] == BOB
    # And it may re-export over its owner's earlier export, or into an empty place (claimed by the marker)
    access.claim_export(str(alices), spec)
    access.claim_export(str(empty), spec)
    assert json.loads((empty / EXPORT_MARKER).read_text())["owner"] == ALICE


@pytest.mark.parametrize("where", ["local", "s3"])
def test_two_principals_racing_for_one_empty_place_exactly_one_claims_it(
    tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    # Given an empty place both alice's and bob's jobs may write, locally or on (moto's) S3
    if where == "s3":
        _, bucket = request.getfixturevalue("s3_bucket")
        area, destination = f"s3://{bucket}/exports", f"s3://{bucket}/exports/model"
        # moto applies a call in several steps; S3 applies each atomically: one lock per call restores that
        client, lock = storage.s3_client(), threading.Lock()
        real_call = client._make_api_call

        def atomic(*args: Any, **kwargs: Any) -> Any:
            with lock:
                return real_call(*args, **kwargs)

        monkeypatch.setattr(client, "_make_api_call", atomic)
    else:
        area, destination = str(tmp_path), str(tmp_path / "exports" / "model")
    specs = []
    for owner in (ALICE, BOB):
        spec = make_spec(tmp_path / f"job-{owner.rsplit('/', 1)[1]}")
        spec["access"] = {"owner": owner, "write": [area]}
        specs.append(RunSpec.model_validate(spec))
    # And both exports pass every check (no marker, nothing there) before either writes its marker
    both_checked = threading.Barrier(2)
    real_create = storage.create_text

    def create_once_both_checked(uri: str, text: str) -> bool:
        both_checked.wait(timeout=10)
        return real_create(uri, text)

    monkeypatch.setattr(storage, "create_text", create_once_both_checked)
    outcomes: dict[str, str] = {}

    def export(spec: RunSpec) -> None:
        try:
            access.claim_export(destination, spec)
            outcomes[spec.access.owner] = "claimed"  # type: ignore[union-attr]
        except UserError as exc:
            outcomes[spec.access.owner] = str(exc)  # type: ignore[union-attr]

    # When they claim it at the same moment
    threads = [threading.Thread(target=export, args=(spec,)) for spec in specs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    # Then exactly one claimed it, the other was refused, and the marker names the one that claimed it
    winners = [owner for owner, outcome in outcomes.items() if outcome == "claimed"]
    assert len(winners) == 1 and len(outcomes) == 2, outcomes
    loser = next(outcome for outcome in outcomes.values() if outcome != "claimed")
    assert "just claimed by another principal's export" in loser
    assert json.loads(storage.read_text(storage.join(destination, EXPORT_MARKER)))["owner"] == winners[0]


def test_a_create_only_write_never_replaces(tmp_path: Path) -> None:
    target = str(tmp_path / "marker.json")
    assert storage.create_text(target, "first") and not storage.create_text(target, "second")
    assert storage.read_text(target) == "first" and sorted(p.name for p in tmp_path.iterdir()) == ["marker.json"]


@pytest.mark.parametrize("name", ["XDG_CONFIG_HOME", "HF_HOME", "WANDB_DIR", "TORCH_HOME"])
def test_an_environment_variable_that_moves_files_is_refused_by_the_trainer_too(tmp_path: Path, monkeypatch, capsys, name: str) -> None:
    # Given a hand-made spec (submit's check bypassed, or a job stored before the rule) whose environment
    # points a library's files elsewhere; even without an AccessSet (the list is the one submit reads)
    root = tmp_path / "job"
    elsewhere = tmp_path / "state"
    spec = make_spec(root)
    spec["training_config"]["environment"] = {name: str(elsewhere)}
    # When the trainer runs it, then it refuses naming the variable, before anything is written there
    _refused(run_in_process(root, spec, monkeypatch, capsys), f"training_config.environment.{name}")
    assert not elsewhere.exists()


def test_an_ordinary_environment_variable_reaches_the_run(tmp_path: Path, monkeypatch, capsys) -> None:
    root = tmp_path / "job"
    spec = make_spec(root)
    spec["training_config"]["environment"] = {"MY_FLAG": "1", "HF_TOKEN": "hf_x", "NCCL_DEBUG": "INFO"}
    monkeypatch.setenv("MY_FLAG", "unset")  # restored after the test (the trainer updates os.environ)
    outcome = run_in_process(root, spec, monkeypatch, capsys)
    assert outcome.code == ExitCode.COMPLETED, outcome.stdout[-2000:]
    assert os.environ.get("MY_FLAG") == "1"


def test_the_own_prefix_is_the_checkpoints_parent_unless_the_run_keeps_the_deepfinery_layout(tmp_path: Path) -> None:
    spec = RunSpec.model_validate(make_spec(tmp_path / "job"))
    plain = spec.model_copy(update={"checkpoint_uri": "s3://b/jobs/j-1/checkpoints", "metrics_uri": "s3://b/metrics/j-1.jsonl"})
    assert access.own_prefix(plain) == "s3://b/jobs/j-1"  # metrics kept elsewhere do not move it
    deepfinery = plain.model_copy(
        update={"layout_uri": "s3://b/runs/r-1", "checkpoint_uri": "s3://b/runs/r-1", "metrics_uri": "s3://b/runs/r-1/metrics.jsonl"}
    )
    assert access.own_prefix(deepfinery) == "s3://b/runs/r-1"
    assert access.own_prefix(deepfinery.model_copy(update={"metrics_uri": None})) == "s3://b/runs"
