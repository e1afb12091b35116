"""Records -> token ids and labels per training type, asserted token by token with the byte tokenizer
(ids 0-255 are the UTF-8 bytes, then PAD 256, BOS 257, EOS 258), and batch collation."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import torch
from trainer.data import build_examples, collate, load_splits
from trainer.failures import DataError, UserError
from trainer.formatting import IGNORE_INDEX, Record
from trainer.hyper import Hyper
from trainer.tokenizer import BOS_ID, EOS_ID, PAD_ID, ByteTokenizer

from schemas.configs import DataConfig, DataSource, TrainingType

M = IGNORE_INDEX  # a masked label


def b(text: str) -> list[int]:
    """The byte tokenizer's ids for plain text."""
    return list(text.encode("utf-8"))


def ids_of(text: str) -> list[int]:
    """Like b() but with '</s>' as the EOS token, as the tokenizer reads it."""
    out: list[int] = []
    for index, part in enumerate(text.split("</s>")):
        if index:
            out.append(EOS_ID)
        out += b(part)
    return out


def dc(max_seq_length: int = 256, **preprocess: Any) -> DataConfig:
    return DataConfig(sources=[DataSource(path="unused.jsonl")], max_seq_length=max_seq_length, preprocess=preprocess)


def hyper(training_type: TrainingType | str, **values: str) -> Hyper:
    return Hyper.from_strings(values, training_type)


def build(records: list[dict[str, Any]], training_type: str, config: DataConfig | None = None, **hp: str) -> list[dict[str, list[int]]]:
    return build_examples(records, ByteTokenizer(), training_type, config or dc(), hyper(training_type, **hp))


# --- text ----------------------------------------------------------------------------------------


def test_continued_pretrain_packs_documents_with_eos_into_blocks() -> None:
    # Given two documents and 8-token blocks (CONTINUED_PRETRAIN packs by default)
    records = [{"text": "abcdef"}, {"text": "ghij"}]
    # When formatted
    examples = build(records, "CONTINUED_PRETRAIN", dc(8))
    # Then the stream BOS abcdef EOS BOS ghij EOS is cut into 8-token blocks, the short tail kept
    assert [e["input_ids"] for e in examples] == [[BOS_ID, *b("abcdef"), EOS_ID], [BOS_ID, *b("ghij"), EOS_ID]]
    # And every token is a label except the BOS (nothing predicts the start of a document)
    assert [e["labels"] for e in examples] == [[M, *b("abcdef"), EOS_ID], [M, *b("ghij"), EOS_ID]]


def test_packing_spans_documents_across_block_boundaries() -> None:
    # Given one 11-byte document and 8-token blocks
    examples = build([{"text": "abcdefghijk"}], "CONTINUED_PRETRAIN", dc(8))
    # Then the 13-token stream becomes a block of 8 and a tail of 5
    assert [e["input_ids"] for e in examples] == [[BOS_ID, *b("abcdefg")], [*b("hijk"), EOS_ID]]
    assert examples[1]["labels"] == [*b("hijk"), EOS_ID]


def test_full_finetune_without_packing_truncates_each_record() -> None:
    # Given a record longer than max_seq_length and packing off (the FULL_FINETUNE default)
    examples = build([{"text": "abcdefghij"}, {"text": "ab"}], "FULL_FINETUNE", dc(8))
    # Then the first is cut at 8 tokens (its EOS falls off) and the second kept whole
    assert examples[0]["input_ids"] == [BOS_ID, *b("abcdefg")]
    assert examples[0]["labels"] == [M, *b("abcdefg")]
    assert examples[1]["input_ids"] == [BOS_ID, *b("ab"), EOS_ID]


def test_a_too_long_record_is_refused_when_truncation_is_off() -> None:
    # Given truncation off and a record from line 7 of a file that does not fit
    record = Record({"text": "abcdefghij"}, "data/train.jsonl", 7)
    # When formatted, Then the error names the file, the line and the limit
    with pytest.raises(DataError, match=r"12 tokens exceed max_seq_length=8 and preprocess\.truncation is false") as info:
        build([record], "FULL_FINETUNE", dc(8, truncation=False))
    assert (info.value.file, info.value.line) == ("data/train.jsonl", 7)


def test_lora_accepts_plain_text_with_loss_on_every_token() -> None:
    # Given a plain text record for LORA
    examples = build([{"text": "hello"}], "LORA")
    # Then it is trained on in full
    assert examples == [{"input_ids": [BOS_ID, *b("hello"), EOS_ID], "labels": [M, *b("hello"), EOS_ID]}]


def test_sft_refuses_plain_text() -> None:
    # Given a text record for SFT (which learns completions only)
    with pytest.raises(DataError, match="expected 'prompt' \\+ 'completion' or 'messages'"):
        build([{"text": "hello"}], "SFT")


# --- prompt / completion -------------------------------------------------------------------------


