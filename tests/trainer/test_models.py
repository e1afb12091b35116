"""Loading models and tokenizers: every source, dtype, LoRA, QLoRA refusal, DPO reference, hub offline."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers
from pydantic import ValidationError
from tokenizers import Tokenizer, models, pre_tokenizers
from trainer import models as trainer_models
from trainer.data import collate
from trainer.failures import UserError
from trainer.hyper import Hyper
from trainer.models import LoadedModel, load_model_and_tokenizer
from trainer.tokenizer import BOS_ID, BYTE_VOCAB_SIZE, EOS_ID, PAD_ID, ByteTokenizer
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from schemas.configs import BaseModelSpec, TrainingConfig
from tests.trainer.conftest import TINY_GPT2, TINY_LLAMA

CPU = torch.device("cpu")
MakeTC = Callable[..., TrainingConfig]


def load(tc: TrainingConfig, **kwargs: Any) -> LoadedModel:
    return load_model_and_tokenizer(tc, Hyper.from_strings(tc.hyperparameters, tc.training_type), CPU, **kwargs)


def with_model(tc: TrainingConfig, **base_model: Any) -> TrainingConfig:
    """tc with base_model fields replaced (model_kwargs emptied unless given)."""
    fields = {"model_kwargs": {}, **base_model}
    return tc.model_copy(update={"base_model": BaseModelSpec(**{**tc.base_model.model_dump(), "source": None, **fields})})


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def adapted_modules(model: torch.nn.Module) -> set[str]:
    """Names of the modules that carry trainable LoRA weights (q_proj for ...q_proj.lora_A.default.weight)."""
    return {name.split(".lora_")[0].rsplit(".", 1)[-1] for name, p in model.named_parameters() if p.requires_grad}


def save_tiny(tc: TrainingConfig, directory: Path) -> LoadedModel:
    loaded = load(tc)
    loaded.model.save_pretrained(directory)
    loaded.tokenizer.save_pretrained(directory)
    return loaded


# --- byte tokenizer ------------------------------------------------------------------------------


def test_byte_tokenizer_maps_bytes_to_ids_and_round_trips(tmp_path: Path) -> None:
    # Given the byte tokenizer
    tokenizer = ByteTokenizer()
    # Then ids are the UTF-8 bytes, specials follow them, and decode inverts encode
    assert (tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id, len(tokenizer)) == (
        PAD_ID,
        BOS_ID,
        EOS_ID,
        BYTE_VOCAB_SIZE,
    )
    text = "héllo, wörld ✓"
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert ids == list(text.encode("utf-8"))
    assert tokenizer.decode(ids) == text
    # When saved, Then plain AutoTokenizer (no trainplane code) and ByteTokenizer both load it back
    tokenizer.save_pretrained(tmp_path)
    for reloaded in (AutoTokenizer.from_pretrained(tmp_path), ByteTokenizer.from_pretrained(tmp_path)):
        assert reloaded.encode(text, add_special_tokens=False) == ids
        assert (reloaded.pad_token_id, reloaded.eos_token_id) == (PAD_ID, EOS_ID)
        assert reloaded.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False) == "<|user|>\nhi</s>"


# --- source "config" -----------------------------------------------------------------------------


def test_a_llama_from_config_covers_the_tokenizer_and_trains(make_training_config: MakeTC) -> None:
    # Given the tiny llama config (no vocab_size given)
    loaded = load(make_training_config())
    # Then it is a random llama sized to the byte tokenizer, all trainable, no adapter or reference
    assert type(loaded.model).__name__ == "LlamaForCausalLM"
    assert loaded.model.config.vocab_size == BYTE_VOCAB_SIZE
    assert (loaded.model.config.hidden_size, loaded.model.config.num_hidden_layers) == (32, 2)
    assert isinstance(loaded.tokenizer, ByteTokenizer)
    assert loaded.model.config.pad_token_id == PAD_ID
    assert all(p.requires_grad for p in loaded.model.parameters())
    assert (loaded.is_adapter, loaded.reference_model) == (False, None)
    assert loaded.model.dtype == torch.float32
    # And a collated batch runs forward and backward
    batch = collate([{"input_ids": [BOS_ID, 104, 105], "labels": [-100, 104, 105]}], PAD_ID)
    loss = loaded.model(**batch).loss
    loss.backward()
    assert torch.isfinite(loss)


def test_a_gpt2_from_config(make_training_config: MakeTC) -> None:
    loaded = load(make_training_config(model_kwargs=TINY_GPT2))
    assert type(loaded.model).__name__ == "GPT2LMHeadModel"
    assert loaded.model.config.vocab_size == BYTE_VOCAB_SIZE


def test_initialisation_is_seeded_and_leaves_the_global_rng_alone(make_training_config: MakeTC) -> None:
    # Given the global RNG in some state
    torch.manual_seed(1234)
    state = torch.get_rng_state()
    # When the same config is built twice with one seed and once with another
    first, again = load(make_training_config(), seed=7).model, load(make_training_config(), seed=7).model
    other = load(make_training_config(), seed=8).model
    # Then the same seed gives the same weights, another seed other weights
    assert same_weights(first, again)
    assert not same_weights(first, other)
    # And the caller's RNG state is untouched
    assert torch.equal(torch.get_rng_state(), state)
    # And hyper.seed is the default seed
    assert same_weights(load(make_training_config(hyperparameters={"seed": "7"})).model, first)


def unchecked(tc: TrainingConfig, **model_kwargs: Any) -> TrainingConfig:
    """tc with model_kwargs the schema (and so submit) would refuse: what the trainer does with a spec that skipped submit."""
    spec = BaseModelSpec.model_construct(**{**tc.base_model.model_dump(), "model_kwargs": {**tc.base_model.model_kwargs, **model_kwargs}})
    return tc.model_copy(update={"base_model": spec})


def test_vocab_size_smaller_than_the_tokenizer_is_refused(make_training_config: MakeTC) -> None:
    # Submit refuses it (schemas/configs.py); a spec that skipped submit is refused by the trainer too
    with pytest.raises(ValidationError, match="100 does not cover the byte tokenizer's 259 tokens"):
        make_training_config(model_kwargs={**TINY_LLAMA, "vocab_size": 100})
    with pytest.raises(UserError, match=r"model_kwargs\.vocab_size=100 does not cover the tokenizer's 259 tokens"):
        load(unchecked(make_training_config(), vocab_size=100))
    # A larger one is kept as given
    assert load(make_training_config(model_kwargs={**TINY_LLAMA, "vocab_size": 320})).model.config.vocab_size == 320


def test_an_unknown_architecture_is_a_clear_error(make_training_config: MakeTC) -> None:
    with pytest.raises(ValidationError, match="'no-such-arch' is not a causal language model of transformers"):
        make_training_config(model_kwargs={**TINY_LLAMA, "architecture": "no-such-arch"})
    with pytest.raises(UserError, match="architecture 'no-such-arch' is not a transformers model type"):
        load(unchecked(make_training_config(), architecture="no-such-arch"))


@pytest.mark.parametrize(("architecture", "built"), [("LlamaForCausalLM", "LlamaForCausalLM"), ("GPT2LMHeadModel", "GPT2LMHeadModel")])
def test_the_architecture_may_be_the_class_name_a_config_json_lists(make_training_config: MakeTC, architecture: str, built: str) -> None:
    kwargs = TINY_GPT2 if architecture.startswith("GPT2") else TINY_LLAMA
    loaded = load(make_training_config(model_kwargs={**kwargs, "architecture": architecture}))
    assert type(loaded.model).__name__ == built


def test_dtype_is_honoured(make_training_config: MakeTC) -> None:
    # Given bfloat16 requested, and auto on a CPU
    tc = make_training_config()
    bf16 = tc.model_copy(update={"base_model": tc.base_model.model_copy(update={"dtype": "bfloat16"})})
    auto = tc.model_copy(update={"base_model": tc.base_model.model_copy(update={"dtype": "auto"})})
    # Then the model has that dtype, and auto is float32 on a CPU
    assert load(bf16).model.dtype == torch.bfloat16
    assert load(auto).model.dtype == torch.float32


@pytest.mark.parametrize("training_type", ["FULL_FINETUNE", "LORA"])
def test_gradient_checkpointing_hyperparameter_switches_it_on(make_training_config: MakeTC, training_type: str) -> None:
    # Given gradient_checkpointing=true
    loaded = load(make_training_config(training_type, hyperparameters={"gradient_checkpointing": "true"}))
    model = loaded.model.get_base_model() if loaded.is_adapter else loaded.model
    # Then the model checkpoints activations
    assert model.is_activation_checkpointing
    # And the trainable weights still get gradients through the checkpointed blocks
    loaded.model.train()
    batch = collate([{"input_ids": [BOS_ID, 104, 105, 106], "labels": [-100, 104, 105, 106]}], PAD_ID)
    loaded.model(**batch).loss.backward()
    trainable = [p for p in loaded.model.parameters() if p.requires_grad]
    assert trainable and all(p.grad is not None for p in trainable)
    assert sum(float(p.grad.abs().sum()) for p in trainable) > 0


# --- LoRA, QLoRA, DPO ----------------------------------------------------------------------------


def test_lora_trains_only_the_adapter_on_the_default_targets(make_training_config: MakeTC) -> None:
    # Given a LORA job with rank 4
    loaded = load(make_training_config("LORA", hyperparameters={"lora_rank": "4", "lora_alpha": "8"}))
    # Then the model carries an adapter and only its parameters train
    trainable = [name for name, p in loaded.model.named_parameters() if p.requires_grad]
    assert loaded.is_adapter
    assert trainable
    assert all("lora_" in name for name in trainable)
    # And llama's default targets (q_proj, v_proj) got rank-4 adapters
    assert adapted_modules(loaded.model) == {"q_proj", "v_proj"}
    assert loaded.model.base_model.model.model.layers[0].self_attn.q_proj.lora_A["default"].weight.shape[0] == 4
    assert loaded.model.peft_config["default"].lora_alpha == 8


def test_lora_target_modules_from_hyperparameters(make_training_config: MakeTC) -> None:
    # Given explicit targets
    loaded = load(make_training_config("LORA", hyperparameters={"lora_target_modules": "gate_proj,down_proj"}))
    assert adapted_modules(loaded.model) == {"gate_proj", "down_proj"}
    # And targets the model does not have are refused naming the hyperparameter
    with pytest.raises(UserError, match="lora_target_modules=nope"):
        load(make_training_config("LORA", hyperparameters={"lora_target_modules": "nope"}))


def test_lora_on_gpt2_uses_its_own_default_targets(make_training_config: MakeTC) -> None:
    loaded = load(make_training_config("LORA", model_kwargs=TINY_GPT2))
    assert adapted_modules(loaded.model) == {"c_attn"}


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_qlora_is_refused_without_cuda_before_anything_is_loaded(
    make_training_config: MakeTC, monkeypatch: pytest.MonkeyPatch, device: str
) -> None:
    if torch.cuda.is_available():
        pytest.skip("this host has CUDA; the refusal is for CPU-only hosts")

    # Given a QLORA job whose model would come from S3, with every loading path booby-trapped
    def must_not_run(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("QLORA loaded something before checking for CUDA")

    monkeypatch.setattr(trainer_models, "download_s3", must_not_run)
    monkeypatch.setattr(trainer_models, "load_tokenizer", must_not_run)
    tc = with_model(make_training_config("QLORA"), model_id="s3://bucket/models/big")
    # When loaded on a CPU (or with a cuda device on a host with no CUDA)
    with pytest.raises(UserError, match="QLORA needs a CUDA GPU") as info:
        load_model_and_tokenizer(tc, Hyper.from_strings({}, "QLORA"), torch.device(device))
    # Then the message says what to do instead
    assert "LORA on a CPU" in str(info.value)


def test_dpo_gets_a_frozen_copy_as_reference(make_training_config: MakeTC) -> None:
    loaded = load(make_training_config("DPO"))
    reference = loaded.reference_model
    assert reference is not None and reference is not loaded.model
    assert same_weights(reference, loaded.model)
    assert not any(p.requires_grad for p in reference.parameters())
    assert all(p.requires_grad for p in loaded.model.parameters())
    assert not reference.training


def test_lora_dpo_uses_the_disabled_adapter_as_reference(make_training_config: MakeTC) -> None:
    # Given a DPO job that sets a lora_* hyperparameter
    loaded = load(make_training_config("DPO", hyperparameters={"lora_rank": "4"}))
    # Then the policy is an adapter model and there is no separate reference (disable_adapter() is it)
    assert loaded.is_adapter
    assert loaded.reference_model is None
    ids = torch.tensor([[BOS_ID, 1, 2, 3]])
    with loaded.model.disable_adapter():
        assert loaded.model(input_ids=ids).logits.shape == (1, 4, BYTE_VOCAB_SIZE)


# --- sources "local", "s3", "hub" ----------------------------------------------------------------


def test_a_local_directory_loads_model_and_its_byte_tokenizer(make_training_config: MakeTC, tmp_path: Path) -> None:
    # Given a tiny model and its byte tokenizer saved to a directory
    saved = save_tiny(make_training_config(), tmp_path / "tiny")
    # When loaded from the path (source inferred) and from a file:// URI, with no tokenizer_id
    for model_id in (str(tmp_path / "tiny"), f"file://{tmp_path / 'tiny'}"):
        loaded = load(with_model(make_training_config(), model_id=model_id, tokenizer_id=None, source="local"))
        # Then the weights are the saved ones and the tokenizer is the byte tokenizer again
        assert same_weights(loaded.model, saved.model)
        assert isinstance(loaded.tokenizer, ByteTokenizer)


def test_local_directory_errors_are_clear(make_training_config: MakeTC, tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no such directory"):
        load(with_model(make_training_config(), model_id=str(tmp_path / "missing")))
    (tmp_path / "not-a-model").mkdir()
    with pytest.raises(UserError, match=r"no config\.json"):
        load(with_model(make_training_config(), model_id=str(tmp_path / "not-a-model")))


def test_dtype_and_trust_remote_code_reach_from_pretrained(
    make_training_config: MakeTC, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a saved model and a spy on from_pretrained
    save_tiny(make_training_config(), tmp_path / "tiny")
    seen: dict[str, Any] = {}
    original = transformers.AutoModelForCausalLM.from_pretrained

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.update(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", spy)
    # When loaded with bfloat16 and trust_remote_code
    loaded = load(with_model(make_training_config(), model_id=str(tmp_path / "tiny"), dtype="bfloat16", trust_remote_code=True))
    # Then both were passed on
    assert seen["dtype"] == torch.bfloat16
    assert seen["trust_remote_code"] is True
    assert loaded.model.dtype == torch.bfloat16


def test_an_s3_prefix_is_downloaded_and_loaded(make_training_config: MakeTC, tmp_path: Path, s3_bucket: tuple[Any, str]) -> None:
    # Given a tiny model uploaded under an S3 prefix
    client, bucket = s3_bucket
    saved = save_tiny(make_training_config(), tmp_path / "tiny")
    for file in (tmp_path / "tiny").iterdir():
        client.upload_file(str(file), bucket, f"models/tiny/{file.name}")
    # When loaded from the prefix (source inferred from s3://)
    loaded = load(with_model(make_training_config(), model_id=f"s3://{bucket}/models/tiny", tokenizer_id=None))
    # Then the weights and tokenizer are the saved ones
    assert same_weights(loaded.model, saved.model)
    assert isinstance(loaded.tokenizer, ByteTokenizer)
    # And a prefix with nothing under it is a clear error
    with pytest.raises(UserError, match="nothing found at s3://"):
        load(with_model(make_training_config(), model_id=f"s3://{bucket}/models/none"))


def test_a_pretrained_model_smaller_than_the_tokenizer_is_resized(make_training_config: MakeTC, tmp_path: Path) -> None:
    # Given a saved model with 100 embeddings, loaded with the 259-token byte tokenizer
    kwargs = {**TINY_LLAMA, "vocab_size": 100}
    model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(kwargs.pop("architecture"), **kwargs))
    model.save_pretrained(tmp_path / "small")
    loaded = load(with_model(make_training_config(), model_id=str(tmp_path / "small"), tokenizer_id="byte"))
    # Then its embeddings cover the tokenizer
    assert loaded.model.get_input_embeddings().num_embeddings == BYTE_VOCAB_SIZE


def test_a_tokenizer_without_pad_pads_with_eos(make_training_config: MakeTC, tmp_path: Path) -> None:
    # Given a saved tokenizer that has an EOS token and no PAD token
    backend = Tokenizer(models.WordLevel({"a": 0, "b": 1, "[UNK]": 2}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="b").save_pretrained(tmp_path / "tok")
    # When a job names it as tokenizer_id
    tc = with_model(make_training_config(), model_id="tiny", source="config", tokenizer_id=str(tmp_path / "tok"), model_kwargs=TINY_LLAMA)
    loaded = load(tc)
    # Then padding uses EOS
    assert loaded.tokenizer.pad_token_id == loaded.tokenizer.eos_token_id == 1


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("offline_how", ["HF_HUB_OFFLINE", "unreachable"])
def test_a_hub_model_without_network_is_a_clear_error(
    make_training_config: MakeTC, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, offline_how: str
) -> None:
    # Given an empty hub cache and a hub that is switched off or cannot be reached
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    if offline_how == "HF_HUB_OFFLINE":
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    else:
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    tc = with_model(make_training_config("SFT"), model_id="some-org/some-model", source="hub", tokenizer_id=None)
    # When the model is loaded, Then it fails at once, saying why and what to use instead
    with pytest.raises(UserError, match="not reachable from this host") as info:
        load(tc)
    assert "some-org/some-model" in str(info.value)
    assert "'local' or 's3'" in str(info.value)
    if offline_how == "HF_HUB_OFFLINE":
        assert "HF_HUB_OFFLINE is set" in str(info.value)


def test_a_cached_hub_model_is_used_when_the_hub_is_offline(
    make_training_config: MakeTC, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given two revisions of a model in the Hugging Face cache layout (main and v1), and the hub switched off
    repo = tmp_path / "hub" / "models--some-org--tiny"
    saved = {}
    for ref, commit, seed in (("main", "0" * 40, "1"), ("v1", "1" * 40, "2")):
        saved[ref] = save_tiny(make_training_config(hyperparameters={"seed": seed}), repo / "snapshots" / commit)
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / ref).write_text(commit)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # When the hub id is loaded without and with a revision
    default = load(with_model(make_training_config(), model_id="some-org/tiny", source="hub", tokenizer_id=None))
    pinned = load(with_model(make_training_config(), model_id="some-org/tiny", source="hub", tokenizer_id=None, revision="v1"))
    # Then each gets its cached snapshot, tokenizer included
    assert same_weights(default.model, saved["main"].model)
    assert same_weights(pinned.model, saved["v1"].model)
    assert not same_weights(pinned.model, default.model)
    assert default.tokenizer.encode("hi", add_special_tokens=False) == [104, 105]


@pytest.mark.gpu
def test_qlora_loads_a_4bit_base_with_an_adapter_on_a_gpu(make_training_config: MakeTC) -> None:
    # (tests/conftest.py skips it without CUDA, and refuses `-m gpu` there; `make test-gpu` installs bitsandbytes)
    import bitsandbytes  # noqa: F401

    # Given a QLORA job on a CUDA device
    loaded = load_model_and_tokenizer(make_training_config("QLORA"), Hyper.from_strings({}, "QLORA"), torch.device("cuda"))
    # Then the base is 4-bit and only the adapter trains
    assert loaded.is_adapter
    assert any(type(m).__name__ == "Linear4bit" for m in loaded.model.modules())
    assert all("lora_" in name for name, p in loaded.model.named_parameters() if p.requires_grad)
