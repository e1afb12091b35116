"""The model and tokenizer a job trains, from its training_config.base_model.

Sources (BaseModelSpec.resolved_source()):
- "config": a randomly initialised model from model_kwargs (architecture + config fields), seeded;
- "local": a Hugging Face model directory (model_id is its path, optionally file://);
- "s3": a model directory under an s3:// prefix, downloaded to the local cache first;
- "hub": from_pretrained(model_id, revision). The hub is probed with a short timeout first, so a host
  without network fails in seconds with a clear message instead of hanging in retries.

Training types change what is loaded: LORA and QLORA wrap the model with a peft LoRA adapter (QLORA
on a 4-bit base, which needs a CUDA GPU and is refused before anything is loaded otherwise); DPO adds a
frozen reference model.
"""

from __future__ import annotations

import copy
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from schemas.configs import BaseModelSpec, DType, ModelSource, TrainingConfig, TrainingType
from schemas.model_architectures import model_type_of
from trainer.failures import UserError
from trainer.hyper import Hyper
from trainer.sources import download_s3, is_s3_uri
from trainer.tokenizer import BYTE_TOKENIZER_ID, ByteTokenizer, is_saved_byte_tokenizer

logger = logging.getLogger(__name__)

HUB_PROBE_TIMEOUT_SECONDS = 10.0
DEFAULT_SEED = 42  # DataConfig's default seed, so a job that sets no seed anywhere is still reproducible
_ADAPTER_TYPES = {TrainingType.LORA, TrainingType.QLORA}
_TRUTHY = {"1", "true", "yes", "on"}


@dataclass
class LoadedModel:
    """What the training loop trains.

    reference_model is the frozen reference policy for DPO. It is None for every other training type,
    and also for LoRA-DPO (a DPO job that sets any lora_* hyperparameter): there the reference is the
    same model with its adapter disabled (peft's `disable_adapter()`), which costs no extra memory.
    """

    model: nn.Module
    tokenizer: Any
    is_adapter: bool
    reference_model: nn.Module | None


def load_model_and_tokenizer(tc: TrainingConfig, hyper: Hyper, device: torch.device, *, seed: int | None = None) -> LoadedModel:
    """Load (or build) the model and tokenizer for `tc`, placed on `device`, ready to train.

    `seed` seeds random initialisation (source "config" and fresh LoRA weights); it defaults to
    hyper.seed, then DEFAULT_SEED. The caller's global RNG state is left as it was.
    """
    training_type = TrainingType(tc.training_type)
    spec = tc.base_model
    if training_type == TrainingType.QLORA:
        _require_qlora_support(device)  # before any download or allocation
    init_seed = seed if seed is not None else hyper.seed if hyper.seed is not None else DEFAULT_SEED
    source = spec.resolved_source()
    model_dir = _model_location(spec, source)
    tokenizer = load_tokenizer(spec, model_dir)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(init_seed)
        if source == ModelSource.CONFIG:
            model = _build_from_config(spec, tokenizer, training_type, device)
        else:
            assert model_dir is not None
            model = _load_pretrained(spec, model_dir, training_type, device)
        _cover_tokenizer(model, tokenizer)
        lora_dpo = training_type == TrainingType.DPO and any(key.startswith("lora_") for key in tc.hyperparameters)
        is_adapter = training_type in _ADAPTER_TYPES or lora_dpo
        if hyper.gradient_checkpointing:
            _enable_activation_checkpointing(model)
        reference = None
        if training_type == TrainingType.DPO and not lora_dpo:
            reference = _frozen_copy(model)
        if is_adapter:
            model = apply_lora(model, hyper, quantized=training_type == TrainingType.QLORA)
    logger.info(
        "loaded %s model %s (%s parameters, %s trainable) on %s",
        source.value,
        spec.model_id,
        f"{sum(p.numel() for p in model.parameters()):,}",
        f"{sum(p.numel() for p in model.parameters() if p.requires_grad):,}",
        device,
    )
    return LoadedModel(model=model, tokenizer=tokenizer, is_adapter=is_adapter, reference_model=reference)


# --- QLoRA ---------------------------------------------------------------------------------------


