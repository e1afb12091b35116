"""The document and the server agree on hyperparameters (issue 21, point 4), found by probing local mode:
a CUSTOM job accepted `max_steps: ""` (its own answers then broke the response schema); other jobs accepted
a 61-digit `max_steps` and `learning_rate: "1e+308"`, which the document's patterns forbid; and
`torch_compile: "true"` was in the document's enum and always refused.

The rule: a spelling the committed openapi.json refuses, the server refuses (for every framework); a
spelling it allows, a CUSTOM job (whose keys are its script's own) accepts.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from pydantic import ValidationError

from functions.handlers.openapi import COMMITTED
from schemas.hyperparameters import known_hyperparameters
from schemas.job import SubmitJobRequest
from tests.helpers.jobs import request_body

DOCUMENT = json.loads(COMMITTED.read_text())
HYPERPARAMETERS = next(s for n, s in DOCUMENT["components"]["schemas"].items() if n.startswith("TrainingConfig"))["properties"][
    "hyperparameters"
]
SAMPLES = ["", "0", "1", "8", "0" * 60 + "1", "1" * 19, "1e+308", "1e-4", "0.5", "-1", "true", "TRUE", " true", "no", "adamw", "AdamW"]
SAMPLES += ["cosine", "steps", "q_proj,v_proj", "1.5e3", "nan", "1_000"]


def _documented(key: str, value: str) -> bool:
    try:
        jsonschema.validate({key: value}, HYPERPARAMETERS)
    except jsonschema.ValidationError:
        return False
    return True


def _accepted(key: str, value: str, framework: dict[str, Any] | None = None) -> bool:
    body = request_body()
    body["training_config"]["hyperparameters"] = {key: value}
    if framework:
        body["training_config"]["framework"] = framework
    try:
        SubmitJobRequest.model_validate(body)
    except ValidationError as exc:
        fields = {".".join(map(str, e["loc"])) for e in exc.errors()}
        assert fields == {f"training_config.hyperparameters.{key}"}, exc.errors()  # refused for this value only
        return False
    return True


CUSTOM = {"type": "CUSTOM", "command": ["python", "train.py"]}


@pytest.mark.parametrize("key", known_hyperparameters())
def test_each_known_keys_spellings_agree_with_the_document(key: str) -> None:
    for value in SAMPLES:
        documented = _documented(key, value)
        # A CUSTOM job checks only the spelling: exactly what the document says
        assert _accepted(key, value, CUSTOM) == documented, (key, value, documented)
        # Our trainer's jobs refuse every spelling the document refuses (and may refuse more: ranges, rules)
        if not documented:
            assert not _accepted(key, value), (key, value)


@pytest.mark.parametrize(
    ("key", "value", "framework"),
    [("max_steps", "", CUSTOM), ("max_steps", "0" * 60 + "1", None), ("learning_rate", "1e+308", None)],
)
def test_the_probed_disagreements_are_refused(key: str, value: str, framework: dict[str, Any] | None) -> None:
    assert not _documented(key, value)
    assert not _accepted(key, value, framework)


def test_torch_compile_true_is_not_offered_and_false_is() -> None:
    assert not _documented("torch_compile", "true") and not _accepted("torch_compile", "true")
    assert _documented("torch_compile", "false") and _accepted("torch_compile", "false")


def test_a_custom_scripts_own_keys_are_documented_and_accepted() -> None:
    assert _documented("my_own_knob", "x") and _accepted("my_own_knob", "x", CUSTOM)
