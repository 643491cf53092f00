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

import dataclasses
import datetime
import enum
import importlib
import json
import os
import sys
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePath
from typing import Any, Literal, TypeVar

import dmpo
from dmpo.config import ConfigError
from dmpo.lifecycle.formats import CONFIG_FORMAT, FORMAT_KEY, RUN_INFO_FORMAT, check_format
from dmpo.utils.files import atomic_write_text

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

# ------------------------------------------------------------------------------------------ atomic writes


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2) + "\n")


# --------------------------------------------------------------------------------------- config <-> JSON


def _type_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _to_jsonable(value: Any, where: str) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _to_jsonable(getattr(value, f.name), f"{where}.{f.name}")
                for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, tuple | list):
        return [_to_jsonable(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        if not all(isinstance(k, str) for k in value):
            raise TypeError(f"{where}: only string keys can be saved to JSON, got {list(value)}")
        return {k: _to_jsonable(v, f"{where}.{k}") for k, v in value.items()}
    if hasattr(value, "item") and getattr(value, "shape", None) == ():  # numpy scalar
        return value.item()
    raise TypeError(f"{where}: cannot save a {type(value).__name__} to JSON ({value!r})")


def config_to_dict(config: Any) -> dict[str, Any]:
    """`{"type": "<module>.<Class>", "config": {...}}` for a dataclass instance (nested ones inline)."""
    if not dataclasses.is_dataclass(config) or isinstance(config, type):
        raise TypeError(f"config must be a dataclass instance, got {type(config).__name__}")
    return {"type": _type_name(type(config)), FORMAT_KEY: CONFIG_FORMAT,
            "config": _to_jsonable(config, type(config).__name__)}


def _expect(condition: bool, where: str, expected: str, value: Any) -> None:
    if not condition:
        raise ConfigError(f"{where} must be {expected}, got {value!r}")


def _from_union(value: Any, args: tuple[Any, ...], where: str) -> Any:
    if value is None:
        _expect(type(None) in args, where, f"one of {args}", value)
        return None
    errors = []
    for arg in args:
        if arg is type(None):
            continue
        try:
            return _from_jsonable(value, arg, where)
        except (ConfigError, TypeError, ValueError) as error:
            errors.append(str(error))
    raise ConfigError(f"{where}: {value!r} matches none of {args} ({'; '.join(errors)})")


def _from_tuple(value: Any, args: tuple[Any, ...], where: str) -> tuple[Any, ...]:
    _expect(isinstance(value, list | tuple), where, "a list", value)
    if not args:
        return tuple(value)
    if len(args) == 2 and args[1] is Ellipsis:
        return tuple(_from_jsonable(v, args[0], f"{where}[{i}]") for i, v in enumerate(value))
    _expect(len(value) == len(args), where, f"a list of length {len(args)}", value)
    pairs = enumerate(zip(value, args, strict=True))
    return tuple(_from_jsonable(v, a, f"{where}[{i}]") for i, (v, a) in pairs)


def _from_scalar(value: Any, tp: type, where: str) -> Any:
    if tp is bool:
        _expect(isinstance(value, bool), where, "a bool", value)
    elif tp is int:
        _expect(isinstance(value, int) and not isinstance(value, bool), where, "an int", value)
    elif tp is float:
        _expect(isinstance(value, int | float) and not isinstance(value, bool), where, "a number", value)
        return float(value)
    elif tp is str:
        _expect(isinstance(value, str), where, "a string", value)
    elif isinstance(tp, type) and issubclass(tp, PurePath):
        _expect(isinstance(value, str), where, "a path string", value)
        return tp(value)
    elif isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp(value)
    else:
        raise TypeError(f"{where}: cannot load values of type {tp!r} from JSON")
    return value


def _from_jsonable(value: Any, tp: Any, where: str) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return value
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _dataclass_from_dict(value, tp, where)
    if origin is typing.Union or origin is types.UnionType:
        return _from_union(value, args, where)
    if origin is Literal:
        _expect(value in args, where, f"one of {list(args)}", value)
        return value
    if origin is tuple or tp is tuple:
        return _from_tuple(value, args, where)
    if origin is list or tp is list:
        _expect(isinstance(value, list), where, "a list", value)
        item = args[0] if args else Any
        return [_from_jsonable(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict or tp is dict:
        _expect(isinstance(value, dict), where, "an object", value)
        item = args[1] if args else Any
        return {k: _from_jsonable(v, item, f"{where}.{k}") for k, v in value.items()}
    return _from_scalar(value, tp, where)


def _dataclass_from_dict(data: Any, cls: type[T], where: str) -> T:
    _expect(isinstance(data, dict), where, f"an object holding a {cls.__name__}", data)
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(f"{where}: unknown field(s) {unknown}; {cls.__name__} has {sorted(fields)}")
    kwargs = {name: _from_jsonable(data[name], hints[name], f"{where}.{name}")
              for name in fields if name in data}
    return cls(**kwargs)


def config_from_dict(data: Mapping[str, Any], cls: type[T] | None = None) -> T:
    """Inverse of `config_to_dict`. With `cls=None` the class is imported from the "type" header.

    Fields missing from `data` take their dataclass defaults, so older run directories still load.
    """
    if "type" not in data or "config" not in data:
        raise ConfigError(f"a saved config needs the keys 'type' and 'config', got {sorted(data)}")
    check_format(data, CONFIG_FORMAT, "the saved config", ConfigError)
    saved_type = data["type"]
    if cls is None:
        module, _, qualname = saved_type.rpartition(".")
        try:
            cls = getattr(importlib.import_module(module), qualname)
        except (ImportError, AttributeError, ValueError) as error:
            raise ConfigError(f"cannot import the saved config type {saved_type!r}: {error}") from error
    elif saved_type != _type_name(cls):
        raise ConfigError(f"the saved config is a {saved_type}, not a {_type_name(cls)}")
    assert cls is not None
    return _dataclass_from_dict(data["config"], cls, cls.__name__)


def save_config(path: str | os.PathLike[str], config: Any) -> None:
    atomic_write_json(path, config_to_dict(config))


def load_config(path: str | os.PathLike[str], cls: type[T] | None = None) -> T:
    """Reads a config saved by `save_config` back into (nested, frozen) dataclasses."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    try:
        return config_from_dict(data, cls)
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}") from error


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
            FORMAT_KEY: RUN_INFO_FORMAT,
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
        check_format(info, RUN_INFO_FORMAT, str(self.info_path), ConfigError)
        return info

    def update_info(self, **fields: Any) -> dict[str, Any]:
        """Merges `fields` into run.json (atomically) and returns the new content."""
        info = self.info()
        info.update(fields)
        atomic_write_json(self.info_path, info)
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
            first = pending.get(field, {}).get("from", _to_jsonable(old, field))
            pending[field] = {"from": first, "to": _to_jsonable(new, field)}
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
        atomic_write_json(self.info_path, info)

    def __repr__(self) -> str:
        return f"RunDirectory({str(self.path)!r})"
