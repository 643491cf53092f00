"""Frames of an environment behind its wrappers: the layers of a wrapper chain and a default render.

`evaluate` films with `default_render` unless given a `render_fn`; the training videos'
cameras (`dmpo.lifecycle.videos`) walk the same `wrapper_chain` to reach the simulator.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["default_render", "wrapper_chain"]

_WRAPPED_ATTRIBUTES = ("_environment", "environment", "_env", "env")
_DEFAULT_RENDER = {"height": 240, "width": 320, "camera_id": 0}


def wrapper_chain(environment: Any, max_depth: int = 32) -> list[Any]:
    """`environment` and the layers it wraps, outermost first: each one's inner layer is its first
    attribute of `_environment`, `environment`, `_env`, `env` that is set (at most `max_depth`
    layers; a layer met twice ends the chain)."""
    chain, seen = [environment], {id(environment)}
    while len(chain) < max_depth:
        inner = next((getattr(chain[-1], a) for a in _WRAPPED_ATTRIBUTES
                      if getattr(chain[-1], a, None) is not None), None)
        if inner is None or id(inner) in seen:
            break
        chain.append(inner)
        seen.add(id(inner))
    return chain


def default_render(environment: Any) -> np.ndarray:
    """An RGB frame of `environment`: from the first layer of its wrapper chain that has a `render()`
    method, else from the first one exposing a MuJoCo `physics` (dm_control; camera 0, 240×320)."""
    for layer in wrapper_chain(environment):
        render = getattr(layer, "render", None)
        if callable(render):
            return render()
        physics = getattr(layer, "physics", None)
        if physics is not None:
            return physics.render(**_DEFAULT_RENDER)
    raise TypeError(f"cannot render a {type(environment).__name__}: no layer of it has a render() method or "
                    "a physics attribute; pass render_fn")