def _require_qlora_support(device: torch.device) -> None:
    if device.type != "cuda" or not torch.cuda.is_available():
        raise UserError(
            "QLORA needs a CUDA GPU: its 4-bit base model runs on bitsandbytes CUDA kernels, and this run has "
            f"device {device} (CUDA available: {torch.cuda.is_available()}). Use training_type LORA on a CPU, "
            "or give the job resource_config.gpu_count >= 1."
        )
    try:
        import bitsandbytes  # noqa: F401  (the GPU image pins it; only QLoRA needs it)
    except ImportError as exc:
        raise UserError("QLORA needs the bitsandbytes package, which is not installed in this trainer image") from exc


def _quantization_config() -> Any:
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16,
    )


# --- where the model is --------------------------------------------------------------------------


def _env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in _TRUTHY


def _hub_offline() -> bool:
    return _env_true("HF_HUB_OFFLINE") or _env_true("TRANSFORMERS_OFFLINE")


def _hub_cache_dir() -> str | None:
    # Read at call time (huggingface_hub fixes its default at import).
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    return os.path.join(os.environ["HF_HOME"], "hub") if os.environ.get("HF_HOME") else None


def probe_hub(repo_id: str, revision: str | None, what: str) -> str | None:
    """None when the hub answers for `repo_id`; otherwise why it cannot be reached.

    A missing repository, revision or a gated one is a UserError at once (no point retrying).
    """
    if _hub_offline():
        return "HF_HUB_OFFLINE is set"
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError

    # Read at call time, not huggingface_hub's import-time constant, so an endpoint set later is honoured.
    endpoint = os.environ.get("HF_ENDPOINT") or None
    try:
        HfApi(endpoint=endpoint).model_info(repo_id, revision=revision, timeout=HUB_PROBE_TIMEOUT_SECONDS)
    except GatedRepoError as exc:
        raise UserError(f"{what} {repo_id!r} is gated on the Hugging Face Hub: accept its licence and give the job an HF_TOKEN") from exc
    except RevisionNotFoundError as exc:
        raise UserError(f"{what} {repo_id!r} has no revision {revision!r} on the Hugging Face Hub") from exc
    except RepositoryNotFoundError as exc:
        raise UserError(f"{what} {repo_id!r} was not found on the Hugging Face Hub (or it is private and no HF_TOKEN was given)") from exc
    except Exception as exc:  # connection errors come from httpx/requests depending on the hub client's version
        return f"{type(exc).__name__}: {exc}"
    return None


def _model_location(spec: BaseModelSpec, source: ModelSource) -> str | None:
    """A local directory (local, s3) or a hub id; None for a model built from its config."""
    if source == ModelSource.CONFIG:
        return None
    if source == ModelSource.S3:
        if not is_s3_uri(spec.model_id):
            raise UserError(f"base_model.source is 's3' but model_id {spec.model_id!r} is not an s3:// URI")
        local = download_s3(spec.model_id, "models")
        if not local.is_dir():
            raise UserError(f"base_model.model_id {spec.model_id} names one object; give the s3:// prefix of a model directory")
        return _checked_model_dir(local, spec.model_id)
    if source == ModelSource.LOCAL:
        return _checked_model_dir(Path(spec.model_id.removeprefix("file://")).expanduser(), spec.model_id)
    return spec.model_id


def _checked_model_dir(directory: Path, shown: str) -> str:
    if not directory.is_dir():
        raise UserError(f"base_model.model_id {shown!r}: no such directory ({directory})")
    if not (directory / "config.json").is_file():
        raise UserError(f"base_model.model_id {shown!r}: no config.json in {directory}, so it is not a Hugging Face model directory")
    return str(directory)


def _from_hub_or_cache(loader: Any, repo_id: str, revision: str | None, what: str, **kwargs: Any) -> Any:
    """loader.from_pretrained(repo_id) online, or from the local hub cache when the hub cannot be reached."""
    why_offline = probe_hub(repo_id, revision, what)
    if why_offline is not None:
        # from_pretrained(repo_id, local_files_only=True) still makes requests (adapter lookups, with
        # retries); a cached snapshot's directory makes none.
        from huggingface_hub import snapshot_download

        try:
            cached = snapshot_download(repo_id, revision=revision, local_files_only=True, cache_dir=_hub_cache_dir())
        except Exception as exc:  # LocalEntryNotFoundError, or a validation error for an odd id
            raise UserError(
                f"cannot load {what} {repo_id!r}: the Hugging Face Hub is not reachable from this host ({why_offline}) "
                "and it is not in the local cache. Use base_model.source 'local' or 's3' with a copy of the model, or 'config'."
            ) from exc
        logger.warning("the Hugging Face Hub is not reachable (%s); using the cached %s %s", why_offline, what, repo_id)
        return loader.from_pretrained(cached, **kwargs)
    try:
        return loader.from_pretrained(repo_id, revision=revision, **kwargs)
    except OSError as exc:
        raise UserError(f"cannot load {what} {repo_id!r} from the Hugging Face Hub: {exc}") from exc


