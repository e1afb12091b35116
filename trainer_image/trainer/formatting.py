"""Records -> token ids and labels, per training type.

Which record shapes each training type reads:

| training type          | shapes                                                      | loss on            |
|------------------------|-------------------------------------------------------------|--------------------|
| CONTINUED_PRETRAIN     | text                                                        | every token        |
| FULL_FINETUNE          | text, prompt/completion, messages                           | text / completion / assistant turns |
| SFT                    | prompt/completion, messages                                 | completion / assistant turns |
| LORA, QLORA            | prompt/completion, messages, text                           | as above           |
| DPO                    | prompt/chosen/rejected                                      | chosen and rejected, prompt masked |
| RLHF                   | prompt (a string, or a list of {role, content} messages)   | sampled completions (trainer/rlhf.py) |

Labels are IGNORE_INDEX (-100) where no loss is taken; label i is the token at position i (the model
shifts, as Hugging Face causal LMs do). Every check raises DataError with the record's file and line.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from schemas.configs import PreprocessConfig, TrainingType
from trainer.failures import DataError, UserError

logger = logging.getLogger(__name__)

IGNORE_INDEX = -100


class Record(dict[str, Any]):
    """A data row (a plain dict to everything that reads it) that remembers its file and 1-based line."""

    __slots__ = ("line", "source")

    def __init__(self, data: Mapping[str, Any], source: str = "<records>", line: int = 0) -> None:
        super().__init__(data)
        self.source = source
        self.line = line

    def __reduce__(self) -> Any:
        return (Record, (dict(self), self.source, self.line))


def origin(record: Mapping[str, Any], index: int) -> tuple[str, int]:
    """Where a record came from: its file and line, or its position when it was built in memory."""
    if isinstance(record, Record) and record.line:
        return record.source, record.line
    return getattr(record, "source", "<records>"), index + 1


class Shape(StrEnum):
    TEXT = "text"
    PROMPT_COMPLETION = "prompt/completion"
    CHAT = "messages"
    PREFERENCE = "prompt/chosen/rejected"
    PROMPT = "prompt"


REQUIRED_FIELDS: dict[Shape, tuple[str, ...]] = {
    Shape.TEXT: ("text",),
    Shape.PROMPT_COMPLETION: ("prompt", "completion"),
    Shape.CHAT: ("messages",),
    Shape.PREFERENCE: ("prompt", "chosen", "rejected"),
    Shape.PROMPT: ("prompt",),
}

# Order matters: a record with both "messages" and "text" is read as a conversation.
ACCEPTED_SHAPES: dict[TrainingType, tuple[Shape, ...]] = {
    TrainingType.CONTINUED_PRETRAIN: (Shape.TEXT,),
    TrainingType.FULL_FINETUNE: (Shape.TEXT, Shape.PROMPT_COMPLETION, Shape.CHAT),
    TrainingType.SFT: (Shape.PROMPT_COMPLETION, Shape.CHAT),
    TrainingType.LORA: (Shape.PROMPT_COMPLETION, Shape.CHAT, Shape.TEXT),
    TrainingType.QLORA: (Shape.PROMPT_COMPLETION, Shape.CHAT, Shape.TEXT),
    TrainingType.DPO: (Shape.PREFERENCE,),
    TrainingType.RLHF: (Shape.PROMPT,),
}


def accepted_shapes(training_type: TrainingType | str) -> tuple[Shape, ...]:
    training_type = TrainingType(training_type)
    if training_type not in ACCEPTED_SHAPES:
        raise UserError(f"training_type {training_type.value} is not supported by this trainer")
    return ACCEPTED_SHAPES[training_type]


def map_fields(record: Mapping[str, Any], field_mapping: Mapping[str, str]) -> dict[str, Any]:
    """preprocess.field_mapping is {our name: the data's name}, e.g. {"prompt": "question"}."""
    out = dict(record)
    for ours, theirs in field_mapping.items():
        if theirs in record:
            out[ours] = record[theirs]
    return out


def check_record(record: Mapping[str, Any], training_type: TrainingType | str, field_mapping: Mapping[str, str], index: int = 0) -> Shape:
    """Validate one (already mapped) record for a training type; returns its shape or raises DataError."""
    training_type = TrainingType(training_type)
    source, line = origin(record, index)
    mapped = map_fields(record, field_mapping)
    shapes = accepted_shapes(training_type)
    shape = next((s for s in shapes if all(name in mapped for name in REQUIRED_FIELDS[s])), None)
    if shape is None:
        raise DataError(source, line, _missing_message(mapped, training_type, shapes, field_mapping))
    if shape == Shape.PROMPT:
        _check_prompt(mapped["prompt"], source, line, _shown("prompt", field_mapping))
        return shape
    for name in REQUIRED_FIELDS[shape]:
        if name == "messages":
            _check_messages(mapped[name], source, line, _shown(name, field_mapping))
        elif not isinstance(mapped[name], str):
            raise DataError(source, line, f"field {_shown(name, field_mapping)} must be a string, got {_type_name(mapped[name])}")
    return shape


def _missing_message(
    mapped: Mapping[str, Any], training_type: TrainingType, shapes: tuple[Shape, ...], field_mapping: Mapping[str, str]
) -> str:
    # Name the closest shape's missing fields: a record with "prompt" but no "completion" is told so.
    partial = [s for s in shapes if any(name in mapped for name in REQUIRED_FIELDS[s])]
    if partial:
        missing = [_shown(name, field_mapping) for name in REQUIRED_FIELDS[partial[0]] if name not in mapped]
        return f"missing required column(s) {', '.join(missing)} for {training_type.value} ({partial[0].value} records)"
    expected = " or ".join(" + ".join(_shown(name, field_mapping) for name in REQUIRED_FIELDS[s]) for s in shapes)
    present = ", ".join(sorted(mapped)) or "none"
    return f"missing required column(s) for {training_type.value}: expected {expected} (the record has: {present})"


def _shown(name: str, field_mapping: Mapping[str, str]) -> str:
    theirs = field_mapping.get(name)
    return f"'{name}' (read from '{theirs}' by preprocess.field_mapping)" if theirs else f"'{name}'"


def _type_name(value: Any) -> str:
    return {dict: "an object", list: "a list", type(None): "null", bool: "a boolean"}.get(type(value), type(value).__name__)


def _check_prompt(prompt: Any, source: str, line: int, shown: str) -> None:
    """An RLHF prompt: plain text, or a conversation (trl's conversational format) the model continues."""
    if isinstance(prompt, str):
        if not prompt:
            raise DataError(source, line, f"field {shown} is empty")
        return
    if not isinstance(prompt, list) or not prompt:
        expected = "a string or a non-empty list of {role, content} objects"
        raise DataError(source, line, f"field {shown} must be {expected}, got {_type_name(prompt)}")
    for position, message in enumerate(prompt):
        if not isinstance(message, dict):
            raise DataError(source, line, f"{shown}[{position}] must be an object with role and content, got {_type_name(message)}")
        for key in ("role", "content"):
            if not isinstance(message.get(key), str):
                raise DataError(source, line, f"{shown}[{position}].{key} must be a string, got {_type_name(message.get(key))}")


def _check_messages(messages: Any, source: str, line: int, shown: str) -> None:
    if not isinstance(messages, list) or not messages:
        raise DataError(source, line, f"field {shown} must be a non-empty list of {{role, content}} objects, got {_type_name(messages)}")
    for position, message in enumerate(messages):
        if not isinstance(message, dict):
            raise DataError(source, line, f"{shown}[{position}] must be an object with role and content, got {_type_name(message)}")
        for key in ("role", "content"):
            if not isinstance(message.get(key), str):
                raise DataError(source, line, f"{shown}[{position}].{key} must be a string, got {_type_name(message.get(key))}")
    if not any(message["role"] == "assistant" for message in messages[1:]):
        raise DataError(source, line, f"field {shown} has no assistant turn after the first message: nothing to learn from")


# --- token sequences -----------------------------------------------------------------------------


@dataclass
class Tokenized:
    input_ids: list[int]
    labels: list[int]

    def trainable(self) -> int:
        # Position 0 is never predicted (the model shifts labels by one).
        return sum(1 for label in self.labels[1:] if label != IGNORE_INDEX)


class Formatter:
    """Turns validated records into token ids and labels for one tokenizer and preprocess config."""

    def __init__(self, tokenizer: Any, preprocess: PreprocessConfig) -> None:
        self.tokenizer = tokenizer
        self.preprocess = preprocess
        self.bos_id: int | None = tokenizer.bos_token_id if preprocess.add_bos else None
        self.eos_id: int | None = tokenizer.eos_token_id if preprocess.add_eos else None
        self.chat_template = preprocess.chat_template

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []

    def segments(self, record: Mapping[str, Any], shape: Shape, source: str, line: int) -> list[tuple[str, bool]]:
        """(text, trained) pieces in order; the concatenation is the full training text."""
        if shape == Shape.TEXT:
            return [(record["text"], True)]
        if shape == Shape.PROMPT_COMPLETION:
            return [(record["prompt"], False), (record["completion"], True)]
        if shape == Shape.CHAT:
            return self.chat_segments(record["messages"], source, line)
        raise UserError(f"records of shape {shape.value} are formatted as preference pairs, not single sequences")

    def sequence(self, pieces: list[tuple[str, bool]]) -> Tokenized:
        """Tokenize each piece on its own (so a label boundary is a token boundary) and add BOS/EOS."""
        input_ids: list[int] = []
        labels: list[int] = []
        text = "".join(piece for piece, _ in pieces)
        if self.bos_id is not None and not (self.tokenizer.bos_token and text.startswith(self.tokenizer.bos_token)):
            input_ids.append(self.bos_id)
            labels.append(IGNORE_INDEX)
        for piece, trained in pieces:
            ids = self.encode(piece)
            input_ids += ids
            labels += ids if trained else [IGNORE_INDEX] * len(ids)
        # A chat template usually ends each turn with EOS already; never add a second one.
        if self.eos_id is not None and not (self.tokenizer.eos_token and text.endswith(self.tokenizer.eos_token)):
            input_ids.append(self.eos_id)
            labels.append(self.eos_id if pieces and pieces[-1][1] else IGNORE_INDEX)
        return Tokenized(input_ids, labels)

    def chat_segments(self, messages: list[dict[str, Any]], source: str, line: int) -> list[tuple[str, bool]]:
        """Render a conversation with the chat template; only assistant turns are trained.

        Each assistant turn i is located by rendering messages[:i] with the generation prompt (the text
        before the turn's content) and messages[:i+1] (the text through the end of the turn); both must
        be prefixes of the whole rendering, which holds for templates that render history verbatim.
        An assistant message that opens the conversation has no prompt and is kept as context.
        """
        full = self.render(messages, False, source, line)
        pieces: list[tuple[str, bool]] = []
        position = 0
        for index, message in enumerate(messages):
            if message["role"] != "assistant" or index == 0:
                continue
            head = self.render(messages[:index], True, source, line)
            through = self.render(messages[: index + 1], False, source, line)
            if not (full.startswith(through) and through.startswith(head) and len(head) >= position):
                raise UserError(
                    "the chat template does not render earlier turns verbatim, so assistant turns cannot be located for "
                    "loss masking; set data_config.preprocess.chat_template to a template that does"
                )
            pieces += [(full[position : len(head)], False), (full[len(head) : len(through)], True)]
            position = len(through)
        pieces.append((full[position:], False))
        return [(text, trained) for text, trained in pieces if text]

    def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool, source: str, line: int) -> str:
        template = self.chat_template
        if template is None and not getattr(self.tokenizer, "chat_template", None):
            raise UserError("the tokenizer has no chat template for 'messages' records; set data_config.preprocess.chat_template")
        try:
            rendered = self.tokenizer.apply_chat_template(
                messages, chat_template=template, tokenize=False, add_generation_prompt=add_generation_prompt
            )
        except Exception as exc:  # Jinja errors (raise_exception in a template, syntax errors) have no common base
            raise DataError(source, line, f"the chat template failed on this conversation: {type(exc).__name__}: {exc}") from exc
        return str(rendered)
