"""The causal LM architectures a `source: config` model may name, from schemas/model_architectures.json.

The JSON is generated from transformers by scripts/gen_model_architectures.py and checked against the
installed transformers by a test: the API Lambda checks names with it without importing transformers,
and the trainer maps a class name to the model type AutoConfig.for_model needs.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

ARCHITECTURES_FILE = Path(__file__).resolve().with_name("model_architectures.json")


@cache
def _table() -> dict[str, Any]:
    return json.loads(ARCHITECTURES_FILE.read_text(encoding="utf-8"))


def model_type_of(architecture: str) -> str | None:
    """`llama` -> `llama`; `LlamaForCausalLM` -> `llama`; None when transformers has no such causal LM."""
    table = _table()
    if architecture in table["model_types"]:
        return architecture
    return table["classes"].get(architecture)


def transformers_version() -> str:
    return str(_table()["transformers_version"])


def unknown_architecture_message(architecture: str) -> str:
    return (
        f"{architecture!r} is not a causal language model of transformers {transformers_version()}: give a model type "
        "(e.g. llama, gpt2, qwen2) or a class name as config.json's `architectures` spells it (e.g. LlamaForCausalLM)"
    )
