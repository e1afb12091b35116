"""Reading an offline W&B run's transaction log (`run-<id>.wandb`), as `wandb sync` replays it.

wandb 0.31 writes the file from its Go core and ships no Python reader; the format is stable and
documented by its writer: a 7-byte header (`:W&B`, magic 0xBEE1, version 0), then LevelDB's log format
(32 KiB blocks; each chunk a little-endian CRC32 (zlib's, seeded with the chunk type byte), a length and a
type: FULL, FIRST, MIDDLE, LAST), each record a `wandb.proto.wandb_internal_pb2.Record`. The trainer
reads the earlier attempts' files to know the highest step the run holds (docs/TRACKING.md); the tests
read the files back the same way. A file uploaded while the run was writing it may end mid-record: the
reader stops at the last whole record, as a replay does.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from typing import Any

HEADER = struct.pack("<4sHB", b":W&B", 0xBEE1, 0)
_BLOCK = 32768
_CHUNK_HEADER = 7
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4
_SEEDS = [zlib.crc32(bytes([kind])) for kind in range(_LAST + 1)]


def records(data: bytes) -> Iterator[Any]:
    """Every whole record of a .wandb file (Record protos), in order; ValueError if it is not one."""
    from wandb.proto import wandb_internal_pb2 as pb

    if data[: len(HEADER)] != HEADER:
        raise ValueError("not a W&B transaction log (bad header)")
    offset, pending = len(HEADER), b""
    while True:
        left = _BLOCK - offset % _BLOCK
        if left < _CHUNK_HEADER:
            offset += left  # the block's zero padding
        if offset + _CHUNK_HEADER > len(data):
            return
        checksum, length, kind = struct.unpack_from("<IHB", data, offset)
        chunk = data[offset + _CHUNK_HEADER : offset + _CHUNK_HEADER + length]
        if kind not in (_FULL, _FIRST, _MIDDLE, _LAST) or len(chunk) < length or zlib.crc32(chunk, _SEEDS[kind]) != checksum:
            return  # the end of what was written (a file copied while it grew, or a zero-filled tail)
        offset += _CHUNK_HEADER + length
        if kind in (_FULL, _FIRST):
            pending = chunk
        else:
            pending += chunk
        if kind in (_FULL, _LAST):
            record = pb.Record()  # type: ignore[attr-defined]  # generated protobuf module
            record.ParseFromString(pending)
            yield record


def history(data: bytes) -> list[dict[str, Any]]:
    """The run's history rows (`_step` and every logged key, values decoded), in file order."""
    import json

    rows = []
    for record in records(data):
        if record.WhichOneof("record_type") == "history":
            row = {".".join(item.nested_key) or item.key: json.loads(item.value_json) for item in record.history.item}
            rows.append(row)
    return rows


def last_step(data: bytes) -> int:
    """The highest history step in the file; -1 when it holds none."""
    return max((int(row["_step"]) for row in history(data) if "_step" in row), default=-1)


def run_record(data: bytes) -> Any | None:
    """The file's run record (id, project, group, tags, config, resume), or None (not written yet)."""
    if data[: len(HEADER)] != HEADER:
        return None
    for record in records(data):
        if record.WhichOneof("record_type") == "run":
            return record.run
    return None


def has_exit(data: bytes) -> bool:
    """The file holds the run's exit record: what `finish()` wrote last is in it."""
    if data[: len(HEADER)] != HEADER:
        return False
    return any(record.WhichOneof("record_type") == "exit" for record in records(data))
