"""dmpo: Distributional MPO (DMPO) for continuous control, in JAX.

The public API, imported lazily so that light modules (e.g. `dmpo.replay` inside a Ray actor) do
not pull in JAX:

    from dmpo import DMPO, DMPOConfig, make, make_environment_spec, EnvironmentLoop, load_policy, train
"""

from __future__ import annotations

import importlib
import sys
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


# `dmpo.callbacks` is where users import callbacks from (`from dmpo.callbacks import Callback`); the
# module lives with the rest of a run's parts, in `dmpo.lifecycle`. It imports nothing heavy.
sys.modules["dmpo.callbacks"] = importlib.import_module("dmpo.lifecycle.callbacks")

__all__ = sorted([*_EXPORTS, "callbacks"])


def __getattr__(name: str) -> Any:
    if name == "callbacks":
        return sys.modules["dmpo.callbacks"]
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'dmpo' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS, "callbacks"])
