"""dmpo: Distributional MPO (DMPO) for continuous control, in JAX.

The public API, imported lazily so that light modules (e.g. `dmpo.replay` inside a Ray actor) do
not pull in JAX, and so that importing this package runs almost nothing: the `dmpo` command takes
its signals from its entry point on (`dmpo.cli.entry`), which Python reaches only after this file.

    from dmpo import DMPO, DMPOConfig, make, make_environment_spec, EnvironmentLoop, load_policy, train
"""

from __future__ import annotations

import importlib
import importlib.util
import sys

__version__ = "0.1.0"

_EXPORTS = {
    "DMPO": "dmpo.agent.core",
    "ConfigError": "dmpo.config",
    "DMPOConfig": "dmpo.config",
    "LearnerConfig": "dmpo.config",
    "MPOLossConfig": "dmpo.config",
    "NetworkConfig": "dmpo.config",
    "TrainConfig": "dmpo.config",
    "EnvironmentSpec": "dmpo.types",
    "Transition": "dmpo.types",
    "make_environment_spec": "dmpo.envs",
    "make": "dmpo.envs",
    "EnvironmentLoop": "dmpo.agent.environment_loop",
    "evaluate": "dmpo.agent.environment_loop",
    "train": "dmpo.run.run",
    "load_policy": "dmpo.agent.policies.snapshot",
    "save_policy": "dmpo.agent.policies.snapshot",
    "make_networks": "dmpo.agent.networks",
    "Learner": "dmpo.agent.learning",
}




def _lazy_module(name: str) -> object:
    """`name`, registered now and executed at its first attribute access (`importlib.util.LazyLoader`)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.loader is not None, name
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    parent, _, child = name.rpartition(".")
    setattr(sys.modules[parent], child, module)
    return module


# `dmpo.callbacks` is where users import callbacks from (`from dmpo.callbacks import Callback`); the
# module lives with the rest of a run's parts, in `dmpo.lifecycle`, and loads at its first use.
sys.modules["dmpo.callbacks"] = _lazy_module("dmpo.lifecycle.callbacks")  # type: ignore[assignment]

__all__ = sorted([*_EXPORTS, "callbacks"])


def __getattr__(name: str) -> object:
    if name == "callbacks":
        return sys.modules["dmpo.callbacks"]
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'dmpo' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS, "callbacks"])
