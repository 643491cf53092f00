"""dmpo: Distributional MPO (DMPO) for continuous control, in JAX.

The public API, imported lazily so that light modules (e.g. `dmpo.replay` inside a Ray actor) do
not pull in JAX:

    from dmpo import DMPO, DMPOConfig, make, make_environment_spec, EnvironmentLoop, load_policy, train
"""

from __future__ import annotations

import importlib
from typing import Any

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
    "make_environment_spec": "dmpo.types",
    "make": "dmpo.envs",
    "EnvironmentLoop": "dmpo.runners.environment_loop",
    "evaluate": "dmpo.runners.environment_loop",
    "train": "dmpo.runners.local",
    "load_policy": "dmpo.policies.snapshot",
    "save_policy": "dmpo.policies.snapshot",
    "make_networks": "dmpo.networks",
    "Learner": "dmpo.learning",
}

_SUBMODULES = ("callbacks",)  # `dmpo.callbacks.Callback` without an import of its own

__all__ = sorted([*_EXPORTS, *_SUBMODULES])


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"dmpo.{name}")
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'dmpo' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS, *_SUBMODULES])
