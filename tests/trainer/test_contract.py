"""The SageMaker container contract (paths, hyperparameters.json, channels, hosts, run spec), the
storage helper over local paths and S3, and Hyper."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError
from trainer import storage
from trainer.contract import ContainerPaths, load_run_spec
from trainer.failures import UserError
from trainer.hyper import Hyper

from schemas.configs import TrainingType
from tests.trainer.runs import make_spec


@pytest.fixture
def s3(s3_bucket):
    storage.reset_client()
    yield s3_bucket
    storage.reset_client()


def test_paths_default_to_sagemaker_and_every_one_can_be_moved() -> None:
    defaults = ContainerPaths.from_env({})
    assert defaults.hyperparameters_file == Path("/opt/ml/input/config/hyperparameters.json")
    assert defaults.model_dir == Path("/opt/ml/model")
    assert defaults.checkpoint_dir == Path("/opt/ml/checkpoints")
    assert defaults.failure_file == Path("/opt/ml/output/failure")
    assert defaults.output_data_dir == Path("/opt/ml/output/data")
    assert defaults.stop_grace_seconds() == 120
    moved = ContainerPaths.from_env(
        {
            "SM_INPUT_CONFIG_DIR": "/r/config",
            "SM_MODEL_DIR": "/r/model",
            "TRAINPLANE_CHECKPOINT_DIR": "/r/ck",
            "TRAINPLANE_FAILURE_FILE": "/r/failure",
            "SM_OUTPUT_DATA_DIR": "/r/out",
            "TRAINPLANE_STOP_GRACE_SECONDS": "30",
        }
    )
    assert moved.hyperparameters_file == Path("/r/config/hyperparameters.json")
    assert (moved.model_dir, moved.checkpoint_dir, moved.failure_file, moved.output_data_dir) == (
        Path("/r/model"),
        Path("/r/ck"),
        Path("/r/failure"),
        Path("/r/out"),
    )
    assert moved.stop_grace_seconds() == 30


def test_channels_come_from_inputdataconfig_and_sm_channel_variables(tmp_path: Path) -> None:
    # Given SageMaker's inputdataconfig.json (bare container) and a toolkit-style variable
    config = tmp_path / "config"
    config.mkdir()
    (config / "inputdataconfig.json").write_text(json.dumps({"source_0": {"TrainingInputMode": "FastFile"}}))
    env = {"SM_INPUT_CONFIG_DIR": str(config), "SM_INPUT_DATA_DIR": str(tmp_path / "data"), "SM_CHANNEL_EVAL": "/mnt/eval"}

    # Then both are channels, by lower-case name
    assert ContainerPaths.from_env(env).channels() == {"source_0": tmp_path / "data" / "source_0", "eval": Path("/mnt/eval")}


def test_the_multi_node_host_list_gives_rank_and_master(tmp_path: Path) -> None:
    (tmp_path / "resourceconfig.json").write_text(json.dumps({"current_host": "algo-2", "hosts": ["algo-2", "algo-1"]}))
    hosts = ContainerPaths.from_env({"SM_INPUT_CONFIG_DIR": str(tmp_path)}).hosts()
    assert hosts is not None and (hosts.node_rank, hosts.master) == (1, "algo-1")
    (tmp_path / "resourceconfig.json").write_text(json.dumps({"current_host": "algo-9", "hosts": ["algo-1"]}))
    with pytest.raises(UserError, match="algo-9"):
        ContainerPaths.from_env({"SM_INPUT_CONFIG_DIR": str(tmp_path)}).hosts()
    assert ContainerPaths.from_env({"SM_INPUT_CONFIG_DIR": str(tmp_path / "none")}).hosts() is None


def test_run_spec_from_the_hyperparameters_file_with_overrides(tmp_path: Path) -> None:
    # Given SageMaker's hyperparameters.json: the run spec URI, one override, SageMaker's own keys
    spec = make_spec(tmp_path, hyperparameters={"max_steps": "10", "learning_rate": "1e-3"})
    spec_file = tmp_path / "run.json"
    spec_file.write_text(json.dumps(spec))
    config = tmp_path / "config"
    config.mkdir()
    hps = {"run_spec": str(spec_file), "max_steps": '"20"', "sagemaker_program": "x"}  # the SDK quotes values once more
    (config / "hyperparameters.json").write_text(json.dumps(hps))

    # When the trainer loads its run spec
    loaded = load_run_spec(ContainerPaths.from_env({"SM_INPUT_CONFIG_DIR": str(config), "TRAINPLANE_ATTEMPT": "3"}))

    # Then the file's hyperparameters win, SageMaker's are ignored, and the attempt comes from the launcher
    assert loaded.training_config.hyperparameters == {"max_steps": "20", "learning_rate": "1e-3"}
    assert loaded.attempt == 3 and loaded.job_id == "job-1"


def test_run_spec_from_s3_inline_and_errors(s3, tmp_path: Path) -> None:
    client, bucket = s3
    spec = make_spec(tmp_path)
    client.put_object(Bucket=bucket, Key="jobs/job-1/config/run-001.json", Body=json.dumps(spec).encode())
    from_s3 = load_run_spec(ContainerPaths.from_env({"TRAINPLANE_RUN_SPEC": f"s3://{bucket}/jobs/job-1/config/run-001.json"}))
    inline = load_run_spec(ContainerPaths.from_env({"TRAINPLANE_RUN_SPEC": json.dumps(spec)}))
    assert from_s3 == inline
    with pytest.raises(UserError, match="run spec not found"):
        load_run_spec(ContainerPaths.from_env({"TRAINPLANE_RUN_SPEC": str(tmp_path / "missing.json")}))
    with pytest.raises(UserError, match="does not match"):
        load_run_spec(ContainerPaths.from_env({"TRAINPLANE_RUN_SPEC": json.dumps(spec), "TRAINPLANE_JOB_ID": "someone-else"}))
    broken = tmp_path / "config" / "hyperparameters.json"
    broken.parent.mkdir(exist_ok=True)
    broken.write_text("{not json")
    with pytest.raises(UserError, match="not JSON"):
        load_run_spec(ContainerPaths.from_env({"SM_INPUT_CONFIG_DIR": str(broken.parent)}))


@pytest.mark.parametrize("where", ["local", "s3"])
def test_storage_round_trip(where: str, tmp_path: Path, request) -> None:
    # Given a prefix on local disk or in (emulated) S3
    if where == "s3":
        _, bucket = request.getfixturevalue("s3")
        base = f"s3://{bucket}/prefix"
    else:
        base = str(tmp_path / "prefix")
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    (src / "a" / "x.bin").write_bytes(b"x" * 10)
    (src / "manifest.json").write_text("{}")
    (src / "b.txt").write_text("b")

    # When a directory is uploaded, listed, read, downloaded and deleted
    storage.upload_dir(src, storage.join(base, "d1"), last="manifest.json")
    storage.write_text(storage.join(base, "d2", "f.txt"), "hello")

    # Then it behaves the same in both places
    assert storage.list_children(base) == ["d1", "d2"]
    assert sorted(storage.list_files(storage.join(base, "d1"))) == ["a/x.bin", "b.txt", "manifest.json"]
    assert storage.read_text(storage.join(base, "d2/f.txt")) == "hello"
    assert storage.exists(storage.join(base, "d1", "b.txt")) and not storage.exists(storage.join(base, "d1", "nope"))
    storage.download_dir(storage.join(base, "d1"), tmp_path / "back")
    assert (tmp_path / "back" / "a" / "x.bin").read_bytes() == b"x" * 10
    storage.delete_prefix(storage.join(base, "d1"), first="manifest.json")
    assert storage.list_children(base) == ["d2"]


def test_storage_honours_the_s3_endpoint_variable(monkeypatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")
    storage.reset_client()
    try:
        assert storage.s3_client().meta.endpoint_url == "http://127.0.0.1:9"
    finally:
        storage.reset_client()
    assert storage.join("s3://b/p/", "/x/", "y") == "s3://b/p/x/y"
    with pytest.raises(ValueError, match="not an s3"):
        storage.split_s3("/local/path")


def test_hyper_defaults_depend_on_the_training_type() -> None:
    lora = Hyper.from_strings({}, TrainingType.LORA)
    full = Hyper.from_strings({}, TrainingType.FULL_FINETUNE)
    assert (lora.learning_rate, full.learning_rate) == (2e-4, 5e-5)
    assert full.packing_for(TrainingType.CONTINUED_PRETRAIN) and not full.packing_for(TrainingType.SFT)
    assert (full.max_steps, full.num_train_epochs, full.lr_scheduler_type, full.async_checkpoint) == (None, 1.0, "linear", True)


def test_hyper_parses_strings_and_round_trips() -> None:
    hyper = Hyper.from_strings(
        {"max_steps": "7", "lora_target_modules": "q_proj, v_proj", "packing": "FALSE", "gradient_checkpointing": "1", "eval_steps": "3"},
        "SFT",
    )
    assert hyper.lora_target_modules == ["q_proj", "v_proj"] and hyper.packing is False and hyper.gradient_checkpointing
    assert Hyper.from_strings(hyper.to_strings(), "SFT") == hyper
    with pytest.raises(ValidationError, match="frozen"):
        hyper.max_steps = 3  # type: ignore[misc]  # frozen


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"learning_rat": "1", "epochs": "2"}, "unknown hyperparameter(s): epochs, learning_rat"),
        ({"learning_rate": "-1"}, "learning_rate"),
        ({"optimizer": "lion"}, "optimizer"),
        ({"lora_dropout": "1.5"}, "lora_dropout"),
        ({"warmup_steps": "1.5"}, "warmup_steps"),
    ],
)
def test_hyper_refuses_unknown_and_invalid_keys(values: dict[str, str], message: str) -> None:
    with pytest.raises(UserError) as caught:
        Hyper.from_strings(values, "SFT")
    assert message in str(caught.value)
