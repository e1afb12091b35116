"""The example job files stay valid, in sync, and submittable from any working directory."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from schemas.job import SubmitJobRequest
from trainplane.cli_output import load_document, resolve_relative_data_paths

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_yaml_and_json_examples_are_the_same_valid_request() -> None:
    # Given the two example job files
    as_yaml = yaml.safe_load((EXAMPLES / "jobs" / "lora-tiny.yaml").read_text())
    as_json = json.loads((EXAMPLES / "jobs" / "lora-tiny.json").read_text())
    # When they are validated  Then they are one and the same CPU-only LoRA job on a model built from config
    assert as_yaml == as_json
    request = SubmitJobRequest.model_validate(as_yaml)
    assert request.resource_config.gpu_count == 0
    assert request.training_config.base_model.resolved_source().value == "config"
    assert request.training_config.base_model.tokenizer_id == "byte"


def test_relative_data_paths_resolve_against_the_job_file() -> None:
    # Given the YAML example, whose dataset path is relative to its own directory
    job_file = EXAMPLES / "jobs" / "lora-tiny.yaml"
    document = load_document(str(job_file))
    # When the CLI resolves its paths
    resolve_relative_data_paths(document, job_file.parent)
    # Then the path is absolute and names the shipped dataset
    path = Path(document["data_config"]["sources"][0]["path"])
    assert path.is_absolute()
    assert path == (EXAMPLES / "data" / "tiny-qa.jsonl").resolve()
    assert sum(1 for _ in path.open()) >= 100


def test_remote_absolute_and_missing_paths_are_left_alone(tmp_path: Path) -> None:
    # Given sources on S3, absolute, and relative but absent
    document = {"data_config": {"sources": [{"path": "s3://b/k.jsonl"}, {"path": "/abs/x.jsonl"}, {"path": "nope.jsonl"}]}}
    # When resolved  Then nothing changes (the server or trainer will say what is wrong)
    resolve_relative_data_paths(document, tmp_path)
    assert [s["path"] for s in document["data_config"]["sources"]] == ["s3://b/k.jsonl", "/abs/x.jsonl", "nope.jsonl"]


def test_the_rlhf_example_is_valid_and_its_reward_script_resolves_against_the_job_file() -> None:
    # Given the RLHF example, whose data and reward script are relative to its own directory
    job_file = EXAMPLES / "jobs" / "rlhf-tiny.json"
    document = load_document(str(job_file))
    # When the CLI resolves its paths  Then both are absolute, and it is a valid RLHF request
    resolve_relative_data_paths(document, job_file.parent)
    assert document["training_config"]["rlhf"]["reward_script_path"] == str((EXAMPLES / "rlhf" / "rewards.py").resolve())
    request = SubmitJobRequest.model_validate(document)
    assert request.training_config.rlhf is not None and request.training_config.rlhf.function_names() == ["readable", "correct"]
