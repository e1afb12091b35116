"""RLHF at submit: the rlhf block is required for RLHF (and only there), and what the RLHF trainer
(trainer/rlhf.py) cannot do is a 422 naming the field; what it can do is accepted."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from schemas.configs import ModelSource
from schemas.job import SubmitJobRequest
from tests.helpers.jobs import request_body

REWARD_SCRIPT = "s3://bucket/data/rewards.py"


def rlhf_body(rlhf: dict[str, Any] | None = None) -> dict[str, Any]:
    body = request_body()
    body["training_config"].update(training_type="RLHF", hyperparameters={})
    body["training_config"]["rlhf"] = {"reward_script_path": REWARD_SCRIPT, **(rlhf or {})}
    body["data_config"]["batch_size"] = 8  # one group of num_generations=8 completions per step
    return body


def error_of(body: dict[str, Any]) -> tuple[str, str]:
    with pytest.raises(ValidationError) as caught:
        SubmitJobRequest.model_validate(body)
    first = caught.value.errors()[0]
    return ".".join(str(p) for p in first["loc"]), first["msg"]


def test_an_rlhf_job_with_a_reward_is_accepted() -> None:
    request = SubmitJobRequest.model_validate(
        rlhf_body({"reward_model": "org/reward-model", "reward_functions": ["a", "b"], "reward_weights": [1, 0.5, 2], "beta": 0.04})
    )
    rlhf = request.training_config.rlhf
    assert rlhf is not None and rlhf.function_names() == ["a", "b"] and rlhf.reward_count() == 3
    assert rlhf.reward_model_source() == ModelSource.HUB
    assert SubmitJobRequest.model_validate(rlhf_body()).training_config.rlhf.function_names() == ["reward"]  # type: ignore[union-attr]


def _body_without_block() -> dict[str, Any]:
    body = rlhf_body()
    del body["training_config"]["rlhf"]
    return body


def _block_on_sft() -> dict[str, Any]:
    body = rlhf_body()
    body["training_config"]["training_type"] = "SFT"
    return body


def _change(path: tuple[str, ...], value: Any, rlhf: dict[str, Any] | None = None) -> dict[str, Any]:
    body = rlhf_body(rlhf)
    target = body
    for key in path[:-1]:
        target = target.setdefault(key, {})
    target[path[-1]] = value
    return body


@pytest.mark.parametrize(
    ("body", "field", "fragment"),
    [
        (_body_without_block(), "training_config.rlhf", "training_type RLHF needs the rlhf block"),
        (_block_on_sft(), "training_config.rlhf", "for training_type RLHF, not SFT"),
        (rlhf_body({"reward_script_path": None}), "training_config.rlhf", "RLHF needs a reward"),
        (
            rlhf_body({"reward_script_path": None, "reward_model": "m", "reward_functions": ["f"]}),
            "training_config.rlhf.reward_functions",
            "not set",
        ),
        (rlhf_body({"reward_weights": [1.0, 2.0]}), "training_config.rlhf.reward_weights", "2 weight(s) for 1 reward(s)"),
        (rlhf_body({"reward_functions": ["f", "f"]}), "training_config.rlhf.reward_functions", "named twice"),
        (rlhf_body({"reward_functions": ["not-an-identifier"]}), "training_config.rlhf.reward_functions.0", "should match pattern"),
        (rlhf_body({"reward_model": "s3://"}), "training_config.rlhf.reward_model", "no bucket"),
        (rlhf_body({"reward_model_revision": "v1"}), "training_config.rlhf.reward_model_revision", "without reward_model"),
        (rlhf_body({"num_generations": 1}), "training_config.rlhf.num_generations", "greater than or equal to 2"),
        (rlhf_body({"beta": -0.1}), "training_config.rlhf.beta", "greater than or equal to 0"),
        (rlhf_body({"temperature": 0}), "training_config.rlhf.temperature", "greater than 0"),
        (rlhf_body({"num_generations": 3}), "training_config.rlhf.num_generations", "not a multiple of num_generations=3"),
        (_change(("data_config", "validation_split"), 0.1), "data_config.validation_split", "no evaluation pass"),
        (_change(("training_config", "framework"), {"type": "FSDP"}), "training_config.framework.type", "not supported for RLHF"),
        (
            _change(("training_config", "framework"), {"distributed": {"world_size": 2}}),
            "training_config.framework.distributed.world_size",
            "world_size 1",
        ),
        (
            _change(("output_config", "checkpoint"), {"metric_for_best_model": "eval_loss"}),
            "output_config.checkpoint.metric_for_best_model",
            "no evaluation pass",
        ),
        (_change(("training_config", "hyperparameters"), {"lora_rank": "8"}), "training_config.hyperparameters.lora_rank", "full model"),
        (_change(("training_config", "hyperparameters"), {"eval_steps": "5"}), "training_config.hyperparameters.eval_steps", "RLHF"),
        (_change(("training_config", "hyperparameters"), {"dpo_beta": "0.2"}), "training_config.hyperparameters.dpo_beta", "rlhf.beta"),
        (_change(("training_config", "hyperparameters"), {"packing": "true"}), "training_config.hyperparameters.packing", "RLHF"),
    ],
)
def test_what_the_rlhf_trainer_cannot_do_is_refused_naming_the_field(body: dict[str, Any], field: str, fragment: str) -> None:
    where, message = error_of(body)
    assert where == field and fragment in message, (where, message)


def test_a_validation_source_is_refused_for_rlhf() -> None:
    body = rlhf_body()
    body["data_config"]["sources"].append({"path": "s3://bucket/data/val.jsonl", "split": "validation"})
    assert error_of(body)[0] == "data_config.sources.1.split"


def test_the_completions_per_step_may_come_from_the_trainer_aliases() -> None:
    # batch_size 8 x 1 is not a multiple of 16, but with gradient_accumulation_steps 2 it is
    body = rlhf_body({"num_generations": 16})
    assert error_of(body)[0] == "training_config.rlhf.num_generations"
    body["training_config"]["hyperparameters"]["gradient_accumulation_steps"] = "2"
    SubmitJobRequest.model_validate(body)


def test_an_rlhf_job_may_log_to_the_trackers() -> None:
    # Given an RLHF job asking for an MLflow run and TensorBoard (trainer/rlhf.py logs to them like the loop)
    body = rlhf_body()
    body.setdefault("output_config", {})["tracking"] = {"mlflow": {"tracking_uri": "https://mlflow.example.com"}, "tensorboard": {}}
    # Then it is accepted with its tracking block
    tracking = SubmitJobRequest.model_validate(body).output_config.tracking
    assert tracking is not None and tracking.mlflow is not None and tracking.mlflow.tracking_uri == "https://mlflow.example.com"