@pytest.mark.parametrize("training_type", ["SFT", "LORA", "QLORA", "FULL_FINETUNE"])
def test_prompt_completion_masks_the_prompt(training_type: str) -> None:
    # Given a prompt/completion pair
    examples = build([{"prompt": "Q?", "completion": "A!"}], training_type)
    # Then the loss is on the completion and the EOS only
    assert examples == [{"input_ids": [BOS_ID, *b("Q?A!"), EOS_ID], "labels": [M, M, M, *b("A!"), EOS_ID]}]


def test_bos_and_eos_can_be_switched_off() -> None:
    # Given add_bos and add_eos false
    examples = build([{"prompt": "Q?", "completion": "A!"}], "SFT", dc(add_bos=False, add_eos=False))
    # Then neither special token is added
    assert examples == [{"input_ids": b("Q?A!"), "labels": [M, M, *b("A!")]}]


def test_field_mapping_renames_the_data_fields() -> None:
    # Given data with question/answer fields and a mapping onto prompt/completion
    config = dc(field_mapping={"prompt": "question", "completion": "answer"})
    examples = build([{"question": "Q", "answer": "A"}], "SFT", config)
    # Then they are read as prompt and completion
    assert examples == [{"input_ids": [BOS_ID, *b("QA"), EOS_ID], "labels": [M, M, *b("A"), EOS_ID]}]


def test_records_whose_prompt_fills_the_window_are_dropped_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    # Given one record whose prompt alone exceeds max_seq_length and one that fits
    records = [{"prompt": "x" * 20, "completion": "y"}, {"prompt": "Q", "completion": "A"}]
    # When formatted
    with caplog.at_level(logging.WARNING, logger="trainer.data"):
        examples = build(records, "SFT", dc(8))
    # Then only the second is kept and the drop is logged
    assert examples == [{"input_ids": [BOS_ID, *b("QA"), EOS_ID], "labels": [M, M, *b("A"), EOS_ID]}]
    assert "dropped 1 of 2 record(s)" in caplog.text
    # And when every record is like the first, the run fails instead of training on nothing
    with pytest.raises(DataError, match="no usable example"):
        build(records[:1], "SFT", dc(8))


def test_sft_packing_keeps_each_record_s_mask() -> None:
    # Given two pairs, packing on, and a window that holds both
    examples = build([{"prompt": "Q", "completion": "A"}, {"prompt": "R", "completion": "B"}], "SFT", dc(16), packing="true")
    # Then one block holds both, with each prompt still masked
    assert examples == [
        {
            "input_ids": [BOS_ID, *b("QA"), EOS_ID, BOS_ID, *b("RB"), EOS_ID],
            "labels": [M, M, *b("A"), EOS_ID, M, M, *b("B"), EOS_ID],
        }
    ]


# --- chat messages -------------------------------------------------------------------------------

CONVERSATION = [
    {"role": "system", "content": "S"},
    {"role": "user", "content": "U1"},
    {"role": "assistant", "content": "A1"},
    {"role": "user", "content": "U2"},
    {"role": "assistant", "content": "A2"},
]


def test_chat_messages_use_the_template_with_loss_on_assistant_turns_only() -> None:
    # Given a two-turn conversation
    examples = build([{"messages": CONVERSATION}], "SFT")
    # Then the input is BOS + the byte tokenizer's template rendering (no second EOS: the template ends with one)
    prefix1 = "<|system|>\nS</s><|user|>\nU1</s><|assistant|>\n"
    prefix2 = "<|user|>\nU2</s><|assistant|>\n"
    assert examples[0]["input_ids"] == [BOS_ID, *ids_of(prefix1 + "A1</s>" + prefix2 + "A2</s>")]
    # And exactly the assistant contents and their closing EOS carry labels
    expected = [M] + [M] * len(ids_of(prefix1)) + ids_of("A1</s>") + [M] * len(ids_of(prefix2)) + ids_of("A2</s>")
    assert examples[0]["labels"] == expected


def test_data_config_chat_template_overrides_the_tokenizer_s() -> None:
    # Given a template of "role: content" lines
    template = (
        "{% for m in messages %}{{ m['role'] + ': ' + m['content'] + '\\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ 'assistant: ' }}{% endif %}"
    )
    examples = build([{"messages": CONVERSATION[1:3]}], "SFT", dc(chat_template=template))
    # Then it renders the conversation, the assistant's content and newline are trained, and EOS closes it
    assert examples[0]["input_ids"] == [BOS_ID, *b("user: U1\nassistant: A1\n"), EOS_ID]
    assert examples[0]["labels"] == [M, *[M] * len(b("user: U1\nassistant: ")), *b("A1\n"), EOS_ID]


def test_a_tokenizer_without_a_chat_template_is_a_clear_error() -> None:
    # Given a tokenizer with no chat template and no override
    tokenizer = ByteTokenizer()
    tokenizer.chat_template = None
    # When messages are formatted, Then the error points at preprocess.chat_template
    with pytest.raises(UserError, match=r"set data_config\.preprocess\.chat_template"):
        build_examples([{"messages": CONVERSATION}], tokenizer, "SFT", dc(), hyper("SFT"))


