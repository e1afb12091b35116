"""trainer/storage.py, the one storage API over local paths and s3:// (moto): each call's contract, the same
on both sides (what checkpoints, retention and exports stand on)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore import exceptions as botocore_exceptions
from trainer import storage


@pytest.fixture(params=["local", "s3"])
def base(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A prefix to work under: a local directory, or a key prefix in a moto bucket."""
    if request.param == "local":
        yield str(tmp_path / "area")
        return
    _client, bucket = request.getfixturevalue("s3_bucket")
    yield f"s3://{bucket}/jobs/j1"


def test_join_puts_exactly_one_slash_between_segments() -> None:
    assert storage.join("s3://b/jobs/", "/j1/", "checkpoints") == "s3://b/jobs/j1/checkpoints"
    assert storage.join("/tmp/x", "", "/a/b/") == "/tmp/x/a/b"
    assert storage.join("s3://b/p") == "s3://b/p"


def test_split_s3_and_local_path() -> None:
    assert storage.split_s3("s3://bucket/a/b.json") == ("bucket", "a/b.json")
    assert storage.split_s3("s3://bucket") == ("bucket", "")
    for bad in ("/tmp/x", "s3:///key", "https://bucket/key"):
        with pytest.raises(ValueError, match="not an s3:// URI"):
            storage.split_s3(bad)
    assert storage.local_path("file:///tmp/x/y") == Path("/tmp/x/y")
    assert storage.local_path("/tmp/x/y") == Path("/tmp/x/y")
    assert storage.is_s3("s3://b/k") and not storage.is_s3("/s3://b") and not storage.is_s3("file:///x")


def test_write_read_exists_and_delete_one_file(base: str) -> None:
    uri = storage.join(base, "deep/dir/a.txt")
    assert not storage.exists(uri)
    storage.write_text(uri, "héllo")
    assert storage.exists(uri) and storage.read_text(uri) == "héllo"
    storage.write_bytes(uri, b"\x00\x01")
    assert storage.read_bytes(uri) == b"\x00\x01"
    storage.delete_file(uri)
    assert not storage.exists(uri)
    storage.delete_file(uri)  # nothing there: still fine


def test_create_text_writes_once_and_never_replaces(base: str) -> None:
    uri = storage.join(base, "marker/owner.json")
    assert storage.create_text(uri, "first") is True
    assert storage.create_text(uri, "second") is False
    assert storage.read_text(uri) == "first"
    if not storage.is_s3(uri):
        # No temp file is left beside it, either way
        assert sorted(p.name for p in storage.local_path(uri).parent.iterdir()) == ["owner.json"]


def test_list_files_and_children_relative_to_the_prefix(base: str) -> None:
    for rel in ("checkpoints/step-000100/manifest.json", "checkpoints/step-000100/w.bin", "checkpoints/step-000200/w.bin", "metrics.jsonl"):
        storage.write_text(storage.join(base, rel), rel)
    assert sorted(storage.list_files(base)) == [
        "checkpoints/step-000100/manifest.json",
        "checkpoints/step-000100/w.bin",
        "checkpoints/step-000200/w.bin",
        "metrics.jsonl",
    ]
    assert sorted(storage.list_files(storage.join(base, "checkpoints/step-000100"))) == ["manifest.json", "w.bin"]
    assert storage.list_children(storage.join(base, "checkpoints")) == ["step-000100", "step-000200"]
    assert storage.list_children(base) == ["checkpoints"]
    # A prefix is a directory, not a string prefix: checkpoints/step-0001 lists nothing of step-000100
    assert list(storage.list_files(storage.join(base, "checkpoints/step-0001"))) == []
    assert storage.list_children(storage.join(base, "nothing-here")) == []


def test_delete_prefix_removes_everything_under_it_and_nothing_beside(base: str) -> None:
    for rel in ("ck/step-000100/manifest.json", "ck/step-000100/w.bin", "ck/step-000100/sub/x.bin", "ck/step-0001000/w.bin"):
        storage.write_text(storage.join(base, rel), rel)
    storage.delete_prefix(storage.join(base, "ck/step-000100"), first="manifest.json")
    assert sorted(storage.list_files(base)) == ["ck/step-0001000/w.bin"]
    storage.delete_prefix(storage.join(base, "ck/none"), first="manifest.json")  # nothing there: fine
    assert sorted(storage.list_files(base)) == ["ck/step-0001000/w.bin"]


