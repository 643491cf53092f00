"""Reads what an offline W&B run recorded (its `run-<id>.wandb` file), to check what dmpo sent.

The file is a 7-byte header (`:W&B`, magic, version) and then LevelDB-log records in 32 KiB blocks:
`crc32c (4) | length (2, LE) | type (1) | data`, a record split across blocks as FIRST, MIDDLE..., LAST
pieces, a block tail shorter than a header padded with zeros (the layout wandb's own datastore used).
Each record is a `wandb.proto.wandb_internal_pb2.Record`. Written here because wandb no longer ships a
Python reader; checksums are not verified (the tests read files wandb just closed).

`run.finish()` can return before wandb's service process has written the run's last records: a test
that read a resumed run's file right after `train()` returned once found none of its rows. So each read
first calls `wandb.teardown()`, which waits for that process to finish its work and exit (a later
`wandb.init` in the same process starts a new one).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

_BLOCK, _HEADER, _FILE_HEADER = 32 * 1024, 7, 7
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def records(path: str | Path) -> list[Any]:
    import wandb
    from wandb.proto import wandb_internal_pb2

    wandb.teardown()  # the file is complete only once wandb's service has exited (module docstring)
    blob = Path(path).read_bytes()
    assert blob[:4] == b":W&B", f"{path} is not a W&B run file"
    found, pieces, offset = [], [], _FILE_HEADER
    while offset + _HEADER <= len(blob):
        left = _BLOCK - offset % _BLOCK
        if left < _HEADER:
            offset += left
            continue
        _, length, kind = struct.unpack_from("<IHB", blob, offset)
        data = blob[offset + _HEADER:offset + _HEADER + length]
        offset += _HEADER + length
        if kind == 0 and length == 0:
            break
        pieces.append(data)
        if kind in (_FULL, _LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(b"".join(pieces))
            found.append(record)
            pieces = []
    return found


def history(path: str | Path) -> list[dict[str, Any]]:
    """The rows `run.log` recorded, as `{key: value}`."""
    rows = []
    for record in records(path):
        if record.WhichOneof("record_type") == "history":
            rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                         for item in record.history.item})
    return rows


def config(path: str | Path) -> dict[str, Any]:
    """The run config as recorded (`wandb.init(config=...)` and later updates)."""
    values: dict[str, Any] = {}
    for record in records(path):
        kind = record.WhichOneof("record_type")
        update = {"run": record.run.config.update, "config": record.config.update}.get(kind, [])
        for item in update:
            values[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
    return values