# --- tokenizer -----------------------------------------------------------------------------------


def load_tokenizer(spec: BaseModelSpec, model_location: str | None) -> Any:
    """tokenizer_id "byte" -> ByteTokenizer; another tokenizer_id (path, s3:// prefix or hub id); else the model's own."""
    tokenizer_id = spec.tokenizer_id
    if tokenizer_id == BYTE_TOKENIZER_ID or (tokenizer_id is None and model_location is None):
        # A model built from a config has no tokenizer of its own: the byte tokenizer needs no download.
        return ByteTokenizer()
    if tokenizer_id is None:
        assert model_location is not None
        location, revision = model_location, spec.revision
    elif is_s3_uri(tokenizer_id):
        location, revision = str(download_s3(tokenizer_id, "tokenizers")), None
    else:
        location, revision = tokenizer_id.removeprefix("file://"), None
    tokenizer = _load_auto_tokenizer(location, revision, spec.trust_remote_code)
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise UserError(f"tokenizer {location!r} has neither a pad nor an eos token; batches cannot be padded")
        # Padding positions are masked out of attention and loss, so reusing EOS as PAD is harmless.
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _load_auto_tokenizer(location: str, revision: str | None, trust_remote_code: bool) -> Any:
    from transformers import AutoTokenizer

    if Path(location).is_dir():
        if is_saved_byte_tokenizer(location):
            return ByteTokenizer.from_pretrained(location)
        try:
            return AutoTokenizer.from_pretrained(location, trust_remote_code=trust_remote_code)
        except (OSError, ValueError) as exc:
            raise UserError(f"cannot load a tokenizer from {location}: {exc}") from exc
    return _from_hub_or_cache(AutoTokenizer, location, revision, "tokenizer", trust_remote_code=trust_remote_code)


# --- model ---------------------------------------------------------------------------------------


def resolve_dtype(dtype: DType, device: torch.device) -> torch.dtype | str:
    """DType -> torch dtype. "auto" is float32 on CPU (half precision there is slow and fp16 is lossy), the
    checkpoint's own dtype for a pretrained model on a GPU ("auto"), bfloat16 for a fresh model on a GPU."""
    explicit = {DType.FLOAT32: torch.float32, DType.FLOAT16: torch.float16, DType.BFLOAT16: torch.bfloat16}
    if dtype in explicit:
        return explicit[DType(dtype)]
    if device.type == "cpu":
        return torch.float32
    return "auto"


def _build_from_config(spec: BaseModelSpec, tokenizer: Any, training_type: TrainingType, device: torch.device) -> nn.Module:
    from transformers import AutoConfig, AutoModelForCausalLM

    kwargs = dict(spec.model_kwargs)
    architecture = str(kwargs.pop("architecture"))
    # The class name a config.json's `architectures` lists (LlamaForCausalLM) names its model type (llama).
    architecture = model_type_of(architecture) or architecture
    vocab = len(tokenizer)
    if kwargs.get("vocab_size") is None:
        kwargs["vocab_size"] = vocab
    elif not isinstance(kwargs["vocab_size"], int) or kwargs["vocab_size"] < vocab:
        raise UserError(f"base_model.model_kwargs.vocab_size={kwargs['vocab_size']!r} does not cover the tokenizer's {vocab} tokens")
    for name in ("pad_token_id", "bos_token_id", "eos_token_id"):
        kwargs.setdefault(name, getattr(tokenizer, name))
    try:
        config = AutoConfig.for_model(architecture, **kwargs)
    except ValueError as exc:
        raise UserError(
            f"base_model.model_kwargs.architecture {architecture!r} is not a transformers model type (e.g. llama, gpt2)"
        ) from exc
    dtype = resolve_dtype(spec.dtype, device)
    if dtype == "auto":
        dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float32
    if training_type == TrainingType.QLORA:
        # bitsandbytes quantises while loading weights, so the fresh model goes through a directory.
        with tempfile.TemporaryDirectory(prefix="trainplane-qlora-") as scratch:
            AutoModelForCausalLM.from_config(config, dtype=dtype).save_pretrained(scratch)
            return _quantized(AutoModelForCausalLM, scratch, device, trust_remote_code=spec.trust_remote_code)
    try:
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, trust_remote_code=spec.trust_remote_code)
    except ValueError as exc:
        raise UserError(f"base_model.model_kwargs: cannot build a causal language model for {architecture!r}: {exc}") from exc
    return model.to(device)


