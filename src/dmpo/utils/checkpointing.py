"""Atomic, checksummed, pickle-free checkpoints of a pytree (algorithm.md §9).

File layout (`checkpoint_<step>.ckpt`)::

    b"DMPOCKPT" | header length (uint64, little-endian) | sha256(header) | header | payload

The header is UTF-8 JSON: format name and version, step, caller metadata (e.g. counters), the payload's
length and sha256, and one `[path, shape, dtype]` entry per leaf of the saved pytree. The payload is
`flax.serialization` msgpack of the pytree's state dict (plain arrays, no pickle), so loading a file
cannot run code. Restoring checks the checksums first, then compares the template's leaves with the
header's and names the first leaf that differs, so a checkpoint of other networks fails clearly.

Writes go to a temporary file in the same directory, are fsync'ed, then `os.replace`d over the final
name: a crash mid-write leaves the previous checkpoint intact. Older checkpoints beyond `max_to_keep`
are deleted after the new one is in place. One writer per directory is assumed.
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

FORMAT = "dmpo-checkpoint"
VERSION = 1
MAGIC = b"DMPOCKPT"
_LENGTH = struct.Struct("<Q")
_DIGEST_BYTES = 32
_PREFIX_BYTES = len(MAGIC) + _LENGTH.size + _DIGEST_BYTES
_NAME = re.compile(r"^checkpoint_(\d+)\.ckpt$")
_TEMP_PREFIX = ".checkpoint_"


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


class Checkpointer:
    """Saves and restores pytrees under `directory`, keeping the newest `max_to_keep` files."""

    def __init__(self, directory: str | os.PathLike[str], max_to_keep: int = 1) -> None:
        if not isinstance(max_to_keep, int) or max_to_keep < 1:
            raise ValueError(f"max_to_keep must be a positive integer, got {max_to_keep!r}")
        self._directory = Path(directory)
        self._max_to_keep = max_to_keep
        self._directory.mkdir(parents=True, exist_ok=True)
        for stray in self._directory.glob(f"{_TEMP_PREFIX}*.tmp"):  # left by a writer that was killed
            stray.unlink(missing_ok=True)

    @property
    def directory(self) -> Path:
        return self._directory

    def path_for(self, step: int) -> Path:
        return self._directory / f"checkpoint_{step:012d}.ckpt"

    def all_steps(self) -> list[int]:
        """Steps of the complete checkpoints on disk, oldest first (temporary files are ignored)."""
        steps = []
        for entry in self._directory.iterdir():
            match = _NAME.match(entry.name)
            if match and entry.is_file():
                steps.append(int(match.group(1)))
        return sorted(steps)

    def latest(self) -> Path | None:
        steps = self.all_steps()
        return self.path_for(steps[-1]) if steps else None

    def save(self, step: int, state: Any, metadata: dict[str, Any] | None = None) -> Path:
        """Writes `state` (any pytree of arrays) with JSON-serialisable `metadata` as step `step`."""
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
            "format": FORMAT,
            "version": VERSION,
            "step": int(step),
            "metadata": metadata,
            "payload_bytes": len(payload),
            "payload_sha256": hashlib.sha256(payload).hexdigest(),
            "leaves": _summaries(state_dict),
        }, sort_keys=True).encode("utf-8")
        blob = b"".join([MAGIC, _LENGTH.pack(len(header)), hashlib.sha256(header).digest(), header, payload])
        path = self.path_for(int(step))
        self._write_atomically(path, blob)
        self._prune()
        return path

    def _write_atomically(self, path: Path, blob: bytes) -> None:
        atomic_write(path, lambda file: file.write(blob), temp_prefix=_TEMP_PREFIX, sync_directory=True)

    def _prune(self) -> None:
        for step in self.all_steps()[:-self._max_to_keep]:
            self.path_for(step).unlink(missing_ok=True)

    def restore(self, template: Any, path: str | os.PathLike[str] | None = None
                ) -> tuple[Any, dict[str, Any]]:
        """Reads a checkpoint (default: the latest) into the structure of `template`.

        Returns `(state, metadata)`; the state's leaves are numpy arrays. Raises `CheckpointError`
        naming the file and the problem if it is missing, truncated, corrupted, of another format, or
        its leaves differ from the template's.
        """
        if path is None:
            path = self.latest()
            if path is None:
                raise CheckpointError(f"no checkpoint in {self._directory}")
        return read_checkpoint(path, template)


def _read_header(path: Path, blob: bytes) -> tuple[dict[str, Any], bytes]:
    def fail(problem: str) -> CheckpointError:
        return CheckpointError(f"checkpoint {path}: {problem}")

    if len(blob) < _PREFIX_BYTES:
        raise fail(f"truncated ({len(blob)} bytes, shorter than the {_PREFIX_BYTES}-byte prefix)")
    if blob[:len(MAGIC)] != MAGIC:
        raise fail(f"not a {FORMAT} file (magic bytes {blob[:len(MAGIC)]!r})")
    (header_length,) = _LENGTH.unpack_from(blob, len(MAGIC))
    if _PREFIX_BYTES + header_length > len(blob):
        raise fail(f"truncated (header of {header_length} bytes does not fit in {len(blob)} bytes)")
    digest = blob[len(MAGIC) + _LENGTH.size:_PREFIX_BYTES]
    header_bytes = blob[_PREFIX_BYTES:_PREFIX_BYTES + header_length]
    if hashlib.sha256(header_bytes).digest() != digest:
        raise fail("corrupted header (sha256 mismatch)")
    header = json.loads(header_bytes.decode("utf-8"))
    if header.get("format") != FORMAT or header.get("version") != VERSION:
        raise fail(f"unsupported format {header.get('format')!r} version {header.get('version')!r} "
                   f"(expected {FORMAT!r} version {VERSION})")
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
    """Reads one checkpoint file into the structure of `template`; see `Checkpointer.restore`."""
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
