"""Files as the previous dmpo wrote them, before the common header of `dmpo.utils.formats`, made by
rewriting the header of a file this dmpo wrote (the layouts are otherwise the same). Tests use them to
show that old run folders and saved agents still read, and to make files of a newer version."""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

# The checkpoint file layout, restated: magic | length | sha256(header) | header | payload.
CHECKPOINT_MAGIC = b"DMPOCKPT"
_PREFIX = len(CHECKPOINT_MAGIC) + 8 + 32


def checkpoint_header(data: bytes) -> tuple[dict, bytes]:
    """(header, payload) of a checkpoint file's bytes."""
    length = int.from_bytes(data[len(CHECKPOINT_MAGIC):len(CHECKPOINT_MAGIC) + 8], "little")
    return json.loads(data[_PREFIX:_PREFIX + length]), data[_PREFIX + length:]


def rewrite_checkpoint(path: Path, change: Callable[[dict], None]) -> Path:
    """Rewrites the checkpoint file `path` with `change(header)` as its header (checksum updated)."""
    header, payload = checkpoint_header(path.read_bytes())
    change(header)
    encoded = json.dumps(header, sort_keys=True).encode("utf-8")
    path.write_bytes(CHECKPOINT_MAGIC + len(encoded).to_bytes(8, "little") + hashlib.sha256(encoded).digest()
                     + encoded + payload)
    return path


def rewrite_replay(path: Path, change: Callable[[dict], None]) -> Path:
    """Rewrites the replay table file `path` with `change(header)` as its header."""
    with np.load(path, allow_pickle=False) as archive:
        arrays = {name: archive[name] for name in archive.files}
    header = json.loads(bytes(arrays["__header__"]).decode("utf-8"))
    change(header)
    arrays["__header__"] = np.frombuffer(json.dumps(header).encode("utf-8"), dtype=np.uint8)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    path.write_bytes(buffer.getvalue())
    return path


def rewrite_json(path: Path, change: Callable[[dict], None]) -> Path:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=2))
    return path


def rewrite_snapshot(path: Path, change: Callable[[dict], None], target: Path | None = None) -> Path:
    """Rewrites the policy snapshot `path` (to `target`, if given) with `change(payload)` applied."""
    from flax import serialization

    payload = serialization.msgpack_restore(path.read_bytes())
    change(payload)
    target = path if target is None else target
    target.write_bytes(serialization.msgpack_serialize(payload))
    return target


def previous_snapshot(payload: dict) -> None:
    """A policy snapshot as version 2 wrote it: its own format name and a "version" key."""
    del payload["format_version"]
    payload.update(format="dmpo-policy-snapshot", version=2)


def previous_checkpoint(header: dict) -> None:
    """A checkpoint file's header as version 1 wrote it."""
    del header["format_version"]
    header.update(format="dmpo-checkpoint", version=1)


def previous_replay(header: dict) -> None:
    """A replay table file's header as version 1 wrote it."""
    del header["format_version"]
    header.update(format="dmpo.replay.table", version=1)


def previous_run_file(data: dict) -> None:
    """config.json, run.json or state.json as the previous dmpo wrote them: a version, no name."""
    del data["format"]


def unversioned_run_file(data: dict) -> None:
    """config.json, run.json or state.json as dmpo wrote them before versions existed."""
    del data["format"], data["format_version"]


def previous_agent(data: dict) -> None:
    """DMPO.save's agent.json as version 2 wrote it: the version under "format"."""
    del data["format_version"]
    data["format"] = 2


def previous_agent_folder(path: Path) -> None:
    """A folder written by DMPO.save, turned into what the previous dmpo wrote."""
    rewrite_json(path / "agent.json", previous_agent)
    rewrite_json(path / "config.json", previous_run_file)
    (learner_file,) = (path / "learner").glob("checkpoint_*.ckpt")
    rewrite_checkpoint(learner_file, previous_checkpoint)
    if (path / "replay.npz").is_file():
        rewrite_replay(path / "replay.npz", previous_replay)


def previous_run_folder(path: Path) -> None:
    """A run folder written by this dmpo, turned into what the previous dmpo wrote."""
    rewrite_json(path / "config.json", previous_run_file)
    rewrite_json(path / "run.json", previous_run_file)
    if (path / "snapshots" / "best.json").is_file():
        rewrite_json(path / "snapshots" / "best.json", unversioned_run_file)
    for snapshot in (path / "snapshots").glob("*.msgpack"):
        rewrite_snapshot(snapshot, previous_snapshot)
    for checkpoint in (path / "checkpoints").glob("step_*"):
        rewrite_json(checkpoint / "state.json", previous_run_file)
        (learner_file,) = (checkpoint / "learner").glob("checkpoint_*.ckpt")
        rewrite_checkpoint(learner_file, previous_checkpoint)
        if (checkpoint / "replay.npz").is_file():
            rewrite_replay(checkpoint / "replay.npz", previous_replay)
