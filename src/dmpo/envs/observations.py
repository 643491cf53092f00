"""Flattening observations into one float32 vector (for MLP torsos on state observations).

Order: entries of a dict observation are concatenated in **sorted key order** (the order `dm-tree`
uses for dicts, recursively for nested dicts; tuples/lists keep their order). Every entry is
raveled after its leading `batch_dims` axes, so a dm_control observation whose scalar entries
were already reshaped to `(1,)` (see `control_suite`) and one that was not flatten identically.
"""

from __future__ import annotations

import math

import numpy as np
import tree
from dm_env import specs

from dmpo.envs.errors import EnvError
from dmpo.types import NestedArray, NestedSpec


def flatten_observation(observation: NestedArray, batch_dims: int = 0) -> np.ndarray:
    """Concatenates a (nested) observation into float32 of shape `batch_shape + [F]`.

    Args:
      observation: an array, or a dict/tuple nest of arrays (numpy, JAX or Python scalars).
      batch_dims: number of leading axes shared by every entry and kept as they are
        (0 for a single observation, 1 for a `[B, ...]` batch).

    Returns:
      A numpy float32 array: one observation gives shape `[F]`; a batch gives `[B, F]`.
    """
    if not isinstance(batch_dims, int) or batch_dims < 0:
        raise EnvError(f"batch_dims must be a non-negative integer, got {batch_dims!r}")
    leaves = [np.asarray(leaf) for leaf in tree.flatten(observation)]
    if not leaves:
        raise EnvError("flatten_observation got an empty observation (no arrays in the nest)")
    batch_shape = leaves[0].shape[:batch_dims]
    for leaf in leaves:
        if leaf.ndim < batch_dims or leaf.shape[:batch_dims] != batch_shape:
            raise EnvError(
                f"every observation entry must share the leading batch shape {batch_shape} "
                f"(batch_dims={batch_dims}); got an entry of shape {leaf.shape}"
            )
    parts = [leaf.reshape(batch_shape + (-1,)).astype(np.float32, copy=False) for leaf in leaves]
    return np.concatenate(parts, axis=-1)


def flatten_observation_spec(spec: NestedSpec) -> specs.Array:
    """The spec of `flatten_observation(o)` for an observation `o` matching `spec`: float32 `[F]`."""
    leaves = tree.flatten(spec)
    if not leaves:
        raise EnvError("flatten_observation_spec got an empty spec (no arrays in the nest)")
    size = sum(math.prod(leaf.shape) for leaf in leaves)
    return specs.Array(shape=(size,), dtype=np.float32, name="observation")
