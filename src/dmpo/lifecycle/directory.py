"""Run directories: where one training run keeps its config, logs, checkpoints, snapshots and videos.

Layout of a run directory (algorithm.md §9, rooted at `./runs/<run-id>` instead of `~/acme/<run-id>`)::

    config.json     the run's configuration dataclass, with a "type" header naming its class
    run.json        command line, start time, dmpo version, seed, status, resume history
    logs/<label>/logs.csv      CSV loggers        tb/<label>/      TensorBoard event files
    checkpoints/    learner / counter checkpoints  snapshots/       inference artifacts
    videos/         evaluation videos (made when the first one is written)

Every JSON file is written atomically (temporary file in the same folder + `os.replace`), so a crash
never leaves a half-written file behind (`dmpo.utils.files`).
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

import dmpo
from dmpo.config import ConfigError
from dmpo.config.files import config_from_dict, config_to_dict, load_config, save_config, to_jsonable
from dmpo.utils.files import atomic_write_json
from dmpo.utils.formats import RUN_INFO, read_header

__all__ = [
    "RunDirectory",
    "atomic_write_json",
    "check_run_path",
    "config_from_dict",
    "config_to_dict",
    "default_run_id",
    "load_config",
    "new_run_path",
    "save_config",
]

T = TypeVar("T")
Status = Literal["starting", "running", "finished", "failed", "interrupted"]  # dmpo.lifecycle.status
_STATUSES = typing.get_args(Status)
_SUBDIRS = ("logs", "tb", "checkpoints", "snapshots")  # videos/: made by the first video written

# ------------------------------------------------------------------------------------------ run folders


def default_run_id(now: datetime.datetime | None = None) -> str:
    """The launch timestamp `YYYYmmdd-HHMMSS` (algorithm.md §9)."""
    return (now or datetime.datetime.now()).strftime("%Y%m%d-%H%M%S")


def new_run_path(root: str | os.PathLike[str] = "runs", run_id: str | None = None, *,
                 now: datetime.datetime | None = None) -> Path:
    """A path for a new run under `root`.

    With an explicit `run_id` the path is `root/run_id` whether or not it exists (an explicit id is how
    a run is resumed). Otherwise the id is the launch timestamp, with `-1`, `-2`, … appended if taken;
    the folder is created here so that two runs launched in the same second cannot pick the same one.
    """
    root = Path(root)
    if run_id is not None:
        if not run_id or Path(run_id).name != run_id:
            raise ValueError(f"run_id must be a plain folder name, got {run_id!r}")
        return root / run_id
    root.mkdir(parents=True, exist_ok=True)
    base = default_run_id(now)
    for suffix in range(10_000):
        path = root / (base if suffix == 0 else f"{base}-{suffix}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"no free run folder for {base} under {root}")


def check_run_path(path: str | os.PathLike[str]) -> None:
    """Raises an `OSError` naming the path when a run directory cannot live at `path`: it names a
    file, or it (or the nearest existing folder above it) cannot be written. Checked before any work."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise NotADirectoryError(f"run directory {path} is a file, not a folder")
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise NotADirectoryError(f"cannot create run directory {path}: {existing} is a file")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise PermissionError(f"cannot write to {existing} (permission denied), so it cannot hold "
                              f"run directory {path}")


def _now_iso() -> str:
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


