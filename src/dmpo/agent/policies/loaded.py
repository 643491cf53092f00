"""`LoadedPolicy`: a snapshot's policy, acting in the task's own action space, one observation or a batch.

The networks act in the canonical box `[-1, 1]^D`; the environment pipeline clips that action and maps
it onto the task's bounds (`dmpo.envs.interface`). A loaded policy applies the same map, so that its
actions can be sent to the task itself, with no dmpo wrapper in between. `canonical_action` keeps the
networks' own actions, for an environment made by `dmpo.envs.make` (which maps them itself).

An observation with a NaN or infinite entry is a `NonFiniteObservation` (a ValueError) naming the
entries, never an action: the networks would turn it into a NaN action, silently. (The exported
graphs, which cannot raise, replace such entries by 0 and flag the row: `dmpo.agent.policies.export`.)
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from dmpo.agent.acting import make_batched_sample_fn
from dmpo.agent.networks import PolicyParams, make_networks
from dmpo.config import NetworkConfig
from dmpo.envs.interface import TaskInterface
from dmpo.types import EnvironmentSpec

__all__ = ["LoadedPolicy", "NonFiniteObservation"]

_SHOWN = 5  # non-finite entries a message names


class NonFiniteObservation(ValueError):
    """An observation given to a loaded policy has a NaN or infinite entry (the message names them)."""


def _entry_name(path: tuple[Any, ...]) -> str:
    return "observation" + "".join(f"[{getattr(key, 'key', getattr(key, 'idx', key))!r}]" for key in path)


def check_finite(batch: Any, batched: bool) -> None:
    """NonFiniteObservation naming the non-finite entries of `batch` (`[B, ...]` leaves; `batched`:
    name the batch row too)."""
    found, count = [], 0
    for path, leaf in jax.tree_util.tree_flatten_with_path(batch)[0]:
        leaf = np.asarray(leaf)
        if not np.issubdtype(leaf.dtype, np.floating):
            continue
        bad = np.argwhere(~np.isfinite(leaf))
        count += len(bad)
        for index in bad[:_SHOWN - len(found)]:
            inner = ", ".join(str(i) for i in index[1:])
            where = _entry_name(path) + (f"[{inner}]" if inner else "")
            found.append(f"{where} = {leaf[tuple(index)]}" + (f" (batch row {index[0]})" if batched else ""))
    if count:
        more = f" and {count - len(found)} more" if count > len(found) else ""
        raise NonFiniteObservation(f"observation has {count} non-finite entr{'y' if count == 1 else 'ies'} "
                                   f"(NaN or inf): {', '.join(found)}{more}; the policy acts on finite "
                                   "observations only")


class LoadedPolicy:
    """`policy(observation) -> action` in the task's bounds, for one observation or a batch.

    A batch is the observation with one more leading axis on every entry (`[B, ...]`, or a dict of
    such arrays), or a list of single observations; it runs as one network call. `deterministic=True`
    (default) acts with the Gaussian mean, as `dmpo eval` does; otherwise it samples, with randomness
    from `seed` and the number of actions taken so far (row i of a batch counts as one action more
    than row i − 1).

    Attributes:
      task: the task's action bounds and dtype, action repeat and frame stack (`TaskInterface`).
      metadata: the run's record (env, pixels, step counts) stored with the snapshot.
    """

    def __init__(self, env_spec: EnvironmentSpec, network_config: NetworkConfig, params: PolicyParams,
                 metadata: dict[str, Any], *, task: TaskInterface | None = None, deterministic: bool = True,
                 seed: int = 0) -> None:
        self.environment_spec = env_spec
        self.network_config = network_config
        self.metadata = metadata
        self.task = task if task is not None else TaskInterface.canonical(env_spec.actions)
        self.networks = make_networks(env_spec, network_config)
        self.params = jax.device_put(params)
        self.deterministic = deterministic
        networks = self.networks
        self._mean_fn = jax.jit(lambda params, observation: networks.apply_policy(params, observation)[0])
        self._sample_fn = make_batched_sample_fn(networks)
        self._key = np.asarray(jax.random.PRNGKey(seed))
        self._num_actions = 0

    @property
    def action_minimum(self) -> np.ndarray:
        """The task's lower action bounds `[D]`."""
        return self.task.minimum

    @property
    def action_maximum(self) -> np.ndarray:
        """The task's upper action bounds `[D]`."""
        return self.task.maximum

    def __call__(self, observation: Any) -> np.ndarray:
        """The action `[D]` (or actions `[B, D]`) the task receives for `observation(s)`."""
        return self.task.to_task(self.canonical_action(observation))

    def predict(self, observation: Any, state: Any = None, episode_start: Any = None,
                deterministic: bool | None = None) -> tuple[np.ndarray, None]:
        """`(actions, None)` as Stable-Baselines3's `predict` returns them (the policy keeps no
        recurrent state: `state` and `episode_start` are accepted and ignored). `deterministic`:
        the mean (True) or a sample (False); None keeps the setting the policy was loaded with."""
        del state, episode_start
        return self.task.to_task(self.canonical_action(observation, deterministic)), None

    def canonical_action(self, observation: Any, deterministic: bool | None = None) -> np.ndarray:
        """The networks' own action(s), not clipped: what `dmpo.envs.make` environments take."""
        batch, batched = self._as_batch(observation)
        check_finite(batch, batched)
        deterministic = self.deterministic if deterministic is None else deterministic
        if deterministic:
            actions = np.asarray(self._mean_fn(self.params, batch))
        else:
            size = len(jax.tree_util.tree_leaves(batch)[0])
            steps = (self._num_actions + np.arange(size)).astype(np.uint32)
            self._num_actions += size
            keys = np.broadcast_to(self._key, (size, *self._key.shape))
            actions = np.asarray(self._sample_fn(self.params, keys, steps, batch))
        if not np.isfinite(actions).all():  # finite observations too large for the networks
            rows = sorted({int(row) for row in np.argwhere(~np.isfinite(actions))[:, 0]})
            raise ValueError(f"the policy's action is not finite for a finite observation (batch rows "
                             f"{rows}): its entries are too large for the networks")
        return actions if batched else actions[0]

    def _as_batch(self, observation: Any) -> tuple[Any, bool]:
        """`(observation with a batch axis, whether it came with one)`, or a ValueError naming the shapes."""
        spec = self.environment_spec.observations
        if isinstance(observation, list):  # single observations, stacked into one batch
            if not observation:
                raise ValueError("observation: an empty list; give at least one observation")
            return jax.tree_util.tree_map(lambda *rows: np.stack(rows), *observation), True
        spec_leaves = jax.tree_util.tree_leaves(spec, is_leaf=lambda leaf: hasattr(leaf, "shape"))
        leaves = [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(observation)]
        if len(leaves) != len(spec_leaves):
            raise ValueError(f"observation: expected {len(spec_leaves)} entries like the spec {spec}, "
                             f"got {len(leaves)}")
        pairs = list(zip(leaves, spec_leaves, strict=True))
        extra = {leaf.ndim - len(leaf_spec.shape) for leaf, leaf_spec in pairs}
        shapes_match = all(leaf.shape[leaf.ndim - len(s.shape):] == tuple(s.shape) for leaf, s in pairs)
        if extra == {0} and shapes_match:
            return jax.tree_util.tree_map(lambda x: np.asarray(x)[None], observation), False
        if extra == {1} and shapes_match and len({leaf.shape[0] for leaf in leaves}) == 1:
            return observation, True
        raise ValueError("observation: expected one observation of shape(s) "
                         f"{[tuple(s.shape) for s in spec_leaves]} or a batch [B, ...] of them, got shape(s) "
                         f"{[leaf.shape for leaf in leaves]}")
