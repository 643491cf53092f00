"""The checkpoint file: one pytree, checksummed and pickle-free (algorithm.md §9).

This module is the file format only: `write_checkpoint_file`, `read_checkpoint` and
`verify_checkpoint_file` each handle one file. Which files a run keeps, and the folders around
them, belong to `dmpo.lifecycle.checkpoints` (training checkpoints) and `dmpo.agent.files`
(`DMPO.save`); both name the file `checkpoint_file_name(step)` and find it with
`find_checkpoint_file`.

Layout::

    b"DMPOCKPT" | header length (uint64, little-endian) | sha256(header) | header | payload

The header is UTF-8 JSON: the file header of `dmpo.utils.formats` (`"format": "dmpo.checkpoint"`,
`"format_version"`; version 1 files say `"format": "dmpo-checkpoint", "version": 1` and read the same),
step, caller metadata (e.g. counters), the payload's length and sha256, and one `[path, shape, dtype]`
entry per leaf of the saved pytree. The payload is `flax.serialization` msgpack of the pytree's state
dict (plain arrays, no pickle), so loading a file cannot run code. Reading checks the checksums first,
then compares the template's leaves with the header's and names the first leaf that differs, so a
checkpoint of other networks fails clearly.

A file is written to a temporary file in the same folder, fsync'ed, then `os.replace`d over its
name: a crash mid-write leaves the previous file intact.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
from pathlib import Path
from typing import Any

import numpy as np

from dmpo.utils.files import atomic_write
from dmpo.utils.formats import CHECKPOINT, read_header

__all__ = ["MAGIC", "CheckpointError", "checkpoint_file_name", "find_checkpoint_file", "read_checkpoint",
           "verify_checkpoint_file", "write_checkpoint_file"]

MAGIC = b"DMPOCKPT"
_LENGTH = struct.Struct("<Q")
_DIGEST_BYTES = 32
_PREFIX_BYTES = len(MAGIC) + _LENGTH.size + _DIGEST_BYTES
_NAME = re.compile(r"^checkpoint_(\d+)\.ckpt$")


class CheckpointError(RuntimeError, ValueError):
    """A checkpoint (learner file, replay table file or checkpoint folder) is missing, corrupted, or
    does not match what it is restored into. The one checkpoint error of dmpo (`dmpo.replay` re-exports
    it); a ValueError too, as the replay's own error used to be."""


def _leaf_summary(value: Any) -> tuple[list[int], str]:
    if value is None:
        return [], "none"
    if isinstance(value, dict):  # only empty dicts reach here (see _summaries)
        return [], "empty"
    return list(np.shape(value)), str(np.asarray(value).dtype if not hasattr(value, "dtype") else value.dtype)


def _summaries(state_dict: Any, prefix: str = "") -> list[list[Any]]:
    """`[path, shape, dtype]` per leaf of a flax state dict, keys in sorted order (empty dicts and None
    count as leaves so that structure differences show)."""
    if isinstance(state_dict, dict) and state_dict:
        rows: list[list[Any]] = []
        for key in sorted(state_dict, key=str):
            rows.extend(_summaries(state_dict[key], f"{prefix}/{key}" if prefix else str(key)))
        return rows
    shape, dtype = _leaf_summary(state_dict)
    return [[prefix or "<root>", shape, dtype]]


def _first_mismatch(expected: list[list[Any]], found: list[list[Any]]) -> str | None:
    found_by_path = {row[0]: row for row in found}
    for path, shape, dtype in expected:
        if path not in found_by_path:
            return f"leaf {path!r} (template shape {tuple(shape)} {dtype}) is missing from the checkpoint"
        _, other_shape, other_dtype = found_by_path[path]
        if list(other_shape) != list(shape) or other_dtype != dtype:
            return (f"first mismatching leaf {path!r}: checkpoint has shape {tuple(other_shape)} "
                    f"{other_dtype}, template has shape {tuple(shape)} {dtype}")
    expected_paths = {row[0] for row in expected}
    for path, shape, dtype in found:
        if path not in expected_paths:
            return (f"leaf {path!r} (shape {tuple(shape)} {dtype}) is in the checkpoint but not in "
                    "the template")
    return None


def checkpoint_file_name(step: int) -> str:
    """The name a checkpoint file of `step` takes in the folder that holds it (`checkpoint_<step>.ckpt`)."""
    return f"checkpoint_{step:012d}.ckpt"


def find_checkpoint_file(directory: str | os.PathLike[str]) -> Path | None:
    """The checkpoint file in `directory` (the highest step, should there be several); None if it
    holds none or does not exist. Temporary files of a killed writer are not checkpoint files."""
    directory = Path(directory)
    if not directory.is_dir():
        return None
    found = sorted((int(match.group(1)), entry) for entry in directory.iterdir()
                   if (match := _NAME.match(entry.name)) and entry.is_file())
    return found[-1][1] if found else None


