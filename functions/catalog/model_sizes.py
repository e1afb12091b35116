"""A job's model size, from what is known at submit without downloading anything (issue 25 point 6: throughput
is learned "for that model size and GPU shape"; docs/BUDGETS.md "Model size buckets").

The forecast keys what it learns by GPU type x units / training type / **size bucket**, so that a 7B job's
history never predicts a 70B job's. The parameter count comes, in this order, from:

1. a model built from its config (`source: config`): the count its `model_kwargs` give, with the
   architecture's transformers defaults for what they leave out (ARCHITECTURE_DEFAULTS; the byte tokenizer's
   vocabulary when no vocab_size is given, as the trainer does);
2. a catalog of known Hub ids (KNOWN_MODELS, their published parameter counts), matched on the repository
   name without its owner and without a chat/instruct suffix;
3. the size a Hub id, S3 prefix or path states in its name (`Llama-2-7b-chat-hf`, `Mixtral-8x7B`, `opt-350m`);
4. else the `unknown` bucket (never mixed with a sized one).

The buckets are half decades (BUCKET_EDGES): `<1M`, `1M-3M`, `3M-10M`, ... `30B-100B`, `>=300B`; a 7B and an
8B model share `3B-10B`, a 13B is `10B-30B`, a 70B `30B-100B`. Pure: no I/O, no transformers.
"""

from __future__ import annotations

import re
from itertools import pairwise
from typing import Final

from schemas.configs import BYTE_VOCAB_SIZE, BaseModelSpec, ModelSource

UNKNOWN: Final = "unknown"

# Half-decade edges of the size buckets, in parameters.
BUCKET_EDGES: Final[tuple[int, ...]] = tuple(int(m * 10**e) for e in range(6, 12) for m in (1, 3))  # 1M ... 300B


def _label(count: int) -> str:
    for suffix, scale in (("B", 10**9), ("M", 10**6)):
        if count >= scale:
            return f"{count // scale}{suffix}"
    return str(count)


def size_bucket(parameters: int | None) -> str:
    """The bucket a parameter count falls in (`3B-10B`), or `unknown`."""
    if parameters is None or parameters <= 0:
        return UNKNOWN
    if parameters < BUCKET_EDGES[0]:
        return f"<{_label(BUCKET_EDGES[0])}"
    for low, high in pairwise(BUCKET_EDGES):
        if parameters < high:
            return f"{_label(low)}-{_label(high)}"
    return f">={_label(BUCKET_EDGES[-1])}"


# Published parameter counts of widely fine-tuned Hub models, by repository name (lower case, no owner, no
# chat/instruct variant: VARIANTS, SUFFIXES). Where the name states the size, pattern 3 would find the same bucket;
# the table holds the ones whose name does not (gpt2, phi-2, TinyLlama) or misleads (gemma-7b is 8.5B).
KNOWN_MODELS: Final[dict[str, int]] = {
    "gpt2": 124_439_808,
    "gpt2-medium": 354_823_168,
    "gpt2-large": 774_030_080,
    "gpt2-xl": 1_557_611_200,
    "distilgpt2": 81_912_576,
    "tinyllama-1.1b": 1_100_048_384,
    "phi-1_5": 1_418_270_720,
    "phi-2": 2_779_683_840,
    "phi-3-mini-4k": 3_821_079_552,
    "phi-3-mini-128k": 3_821_079_552,
    "gemma-2b": 2_506_172_416,
    "gemma-7b": 8_537_680_896,
    "gemma-2-2b": 2_614_341_888,
    "gemma-2-9b": 9_241_705_984,
    "gemma-2-27b": 27_227_128_320,
    "llama-2-7b": 6_738_415_616,
    "llama-2-13b": 13_015_864_320,
    "llama-2-70b": 68_976_648_192,
    "meta-llama-3-8b": 8_030_261_248,
    "meta-llama-3-70b": 70_553_706_496,
    "llama-3.1-8b": 8_030_261_248,
    "llama-3.1-70b": 70_553_706_496,
    "llama-3.1-405b": 405_853_388_800,
    "llama-3.2-1b": 1_235_814_400,
    "llama-3.2-3b": 3_212_749_824,
    "mistral-7b-v0.1": 7_241_732_096,
    "mistral-7b-v0.3": 7_248_023_552,
    "mixtral-8x7b-v0.1": 46_702_792_704,
    "mixtral-8x22b-v0.1": 140_620_634_112,
    "qwen2.5-0.5b": 494_032_768,
    "qwen2.5-1.5b": 1_543_714_304,
    "qwen2.5-3b": 3_085_938_688,
    "qwen2.5-7b": 7_615_616_512,
    "qwen2.5-14b": 14_770_033_664,
    "qwen2.5-32b": 32_763_876_352,
    "qwen2.5-72b": 72_706_203_648,
    "smollm2-135m": 134_515_008,
    "smollm2-360m": 361_821_120,
    "smollm2-1.7b": 1_711_376_384,
}
VARIANTS: Final = ("-instruct", "-chat")  # dropped where they stand: Mistral-7B-Instruct-v0.2 is Mistral-7B-v0.2
SUFFIXES: Final = ("-hf", "-it")

