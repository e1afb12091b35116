"""Shared fixtures for the trainer tests (both trainer engineers use them).

Everything is tiny and offline: models are built from a config (source "config"), the tokenizer is the
built-in byte tokenizer, and datasets are a few dozen deterministic JSONL records written to tmp_path.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from trainer.sources import ENV_CACHE_DIR, reset_s3_client
from trainer.tokenizer import ByteTokenizer

from schemas.configs import BaseModelSpec, DataConfig, DataSource, DType, ModelSource, TrainingConfig, TrainingType

# Small enough that a forward/backward pass takes milliseconds on a CPU core. vocab_size is left out on
# purpose: the loader sets it to cover the tokenizer (259 for the byte tokenizer).
TINY_LLAMA: dict[str, Any] = {
    "architecture": "llama",
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 512,
}
TINY_GPT2: dict[str, Any] = {"architecture": "gpt2", "n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 512}

# Which dataset shape each training type reads (see trainer/formatting.py).
DATASET_KIND: dict[TrainingType, str] = {
    TrainingType.CONTINUED_PRETRAIN: "text",
    TrainingType.FULL_FINETUNE: "text",
    TrainingType.SFT: "prompt_completion",
    TrainingType.LORA: "prompt_completion",
    TrainingType.QLORA: "prompt_completion",
    TrainingType.DPO: "dpo",
}
DATASET_KINDS = ("text", "prompt_completion", "chat", "dpo")


def make_records(kind: str, n: int) -> list[dict[str, Any]]:
    """n deterministic records of one shape; simple arithmetic so a tiny model's loss visibly falls."""
    records: list[dict[str, Any]] = []
    for i in range(n):
        a, b = i % 7, i % 5
        if kind == "text":
            records.append({"id": i, "text": f"record {i}: {a} plus {b} is {a + b}. the quick brown fox jumps over the lazy dog."})
        elif kind == "prompt_completion":
            records.append({"id": i, "prompt": f"Q: what is {a} plus {b}?\nA:", "completion": f" {a + b}"})
        elif kind == "chat":
            messages = [{"role": "system", "content": "You add numbers."}, {"role": "user", "content": f"{a}+{b}?"}]
            messages.append({"role": "assistant", "content": f"{a + b}"})
            if i % 2:
                messages += [{"role": "user", "content": f"and {a}+{a}?"}, {"role": "assistant", "content": f"{a + a}"}]
            records.append({"id": i, "messages": messages})
        elif kind == "dpo":
            records.append({"id": i, "prompt": f"{a}+{b}=", "chosen": f"{a + b}", "rejected": "I do not know."})
        else:
            raise ValueError(f"unknown dataset kind {kind!r}; one of {DATASET_KINDS}")
    return records


def write_jsonl(path: Path, records: list[dict[str, Any]], *, gz: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(record) + "\n" for record in records)
    if gz:
        path.write_bytes(gzip.compress(text.encode("utf-8"), mtime=0))
    else:
        path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def tiny_model_kwargs() -> dict[str, Any]:
    return dict(TINY_LLAMA)


@pytest.fixture
def make_training_config() -> Callable[..., TrainingConfig]:
    """make_training_config(training_type="FULL_FINETUNE", hyperparameters=None, model_kwargs=TINY_LLAMA) -> TrainingConfig."""

    def make(
        training_type: TrainingType | str = TrainingType.FULL_FINETUNE,
        hyperparameters: dict[str, str] | None = None,
        model_kwargs: dict[str, Any] | None = None,
        **training_fields: Any,
    ) -> TrainingConfig:
        kwargs = dict(TINY_LLAMA if model_kwargs is None else model_kwargs)
        return TrainingConfig(
            training_type=TrainingType(training_type),
            base_model=BaseModelSpec(
                model_id=f"tiny-{kwargs['architecture']}",
                source=ModelSource.CONFIG,
                tokenizer_id="byte",
                dtype=DType.FLOAT32,
                model_kwargs=kwargs,
            ),
            hyperparameters=dict(hyperparameters or {}),
            **training_fields,
        )

    return make


@pytest.fixture
def tiny_training_config(make_training_config: Callable[..., TrainingConfig]) -> TrainingConfig:
    return make_training_config()


@pytest.fixture
def byte_tokenizer() -> ByteTokenizer:
    return ByteTokenizer()


@pytest.fixture
def make_dataset(tmp_path: Path) -> Callable[..., Path]:
    """make_dataset(kind_or_training_type, n=32, name=None, gz=False) -> path of a JSONL file under tmp_path/data."""

    def make(kind: str | TrainingType, n: int = 32, *, name: str | None = None, gz: bool = False) -> Path:
        shape = DATASET_KIND[TrainingType(kind)] if kind in TrainingType.__members__ else str(kind)
        filename = name or f"{shape}.jsonl{'.gz' if gz else ''}"
        return write_jsonl(tmp_path / "data" / filename, make_records(shape, n), gz=gz)

    return make


@pytest.fixture
def make_data_config() -> Callable[..., DataConfig]:
    """make_data_config(*paths, **DataConfig fields) with small defaults (max_seq_length 64, batch_size 4)."""

    def make(*paths: str | Path, **fields: Any) -> DataConfig:
        fields.setdefault("max_seq_length", 64)
        fields.setdefault("batch_size", 4)
        if "sources" not in fields:
            fields["sources"] = [DataSource(path=str(path)) for path in paths]
        return DataConfig(**fields)

    return make


@pytest.fixture
def s3_bucket(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[tuple[Any, str]]:
    """A moto S3 bucket: yields (boto3 s3 client, bucket name). No real AWS is reachable from it.

    Downloads from S3 land in tmp_path/cache, and the trainer's cached S3 client is dropped before and
    after, so each test talks to its own moto backend.
    """
    import boto3
    from moto import mock_aws

    # An endpoint override in the developer's shell would send our clients past moto.
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setenv(ENV_CACHE_DIR, str(tmp_path / "cache"))
    reset_s3_client()
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="trainplane-test")
        yield client, "trainplane-test"
    reset_s3_client()
