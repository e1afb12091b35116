"""Reward functions for examples/jobs/rlhf-tiny.json (training_config.rlhf.reward_script_path).

Each is a trl reward function: f(prompts, completions, **columns) -> one float per completion. The other
columns of the prompt records arrive as keyword arguments, but for `prompt`, `completion` and
`completion_ids` (trl's own names): tiny-qa.jsonl's reference answer, its `completion` column, arrives as
`answer` through the job's data_config.preprocess.field_mapping {"answer": "completion"}.
"""

from __future__ import annotations

import string
from typing import Any

LETTERS = set(string.ascii_letters + string.digits + " ")


def readable(prompts: list[Any], completions: list[str], **columns: Any) -> list[float]:
    """The share of letters, digits and spaces: a dense signal even a random model can climb."""
    return [sum(ch in LETTERS for ch in text) / max(1, len(text)) for text in completions]


def correct(prompts: list[Any], completions: list[str], answer: list[str], **columns: Any) -> list[float]:
    """1 when the completion starts with the reference answer."""
    return [1.0 if text.strip().startswith(reference.strip()) else 0.0 for text, reference in zip(completions, answer, strict=True)]
