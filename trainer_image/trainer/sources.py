"""Where training data and models come from: local paths, `s3://` URIs and SageMaker channels.

S3 objects are downloaded to a local cache before they are read (as SageMaker's File input mode does),
so every reader works on local files while error messages still name the `s3://` URI the user wrote.
The S3 client honours AWS_ENDPOINT_URL_S3 (local mode's emulated S3) and is created on first use.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from schemas.trainer import ENV_CHANNEL_PREFIX, ENV_S3_ENDPOINT
from trainer.failures import DataError, UserError

logger = logging.getLogger(__name__)

ENV_CACHE_DIR = "TRAINPLANE_CACHE_DIR"  # downloads from S3 (data and models) [<tmp>/trainplane-cache]
CHANNEL_SCHEME = "channel://"
DATA_SUFFIXES = (".jsonl", ".jsonl.gz")
GZIP_MAGIC = b"\x1f\x8b"

_client_lock = threading.Lock()
_s3_client: Any = None


def s3_client() -> Any:
    """The process's S3 client, created on first use (importing this module never touches AWS)."""
    global _s3_client
    with _client_lock:
        if _s3_client is None:
            import boto3

            _s3_client = boto3.client("s3", endpoint_url=os.environ.get(ENV_S3_ENDPOINT) or None)
        return _s3_client


def reset_s3_client() -> None:
    """Forget the cached client (tests switch endpoints and moto contexts)."""
    global _s3_client
    with _client_lock:
        _s3_client = None


def is_s3_uri(path: str) -> bool:
    return path.startswith("s3://")


def parse_s3_uri(uri: str) -> tuple[str, str]:
    if not is_s3_uri(uri):
        raise UserError(f"not an s3:// URI: {uri!r}")
    bucket, _, key = uri[len("s3://") :].partition("/")
    if not bucket:
        raise UserError(f"s3 URI has no bucket: {uri!r}")
    return bucket, key


def cache_root() -> Path:
    return Path(os.environ.get(ENV_CACHE_DIR) or Path(tempfile.gettempdir()) / "trainplane-cache")


@dataclass(frozen=True)
class S3Object:
    key: str
    size: int
    etag: str


@dataclass(frozen=True)
class S3Listing:
    prefix: str  # the objects' names relative to the listing start after this
    objects: list[S3Object]  # sorted by key; folder markers (keys ending in "/") left out
    single: bool  # the URI named one object exactly


def list_s3(uri: str) -> S3Listing:
    """The objects `uri` names: the exact key when it exists, else everything under `uri/`."""
    from botocore.exceptions import BotoCoreError, ClientError

    bucket, key = parse_s3_uri(uri)
    client = s3_client()
    try:
        if key and not key.endswith("/"):
            try:
                head = client.head_object(Bucket=bucket, Key=key)
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") not in {"404", "NoSuchKey", "NotFound"}:
                    raise
            else:
                parent = key.rsplit("/", 1)[0] + "/" if "/" in key else ""
                return S3Listing(parent, [S3Object(key, int(head["ContentLength"]), str(head.get("ETag", "")))], single=True)
            key += "/"
        objects = [
            S3Object(item["Key"], int(item["Size"]), str(item.get("ETag", "")))
            for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=key)
            for item in page.get("Contents", [])
            if not item["Key"].endswith("/")
        ]
    except (ClientError, BotoCoreError) as exc:
        raise UserError(f"cannot read {uri}: {exc}") from exc
    return S3Listing(key, sorted(objects, key=lambda obj: obj.key), single=False)


def download_s3(uri: str, kind: str) -> Path:
    """Download the object or prefix `uri` into the cache; returns the local file or directory.

    A finished download is recorded with the listing it came from, so a second call (a retry, a
    resumed attempt) reuses it unless an object changed. A half-finished one is never reused: files
    land in a temporary directory that is renamed into place only when complete.
    """
    bucket, _ = parse_s3_uri(uri)
    found = list_s3(uri)
    prefix, objects = found.prefix, found.objects
    if not objects:
        raise UserError(f"nothing found at {uri}")
    fingerprint = [[obj.key, obj.size, obj.etag] for obj in objects]
    where = f"{os.environ.get(ENV_S3_ENDPOINT, '')}|{uri}"
    target = cache_root() / kind / hashlib.sha256(where.encode()).hexdigest()[:24]
    if _is_complete(target, fingerprint):
        logger.info("using cached download of %s", uri)
    else:
        _download_into(target, bucket, prefix, objects, uri, fingerprint)
    return target / objects[0].key[len(prefix) :] if found.single else target


_MARKER = ".trainplane-download.json"


def _is_complete(target: Path, fingerprint: list[list[Any]]) -> bool:
    marker = target / _MARKER
    try:
        return bool(json.loads(marker.read_text(encoding="utf-8")).get("listing") == fingerprint)
    except (OSError, ValueError):
        return False