def write_checkpoint_file(path: str | os.PathLike[str], state: Any, metadata: dict[str, Any] | None = None,
                          *, step: int = 0) -> Path:
    """Writes `state` (any pytree of arrays) with JSON-serialisable `metadata` to the file `path`,
    atomically (the file holds the old bytes or the new ones); `step` is recorded in the header."""
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step < 0:
        raise ValueError(f"step must be a non-negative integer, got {step!r}")
    metadata = {} if metadata is None else metadata
    try:
        json.dumps(metadata, allow_nan=True)
    except (TypeError, ValueError) as error:
        raise TypeError(f"metadata must be JSON-serialisable: {error}") from error
    import flax.serialization  # here, not at the top: dmpo.replay imports CheckpointError without jax

    state_dict = flax.serialization.to_state_dict(state)
    payload = flax.serialization.msgpack_serialize(state_dict)
    header = json.dumps({
        **CHECKPOINT.header(),
        "step": int(step),
        "metadata": metadata,
        "payload_bytes": len(payload),
        "payload_sha256": hashlib.sha256(payload).hexdigest(),
        "leaves": _summaries(state_dict),
    }, sort_keys=True).encode("utf-8")
    blob = b"".join([MAGIC, _LENGTH.pack(len(header)), hashlib.sha256(header).digest(), header, payload])
    path = Path(path)
    atomic_write(path, lambda file: file.write(blob), sync_directory=True)
    return path


def _read_header(path: Path, blob: bytes) -> tuple[dict[str, Any], bytes]:
    def fail(problem: str) -> CheckpointError:
        return CheckpointError(f"checkpoint {path}: {problem}")

    if len(blob) < _PREFIX_BYTES:
        raise fail(f"truncated ({len(blob)} bytes, shorter than the {_PREFIX_BYTES}-byte prefix)")
    if blob[:len(MAGIC)] != MAGIC:
        raise fail(f"not a {CHECKPOINT.name} file (magic bytes {blob[:len(MAGIC)]!r})")
    (header_length,) = _LENGTH.unpack_from(blob, len(MAGIC))
    if _PREFIX_BYTES + header_length > len(blob):
        raise fail(f"truncated (header of {header_length} bytes does not fit in {len(blob)} bytes)")
    digest = blob[len(MAGIC) + _LENGTH.size:_PREFIX_BYTES]
    header_bytes = blob[_PREFIX_BYTES:_PREFIX_BYTES + header_length]
    if hashlib.sha256(header_bytes).digest() != digest:
        raise fail("corrupted header (sha256 mismatch)")
    header = json.loads(header_bytes.decode("utf-8"))
    read_header(header, CHECKPOINT, f"checkpoint {path}", CheckpointError)
    payload = blob[_PREFIX_BYTES + header_length:]
    if len(payload) != header["payload_bytes"]:
        raise fail(f"truncated or padded payload ({len(payload)} bytes, header says "
                   f"{header['payload_bytes']})")
    if hashlib.sha256(payload).hexdigest() != header["payload_sha256"]:
        raise fail("corrupted payload (sha256 mismatch)")
    return header, payload


def _read_verified(path: Path) -> tuple[dict[str, Any], bytes]:
    """`(header, payload)` of one checkpoint file after checking its checksums."""
    try:
        blob = path.read_bytes()
    except OSError as error:
        raise CheckpointError(f"checkpoint {path}: cannot be read ({error})") from error
    return _read_header(path, blob)


def verify_checkpoint_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The header of one checkpoint file after checking its checksums; `CheckpointError` otherwise."""
    return _read_verified(Path(path))[0]


def read_checkpoint(path: str | os.PathLike[str], template: Any) -> tuple[Any, dict[str, Any]]:
    """Reads one checkpoint file into the structure of `template`.

    Returns `(state, metadata)`; the state's leaves are numpy arrays. Raises `CheckpointError` naming
    the file and the problem if it is missing, truncated, corrupted, of another format or a newer
    version, or its leaves differ from the template's.
    """
    path = Path(path)
    header, payload = _read_verified(path)
    import flax.serialization

    template_dict = flax.serialization.to_state_dict(template)
    mismatch = _first_mismatch(_summaries(template_dict), header["leaves"])
    if mismatch is not None:
        raise CheckpointError(f"checkpoint {path} does not match the template: {mismatch}")
    try:
        state_dict = flax.serialization.msgpack_restore(payload)
        state = flax.serialization.from_state_dict(template, state_dict)
    except Exception as error:  # the checksums passed, so this is a writer bug or a foreign file
        raise CheckpointError(f"checkpoint {path}: payload cannot be decoded ({error})") from error
    return state, header["metadata"]