# A size written in a name: `7b`, `0.5B`, `350m`, `8x7B` (experts x size), between separators.
_STATED = re.compile(r"(?:^|[-_/.])(?:(\d+)x)?(\d+(?:\.\d+)?)([bm])(?=$|[-_/.])", re.IGNORECASE)


def _repository_name(model_id: str) -> str:
    name = model_id.rstrip("/").rsplit("/", 1)[-1].lower()
    for variant in VARIANTS:
        name = name.replace(variant, "")
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            return name.removesuffix(suffix)
    return name


def stated_parameters(model_id: str) -> int | None:
    """The size a model id states in its name (the last one it names), or None."""
    found = list(_STATED.finditer(model_id))
    if not found:
        return None
    experts, size, unit = found[-1].groups()
    count = float(size) * (10**9 if unit.lower() == "b" else 10**6)
    return int(count * int(experts)) if experts else int(count)


# transformers' defaults of the config fields a count needs, for the families people build from a config
# (tests/unit/test_model_sizes.py checks the estimate against the models transformers builds).
ARCHITECTURE_DEFAULTS: Final[dict[str, dict[str, int | bool]]] = {
    "llama": {
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "tie_word_embeddings": False,
    },
    "mistral": {
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "tie_word_embeddings": False,
    },
    "qwen2": {
        "hidden_size": 4096,
        "intermediate_size": 22016,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "tie_word_embeddings": False,
    },
    "gpt2": {"n_embd": 768, "n_layer": 12, "n_positions": 1024, "tie_word_embeddings": True},
}
GPT2_ALIASES: Final = {"hidden_size": "n_embd", "num_hidden_layers": "n_layer", "max_position_embeddings": "n_positions"}


def _int(kwargs: dict[str, object], name: str, defaults: dict[str, int | bool]) -> int | None:
    value = kwargs.get(name, defaults.get(name))
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def config_parameters(spec: BaseModelSpec) -> int | None:
    """The parameters of a model built from `model_kwargs` (source `config`), or None for an architecture
    whose defaults are not tabled or kwargs that do not add up."""
    from schemas.model_architectures import model_type_of

    kwargs: dict[str, object] = dict(spec.model_kwargs)
    model_type = model_type_of(str(kwargs.get("architecture", "")))
    defaults = ARCHITECTURE_DEFAULTS.get(model_type or "")
    if defaults is None:
        return None
    byte_vocab = spec.tokenizer_id in (None, "byte")
    vocab = _int(kwargs, "vocab_size", {"vocab_size": BYTE_VOCAB_SIZE} if byte_vocab else {})
    if vocab is None:
        return None  # a Hub tokenizer's vocabulary is only known once it is downloaded
    tied = kwargs.get("tie_word_embeddings", defaults["tie_word_embeddings"]) is True
    if model_type == "gpt2":
        for alias, name in GPT2_ALIASES.items():  # GPT2Config's attribute_map: hidden_size is n_embd
            if alias in kwargs:
                kwargs.setdefault(name, kwargs[alias])
        hidden, layers, positions = (_int(kwargs, name, defaults) for name in ("n_embd", "n_layer", "n_positions"))
        if hidden is None or layers is None or positions is None:
            return None
        inner = _int(kwargs, "n_inner", {"n_inner": 4 * hidden}) or 4 * hidden
        block = (
            4 * hidden
            + (hidden * 3 * hidden + 3 * hidden)
            + (hidden * hidden + hidden)
            + (hidden * inner + inner)
            + (inner * hidden + hidden)
        )
        return vocab * hidden + positions * hidden + layers * block + 2 * hidden + (0 if tied else vocab * hidden)
    hidden, inter, layers, heads = (
        _int(kwargs, n, defaults) for n in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
    )
    if hidden is None or inter is None or layers is None or heads is None:
        return None
    kv_heads = _int(kwargs, "num_key_value_heads", {"num_key_value_heads": heads}) or heads
    head_dim = _int(kwargs, "head_dim", {"head_dim": hidden // heads}) or hidden // heads
    kv = kv_heads * head_dim
    attention = hidden * heads * head_dim * 2 + hidden * kv * 2 + (heads * head_dim + 2 * kv if model_type == "qwen2" else 0)
    block = attention + 3 * hidden * inter + 2 * hidden
    return vocab * hidden + layers * block + hidden + (0 if tied else vocab * hidden)


def model_parameters(spec: BaseModelSpec) -> int | None:
    """The model's parameter count from what is known at submit (config, catalog, name), or None."""
    if spec.resolved_source() == ModelSource.CONFIG:
        return config_parameters(spec)
    name = _repository_name(spec.model_id)
    # the repository's own name first; then the whole id (s3://bucket/llama-13b/checkpoint-final/ names a folder's)
    return KNOWN_MODELS.get(name) or stated_parameters(name) or stated_parameters(spec.model_id)


def model_size_bucket(spec: BaseModelSpec) -> str:
    """The forecast shape's size part: `3B-10B`, `<1M`, ... or `unknown`."""
    return size_bucket(model_parameters(spec))