def test_a_template_that_rewrites_history_is_refused() -> None:
    # Given a template whose output depends on the number of messages (earlier turns are not stable)
    template = "{{ messages | length }}{% for m in messages %}{{ m['content'] }}{% endfor %}"
    with pytest.raises(UserError, match="does not render earlier turns verbatim"):
        build([{"messages": CONVERSATION}], "SFT", dc(chat_template=template))


def test_a_template_error_names_the_record() -> None:
    # Given a template that rejects the conversation, and a record from line 4
    template = "{{ raise_exception('roles must alternate user/assistant') }}"
    record = Record({"messages": CONVERSATION}, "chats.jsonl", 4)
    with pytest.raises(DataError, match="roles must alternate") as info:
        build([record], "SFT", dc(chat_template=template))
    assert (info.value.file, info.value.line) == ("chats.jsonl", 4)


# --- DPO -----------------------------------------------------------------------------------------


def test_dpo_pairs_mask_the_prompt_on_both_sides() -> None:
    # Given a preference record
    examples = build([{"prompt": "1+1=", "chosen": "2", "rejected": "three"}], "DPO")
    # Then chosen and rejected each continue the prompt, with loss on the answer and EOS
    assert examples == [
        {
            "chosen_input_ids": [BOS_ID, *b("1+1=2"), EOS_ID],
            "chosen_labels": [M, M, M, M, M, *b("2"), EOS_ID],
            "rejected_input_ids": [BOS_ID, *b("1+1=three"), EOS_ID],
            "rejected_labels": [M, M, M, M, M, *b("three"), EOS_ID],
        }
    ]


def test_dpo_refuses_packing() -> None:
    with pytest.raises(UserError, match="packing=true is not supported for DPO"):
        build([{"prompt": "p", "chosen": "a", "rejected": "b"}], "DPO", packing="true")


def test_rlhf_is_refused_with_a_clear_message() -> None:
    with pytest.raises(UserError, match="RLHF"):
        build_examples([{"text": "x"}], ByteTokenizer(), TrainingType.RLHF, dc(), Hyper())


# --- collate -------------------------------------------------------------------------------------


def test_collate_pads_to_the_longest_with_masks_and_ignored_labels() -> None:
    # Given two examples of lengths 3 and 1
    examples = [{"input_ids": [1, 2, 3], "labels": [M, 2, 3]}, {"input_ids": [4], "labels": [4]}]
    # When collated
    batch = collate(examples, PAD_ID)
    # Then both are right-padded to 3
    assert batch["input_ids"].tolist() == [[1, 2, 3], [4, PAD_ID, PAD_ID]]
    assert batch["labels"].tolist() == [[M, 2, 3], [4, M, M]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert batch["input_ids"].dtype == torch.long


def test_collate_pads_to_max_length_when_asked() -> None:
    batch = collate([{"input_ids": [1, 2], "labels": [1, 2]}], PAD_ID, max_length=5)
    assert batch["input_ids"].tolist() == [[1, 2, PAD_ID, PAD_ID, PAD_ID]]
    assert batch["attention_mask"].tolist() == [[1, 1, 0, 0, 0]]


def test_collate_pads_chosen_and_rejected_to_one_length() -> None:
    # Given DPO examples whose rejected side is longer
    examples = build([{"prompt": "p", "chosen": "a", "rejected": "bbbb"}, {"prompt": "pp", "chosen": "c", "rejected": "d"}], "DPO")
    # When collated
    batch = collate(examples, PAD_ID)
    # Then all four tensors share the longest length, with masks for each side
    assert set(batch) == {f"{side}_{key}" for side in ("chosen", "rejected") for key in ("input_ids", "labels", "attention_mask")}
    assert {tuple(tensor.shape) for tensor in batch.values()} == {(2, 7)}
    assert batch["chosen_attention_mask"].tolist()[0] == [1, 1, 1, 1, 0, 0, 0]
    assert batch["rejected_labels"].tolist()[0] == [M, M, *b("bbbb"), EOS_ID]


def test_examples_from_the_fixture_datasets_collate_for_every_training_type(
    make_dataset: Any, make_data_config: Any, byte_tokenizer: ByteTokenizer
) -> None:
    # Given the shared datasets of every training type
    for training_type in ("CONTINUED_PRETRAIN", "FULL_FINETUNE", "SFT", "LORA", "QLORA", "DPO"):
        config = make_data_config(make_dataset(training_type, 8, name=f"{training_type}.jsonl"))
        train, _ = load_splits(config, {}, training_type)
        # When built and collated
        examples = build_examples(train, byte_tokenizer, training_type, config, hyper(training_type))
        batch = collate(examples[:4], byte_tokenizer.pad_token_id)
        # Then each batch has trained positions and no sequence longer than max_seq_length
        label_keys = [key for key in batch if key.endswith("labels")]
        assert all(int((batch[key][:, 1:] != M).sum()) > 0 for key in label_keys), training_type
        assert max(tensor.shape[1] for tensor in batch.values()) <= config.max_seq_length