def _load_pretrained(spec: BaseModelSpec, location: str, training_type: TrainingType, device: torch.device) -> nn.Module:
    from transformers import AutoModelForCausalLM

    if training_type == TrainingType.QLORA:
        return _quantized(AutoModelForCausalLM, location, device, trust_remote_code=spec.trust_remote_code, revision=spec.revision)
    kwargs: dict[str, Any] = {"dtype": resolve_dtype(spec.dtype, device), "trust_remote_code": spec.trust_remote_code}
    if not Path(location).is_dir():
        model = _from_hub_or_cache(AutoModelForCausalLM, location, spec.revision, "model", **kwargs)
    else:
        try:
            model = AutoModelForCausalLM.from_pretrained(location, **kwargs)
        except (OSError, ValueError) as exc:
            raise UserError(f"cannot load the model in {spec.model_id}: {exc}") from exc
    return model.to(device)


def _quantized(loader: Any, location: str, device: torch.device, **kwargs: Any) -> nn.Module:
    from peft import prepare_model_for_kbit_training

    config = _quantization_config()
    load = {"quantization_config": config, "dtype": config.bnb_4bit_compute_dtype, "device_map": {"": device.index or 0}, **kwargs}
    revision = load.pop("revision", None)  # a hub id's revision; a directory has none
    model = (
        loader.from_pretrained(location, **load)
        if Path(location).is_dir()
        else _from_hub_or_cache(loader, location, revision, "model", **load)
    )
    return prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)


def _cover_tokenizer(model: Any, tokenizer: Any) -> None:
    embeddings = model.get_input_embeddings()
    if embeddings is not None and len(tokenizer) > embeddings.num_embeddings:
        logger.warning("resizing the model's embeddings from %d to the tokenizer's %d tokens", embeddings.num_embeddings, len(tokenizer))
        model.resize_token_embeddings(len(tokenizer))


def _enable_activation_checkpointing(model: Any) -> None:
    # transformers 5 renamed gradient_checkpointing_enable (deprecated, removed in v6).
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    model.config.use_cache = False


def _frozen_copy(model: nn.Module) -> nn.Module:
    reference = copy.deepcopy(model)
    reference.eval()
    reference.requires_grad_(False)
    return reference


# --- LoRA ----------------------------------------------------------------------------------------


def default_lora_targets(model: nn.Module) -> list[str] | str:
    """peft's per-architecture defaults (llama: q_proj, v_proj; gpt2: c_attn), else every linear layer."""
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING

    model_type = getattr(getattr(model, "config", None), "model_type", None)
    targets = TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING.get(model_type or "")
    return list(targets) if targets else "all-linear"


def apply_lora(model: Any, hyper: Hyper, *, quantized: bool = False) -> nn.Module:
    """Wrap `model` with a LoRA adapter; afterwards only the adapter's parameters are trainable."""
    from peft import LoraConfig, TaskType, get_peft_model

    targets = hyper.lora_target_modules or default_lora_targets(model)
    config = LoraConfig(
        r=hyper.lora_rank,
        lora_alpha=hyper.lora_alpha,
        lora_dropout=hyper.lora_dropout,
        target_modules=targets,
        bias="none",
        task_type=TaskType.CAUSAL_LM,
    )
    if hyper.gradient_checkpointing and not quantized:
        # With frozen embeddings no input requires grad, and checkpointed blocks would get no gradient.
        model.enable_input_require_grads()
    try:
        return get_peft_model(model, config)
    except ValueError as exc:
        raise UserError(f"hyperparameter lora_target_modules={','.join(targets) if isinstance(targets, list) else targets}: {exc}") from exc
