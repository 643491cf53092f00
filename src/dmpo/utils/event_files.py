"""TensorBoard event files: read and rewrite their records, to cut a log back to a resumed step.

An event file is a sequence of TFRecords: `length (uint64 LE) | masked crc32c(length) (uint32) |
data | masked crc32c(data) (uint32)`, each `data` one serialised `Event` protobuf. After a resume,
events logged between the checkpoint and the kill would show twice (once from the killed run, once
from the resumed one), so `truncate_event_files` drops every summary event whose step is past the
checkpoint's, rewriting each file atomically. A record torn by a kill ends the file's readable part.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from pathlib import Path

from dmpo.files import atomic_write

_LENGTH = struct.Struct("<Q")
_CRC = struct.Struct("<I")


def _masked_crc(data: bytes) -> int:
    from tensorboardX.record_writer import masked_crc32c

    return masked_crc32c(data)


def read_records(path: str | os.PathLike[str]) -> Iterator[bytes]:
    """The complete, checksum-valid records of one file, in order (stops at the first torn one)."""
    blob = Path(path).read_bytes()
    offset = 0
    while offset + _LENGTH.size + _CRC.size <= len(blob):
        header = blob[offset:offset + _LENGTH.size]
        (length,) = _LENGTH.unpack(header)
        (header_crc,) = _CRC.unpack_from(blob, offset + _LENGTH.size)
        start = offset + _LENGTH.size + _CRC.size
        end = start + length
        if header_crc != _masked_crc(header) or end + _CRC.size > len(blob):
            return
        data = blob[start:end]
        (data_crc,) = _CRC.unpack_from(blob, end)
        if data_crc != _masked_crc(data):
            return
        yield data
        offset = end + _CRC.size


def encode_record(data: bytes) -> bytes:
    header = _LENGTH.pack(len(data))
    return b"".join([header, _CRC.pack(_masked_crc(header)), data, _CRC.pack(_masked_crc(data))])


def event_files(logdir: str | os.PathLike[str]) -> list[Path]:
    return sorted(p for p in Path(logdir).glob("events.out.tfevents.*") if p.is_file())


def truncate_event_files(logdir: str | os.PathLike[str], last_step: int) -> int:
    """Drops summary events with `step > last_step` from every event file in `logdir`; returns how
    many were dropped. Files that need no change are left untouched."""
    from tensorboardX.proto.event_pb2 import Event

    dropped = 0
    for path in event_files(logdir):
        records = list(read_records(path))
        kept = [r for r in records if not _past(Event.FromString(r), last_step)]
        complete = sum(len(encode_record(r)) for r in records) == path.stat().st_size
        if len(kept) == len(records) and complete:
            continue
        dropped += len(records) - len(kept)
        payload = b"".join(encode_record(r) for r in kept)
        atomic_write(path, lambda file, payload=payload: file.write(payload))
    return dropped


def _past(event: object, last_step: int) -> bool:
    return event.HasField("summary") and event.step > last_step  # type: ignore[attr-defined]


def scalar_events(logdir: str | os.PathLike[str]) -> list[tuple[str, int, float]]:
    """`(tag, step, value)` of every scalar summary in `logdir`'s event files, in file order."""
    from tensorboardX.proto.event_pb2 import Event

    found = []
    for path in event_files(logdir):
        for record in read_records(path):
            event = Event.FromString(record)
            if event.HasField("summary"):
                found.extend((value.tag, event.step, value.simple_value) for value in event.summary.value)
    return found
