"""Local mode's durable state: a write-through journal of DynamoDB items and S3 objects.

moto keeps everything in memory. Every committed write is appended here before the request that made
it is answered: one JSON line per unit of work (a PutItem, a transaction, an S3 PUT), fsync'd, so a
`kill -9` loses at most the write in flight. Records carry the resulting STATE of what changed (the
item as stored, the object's body and metadata), never the operation, so replaying is idempotent and
needs no condition evaluation. S3 bodies are files named by their sha256 (written and fsync'd before
the line that names them).

At start-up the journal is folded into its final state, replayed into moto, and rewritten compacted.
This module knows nothing of moto: moto_hooks.py produces the records and applies the folded state.

Record ops (one line: {"v": 1, "ops": [...]}):
  ddb.create_table {account, region, table, params}   (tables created at run time; deployers' are rebuilt)
  ddb.delete_table {account, region, table}
  ddb.put          {account, region, table, key, item}  (item in DynamoDB JSON, as moto stores it)
  ddb.delete       {account, region, table, key}
  s3.create_bucket {account, bucket, region}
  s3.delete_bucket {account, bucket}
  s3.put           {account, bucket, key, blob, size, etag, metadata, last_modified, storage_class}
  s3.delete        {account, bucket, key}
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1
JOURNAL_FILE = "journal.jsonl"
BLOBS_DIR = "blobs"
# A long session rewrites the same items over and over (progress, heartbeats): past this size the
# journal is folded while serving, so a restart never has to read more than about this much.
COMPACT_OVER_BYTES = 64 * 1024 * 1024

Op = dict[str, Any]


def item_key_id(key: dict[str, Any]) -> str:
    """A stable identity for a DynamoDB key in DynamoDB JSON ({"pk": {"S": "x"}, ...})."""
    return json.dumps(key, sort_keys=True, separators=(",", ":"))


@dataclass
class Table:
    account: str
    region: str
    name: str
    params: dict[str, Any] | None  # None: created by a deployer at start-up, not by a journaled call
    items: dict[str, Op] = field(default_factory=dict)  # key id -> ddb.put op


@dataclass
class Bucket:
    account: str
    name: str
    region: str | None  # None: created by a deployer at start-up
    objects: dict[str, Op] = field(default_factory=dict)  # object key -> s3.put op


@dataclass
class State:
    """The journal folded: what moto must hold after a restart."""

    tables: dict[tuple[str, str, str], Table] = field(default_factory=dict)
    buckets: dict[tuple[str, str], Bucket] = field(default_factory=dict)
    records: int = 0
    torn_tail: bool = False

    def apply(self, op: Op) -> None:
        kind = op["op"]
        if kind.startswith("ddb."):
            tkey = (op["account"], op["region"], op["table"])
            if kind == "ddb.create_table":
                self.tables[tkey] = Table(*tkey, params=op["params"])
            elif kind == "ddb.delete_table":
                self.tables.pop(tkey, None)
            else:
                table = self.tables.get(tkey) or self.tables.setdefault(tkey, Table(*tkey, params=None))
                kid = item_key_id(op["key"])
                if kind == "ddb.put":
                    table.items[kid] = op
                elif kind == "ddb.delete":
                    table.items.pop(kid, None)
                else:
                    raise ValueError(f"unknown journal op {kind!r}")
        elif kind.startswith("s3."):
            bkey = (op["account"], op["bucket"])
            if kind == "s3.create_bucket":
                self.buckets[bkey] = Bucket(*bkey, region=op["region"])
            elif kind == "s3.delete_bucket":
                self.buckets.pop(bkey, None)
            else:
                bucket = self.buckets.get(bkey) or self.buckets.setdefault(bkey, Bucket(*bkey, region=None))
                if kind == "s3.put":
                    bucket.objects[op["key"]] = op
                elif kind == "s3.delete":
                    bucket.objects.pop(op["key"], None)
                else:
                    raise ValueError(f"unknown journal op {kind!r}")
        else:
            raise ValueError(f"unknown journal op {kind!r}")

    def ops(self) -> Iterator[Op]:
        """The state as a minimal sequence of ops: containers first, then their contents."""
        for t in self.tables.values():
            if t.params is not None:
                yield {"op": "ddb.create_table", "account": t.account, "region": t.region, "table": t.name, "params": t.params}
        for b in self.buckets.values():
            if b.region is not None:
                yield {"op": "s3.create_bucket", "account": b.account, "bucket": b.name, "region": b.region}
        for t in self.tables.values():
            yield from t.items.values()
        for b in self.buckets.values():
            yield from b.objects.values()

    def blobs(self) -> set[str]:
        return {op["blob"] for b in self.buckets.values() for op in b.objects.values()}


class Journal:
    """Append-only JSON lines under `directory`, plus content-addressed blob files."""

    def __init__(self, directory: Path, *, compact_over_bytes: int = COMPACT_OVER_BYTES) -> None:
        self.directory = directory
        self.compact_over_bytes = compact_over_bytes
        self.path = directory / JOURNAL_FILE
        self.blob_dir = directory / BLOBS_DIR
        self.blob_dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._file: IO[bytes] | None = None

    # --- writing ---------------------------------------------------------------------------------

    def append(self, ops: list[Op]) -> None:
        """One unit of work, durably: the line is on disk (fsync) when this returns."""
        if not ops:
            return
        line = json.dumps({"v": FORMAT_VERSION, "ops": ops}, separators=(",", ":"), default=str).encode() + b"\n"
        with self._lock:
            fh = self._open()
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())
            if fh.tell() > self.compact_over_bytes:
                # Blobs are not collected here: a body may be on disk while the record naming it is still
                # waiting for this lock. Start-up, with nothing in flight, collects them.
                self._rewrite(self.fold())

    def put_blob(self, chunks: Iterator[bytes]) -> tuple[str, int]:
        """Store a body by its sha256 (durably, before any record names it); returns (sha256, size)."""
        digest = hashlib.sha256()
        size = 0
        tmp = self.blob_dir / f".tmp-{threading.get_ident()}-{os.getpid()}"
        with open(tmp, "wb") as fh:
            for chunk in chunks:
                digest.update(chunk)
                size += len(chunk)
                fh.write(chunk)
            fh.flush()
            os.fsync(fh.fileno())
        name = digest.hexdigest()
        target = self._blob_path(name)
        if target.exists():
            tmp.unlink()
        else:
            target.parent.mkdir(exist_ok=True)
            os.replace(tmp, target)
            _fsync_dir(target.parent)
        return name, size

    def read_blob(self, name: str) -> bytes:
        return self._blob_path(name).read_bytes()

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    # --- reading, compaction ---------------------------------------------------------------------

    def fold(self) -> State:
        """Every complete record, in order, folded into the final state. A torn last line (the write
        that was in flight when the process died) is dropped; a corrupt line elsewhere is an error."""
        state = State()
        if not self.path.exists():
            return state
        with open(self.path, "rb") as fh:
            lines = fh.read().split(b"\n")
        # split() leaves b"" after the final newline; anything else there is a line without its newline.
        last = lines.pop()
        if last:
            state.torn_tail = True
            logger.warning("journal %s: dropping an incomplete last record (%d bytes): the write in flight", self.path, len(last))
        for number, raw in enumerate(lines, start=1):
            if not raw:
                continue
            try:
                record = json.loads(raw)
            except ValueError as exc:
                if number == len(lines):
                    state.torn_tail = True
                    logger.warning("journal %s: dropping an unreadable last record: the write in flight", self.path)
                    continue
                raise RuntimeError(f"journal {self.path} line {number} is corrupt ({exc}); the state dir cannot be restored") from exc
            if record.get("v") != FORMAT_VERSION:
                raise RuntimeError(f"journal {self.path} line {number}: format {record.get('v')!r}, expected {FORMAT_VERSION}")
            for op in record["ops"]:
                state.apply(op)
            state.records += 1
        return state

    def compact(self, state: State) -> None:
        """Rewrite the journal as `state` (one record), atomically, and drop unreferenced blobs.
        Only with no write in flight (start-up): a blob is written before the record that names it."""
        with self._lock:
            self._rewrite(state)
        keep = state.blobs()
        for path in self.blob_dir.glob("*/*"):
            if path.name not in keep:
                path.unlink(missing_ok=True)
        for path in self.blob_dir.glob(".tmp-*"):
            path.unlink(missing_ok=True)

    # --- internals -------------------------------------------------------------------------------

    def _rewrite(self, state: State) -> None:
        """The journal replaced by `state` as one record: a new file, fsync'd, renamed over the old one.
        A crash at any point leaves either the old journal or the new one, never a mix."""
        if self._file is not None:
            self._file.close()
            self._file = None
        tmp = self.path.with_name(self.path.name + ".compact")
        ops = list(state.ops())
        with open(tmp, "wb") as fh:
            if ops:
                fh.write(json.dumps({"v": FORMAT_VERSION, "ops": ops}, separators=(",", ":"), default=str).encode() + b"\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)
        _fsync_dir(self.directory)

    def _open(self) -> IO[bytes]:
        if self._file is None:
            self._file = open(self.path, "ab")  # noqa: SIM115 (kept open across appends, closed by close())
        return self._file

    def _blob_path(self, name: str) -> Path:
        return self.blob_dir / name[:2] / name


def _fsync_dir(path: Path) -> None:
    # A rename is durable only once the directory entry is: fsync the directory too.
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