class _Deleting:
    """An S3 client that records deletions (DeleteObjects' 1000-key limit, without 1000 uploads)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def delete_object(self, *, Bucket: str, Key: str) -> None:
        self.calls.append(("one", Key))

    def delete_objects(self, *, Bucket: str, Delete: dict[str, Any]) -> None:
        assert Delete["Quiet"] is True
        self.calls.append(("many", [o["Key"] for o in Delete["Objects"]]))


def test_delete_prefix_deletes_in_chunks_of_at_most_a_thousand(monkeypatch: pytest.MonkeyPatch) -> None:
    client = _Deleting()
    monkeypatch.setattr(storage, "_client", client)
    names = [f"{i:05d}" for i in range(2003)]
    monkeypatch.setattr(storage, "list_files", lambda prefix: iter(names))
    storage.delete_prefix("s3://b/jobs/j1/ck/", first="manifest.json")
    assert client.calls[0] == ("one", "jobs/j1/ck/manifest.json")
    chunks = [keys for kind, keys in client.calls[1:]]
    assert [len(c) for c in chunks] == [1000, 1000, 3]
    assert [k for c in chunks for k in c] == [f"jobs/j1/ck/{n}" for n in names]


def test_upload_dir_puts_the_last_file_after_every_other_and_download_dir_reads_it_back(
    base: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "src"
    for rel in ("a.bin", "manifest.json", "z/inner.bin"):
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(rel)
    order: list[str] = []
    real = storage.upload_file
    monkeypatch.setattr(storage, "upload_file", lambda path, uri: (order.append(uri), real(path, uri)))
    storage.upload_dir(src, storage.join(base, "ck"), last="manifest.json")
    assert order[-1] == storage.join(base, "ck/manifest.json")
    assert sorted(order) == sorted(storage.join(base, "ck", r) for r in ("a.bin", "manifest.json", "z/inner.bin"))
    dest = tmp_path / "dest"
    storage.download_dir(storage.join(base, "ck"), dest)
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()) == ["a.bin", "manifest.json", "z/inner.bin"]
    assert (dest / "z/inner.bin").read_text() == "z/inner.bin"


def test_upload_and_download_a_file_onto_itself_locally_is_a_no_op(tmp_path: Path) -> None:
    path = tmp_path / "same.bin"
    path.write_bytes(b"data")
    storage.upload_file(path, str(path))
    storage.download_file(str(path), path)
    assert path.read_bytes() == b"data"
    storage.upload_file(path, str(tmp_path / "copy/other.bin"))
    assert (tmp_path / "copy/other.bin").read_bytes() == b"data"
    assert [p.name for p in (tmp_path / "copy").iterdir()] == ["other.bin"]


def test_join_and_prefixes_strip_only_slashes() -> None:
    # Segments ending or starting with other characters keep them (an 'X' is not a separator)
    assert storage.join("s3://b/pX/", "/Xa/") == "s3://b/pX/Xa"


def test_listing_and_deleting_take_a_prefix_with_or_without_its_slash(s3_bucket: tuple[Any, str]) -> None:
    client, bucket = s3_bucket
    for key in ("ckX/step-1/w.bin", "ckX/stepX/w.bin", "ckX/stepX/sub/v.bin", "top.bin"):
        client.put_object(Bucket=bucket, Key=key, Body=b"x")
    assert storage.list_children(f"s3://{bucket}/ckX/") == ["step-1", "stepX"]
    assert storage.list_children(f"s3://{bucket}/ckX") == ["step-1", "stepX"]
    assert storage.list_children(f"s3://{bucket}") == ["ckX"]  # the bucket's root
    assert sorted(storage.list_files(f"s3://{bucket}/ckX/stepX/")) == ["sub/v.bin", "w.bin"]
    storage.delete_prefix(f"s3://{bucket}/ckX/stepX/")
    assert sorted(storage.list_files(f"s3://{bucket}")) == ["ckX/step-1/w.bin", "top.bin"]


def test_download_file_makes_the_missing_directories(base: str, tmp_path: Path) -> None:
    uri = storage.join(base, "one.bin")
    storage.write_bytes(uri, b"1")
    dest = tmp_path / "a" / "b" / "c" / "one.bin"
    storage.download_file(uri, dest)
    assert dest.read_bytes() == b"1"


def test_reset_client_forgets_the_client(s3_bucket: tuple[Any, str]) -> None:
    storage.s3_client()
    storage.reset_client()
    assert storage._client is None


class _Refusing:
    """An S3 client whose conditional put / head answer with one error code (what moto does not produce)."""

    exceptions = botocore_exceptions  # what code reads as client.exceptions.ClientError

    def __init__(self, response: dict[str, Any]) -> None:
        self.response = response

    def _raise(self, **_: Any) -> None:
        raise self.exceptions.ClientError(self.response, "PutObject")

    put_object = head_object = _raise


@pytest.mark.parametrize("code", ["PreconditionFailed", "ConditionalRequestConflict", "412", "409"])
def test_create_text_reads_every_conflict_code_as_already_there(monkeypatch: pytest.MonkeyPatch, code: str) -> None:
    monkeypatch.setattr(storage, "_client", _Refusing({"Error": {"Code": code}}))
    assert storage.create_text("s3://b/k", "x") is False


@pytest.mark.parametrize("code", ["404", "NoSuchKey", "NotFound"])
def test_exists_reads_every_not_found_code_as_absent(monkeypatch: pytest.MonkeyPatch, code: str) -> None:
    monkeypatch.setattr(storage, "_client", _Refusing({"Error": {"Code": code}}))
    assert storage.exists("s3://b/k") is False


@pytest.mark.parametrize("response", [{"Error": {"Code": "AccessDenied"}}, {}])
def test_other_errors_are_raised_not_read_as_an_answer(monkeypatch: pytest.MonkeyPatch, response: dict[str, Any]) -> None:
    monkeypatch.setattr(storage, "_client", _Refusing(response))
    with pytest.raises(botocore_exceptions.ClientError):
        storage.create_text("s3://b/k", "x")
    with pytest.raises(botocore_exceptions.ClientError):
        storage.exists("s3://b/k")


def test_split_s3_keeps_a_keys_first_character() -> None:
    assert storage.split_s3("s3://bucket/Xkey/a") == ("bucket", "Xkey/a")


def test_download_dir_reads_each_file_under_the_prefix_not_beside_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    (src / "d" / "f.txt").write_text("under the prefix")
    elsewhere = tmp_path / "cwd"
    (elsewhere / "d").mkdir(parents=True)
    (elsewhere / "d" / "f.txt").write_text("beside the working directory")
    monkeypatch.chdir(elsewhere)
    storage.download_dir(str(src), tmp_path / "dest")
    assert (tmp_path / "dest" / "d" / "f.txt").read_text() == "under the prefix"


@pytest.mark.parametrize("variable", ["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"])
def test_the_client_is_pointed_at_the_endpoint_even_by_a_boto3_that_ignores_the_environment(
    monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    # Given a boto3 that does not read endpoint variables itself (an older one in a custom base image; here
    # AWS_IGNORE_CONFIGURED_ENDPOINT_URLS makes the pinned one behave so), and one endpoint variable set
    monkeypatch.setenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "true")
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setenv(variable, "http://127.0.0.1:9")
    storage.reset_client()
    try:
        client = storage.s3_client()
        # Then the client uses it, and retries adaptively up to 8 attempts
        assert client.meta.endpoint_url == "http://127.0.0.1:9"
        assert client.meta.config.retries == {"mode": "adaptive", "total_max_attempts": 9}
        assert storage.s3_client() is client
    finally:
        storage.reset_client()


def test_without_an_endpoint_variable_the_client_is_aws_s3(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    storage.reset_client()
    try:
        assert storage.s3_client().meta.endpoint_url == "https://s3.amazonaws.com"
    finally:
        storage.reset_client()