def _download_into(target: Path, bucket: str, prefix: str, objects: list[S3Object], uri: str, fingerprint: list[list[Any]]) -> None:
    from botocore.exceptions import BotoCoreError, ClientError

    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        client = s3_client()
        for obj in objects:
            local = staging / obj.key[len(prefix) :]
            local.parent.mkdir(parents=True, exist_ok=True)
            client.download_file(bucket, obj.key, str(local))
        (staging / _MARKER).write_text(json.dumps({"uri": uri, "listing": fingerprint}), encoding="utf-8")
        if target.exists() and not _is_complete(target, fingerprint):
            shutil.rmtree(target)  # a stale copy of objects that have changed since
        if not target.exists():
            staging.rename(target)
    except (ClientError, BotoCoreError) as exc:
        raise UserError(f"cannot download {uri}: {exc}") from exc
    finally:
        # Another process (a second local rank) may have finished first: its complete copy is kept.
        shutil.rmtree(staging, ignore_errors=True)
    logger.info("downloaded %d object(s) from %s to %s", len(objects), uri, target)


@dataclass(frozen=True)
class DataFile:
    """One JSONL file to read: `name` is what errors show (the URI the user wrote), `local` what is opened."""

    name: str
    local: Path


def channels_from_env(environ: Mapping[str, str] | None = None) -> dict[str, Path]:
    """SM_CHANNEL_<NAME>=<dir> variables as {name (lower case): dir}."""
    env = os.environ if environ is None else environ
    return {key[len(ENV_CHANNEL_PREFIX) :].lower(): Path(value) for key, value in env.items() if key.startswith(ENV_CHANNEL_PREFIX)}


def resolve_channel(path: str, channels: Mapping[str, Path]) -> Path:
    """channel://<name>[/sub/path] -> the channel's local directory (SageMaker copied the data there)."""
    name, _, rest = path[len(CHANNEL_SCHEME) :].partition("/")
    known = {key.lower(): value for key, value in channels_from_env().items()}
    known.update({key.lower(): Path(value) for key, value in channels.items()})
    if name.lower() not in known:
        listed = ", ".join(sorted(known)) or "none"
        variable = ENV_CHANNEL_PREFIX + name.upper()
        raise UserError(f"data source {path!r}: channel {name!r} is not mapped ({variable} is not set; channels: {listed})")
    return known[name.lower()] / rest if rest else known[name.lower()]


def resolve_data_files(path: str, channels: Mapping[str, Path]) -> list[DataFile]:
    """Expand one DataSource.path into the files to read, in a deterministic order."""
    if is_s3_uri(path):
        local = download_s3(path, "data")
        if local.is_file():
            return [DataFile(path, local)]
        base = path.rstrip("/")
        return [DataFile(f"{base}/{file.relative_to(local).as_posix()}", file) for file in _data_files_in(local, path)]
    local = resolve_channel(path, channels) if path.startswith(CHANNEL_SCHEME) else Path(path.removeprefix("file://")).expanduser()
    if local.is_file():
        return [DataFile(str(local), local)]
    if local.is_dir():
        return [DataFile(str(file), file) for file in _data_files_in(local, path)]
    raise DataError(path, 0, f"no such file or directory ({local})")


def _data_files_in(directory: Path, shown: str) -> list[Path]:
    files = sorted(
        (file for file in directory.rglob("*") if file.is_file() and file.name.endswith(DATA_SUFFIXES)),
        key=lambda file: file.relative_to(directory).as_posix(),
    )
    # Hidden files and folders (.cache, our download marker) are never data.
    files = [file for file in files if not any(part.startswith(".") for part in file.relative_to(directory).parts)]
    if not files:
        raise DataError(shown, 0, f"no {' or '.join('*' + suffix for suffix in DATA_SUFFIXES)} files in this directory")
    return files


def is_gzip(path: Path) -> bool:
    with path.open("rb") as handle:
        return handle.read(2) == GZIP_MAGIC


def iter_lines(file: DataFile, declared_format: str = "auto") -> Iterator[tuple[int, str]]:
    """(1-based line number, text) for each line; gzip is detected by its magic bytes.

    An explicit `format` that contradicts the bytes is refused rather than guessed around.
    """
    compressed = is_gzip(file.local)
    if declared_format == "jsonl" and compressed:
        raise DataError(file.name, 0, "format is 'jsonl' but the file is gzip-compressed (use 'jsonl.gz' or 'auto')")
    if declared_format == "jsonl.gz" and not compressed:
        raise DataError(file.name, 0, "format is 'jsonl.gz' but the file is not gzip-compressed (use 'jsonl' or 'auto')")
    line_no = 0
    try:
        with gzip.open(file.local, "rb") if compressed else file.local.open("rb") as handle:
            for line_no, raw in enumerate(handle, start=1):
                try:
                    yield line_no, raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise DataError(file.name, line_no, f"not valid UTF-8 ({exc.reason} at byte {exc.start})") from exc
    except (gzip.BadGzipFile, EOFError, OSError) as exc:
        raise DataError(file.name, line_no + 1, f"corrupt gzip data: {exc}") from exc
