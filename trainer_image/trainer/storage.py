"""One small storage API over local paths and s3:// URIs: checkpoints, metrics, run specs, models.

boto3 honours AWS_ENDPOINT_URL_S3 by itself (botocore >= 1.31); we also pass it explicitly so that
local mode (the emulated S3) works whatever boto3 version a custom base image carries. The client is
created on first use: a run that never touches S3 never imports boto3.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from schemas.trainer import ENV_S3_ENDPOINT

_client: Any = None
_client_lock = threading.Lock()


def is_s3(uri: str) -> bool:
    return uri.startswith("s3://")


def join(base: str, *parts: str) -> str:
    """Join URI or path segments with exactly one '/' between them."""
    out = base.rstrip("/")
    for part in parts:
        part = part.strip("/")
        if part:
            out = f"{out}/{part}"
    return out


def split_s3(uri: str) -> tuple[str, str]:
    parsed = urlparse(uri)
    if parsed.scheme != "s3" or not parsed.netloc:
        raise ValueError(f"not an s3:// URI: {uri!r}")
    return parsed.netloc, parsed.path.lstrip("/")


def local_path(uri: str) -> Path:
    return Path(uri[len("file://") :] if uri.startswith("file://") else uri)


def s3_client() -> Any:
    global _client
    with _client_lock:
        if _client is None:
            import boto3  # lazy: most local runs never touch S3
            from botocore.config import Config

            endpoint = os.environ.get(ENV_S3_ENDPOINT) or os.environ.get("AWS_ENDPOINT_URL") or None
            _client = boto3.client("s3", endpoint_url=endpoint, config=Config(retries={"max_attempts": 8, "mode": "adaptive"}))
        return _client


def reset_client() -> None:
    """Tests point AWS_ENDPOINT_URL_S3 at a fresh emulator; forget the old client."""
    global _client
    with _client_lock:
        _client = None


def read_bytes(uri: str) -> bytes:
    if is_s3(uri):
        bucket, key = split_s3(uri)
        return s3_client().get_object(Bucket=bucket, Key=key)["Body"].read()
    return local_path(uri).read_bytes()


def read_text(uri: str) -> str:
    return read_bytes(uri).decode("utf-8")


def write_bytes(uri: str, data: bytes) -> None:
    """Whole-object write; local writes go through a temp file + rename so readers never see half a file."""
    if is_s3(uri):
        bucket, key = split_s3(uri)
        s3_client().put_object(Bucket=bucket, Key=key, Body=data)
        return
    target = local_path(uri)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    tmp.write_bytes(data)
    os.replace(tmp, target)


def write_text(uri: str, text: str) -> None:
    write_bytes(uri, text.encode("utf-8"))


def create_text(uri: str, text: str) -> bool:
    """Write only if nothing is there, atomically: True when this call created it, False when it existed
    (or another writer created it first). S3: a conditional PutObject (If-None-Match: *; a concurrent
    conditional write answers 409); local: a complete temp file hard-linked into place (link never replaces)."""
    data = text.encode("utf-8")
    if is_s3(uri):
        bucket, key = split_s3(uri)
        client = s3_client()
        try:
            client.put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
        except client.exceptions.ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in {"PreconditionFailed", "ConditionalRequestConflict", "412", "409"}:
                return False
            raise
        return True
    target = local_path(uri)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    tmp.write_bytes(data)
    try:
        os.link(tmp, target)
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)
    return True


def exists(uri: str) -> bool:
    if is_s3(uri):
        bucket, key = split_s3(uri)
        client = s3_client()
        try:
            client.head_object(Bucket=bucket, Key=key)
        except client.exceptions.ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in {"404", "NoSuchKey", "NotFound"}:
                return False
            raise
        return True
    return local_path(uri).exists()


def upload_file(src: Path, uri: str) -> None:
    if is_s3(uri):
        bucket, key = split_s3(uri)
        s3_client().upload_file(str(src), bucket, key)
        return
    target = local_path(uri)
    if target.resolve() == src.resolve():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    shutil.copyfile(src, tmp)
    os.replace(tmp, target)


def download_file(uri: str, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    if is_s3(uri):
        bucket, key = split_s3(uri)
        s3_client().download_file(bucket, key, str(dest))
        return
    src = local_path(uri)
    if src.resolve() != dest.resolve():
        shutil.copyfile(src, dest)


def list_files(prefix_uri: str) -> Iterator[str]:
    """Every file under a prefix, as paths relative to it."""
    if is_s3(prefix_uri):
        bucket, key = split_s3(prefix_uri)
        key = key.rstrip("/") + "/" if key else ""
        paginator = s3_client().get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=bucket, Prefix=key):
            for obj in page.get("Contents", []):
                yield obj["Key"][len(key) :]
        return
    root = local_path(prefix_uri)
    if not root.is_dir():
        return
    for path in sorted(root.rglob("*")):
        if path.is_file():
            yield path.relative_to(root).as_posix()


def list_children(prefix_uri: str) -> list[str]:
    """Names of the immediate sub-directories (common prefixes) under a prefix."""
    if is_s3(prefix_uri):
        bucket, key = split_s3(prefix_uri)
        key = key.rstrip("/") + "/" if key else ""
        names: list[str] = []
        paginator = s3_client().get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=bucket, Prefix=key, Delimiter="/"):
            for common in page.get("CommonPrefixes", []):
                names.append(common["Prefix"][len(key) :].rstrip("/"))
        return sorted(names)
    root = local_path(prefix_uri)
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if p.is_dir())


def delete_file(uri: str) -> None:
    """Delete one object or file (nothing if it is not there)."""
    if is_s3(uri):
        bucket, key = split_s3(uri)
        s3_client().delete_object(Bucket=bucket, Key=key)
        return
    local_path(uri).unlink(missing_ok=True)


def delete_prefix(prefix_uri: str, *, first: str | None = None) -> None:
    """Delete everything under a prefix; `first` (e.g. the manifest) goes before the rest, so a
    deletion cut short leaves an incomplete checkpoint that readers already ignore."""
    if is_s3(prefix_uri):
        bucket, key = split_s3(prefix_uri)
        key = key.rstrip("/") + "/"
        client = s3_client()
        if first:
            client.delete_object(Bucket=bucket, Key=key + first)
        keys = [key + rel for rel in list_files(prefix_uri)]
        for start in range(0, len(keys), 1000):  # DeleteObjects takes at most 1000 keys
            chunk = [{"Key": k} for k in keys[start : start + 1000]]
            client.delete_objects(Bucket=bucket, Delete={"Objects": chunk, "Quiet": True})
        return
    root = local_path(prefix_uri)
    if first and (root / first).exists():
        (root / first).unlink()
    shutil.rmtree(root, ignore_errors=True)


def upload_dir(src: Path, prefix_uri: str, *, last: str | None = None) -> None:
    """Upload a directory; `last` (the manifest) goes after every other file."""
    files = sorted(p for p in src.rglob("*") if p.is_file())
    tail = [p for p in files if last and p.relative_to(src).as_posix() == last]
    for path in [p for p in files if p not in tail] + tail:
        upload_file(path, join(prefix_uri, path.relative_to(src).as_posix()))


def download_dir(prefix_uri: str, dest: Path) -> None:
    for rel in list_files(prefix_uri):
        download_file(join(prefix_uri, rel), dest / rel)
