"""The algorithm: the single-process agent (`core.DMPO`), its parts (networks, losses, learning,
acting, builder), the environment loop and evaluation, and trained policies outside training
(`policies`: snapshots, loading, export). Nothing here knows about run folders or Ray.

Imported lazily, so that `dmpo.agent.<module>` does not build the whole agent.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["DMPO"]


def __getattr__(name: str) -> Any:
    if name == "DMPO":
        return importlib.import_module("dmpo.agent.core").DMPO
    raise AttributeError(f"module 'dmpo.agent' has no attribute {name!r}")
