"""Environments from the user's own code: entry points and Python callables.

Names `make` accepts besides `dmc:`/`gym:<Id>`:

* `gym:<module>:<Id>` imports `<module>` (which registers `<Id>` with gymnasium on import), then
  makes `<Id>`; gymnasium's own `module:Id` convention.
* `<module.path>:<callable>` (e.g. `my_pkg.envs:make_env`, `tests.envs_for_tests:make_point_mass`):
  `callable(seed)` returns a `gymnasium.Env` (wrapped by `gym_adapter.GymnasiumEnvironment`) or a
  `dm_env.Environment`. The callable may be nested (`module:Class.factory`).
* `python:<description>`: what a run made from a Python callable that cannot be imported by name (a
  lambda, a local function) records in its config.json. It cannot be made again from its name, so
  such a run cannot be resumed or evaluated from the command line (Python: pass the callable again).

Import path: like `python -m`, the current working directory is searched first; a `TaskFactory` for an
entry point remembers that directory, so Ray nodes started elsewhere import the same module.

Either way the environment then goes through the same pipeline as a named task (`registry.make`):
canonical actions, action repeat, float32, plus `checks.CheckedEnvironment`.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from typing import Any

import dm_env

from dmpo.envs.errors import EnvError

NOT_IMPORTABLE_PREFIX = "python"
_DOTTED = r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*"
_ENTRY_POINT = re.compile(rf"^{_DOTTED}:{_DOTTED}$")


def is_entry_point(name: str) -> bool:
    """True for `module.path:callable` names (neither `dmc:` nor `gym:` nor `python:`)."""
    prefix = name.partition(":")[0]
    return prefix not in ("dmc", "gym", NOT_IMPORTABLE_PREFIX) and bool(_ENTRY_POINT.match(name))


def _import_module(module: str, what: str, search_path: str | None) -> Any:
    path = search_path or os.getcwd()
    if path not in sys.path:
        sys.path.insert(0, path)
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise EnvError(f"unknown environment name {what!r}: cannot import module {module!r} ({error}); "
                       f"an entry point 'module.path:callable' must be importable from {path} or the "
                       "installed packages (other names: 'dmc:<domain>-<task>', 'gym:<Id>', "
                       "'gym:<module>:<Id>')") from None


def import_gym_module(module: str, search_path: str | None = None) -> None:
    """Imports the module of a `gym:<module>:<Id>` name (it registers the id on import)."""
    _import_module(module, f"gym:{module}:<Id>", search_path)


def load_callable(name: str, search_path: str | None = None) -> Any:
    """The object named by `module.path:attr.path`; EnvError naming what is missing."""
    module_name, _, attribute = name.partition(":")
    target = _import_module(module_name, name, search_path)
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise EnvError(f"entry point {name!r}: module {module_name!r} has no attribute {attribute!r}")
        target = getattr(target, part)
    if not callable(target):
        raise EnvError(f"entry point {name!r} is a {type(target).__name__}, not a callable(seed) -> env")
    return target


def call_entry_point(function: Any, name: str, seed: int | None) -> dm_env.Environment:
    """`function(seed)` as a dm_env: a gymnasium.Env is adapted; anything else is an EnvError."""
    environment = function(seed)
    if isinstance(environment, dm_env.Environment):
        return environment
    import gymnasium

    if isinstance(environment, gymnasium.Env):
        from dmpo.envs import gym_adapter

        try:
            return gym_adapter.GymnasiumEnvironment(environment, seed=seed)
        except EnvError as error:
            environment.close()
            raise EnvError(f"{name}: {error}") from None
    raise EnvError(f"{name}(seed) returned a {type(environment).__name__}; it must return a "
                   "gymnasium.Env or a dm_env.Environment")


def load(name: str, seed: int | None, search_path: str | None = None) -> dm_env.Environment:
    """The raw environment of the entry point `name` (before the pipeline)."""
    return call_entry_point(load_callable(name, search_path), name, seed)


def importable_name(function: Any) -> str | None:
    """`module:qualname` if `function` can be imported back by that name, else None (a lambda, a local
    function, a callable object, anything defined in `__main__`)."""
    module, qualname = getattr(function, "__module__", None), getattr(function, "__qualname__", None)
    if not module or not qualname or module == "__main__" or "<" in qualname:
        return None
    try:
        found = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        return None
    return f"{module}:{qualname}" if found is function else None


def recorded_name(function: Any) -> str:
    """The `TrainConfig.env` recorded for a run made from the Python callable `function`."""
    name = importable_name(function)
    if name is not None:
        return name
    label = getattr(function, "__qualname__", None) or type(function).__name__
    return f"{NOT_IMPORTABLE_PREFIX}:{label}"


def not_importable_error(name: str) -> EnvError:
    return EnvError(f"{name!r} names a Python callable that cannot be imported by name (a lambda, a "
                    "local function or an object): this run can be resumed or evaluated from Python "
                    "only, by passing the same callable again as env_factory")
