"""Configs as JSON: `config_to_dict` / `config_from_dict` (nested frozen dataclasses, with the file
header of `dmpo.utils.formats` and a "type" naming the class), and `save_config` / `load_config`
for files. Used by run folders (config.json), policy snapshots and `DMPO.save`."""

from __future__ import annotations

import dataclasses
import enum
import importlib
import json
import os
import types
import typing
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any, Literal, TypeVar

from dmpo.config.agent import ConfigError
from dmpo.utils.files import atomic_write_json
from dmpo.utils.formats import CONFIG, read_header

__all__ = ["config_from_dict", "config_to_dict", "load_config", "save_config", "to_jsonable"]

T = TypeVar("T")



def _type_name(cls: type) -> str:
    # A config's public home is `dmpo.config` (its modules are an implementation detail): the saved
    # "type" stays `dmpo.config.TrainConfig` whichever module of the package defines it.
    module = "dmpo.config" if cls.__module__.startswith("dmpo.config.") else cls.__module__
    return f"{module}.{cls.__qualname__}"


def to_jsonable(value: Any, where: str) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name), f"{where}.{f.name}")
                for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, tuple | list):
        return [to_jsonable(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        if not all(isinstance(k, str) for k in value):
            raise TypeError(f"{where}: only string keys can be saved to JSON, got {list(value)}")
        return {k: to_jsonable(v, f"{where}.{k}") for k, v in value.items()}
    if hasattr(value, "item") and getattr(value, "shape", None) == ():  # numpy scalar
        return value.item()
    raise TypeError(f"{where}: cannot save a {type(value).__name__} to JSON ({value!r})")


def config_to_dict(config: Any) -> dict[str, Any]:
    """`{"format": "dmpo.config", "format_version": 1, "type": "<module>.<Class>", "config": {...}}` for a
    dataclass instance (nested ones inline)."""
    if not dataclasses.is_dataclass(config) or isinstance(config, type):
        raise TypeError(f"config must be a dataclass instance, got {type(config).__name__}")
    return {**CONFIG.header(), "type": _type_name(type(config)),
            "config": to_jsonable(config, type(config).__name__)}


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
    read_header(data, CONFIG, "the saved config", ConfigError)
    if "type" not in data or "config" not in data:
        raise ConfigError(f"a saved config needs the keys 'type' and 'config', got {sorted(data)}")
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


