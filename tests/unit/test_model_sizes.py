"""A job's model size from what is known at submit, and its bucket in the forecast's shape
(functions/catalog/model_sizes.py; docs/BUDGETS.md "Model size buckets")."""

from __future__ import annotations

from typing import Any

import pytest

from functions.catalog.model_sizes import UNKNOWN, config_parameters, model_parameters, model_size_bucket, size_bucket, stated_parameters
from functions.service import budget_meter as meter
from functions.service.forecast_learning import ForecastLearner
from schemas.configs import BaseModelSpec
from schemas.status import JobStatus
from tests.helpers.forecast import InMemoryShapeRecords, finished_job

TINY_LLAMA = {
    "architecture": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
}


def config_spec(**model_kwargs: Any) -> BaseModelSpec:
    return BaseModelSpec(model_id="tiny", source="config", tokenizer_id="byte", model_kwargs=model_kwargs)


@pytest.mark.parametrize(
    ("parameters", "bucket"),
    [
        (107_200, "<1M"),
        (1_000_000, "1M-3M"),
        (2_999_999, "1M-3M"),
        (124_439_808, "100M-300M"),
        (1_235_814_400, "1B-3B"),
        (6_738_415_616, "3B-10B"),
        (8_030_261_248, "3B-10B"),
        (13_015_864_320, "10B-30B"),
        (68_976_648_192, "30B-100B"),
        (405_853_388_800, ">=300B"),
        (None, UNKNOWN),
    ],
)
def test_parameter_counts_fall_in_half_decade_buckets(parameters: int | None, bucket: str) -> None:
    assert size_bucket(parameters) == bucket


@pytest.mark.parametrize(
    "model_kwargs",
    [
        TINY_LLAMA,
        {"architecture": "LlamaForCausalLM", "hidden_size": 96, "intermediate_size": 256, "num_hidden_layers": 3, "num_attention_heads": 6},
        {"architecture": "mistral", "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 8},
        {
            "architecture": "qwen2",
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
        },
        {"architecture": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4},
        {"architecture": "gpt2", "hidden_size": 96, "num_hidden_layers": 3, "n_head": 4, "vocab_size": 300},
    ],
)
def test_a_config_built_models_count_is_the_one_transformers_builds(model_kwargs: dict[str, Any]) -> None:
    from transformers import AutoConfig, AutoModelForCausalLM

    from schemas.model_architectures import model_type_of

    # Given: a model built from its config, as the trainer builds it (the byte tokenizer's vocabulary by default)
    kwargs = dict(model_kwargs)
    architecture = model_type_of(str(kwargs.pop("architecture")))
    assert architecture is not None
    kwargs.setdefault("vocab_size", 259)
    built = AutoModelForCausalLM.from_config(AutoConfig.for_model(architecture, **kwargs))
    # When / Then: the estimate without transformers is its exact parameter count
    assert config_parameters(config_spec(**model_kwargs)) == sum(p.numel() for p in built.parameters())


def test_a_config_models_defaults_are_its_architectures() -> None:
    # A llama with nothing but its architecture is transformers' default llama (6.5B with the byte vocabulary)
    assert model_size_bucket(config_spec(architecture="llama")) == "3B-10B"
    assert model_size_bucket(config_spec(**TINY_LLAMA)) == "<1M"


def test_what_cannot_be_counted_without_downloading_is_unknown() -> None:
    # An architecture without tabled defaults, or a Hub tokenizer whose vocabulary is unknown before download
    assert config_parameters(config_spec(architecture="falcon", hidden_size=64)) is None
    hub_tokenizer = BaseModelSpec(model_id="t", source="config", tokenizer_id="gpt2", model_kwargs=dict(TINY_LLAMA))
    assert model_size_bucket(hub_tokenizer) == UNKNOWN
    assert model_size_bucket(BaseModelSpec(model_id="acme/house-model")) == UNKNOWN
    assert model_size_bucket(BaseModelSpec(model_id="s3://bucket/models/final/")) == UNKNOWN


@pytest.mark.parametrize(
    ("model_id", "parameters"),
    [
        ("gpt2", 124_439_808),
        ("meta-llama/Llama-2-7b-chat-hf", 6_738_415_616),
        ("google/gemma-7b-it", 8_537_680_896),  # the catalog, not the name: 8.5B
        ("Qwen/Qwen2.5-0.5B-Instruct", 494_032_768),
        ("mistralai/Mixtral-8x7B-Instruct-v0.1", 46_702_792_704),
        ("facebook/opt-350m", 350_000_000),  # from its name
        ("s3://bucket/models/llama-13b/", 13_000_000_000),
        ("/data/models/acme-2.7b", 2_700_000_000),
        ("s3://bucket/llama-13b/checkpoint-final/", 13_000_000_000),  # a folder above states it
    ],
)
def test_a_known_id_or_a_stated_size_gives_the_count(model_id: str, parameters: int) -> None:
    assert model_parameters(BaseModelSpec(model_id=model_id)) == parameters


def test_a_stated_size_is_read_between_separators_only() -> None:
    assert stated_parameters("bigscience/bloom-560m") == 560_000_000
    assert stated_parameters("mixtral-8x22b") == 176_000_000_000
    assert stated_parameters("acme/v2b-model") is None  # "v2b" is no size
    assert stated_parameters("acme/model-final") is None


def test_a_7b_jobs_history_never_predicts_a_70b_job() -> None:
    # Given: ten finished 1 x H100 LoRA jobs of a 7B model at 0.5 s/step
    learner = ForecastLearner(InMemoryShapeRecords())
    for steps in range(100, 1100, 100):
        assert learner.record(finished_job(steps, steps * 0.5, model_id="meta-llama/Llama-2-7b-hf"))

    # When: a 70B job and another 7B job of the same GPU shape are forecast
    big = finished_job(1000, 0.0, model_id="meta-llama/Llama-2-70b-hf", status=JobStatus.PENDING)
    small = finished_job(1000, 0.0, model_id="meta-llama/Llama-2-7b-chat-hf", status=JobStatus.PENDING)

    # Then: the shapes differ by size only, the 70B job gets the prior and the 7B job the learned throughput
    assert meter.shape_of(big) == "H100x1/LORA/30B-100B" and meter.shape_of(small) == "H100x1/LORA/3B-10B"
    assert learner.forecast(big).basis == "prior"
    assert learner.forecast(small).seconds == pytest.approx(500.0)
