"""Training data: read the sources into records (load_splits), turn records into token ids and labels
(build_examples), and pad a batch into tensors (collate).

Deterministic: the same data_config (and its seed) gives the same records in the same order, the same
sample, the same validation split. Randomness comes only from random.Random instances seeded from the
config, never from a global generator.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from schemas.configs import DataConfig, DataSource, TrainingType
from trainer.failures import DataError, UserError
from trainer.formatting import IGNORE_INDEX, Formatter, Record, Shape, Tokenized, check_record, origin
from trainer.hyper import Hyper
from trainer.sources import DataFile, iter_lines, resolve_data_files

logger = logging.getLogger(__name__)

__all__ = ["IGNORE_INDEX", "Record", "build_examples", "collate", "load_splits", "read_source"]


# --- reading -------------------------------------------------------------------------------------


def load_splits(
    dc: DataConfig,
    channels: Mapping[str, Path],
    training_type: TrainingType | str | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Read every source into (train, validation) records.

    Sources with split "validation" form the validation set; when there are none, a
    `validation_split` fraction of the training records is carved out with a generator seeded by
    `dc.seed`. Each record is a Record (a dict that knows its file and line). With `training_type`,
    every record is also checked for that type's required columns here, before any model is loaded.
    """
    train: list[dict[str, Any]] = []
    validation: list[dict[str, Any]] = []
    for index, source in enumerate(dc.sources):
        records = read_source(source, channels, seed=dc.seed, index=index)
        (validation if source.split == "validation" else train).extend(records)
    if training_type is not None:
        for position, record in enumerate(train + validation):
            check_record(record, training_type, dc.preprocess.field_mapping, position)
    if not train:
        raise UserError("data_config.sources: no source with split 'train' (every source is a validation source)")
    if not validation and dc.validation_split > 0:
        train, validation = _carve_validation(train, dc.validation_split, dc.seed)
    logger.info("loaded %d training and %d validation records from %d source(s)", len(train), len(validation), len(dc.sources))
    return train, validation


def read_source(source: DataSource, channels: Mapping[str, Path], *, seed: int = 42, index: int = 0) -> list[dict[str, Any]]:
    """One DataSource: its files in order, filtered, projected, then sampled."""
    files = resolve_data_files(source.path, channels)
    records: list[dict[str, Any]] = []
    for file in files:
        records.extend(_read_file(file, source))
    if not records:
        detail = f" match filters {source.filters}" if source.filters else ""
        raise DataError(source.path, 0, f"no records{detail}")
    if source.sampling is not None:
        sampling_seed = source.sampling.seed if source.sampling.seed is not None else seed
        records = _sample(records, source.sampling.fraction, source.sampling.max_samples, f"{sampling_seed}:{index}")
    return records


def _read_file(file: DataFile, source: DataSource) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    seen_any = False
    for line_no, text in iter_lines(file, source.format):
        if not text.strip():
            continue  # blank lines (a trailing newline, a separator) carry no record
        seen_any = True
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DataError(file.name, line_no, f"unparseable JSON: {exc.msg} (column {exc.colno})") from exc
        if not isinstance(value, dict):
            raise DataError(file.name, line_no, f"expected a JSON object per line, got {type(value).__name__}")
        if any(value.get(key, _MISSING) != wanted for key, wanted in source.filters.items()):
            continue
        if source.columns is not None:
            missing = [column for column in source.columns if column not in value]
            if missing:
                raise DataError(file.name, line_no, f"missing column(s) {', '.join(map(repr, missing))} named in the source's columns")
            value = {column: value[column] for column in source.columns}
        records.append(Record(value, file.name, line_no))
    if not seen_any:
        raise DataError(file.name, 0, "empty file: no records")
    return records


_MISSING = object()


def _sample(records: list[dict[str, Any]], fraction: float, max_samples: int | None, seed: str) -> list[dict[str, Any]]:
    count = max(1, round(len(records) * fraction))
    if max_samples is not None:
        count = min(count, max_samples)
    if count >= len(records):
        return records
    chosen = sorted(random.Random(seed).sample(range(len(records)), count))  # file order is kept
    return [records[i] for i in chosen]


