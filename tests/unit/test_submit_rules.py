"""What the trainer would refuse without downloading anything is refused at submit (issue 11 point 3).

Each rule the trainer applies to a job's configuration alone (trainer/hyper.py, models.py, data.py,
sources.py, distributed.py, export.py) is checked by SubmitJobRequest with the error located at the
field; the hyperparameter rules are the very same model on both sides (schemas/hyperparameters.py).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError
from trainer.failures import UserError
from trainer.hyper import Hyper

from schemas.hyperparameters import Hyperparameters
from schemas.job import SubmitJobRequest
from schemas.model_architectures import ARCHITECTURES_FILE, model_type_of
from tests.helpers.jobs import request_body


def errors_of(body: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(ValidationError) as caught:
        SubmitJobRequest.model_validate(body)
    return [(".".join(str(p) for p in e["loc"]), e["msg"]) for e in caught.value.errors()]


def with_hyperparameters(values: dict[str, str], training_type: str = "LORA") -> dict[str, Any]:
    body = request_body()
    body["training_config"].update(hyperparameters=values, training_type=training_type)
    return body


# --- hyperparameters: the trainer's model, at submit -------------------------------------------------


@pytest.mark.parametrize(
    ("values", "field", "fragment"),
    [
        ({"learning_rat": "1e-3"}, "training_config.hyperparameters.learning_rat", "unknown hyperparameter (known: "),
        ({"max_steps": "ten"}, "training_config.hyperparameters.max_steps", "valid integer"),
        ({"learning_rate": "-1"}, "training_config.hyperparameters.learning_rate", "greater than 0"),
        ({"learning_rate": "inf"}, "training_config.hyperparameters.learning_rate", "finite number"),
        ({"lr_scheduler_type": "exponential"}, "training_config.hyperparameters.lr_scheduler_type", "'linear'"),
        ({"packing": "maybe"}, "training_config.hyperparameters.packing", "expected true or false"),
        ({"lora_dropout": "1.5"}, "training_config.hyperparameters.lora_dropout", "less than 1"),
        ({"seed": str(2**32)}, "training_config.hyperparameters.seed", "less than or equal to 4294967295"),
        ({"optimizer": "lion"}, "training_config.hyperparameters.optimizer", "'adamw_torch'"),
        ({"optim": "adamw_8bit"}, "training_config.hyperparameters.optim", "'adafactor'"),
        ({"optim": "sgd", "optimizer": "AdamW"}, "training_config.hyperparameters.optim", "disagree"),
        ({"lr_scheduler_type": "reduce_lr_on_plateau"}, "training_config.hyperparameters.lr_scheduler_type", "'cosine_with_restarts'"),
        ({"warmup_ratio": "1.5"}, "training_config.hyperparameters.warmup_ratio", "less than 1"),
        ({"warmup_ratio": "0.1", "warmup_steps": "3"}, "training_config.hyperparameters.warmup_ratio", "not both"),
        ({"torch_compile": "true"}, "training_config.hyperparameters.torch_compile", "not supported yet"),
        ({"bf16": "true", "fp16": "true"}, "training_config.hyperparameters.fp16", "choose one"),
        ({"neftune_noise_alpha": "0"}, "training_config.hyperparameters.neftune_noise_alpha", "greater than 0"),
        ({"label_smoothing_factor": "1"}, "training_config.hyperparameters.label_smoothing_factor", "less than 1"),
        ({"adam_beta2": "1"}, "training_config.hyperparameters.adam_beta2", "less than 1"),
        ({"adam_epsilon": "0"}, "training_config.hyperparameters.adam_epsilon", "greater than 0"),
        ({"logging_strategy": "often"}, "training_config.hyperparameters.logging_strategy", "'epoch'"),
        ({"eval_strategy": "no", "eval_steps": "5"}, "training_config.hyperparameters.eval_steps", "eval_strategy is no"),
        ({"eval_strategy": "steps", "evaluation_strategy": "epoch"}, "training_config.hyperparameters.evaluation_strategy", "disagree"),
        ({"save_strategy": "no"}, "training_config.hyperparameters.save_strategy", "'epoch'"),
    ],
)
def test_an_unknown_or_invalid_hyperparameter_is_refused_naming_it(values: dict[str, str], field: str, fragment: str) -> None:
    # Given a job with one bad hyperparameter
    errors = errors_of(with_hyperparameters(values))
    # Then submit refuses it at the key, saying why, as the trainer would
    assert {f for f, _ in errors} == {field} and any(fragment in m for _, m in errors), errors
    with pytest.raises(UserError):
        Hyper.from_strings(values, "LORA")


def test_the_trainer_arguments_users_type_are_accepted() -> None:
    # transformers TrainingArguments names, and the dashboard's optimizer choices (issue 17 point 2)
    for optimizer in ("AdamW", "Adam", "SGD", "adamw"):
        SubmitJobRequest.model_validate(with_hyperparameters({"optimizer": optimizer}))
    values = {
        "optim": "adamw_torch_fused",
        "warmup_ratio": "0.1",
        "lr_scheduler_type": "cosine_with_restarts",
        "gradient_checkpointing": "true",
        "torch_compile": "false",
        "neftune_noise_alpha": "5",
        "label_smoothing_factor": "0.1",
        "adam_beta1": "0.8",
        "adam_beta2": "0.95",
        "adam_epsilon": "1e-6",
        "per_device_train_batch_size": "2",  # the same as data_config.batch_size: no conflict
        "gradient_accumulation_steps": "4",
        "eval_strategy": "epoch",
        "save_strategy": "steps",
        "save_steps": "50",
        "logging_strategy": "steps",
        "logging_steps": "5",
    }
    SubmitJobRequest.model_validate(with_hyperparameters(values, "SFT"))


@pytest.mark.parametrize("name", ["bf16", "fp16"])
def test_mixed_precision_needs_a_gpu_job(name: str) -> None:
    assert errors_of(with_hyperparameters({name: "true"})) == [
        (
            f"training_config.hyperparameters.{name}",
            f"{name}=true needs a GPU (mixed precision is CUDA-only here): set resource_config.gpu_count >= 1",
        )
    ]
    SubmitJobRequest.model_validate({**with_hyperparameters({name: "true"}), "resource_config": {"gpu_count": 1}})


@pytest.mark.parametrize(
    ("name", "value", "where", "config"),
    [
        ("per_device_train_batch_size", "4", "data_config.batch_size=2", {}),
        (
            "gradient_accumulation_steps",
            "4",
            "data_config.gradient_accumulation_steps=2",
            {"data_config": {"gradient_accumulation_steps": 2}},
        ),
        ("save_steps", "10", "output_config.checkpoint.save_steps=20", {"output_config": {"checkpoint": {"save_steps": 20}}}),
        (
            "save_strategy",
            "epoch",
            "output_config.checkpoint.save_strategy=steps",
            {"output_config": {"checkpoint": {"save_strategy": "steps"}}},
        ),
    ],
)
def test_an_alias_that_disagrees_with_its_config_field_is_refused_naming_it(
    name: str, value: str, where: str, config: dict[str, Any]
) -> None:
    body = with_hyperparameters({name: value})
    for key, fields in config.items():
        body[key] = {**body.get(key, {}), **fields}
    errors = errors_of(body)
    assert errors == [(f"training_config.hyperparameters.{name}", f"{name}={value} conflicts with {where}: give one")]
    # without the config field set, the alias is the setting
    if config:
        SubmitJobRequest.model_validate(with_hyperparameters({name: value}))


def test_label_smoothing_is_refused_for_dpo() -> None:
    (field, message), *_ = errors_of(with_hyperparameters({"label_smoothing_factor": "0.1"}, "DPO"))
    assert field == "training_config.hyperparameters.label_smoothing_factor" and "not to DPO" in message


def test_every_bad_key_is_named_at_once() -> None:
    fields = {f for f, _ in errors_of(with_hyperparameters({"epochs": "2", "max_steps": "x", "warmup_steps": "1.5"}))}
    assert fields == {f"training_config.hyperparameters.{k}" for k in ("epochs", "max_steps", "warmup_steps")}


def test_packing_is_refused_for_dpo_only() -> None:
    assert errors_of(with_hyperparameters({"packing": "true"}, "DPO")) == [
        ("training_config.hyperparameters.packing", "packing=true is not supported for DPO (each preference pair is its own example)")
    ]
    SubmitJobRequest.model_validate(with_hyperparameters({"packing": "true"}, "SFT"))


@pytest.mark.parametrize(
    "values",
    [
        {},
        {"max_steps": "4", "learning_rate": "1e-3", "lora_target_modules": "q_proj, v_proj", "packing": "FALSE", "seed": "4294967295"},
        {"learning_rat": "1"},
        {"max_steps": "0"},
        {"gradient_checkpointing": "yes", "async_checkpoint": "off", "eval_steps": "3", "lr_scheduler_type": "cosine"},
        {"num_train_epochs": "nan"},
    ],
)
def test_submit_and_the_trainer_agree(values: dict[str, str]) -> None:
    # The same rules on both sides: submit accepts exactly what the trainer accepts
    try:
        Hyper.from_strings(values, "SFT")
        trainer_accepts = True
    except UserError:
        trainer_accepts = False
    try:
        SubmitJobRequest.model_validate(with_hyperparameters(values, "SFT"))
        submit_accepts = True
    except ValidationError:
        submit_accepts = False
    assert submit_accepts == trainer_accepts
    assert issubclass(Hyper, Hyperparameters)


# --- base_model.model_kwargs.architecture ----------------------------------------------------------


@pytest.mark.parametrize(
    ("architecture", "model_type"), [("llama", "llama"), ("LlamaForCausalLM", "llama"), ("gpt2", "gpt2"), ("GPT2LMHeadModel", "gpt2")]
)
def test_the_architecture_is_a_model_type_or_the_class_name(architecture: str, model_type: str) -> None:
    body = request_body()
    body["training_config"]["base_model"]["model_kwargs"]["architecture"] = architecture
    SubmitJobRequest.model_validate(body)
    assert model_type_of(architecture) == model_type


@pytest.mark.parametrize("architecture", ["Llama", "LlamaModel", "t5", "T5ForConditionalGeneration", "no-such-arch", 3])
def test_an_architecture_transformers_cannot_build_as_a_causal_lm_is_refused(architecture: object) -> None:
    body = request_body()
    body["training_config"]["base_model"]["model_kwargs"]["architecture"] = architecture
    [(field, message)] = errors_of(body)
    assert field == "training_config.base_model.model_kwargs.architecture" and "is not a causal language model" in message


def test_the_architecture_list_is_the_installed_transformers() -> None:
    # Given the committed list (the API Lambda cannot import transformers to check it)
    from scripts.gen_model_architectures import architectures

    # Then it is exactly what the installed transformers builds (run scripts/gen_model_architectures.py when not)
    assert json.loads(ARCHITECTURES_FILE.read_text()) == architectures()


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [({"vocab_size": 100}, "does not cover the byte tokenizer's 259 tokens"), ({"vocab_size": "x"}, "positive integer")],
)
def test_a_vocab_size_the_byte_tokenizer_does_not_fit_is_refused(kwargs: dict[str, Any], fragment: str) -> None:
    body = request_body()
    body["training_config"]["base_model"]["model_kwargs"].update(kwargs)
    [(field, message)] = errors_of(body)
    assert field == "training_config.base_model.model_kwargs.vocab_size" and fragment in message


# --- the rest of the trainer's configuration-only refusals ------------------------------------------


@pytest.mark.parametrize(
    ("change", "field", "fragment"),
    [
        # trainer/data.py: no training split
        (
            lambda b: b["data_config"].update(sources=[{"path": "s3://b/v.jsonl", "split": "validation"}]),
            "data_config.sources",
            "no source with split 'train'",
        ),
        # trainer/sources.py: an s3 URI without a bucket
        (lambda b: b["data_config"].update(sources=[{"path": "s3:///train.jsonl"}]), "data_config.sources.0.path", "has no bucket"),
        (lambda b: b["data_config"].update(sources=[{"path": "s3:/bucket/train.jsonl"}]), "data_config.sources.0.path", "not an s3:// URI"),
        # trainer/models.py: source s3 but not an s3 URI; a tokenizer URI without a bucket
        (
            lambda b: b["training_config"].update(base_model={"model_id": "org/model", "source": "s3"}),
            "training_config.base_model.model_id",
            "not an s3:// URI",
        ),
        (
            lambda b: b["training_config"]["base_model"].update(tokenizer_id="s3:///tok"),
            "training_config.base_model.tokenizer_id",
            "has no bucket",
        ),
        # trainer/distributed.py: world_size vs nodes and GPUs; QLoRA with a sharding framework
        (
            lambda b: (
                b["resource_config"].update(node_count=2),
                b["training_config"].update(framework={"distributed": {"world_size": 3}}),
            ),
            "training_config.framework.distributed.world_size",
            "not a multiple of resource_config.node_count=2",
        ),
        (
            lambda b: (b["resource_config"].update(gpu_count=2), b["training_config"].update(framework={"distributed": {"world_size": 4}})),
            "training_config.framework.distributed.world_size",
            "needs 4 GPUs per node",
        ),
        (
            lambda b: (
                b["resource_config"].update(gpu_count=2),
                b["training_config"].update(training_type="QLORA", framework={"type": "FSDP", "distributed": {"world_size": 2}}),
            ),
            "training_config.framework.type",
            "QLORA with FSDP is not supported",
        ),
        # trainer/export.py: a hub push without a token
        (
            lambda b: b.update(output_config={"push_to_hub": True, "hub_repo_id": "org/model"}),
            "output_config.hub_token",
            "push_to_hub needs output_config.hub_token",
        ),
    ],
)
def test_configuration_the_trainer_refuses_is_refused_at_submit(change: Any, field: str, fragment: str) -> None:
    body = request_body()
    change(body)
    errors = errors_of(body)
    assert any(f == field and fragment in m for f, m in errors), errors


def test_a_hub_push_with_hf_token_in_the_environment_is_accepted() -> None:
    body = request_body(output_config={"push_to_hub": True, "hub_repo_id": "org/model"})
    body["training_config"]["environment"] = {"HF_TOKEN": "hf_x"}
    SubmitJobRequest.model_validate(body)
