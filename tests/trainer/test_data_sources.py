"""Reading training data: source kinds, projection, filters, sampling, validation split, bad data."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from trainer.data import load_splits
from trainer.failures import DataError, UserError
from trainer.formatting import Record
from trainer.sources import reset_s3_client, s3_client

from schemas.configs import DataConfig, DataSource, Sampling, TrainingType
from tests.trainer.conftest import make_records, write_jsonl

MakeDataset = Callable[..., Path]
MakeDataConfig = Callable[..., DataConfig]


def ids(records: list[dict[str, Any]]) -> list[int]:
    return [record["id"] for record in records]


# --- source kinds --------------------------------------------------------------------------------


def test_a_local_file_is_read_in_order_with_file_and_line(make_dataset: MakeDataset, make_data_config: MakeDataConfig) -> None:
    # Given a JSONL file of 5 records
    path = make_dataset("text", 5)
    # When it is loaded
    train, validation = load_splits(make_data_config(path), {})
    # Then every record is there, in file order, and knows where it came from
    assert ids(train) == [0, 1, 2, 3, 4]
    assert validation == []
    assert isinstance(train[2], Record)
    assert (train[2].source, train[2].line) == (str(path), 3)
    assert train[0] == make_records("text", 1)[0]


def test_a_directory_reads_jsonl_and_gz_files_sorted_by_name(tmp_path: Path, make_data_config: MakeDataConfig) -> None:
    # Given a directory with a .jsonl, a .jsonl.gz in a sub-folder, and files that are not data
    records = make_records("text", 6)
    write_jsonl(tmp_path / "d" / "b.jsonl", records[2:4])
    write_jsonl(tmp_path / "d" / "a.jsonl", records[:2])
    write_jsonl(tmp_path / "d" / "c" / "part.jsonl.gz", records[4:], gz=True)
    (tmp_path / "d" / "README.md").write_text("not data")
    write_jsonl(tmp_path / "d" / ".hidden" / "x.jsonl", records)
    # When the directory is the source
    train, _ = load_splits(make_data_config(tmp_path / "d"), {})
    # Then a.jsonl, b.jsonl, c/part.jsonl.gz are read in that order and nothing else
    assert ids(train) == [0, 1, 2, 3, 4, 5]
    assert train[4].source == str(tmp_path / "d" / "c" / "part.jsonl.gz")


def test_gzip_is_detected_by_its_bytes_not_its_name(tmp_path: Path, make_data_config: MakeDataConfig) -> None:
    # Given gzip data in a file named .jsonl
    path = write_jsonl(tmp_path / "misnamed.jsonl", make_records("text", 3), gz=True)
    # When it is loaded with format auto
    train, _ = load_splits(make_data_config(path), {})
    # Then it is decompressed
    assert ids(train) == [0, 1, 2]


@pytest.mark.parametrize(("declared", "gz", "message"), [("jsonl", True, "is gzip-compressed"), ("jsonl.gz", False, "not gzip-compressed")])
def test_a_declared_format_that_contradicts_the_bytes_is_refused(tmp_path: Path, declared: str, gz: bool, message: str) -> None:
    # Given a source whose declared format does not match the file
    path = write_jsonl(tmp_path / "x.jsonl", make_records("text", 2), gz=gz)
    dc = DataConfig(sources=[DataSource(path=str(path), format=declared)])
    # When it is loaded, Then the error names the file and the mismatch
    with pytest.raises(DataError, match=message) as info:
        load_splits(dc, {})
    assert info.value.file == str(path)


def test_s3_object_and_prefix_are_read_with_their_uris_in_errors(s3_bucket: tuple[Any, str], make_data_config: MakeDataConfig) -> None:
    # Given one object and a prefix of two objects (one gzipped) in the moto bucket
    client, bucket = s3_bucket
    records = make_records("text", 6)
    body = "".join(json.dumps(r) + "\n" for r in records)
    client.put_object(Bucket=bucket, Key="single.jsonl", Body=body.encode())
    client.put_object(Bucket=bucket, Key="train/part-0.jsonl", Body="".join(json.dumps(r) + "\n" for r in records[:3]).encode())
    gz_body = gzip.compress("".join(json.dumps(r) + "\n" for r in records[3:]).encode())
    client.put_object(Bucket=bucket, Key="train/part-1.jsonl.gz", Body=gz_body)
    client.put_object(Bucket=bucket, Key="bad/x.jsonl", Body=b'{"text": "ok"}\n{not json}\n')
    # When each is loaded
    single, _ = load_splits(make_data_config(f"s3://{bucket}/single.jsonl"), {})
    prefix, _ = load_splits(make_data_config(f"s3://{bucket}/train"), {})
    # Then both hold every record in key order, and records name their s3:// URI
    assert ids(single) == ids(prefix) == [0, 1, 2, 3, 4, 5]
    assert (prefix[4].source, prefix[4].line) == (f"s3://{bucket}/train/part-1.jsonl.gz", 2)
    # And bad data on S3 is reported with the object's URI and line, not the cache path
    with pytest.raises(DataError) as info:
        load_splits(make_data_config(f"s3://{bucket}/bad/"), {})
    assert (info.value.file, info.value.line) == (f"s3://{bucket}/bad/x.jsonl", 2)


def test_s3_download_is_reused_until_an_object_changes(s3_bucket: tuple[Any, str], make_data_config: MakeDataConfig) -> None:
    # Given a prefix that was loaded once
    client, bucket = s3_bucket
    client.put_object(Bucket=bucket, Key="d/a.jsonl", Body=b'{"id": 1, "text": "a"}\n')
    assert ids(load_splits(make_data_config(f"s3://{bucket}/d/"), {})[0]) == [1]
    # When an object changes and the prefix is loaded again
    client.put_object(Bucket=bucket, Key="d/a.jsonl", Body=b'{"id": 2, "text": "b"}\n')
    train, _ = load_splits(make_data_config(f"s3://{bucket}/d/"), {})
    # Then the new content is read, not the stale cached copy
    assert ids(train) == [2]


def test_the_s3_client_honours_aws_endpoint_url_s3(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given local mode's emulated S3 endpoint in the environment
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:4566")
    reset_s3_client()
    try:
        # When the trainer's S3 client is created, Then it talks to that endpoint
        assert s3_client().meta.endpoint_url == "http://127.0.0.1:4566"
    finally:
        reset_s3_client()


def test_a_missing_s3_prefix_is_a_clear_error(s3_bucket: tuple[Any, str], make_data_config: MakeDataConfig) -> None:
    # Given an empty bucket
    _, bucket = s3_bucket
    # When a prefix that holds nothing is loaded, Then the error names it
    with pytest.raises(UserError, match=f"nothing found at s3://{bucket}/missing"):
        load_splits(make_data_config(f"s3://{bucket}/missing"), {})


def test_channel_paths_map_through_the_channels_and_sm_channel_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make_data_config: MakeDataConfig
) -> None:
    # Given a "train" channel passed in and an "extra" channel only in the environment
    records = make_records("text", 4)
    write_jsonl(tmp_path / "train" / "data.jsonl", records[:2])
    write_jsonl(tmp_path / "extra" / "more.jsonl", records[2:])
    monkeypatch.setenv("SM_CHANNEL_EXTRA", str(tmp_path / "extra"))
    dc = make_data_config("channel://train", "channel://EXTRA/more.jsonl")
    # When loaded
    train, _ = load_splits(dc, {"train": tmp_path / "train"})
    # Then both channels were read
    assert ids(train) == [0, 1, 2, 3]
    # And an unknown channel is refused with the variable that would map it
    with pytest.raises(UserError, match="SM_CHANNEL_NOPE is not set"):
        load_splits(make_data_config("channel://nope"), {"train": tmp_path / "train"})


# --- projection, filters, sampling, validation ---------------------------------------------------


def test_columns_project_and_filters_keep_equal_rows(tmp_path: Path) -> None:
    # Given records with a language field and an extra field
    rows = [{"id": i, "text": f"t{i}", "lang": "en" if i % 3 else "fr", "extra": [i]} for i in range(9)]
    path = write_jsonl(tmp_path / "x.jsonl", rows)
    source = DataSource(path=str(path), columns=["id", "text"], filters={"lang": "fr"})
    # When loaded with a projection and a filter on a column that is not projected
    train, _ = load_splits(DataConfig(sources=[source]), {})
    # Then only French rows remain, with only the projected columns
    assert train == [{"id": 0, "text": "t0"}, {"id": 3, "text": "t3"}, {"id": 6, "text": "t6"}]
    assert train[1].line == 4


def test_filters_that_match_nothing_are_an_error(make_dataset: MakeDataset) -> None:
    # Given a filter no record matches
    source = DataSource(path=str(make_dataset("text", 3)), filters={"id": 99})
    # When loaded, Then the error says the filters matched nothing
    with pytest.raises(DataError, match="no records match filters"):
        load_splits(DataConfig(sources=[source]), {})


def test_sampling_is_deterministic_for_a_seed_and_keeps_file_order(make_dataset: MakeDataset) -> None:
    # Given a 100-record source sampled at 30% (max 25)
    path = str(make_dataset("text", 100))

    def sample(seed: int, sampling_seed: int | None = None) -> list[int]:
        source = DataSource(path=path, sampling=Sampling(fraction=0.3, max_samples=25, seed=sampling_seed))
        return ids(load_splits(DataConfig(sources=[source], seed=seed), {})[0])

    # When sampled twice with the same seed and once with another
    first, again, other = sample(1), sample(1), sample(2)
    # Then the same seed gives the same sample, capped by max_samples, in file order
    assert first == again
    assert len(first) == 25
    assert first == sorted(first)
    assert first != other
    # And sampling.seed overrides data_config.seed
    assert sample(1, sampling_seed=7) == sample(2, sampling_seed=7)


def test_validation_split_is_carved_deterministically(make_dataset: MakeDataset, make_data_config: MakeDataConfig) -> None:
    # Given 50 records and validation_split 0.2
    path = make_dataset("text", 50)
    # When split twice with the same seed and once with another
    train, validation = load_splits(make_data_config(path, validation_split=0.2, seed=3), {})
    train2, validation2 = load_splits(make_data_config(path, validation_split=0.2, seed=3), {})
    _, validation3 = load_splits(make_data_config(path, validation_split=0.2, seed=4), {})
    # Then 10 records are held out, the same ones for the same seed, none lost or duplicated
    assert len(validation) == 10
    assert (ids(train), ids(validation)) == (ids(train2), ids(validation2))
    assert sorted(ids(train) + ids(validation)) == list(range(50))
    assert ids(validation) != ids(validation3)


def test_validation_sources_take_precedence_over_the_split(tmp_path: Path) -> None:
    # Given a train source, a validation source, and a validation_split
    train_path = write_jsonl(tmp_path / "train.jsonl", make_records("text", 8))
    val_path = write_jsonl(tmp_path / "val.jsonl", [{"id": 100, "text": "held out"}])
    dc = DataConfig(sources=[DataSource(path=str(train_path)), DataSource(path=str(val_path), split="validation")], validation_split=0.5)
    # When loaded
    train, validation = load_splits(dc, {})
    # Then the validation source is the validation set and no training record is carved off
    assert ids(validation) == [100]
    assert ids(train) == list(range(8))


def test_a_split_that_leaves_no_training_data_is_refused(make_dataset: MakeDataset, make_data_config: MakeDataConfig) -> None:
    # Given a single record and validation_split 0.5
    dc = make_data_config(make_dataset("text", 1), validation_split=0.5)
    # When loaded, Then the error names validation_split
    with pytest.raises(UserError, match="validation_split"):
        load_splits(dc, {})


# --- bad data fails fast with file and line ------------------------------------------------------


def _write(tmp_path: Path, name: str, content: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(content)
    return path


@pytest.mark.parametrize(
    ("content", "line", "message"),
    [
        (b"", 0, "empty file"),
        (b"\n  \n", 0, "empty file"),
        (b'{"text": "a"}\n{"text": "b"\n', 2, "unparseable JSON"),
        (b'{"text": "a"}\n\n[1, 2]\n', 3, "expected a JSON object per line, got list"),
        (b'{"text": "a"}\n{"text": "\xff\xfe"}\n', 2, "not valid UTF-8"),
    ],
    ids=["empty", "blank-only", "unparseable", "not-an-object", "bad-utf8"],
)
def test_bad_lines_name_the_file_and_line(tmp_path: Path, content: bytes, line: int, message: str) -> None:
    # Given a file with one kind of bad content
    path = _write(tmp_path, "bad.jsonl", content)
    # When it is loaded
    with pytest.raises(DataError, match=message) as info:
        load_splits(DataConfig(sources=[DataSource(path=str(path))]), {})
    # Then the error names the file and the line (0: the whole file)
    assert (info.value.file, info.value.line) == (str(path), line)
    assert str(info.value).startswith(f"{path}:{line}: " if line else f"{path}: ")


def test_corrupt_gzip_is_reported(tmp_path: Path) -> None:
    # Given a truncated gzip file
    good = gzip.compress(b"".join(json.dumps(r).encode() + b"\n" for r in make_records("text", 50)))
    path = _write(tmp_path, "cut.jsonl.gz", good[: len(good) // 2])
    # When loaded, Then a DataError names the file
    with pytest.raises(DataError, match="corrupt gzip") as info:
        load_splits(DataConfig(sources=[DataSource(path=str(path))]), {})
    assert info.value.file == str(path)


def test_missing_path_and_empty_directory_are_errors(tmp_path: Path) -> None:
    # Given a path that does not exist and a directory with no data files
    (tmp_path / "empty").mkdir()
    # When each is loaded, Then each is a DataError naming it
    with pytest.raises(DataError, match="no such file or directory"):
        load_splits(DataConfig(sources=[DataSource(path=str(tmp_path / "nope.jsonl"))]), {})
    with pytest.raises(DataError, match=r"no \*\.jsonl or \*\.jsonl\.gz files") as info:
        load_splits(DataConfig(sources=[DataSource(path=str(tmp_path / "empty"))]), {})
    assert info.value.file == str(tmp_path / "empty")


def test_a_projected_column_missing_from_a_row_names_the_line(tmp_path: Path) -> None:
    # Given a projection on a column the 3rd row lacks
    path = write_jsonl(tmp_path / "x.jsonl", [{"text": "a", "id": 1}, {"text": "b", "id": 2}, {"text": "c"}])
    source = DataSource(path=str(path), columns=["text", "id"])
    # When loaded, Then line 3 is named with the column
    with pytest.raises(DataError, match="missing column\\(s\\) 'id'") as info:
        load_splits(DataConfig(sources=[source]), {})
    assert info.value.line == 3


@pytest.mark.parametrize(
    ("training_type", "row", "message"),
    [
        (TrainingType.CONTINUED_PRETRAIN, {"body": "x"}, "missing required column\\(s\\) for CONTINUED_PRETRAIN: expected 'text'"),
        (TrainingType.SFT, {"prompt": "q"}, "missing required column\\(s\\) 'completion' for SFT"),
        (TrainingType.SFT, {"text": "plain text"}, "expected 'prompt' \\+ 'completion' or 'messages'"),
        (TrainingType.DPO, {"prompt": "q", "chosen": "a"}, "missing required column\\(s\\) 'rejected' for DPO"),
        (TrainingType.FULL_FINETUNE, {"text": 3}, "field 'text' must be a string, got int"),
        (TrainingType.DPO, {"prompt": "q", "chosen": None, "rejected": "b"}, "field 'chosen' must be a string, got null"),
        (TrainingType.SFT, {"messages": "hi"}, "field 'messages' must be a non-empty list"),
        (TrainingType.SFT, {"messages": [{"role": "user", "content": 1}]}, "'messages'\\[0\\].content must be a string"),
        (TrainingType.SFT, {"messages": [{"role": "user", "content": "hi"}]}, "no assistant turn"),
    ],
    ids=[
        "no-text",
        "no-completion",
        "text-for-sft",
        "no-rejected",
        "text-int",
        "chosen-null",
        "messages-str",
        "content-int",
        "no-assistant",
    ],
)
def test_training_type_columns_are_checked_at_load_with_file_and_line(
    tmp_path: Path, training_type: TrainingType, row: dict[str, Any], message: str
) -> None:
    # Given a valid first record and a bad second one for this training type
    good = make_records({"DPO": "dpo", "SFT": "prompt_completion"}.get(training_type.value, "text"), 1)[0]
    path = write_jsonl(tmp_path / "x.jsonl", [good, row])
    # When loaded for the training type
    with pytest.raises(DataError, match=message) as info:
        load_splits(DataConfig(sources=[DataSource(path=str(path))]), {}, training_type)
    # Then the error names the file and line 2
    assert (info.value.file, info.value.line) == (str(path), 2)


def test_field_mapping_is_named_in_a_missing_column_error(tmp_path: Path) -> None:
    # Given a mapping prompt <- question, and a row with no question
    path = write_jsonl(tmp_path / "x.jsonl", [{"question": "q", "completion": "a"}, {"completion": "a"}])
    dc = DataConfig(sources=[DataSource(path=str(path))], preprocess={"field_mapping": {"prompt": "question"}})
    # When loaded for SFT, Then the first row passes and the second names both names
    with pytest.raises(DataError, match=r"'prompt' \(read from 'question' by preprocess.field_mapping\)") as info:
        load_splits(dc, {}, TrainingType.SFT)
    assert info.value.line == 2