def _carve_validation(records: list[dict[str, Any]], fraction: float, seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    count = max(1, round(len(records) * fraction))
    if count >= len(records):
        raise UserError(
            f"data_config.validation_split={fraction} leaves no training records ({len(records)} record(s) in all); "
            "lower it or add a source with split 'validation'"
        )
    held_out = set(random.Random(f"validation:{seed}").sample(range(len(records)), count))
    train = [record for i, record in enumerate(records) if i not in held_out]
    validation = [record for i, record in enumerate(records) if i in held_out]
    return train, validation


# --- formatting ----------------------------------------------------------------------------------


def build_examples(
    records: Sequence[Mapping[str, Any]],
    tokenizer: Any,
    training_type: TrainingType | str,
    dc: DataConfig,
    hyper: Hyper,
) -> list[dict[str, list[int]]]:
    """Token ids and labels for each record (see trainer/formatting.py for the shapes per type).

    Language-model examples are {"input_ids", "labels"}; DPO examples are {"chosen_input_ids",
    "chosen_labels", "rejected_input_ids", "rejected_labels"}. With packing, sequences are joined
    (each ending with EOS) and cut into max_seq_length blocks. Without it, each is truncated at
    max_seq_length (or refused when preprocess.truncation is false). A record left with no trained
    token after truncation (its prompt fills the window) is dropped, and the count is logged.
    """
    training_type = TrainingType(training_type)
    if training_type == TrainingType.RLHF:
        raise UserError("RLHF prompts are not turned into fixed examples: trainer/rlhf.py samples completions for them")
    formatter = Formatter(tokenizer, dc.preprocess)
    packing = hyper.packing_for(training_type)
    if training_type == TrainingType.DPO and packing:
        raise UserError("hyperparameter packing=true is not supported for DPO (each preference pair is its own example)")
    examples: list[dict[str, list[int]]] = []
    sequences: list[Tokenized] = []
    dropped = 0
    for index, raw in enumerate(records):
        shape = check_record(raw, training_type, dc.preprocess.field_mapping, index)
        source, line = origin(raw, index)
        record = Record({**raw, **_mapped(raw, dc.preprocess.field_mapping)}, source, line)
        if shape == Shape.PREFERENCE:
            pair = _preference_example(formatter, record, dc, source, line)
            if pair is None:
                dropped += 1
            else:
                examples.append(pair)
            continue
        sequence = formatter.sequence(formatter.segments(record, shape, source, line))
        if packing:
            sequences.append(sequence)
            continue
        sequence = _fit(sequence, dc, source, line)
        if sequence.trainable():
            examples.append({"input_ids": sequence.input_ids, "labels": sequence.labels})
        else:
            dropped += 1
    if packing:
        examples = _pack(sequences, dc.max_seq_length, tokenizer.eos_token_id)
    if dropped:
        logger.warning(
            "dropped %d of %d record(s): no trained token left within max_seq_length=%d", dropped, len(records), dc.max_seq_length
        )
    if records and not examples:
        raise DataError(origin(records[0], 0)[0], 0, f"no usable example: every record's prompt fills max_seq_length={dc.max_seq_length}")
    return examples


def _mapped(record: Mapping[str, Any], field_mapping: Mapping[str, str]) -> dict[str, Any]:
    return {ours: record[theirs] for ours, theirs in field_mapping.items() if theirs in record}


def _fit(sequence: Tokenized, dc: DataConfig, source: str, line: int) -> Tokenized:
    limit = dc.max_seq_length
    if len(sequence.input_ids) <= limit:
        return sequence
    if not dc.preprocess.truncation:
        raise DataError(source, line, f"{len(sequence.input_ids)} tokens exceed max_seq_length={limit} and preprocess.truncation is false")
    return Tokenized(sequence.input_ids[:limit], sequence.labels[:limit])


def _pack(sequences: list[Tokenized], block: int, eos_id: int | None) -> list[dict[str, list[int]]]:
    input_ids: list[int] = []
    labels: list[int] = []
    for sequence in sequences:
        input_ids += sequence.input_ids
        labels += sequence.labels
        # Documents are always separated by EOS when packed, so the model sees where one ends.
        if eos_id is not None and (not sequence.input_ids or sequence.input_ids[-1] != eos_id):
            input_ids.append(eos_id)
            labels.append(eos_id if sequence.labels and sequence.labels[-1] != IGNORE_INDEX else IGNORE_INDEX)
    blocks = []
    for start in range(0, len(input_ids), block):
        chunk = Tokenized(input_ids[start : start + block], labels[start : start + block])
        # The short tail is kept (padded at collate time) rather than silently thrown away.
        if chunk.trainable():
            blocks.append({"input_ids": chunk.input_ids, "labels": chunk.labels})
    return blocks


def _preference_example(formatter: Formatter, record: Record, dc: DataConfig, source: str, line: int) -> dict[str, list[int]] | None:
    prompt_ids = ([formatter.bos_id] if formatter.bos_id is not None else []) + formatter.encode(record["prompt"])
    example: dict[str, list[int]] = {}
    for side in ("chosen", "rejected"):
        ids = formatter.encode(record[side])
        if formatter.eos_id is not None:
            ids.append(formatter.eos_id)
        sequence = _fit(Tokenized(prompt_ids + ids, [IGNORE_INDEX] * len(prompt_ids) + ids), dc, source, line)
        if not sequence.trainable():
            return None
        example[f"{side}_input_ids"] = sequence.input_ids
        example[f"{side}_labels"] = sequence.labels
    return example


# --- batching ------------------------------------------------------------------------------------


def collate(examples: Sequence[Mapping[str, Sequence[int]]], pad_id: int, max_length: int | None = None) -> dict[str, torch.Tensor]:
    """Right-pad a batch into tensors: ids with `pad_id`, labels with -100, plus attention mask(s).

    Pads to the longest sequence in the batch, or to `max_length` (pass data_config.max_seq_length
    when preprocess.padding is "max_length"). For DPO batches, chosen and rejected are padded to the
    same length so the two can be stacked into one forward pass.
    """
    if not examples:
        raise ValueError("collate() needs at least one example")
    prefixes = ["chosen_", "rejected_"] if "chosen_input_ids" in examples[0] else [""]
    longest = max(len(example[f"{prefix}input_ids"]) for example in examples for prefix in prefixes)
    length = max(longest, max_length or 0)
    batch: dict[str, torch.Tensor] = {}
    for prefix in prefixes:
        ids = torch.full((len(examples), length), pad_id, dtype=torch.long)
        labels = torch.full((len(examples), length), IGNORE_INDEX, dtype=torch.long)
        mask = torch.zeros((len(examples), length), dtype=torch.long)
        for row, example in enumerate(examples):
            size = len(example[f"{prefix}input_ids"])
            ids[row, :size] = torch.tensor(example[f"{prefix}input_ids"], dtype=torch.long)
            labels[row, :size] = torch.tensor(example[f"{prefix}labels"], dtype=torch.long)
            mask[row, :size] = 1
        batch[f"{prefix}input_ids"] = ids
        batch[f"{prefix}labels"] = labels
        batch[f"{prefix}attention_mask"] = mask
    return batch
