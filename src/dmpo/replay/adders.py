"""N-step transition adder: turns an episode's timesteps into replay items (algorithm.md §1).

For a window [f, l) of k = l − f steps with rewards r_f..r_{l−1} and env discounts d_f..d_{l−1}:

    R = r_f + Σ_{i=1}^{k−1} γ^i (Π_{j<i} d_{f+j}) r_{f+i}
    D = γ^{k−1} Π_{j<k} d_{f+j}          (one γ fewer than k; the learner applies the last one)
    item = Transition(o_f, a_f, R, D, o_l)

The window grows 1..n at the start of an episode (so o_0 starts min(n, T) items), then slides;
on the LAST step it shrinks from the left until empty. An episode of T steps yields T + n − 1
items if T ≥ n, else 2T − 1. Termination vs truncation needs no flag: the final discount (0 or 1)
ends up in D of every item whose window reaches the end.

Dtypes: γ is float32; R has dtype result_type(reward, discount) and the broadcast shape of reward
and discount; D keeps the discount dtype and shape. Nested rewards/discounts are supported, a
single leaf on one side being repeated over the other side's nest.
"""

from __future__ import annotations

import collections
import math
from typing import Any, Protocol

import dm_env
import numpy as np
import tree

from dmpo.replay.nests import broadcast_structures
from dmpo.types import Transition


class Writer(Protocol):
    def insert(self, item: Any) -> None: ...


def _copy_nest(value: Any) -> Any:
    """Own copy of an observation/action (environments may reuse their buffers)."""
    if isinstance(value, np.ndarray):
        return value.copy()
    return tree.map_structure(np.array, value)


def _n_step_leaf(rewards: list, discounts: list, gamma: np.float32) -> tuple[np.ndarray, np.ndarray]:
    """R and D for one reward/discount leaf pair over a window (accumulation order of algorithm.md §1).

    `rewards`/`discounts` are numpy arrays (0-d for scalars), one per step of the window.
    """
    r_dtype = np.result_type(rewards[0].dtype, discounts[0].dtype)
    d_dtype = discounts[0].dtype
    shape = np.broadcast_shapes(np.shape(rewards[0]), np.shape(discounts[0]))
    total_discount = np.array(discounts[0], dtype=d_dtype)
    total_reward = np.array(np.broadcast_to(rewards[0], shape), dtype=r_dtype)
    for reward, discount in zip(rewards[1:], discounts[1:], strict=True):
        total_discount = total_discount * gamma
        total_reward = total_reward + reward * total_discount
        total_discount = total_discount * discount
    return total_reward.astype(r_dtype, copy=False), total_discount.astype(d_dtype, copy=False)


def n_step_return(rewards: list, discounts: list, gamma: np.float32) -> tuple[Any, Any]:
    """(R, D) for a window given its per-step rewards and discounts (nests of numpy arrays)."""
    if not tree.is_nested(rewards[0]) and not tree.is_nested(discounts[0]):
        return _n_step_leaf(rewards, discounts, gamma)
    pairs = [broadcast_structures(r, d) for r, d in zip(rewards, discounts, strict=True)]
    structure = pairs[0][0]
    flat_r = [tree.flatten(r) for r, _ in pairs]
    flat_d = [tree.flatten(d) for _, d in pairs]
    results = [
        _n_step_leaf([step[i] for step in flat_r], [step[i] for step in flat_d], gamma)
        for i in range(len(flat_r[0]))
    ]
    return (
        tree.unflatten_as(structure, [r for r, _ in results]),
        tree.unflatten_as(structure, [d for _, d in results]),
    )


class NStepTransitionAdder:
    """Writes n-step transitions of each episode to `writer` (anything with `.insert(item)`).

    Call `add_first(first_timestep)` once per episode, then `add(action, next_timestep)` per step;
    the LAST timestep flushes the episode's tail and resets. `reset()` drops an unfinished
    episode without writing its tail.
    """

    def __init__(self, writer: Writer, n_step: int, discount: float):
        if isinstance(n_step, bool) or not isinstance(n_step, int) or n_step < 1:
            raise ValueError(f"n_step must be an integer >= 1, got {n_step!r}")
        if isinstance(discount, bool) or not isinstance(discount, int | float | np.floating):
            raise ValueError(f"discount must be a number in [0, 1], got {discount!r}")
        if not (math.isfinite(discount) and 0.0 <= discount <= 1.0):
            raise ValueError(f"discount must be a number in [0, 1], got {discount!r}")
        self._writer = writer
        self._n = n_step
        self._gamma = np.float32(discount)
        # o_{base}.., a/r/d for steps base..; entries before `first` are dropped as the window slides.
        self._observations: collections.deque = collections.deque()
        self._steps: collections.deque = collections.deque()
        self._base = 0
        self._first = 0
        self._last = 0
        self._started = False

    @property
    def n_step(self) -> int:
        return self._n

    @property
    def discount(self) -> np.float32:
        return self._gamma

    def reset(self) -> None:
        """Forget the current episode (nothing more is written for it)."""
        self._observations.clear()
        self._steps.clear()
        self._base = self._first = self._last = 0
        self._started = False

    def add_first(self, timestep: dm_env.TimeStep) -> None:
        if not timestep.first():
            raise ValueError(f"add_first needs a FIRST timestep, got step_type={timestep.step_type!r}")
        if self._started and self._last > 0:
            raise ValueError(
                f"add_first called during an unfinished episode ({self._last} steps added, no LAST "
                "timestep); call reset() first to drop it"
            )
        self.reset()
        self._observations.append(_copy_nest(timestep.observation))
        self._started = True

    def add(self, action: Any, next_timestep: dm_env.TimeStep) -> None:
        if not self._started:
            raise ValueError("add() called before add_first(): start each episode with add_first(timestep)")
        if next_timestep.first():
            raise ValueError("add() got a FIRST timestep; start a new episode with add_first()")
        if next_timestep.reward is None or next_timestep.discount is None:
            raise ValueError("add() needs a timestep with a reward and a discount (got None)")
        # Before appending: once n steps are complete, the window's left edge moves.
        if self._last >= self._n:
            self._first += 1
        reward = tree.map_structure(np.asarray, next_timestep.reward)
        discount = tree.map_structure(np.asarray, next_timestep.discount)
        self._steps.append((_copy_nest(action), reward, discount))
        self._observations.append(_copy_nest(next_timestep.observation))
        self._last += 1
        self._write(self._first, self._last)
        if next_timestep.last():
            while True:
                self._first += 1
                if self._first >= self._last:
                    break
                self._write(self._first, self._last)
            self.reset()
        else:
            self._trim()

    def _trim(self) -> None:
        while self._base < self._first:
            self._observations.popleft()
            self._steps.popleft()
            self._base += 1

    def _write(self, first: int, last: int) -> None:
        i, j = first - self._base, last - self._base
        window = [self._steps[k] for k in range(i, j)]
        reward, discount = n_step_return([s[1] for s in window], [s[2] for s in window], self._gamma)
        self._writer.insert(
            Transition(
                observation=self._observations[i],
                action=window[0][0],
                reward=reward,
                discount=discount,
                next_observation=self._observations[j],
            )
        )