class RunDirectory:
    """Accessors for the files and folders of one run (see the module docstring)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    config_path = property(lambda self: self.path / "config.json")
    info_path = property(lambda self: self.path / "run.json")
    logs_dir = property(lambda self: self.path / "logs")
    tb_dir = property(lambda self: self.path / "tb")
    checkpoints_dir = property(lambda self: self.path / "checkpoints")
    snapshots_dir = property(lambda self: self.path / "snapshots")
    videos_dir = property(lambda self: self.path / "videos")

    @classmethod
    def create(
        cls,
        path: str | os.PathLike[str],
        config: Any,
        *,
        seed: int | None = None,
        command: Sequence[str] | None = None,
        exist_ok: bool = False,
    ) -> RunDirectory:
        """Makes the folder tree and writes config.json and run.json (status "starting").

        An existing non-empty folder is an error unless `exist_ok`; even then its saved config must
        equal `config`, so that one folder never mixes two configurations.
        """
        run = cls(path)
        saved = config_to_dict(config)  # fails on a non-dataclass before anything is created
        if run.path.exists() and any(run.path.iterdir()):
            if not exist_ok:
                raise FileExistsError(f"run directory {run.path} exists and is not empty; continue it with "
                                      f"`dmpo train --resume {run.path}` or choose another --run-dir")
            if run.config_path.exists():
                with open(run.config_path, encoding="utf-8") as f:
                    existing = json.load(f)
                if existing != json.loads(json.dumps(saved)):
                    raise ConfigError(f"{run.config_path} holds a different config than the one given; "
                                      f"use a new run directory")
        run.path.mkdir(parents=True, exist_ok=True)
        for name in _SUBDIRS:
            (run.path / name).mkdir(exist_ok=True)
        atomic_write_json(run.config_path, saved)
        atomic_write_json(run.info_path, {
            **RUN_INFO.header(),
            "command": list(sys.argv if command is None else command),
            "start_time": _now_iso(),
            "dmpo_version": dmpo.__version__,
            "seed": seed,
            "status": "starting",
            "resumes": [],
        })
        return run

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> RunDirectory:
        """An existing run directory (read-only until `mark_resumed` / `set_status` is called)."""
        run = cls(path)
        missing = [p.name for p in (run.config_path, run.info_path) if not p.is_file()]
        if missing:
            raise FileNotFoundError(f"{run.path} is not a run directory: missing {missing}")
        for name in _SUBDIRS:
            (run.path / name).mkdir(exist_ok=True)
        return run

    def load_config(self, cls: type[T] | None = None) -> T:
        return load_config(self.config_path, cls)

    def info(self) -> dict[str, Any]:
        with open(self.info_path, encoding="utf-8") as f:
            info = json.load(f)
        read_header(info, RUN_INFO, str(self.info_path), ConfigError)
        return info

    def update_info(self, **fields: Any) -> dict[str, Any]:
        """Merges `fields` into run.json (atomically) and returns the new content."""
        info = self.info()
        info.update(fields)
        # A run.json written before the header gets it (version 1 of dmpo.run is that same layout).
        atomic_write_json(self.info_path, {**RUN_INFO.header(), **info})
        return info

    def set_status(self, status: Status, reason: str | None = None) -> None:
        """Sets run.json's status; `reason` (e.g. why a run failed or stopped early) goes to
        "status_reason", and a status given without one clears an earlier reason."""
        if status not in _STATUSES:
            raise ValueError(f"status must be one of {list(_STATUSES)}, got {status!r}")
        fields: dict[str, Any] = {"status": status, "status_reason": reason}
        if status not in ("starting", "running"):
            fields["end_time"] = _now_iso()
        self.update_info(**fields)

    def update_config(self, config: Any, changes: Mapping[str, tuple[Any, Any]]) -> None:
        """Replaces config.json with `config` (settings changed on resume, e.g. a longer budget) and
        notes `changes` (`field: (old, new)`) in run.json; the next `mark_resumed` records them."""
        atomic_write_json(self.config_path, config_to_dict(config))
        info = self.info()
        pending = dict(info.get("pending_config_changes", {}))
        for field, (old, new) in changes.items():
            first = pending.get(field, {}).get("from", to_jsonable(old, field))
            pending[field] = {"from": first, "to": to_jsonable(new, field)}
        self.update_info(pending_config_changes=pending)

    def mark_resumed(self, command: Sequence[str] | None = None) -> None:
        """Records a resume (time, command line, config changes) in run.json; status starting."""
        info = self.info()
        command = list(sys.argv if command is None else command)
        entry: dict[str, Any] = {"time": _now_iso(), "command": command}
        changes = info.pop("pending_config_changes", None)
        info.pop("status_reason", None)
        if changes:
            entry["config_changes"] = changes
        info.update(status="starting", resumes=[*info.get("resumes", []), entry])
        atomic_write_json(self.info_path, {**RUN_INFO.header(), **info})

    def record_recovery(self, entry: Mapping[str, Any]) -> dict[str, Any]:
        """Appends `entry` (time added) to run.json's "recoveries": a node the run lost and went on
        without a restart of its command (`dmpo.run.distributed.executor`). Returns what it wrote."""
        recorded = {"time": _now_iso(), **entry}
        self.update_info(recoveries=[*self.info().get("recoveries", []), recorded])
        return recorded

    def __repr__(self) -> str:
        return f"RunDirectory({str(self.path)!r})"
