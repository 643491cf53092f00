"""NStepTransitionAdder against algorithm.md §1: golden cases, item counts, dtypes, errors, a slow
reference."""

from __future__ import annotations

import math

import dm_env
import numpy as np
import pytest
from dm_env import specs
from hypothesis import given, settings
from hypothesis import strategies as st

from dmpo.replay import (
    BatchedWriter,
    MinSize,
    NStepTransitionAdder,
    Table,
    transition_signature,
)
from dmpo.types import EnvironmentSpec, Transition


class ListWriter:
    def __init__(self):
        self.items: list[Transition] = []

    def insert(self, item):
        self.items.append(item)


def f32(x):
    return np.asarray(x, dtype=np.float32)


def last_step(reward, observation, discount=0.0):
    """A LAST timestep with a float32 discount (dm_env.termination would give a Python float)."""
    return dm_env.TimeStep(dm_env.StepType.LAST, reward, f32(discount), observation)


def run_episode(adder, steps, *, dtype=np.float32, first_label=1):
    """Feed one episode. Observation labels are 1, 2, ...; the action taken at label L is 10·L.

    `steps` is a list of (reward, discount); the last one is the LAST timestep.
    """
    adder.add_first(dm_env.restart(np.asarray(first_label, dtype=dtype)))
    for i, (reward, discount) in enumerate(steps):
        label = first_label + i + 1
        step_type = dm_env.StepType.LAST if i == len(steps) - 1 else dm_env.StepType.MID
        ts = dm_env.TimeStep(
            step_type, np.asarray(reward, dtype), np.asarray(discount, dtype), np.asarray(label, dtype)
        )
        adder.add(np.asarray(10 * (label - 1), dtype), ts)


# algorithm.md §1 golden table: (name, n, γ, [(reward, discount)...], [(obs, next, R, D)...]).
GOLDEN = [
    ("one-step", 1, 1.0, [(0, 1), (0, 1), (1, 0)], [(1, 2, 0, 1), (2, 3, 0, 1), (3, 4, 1, 0)]),
    (
        "two-step",
        2,
        1.0,
        [(1, 0.5), (1, 0.5), (1, 0)],
        [(1, 2, 1, 0.5), (1, 3, 1.5, 0.25), (2, 4, 1.5, 0), (3, 4, 1, 0)],
    ),
    (
        "three-step discounted",
        3,
        0.4,
        [(1, 0.5), (1, 0.5), (1, 0)],
        [(1, 2, 1, 0.5), (1, 3, 1.2, 0.1), (1, 4, 1.24, 0), (2, 4, 1.2, 0), (3, 4, 1, 0)],
    ),
    (
        "varying reward",
        3,
        0.5,
        [(2, 1), (3, 1), (5, 1), (7, 0)],
        [(1, 2, 2, 1), (1, 3, 3.5, 0.5), (1, 4, 4.75, 0.25), (2, 5, 7.25, 0), (3, 5, 8.5, 0), (4, 5, 7, 0)],
    ),
    ("single step episode", 4, 1.0, [(1, 0)], [(1, 2, 1, 0)]),
    ("shorter than n", 4, 1.0, [(1, 1), (1, 0)], [(1, 2, 1, 1), (1, 3, 2, 0), (2, 3, 1, 0)]),
]


@pytest.mark.parametrize(("name", "n", "gamma", "steps", "expected"), GOLDEN, ids=[g[0] for g in GOLDEN])
def test_golden_cases(name, n, gamma, steps, expected):
    writer = ListWriter()
    run_episode(NStepTransitionAdder(writer, n, gamma), steps)
    assert len(writer.items) == len(expected)
    for item, (obs, nxt, reward, discount) in zip(writer.items, expected, strict=True):
        assert (float(item.observation), float(item.next_observation)) == (obs, nxt)
        assert float(item.action) == 10 * obs  # a_f: the action taken at the window's first observation
        np.testing.assert_allclose(item.reward, reward, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(item.discount, discount, rtol=1e-6, atol=1e-7)
        assert item.reward.dtype == np.float32 and item.discount.dtype == np.float32


def test_truncation_bootstraps_from_last_observation():
    """Same as 'two-step' but the episode is cut by a time limit (final discount 1)."""
    writer = ListWriter()
    run_episode(NStepTransitionAdder(writer, 2, 1.0), [(1, 0.5), (1, 0.5), (1, 1)])
    got = [
        (float(i.observation), float(i.next_observation), float(i.reward), float(i.discount))
        for i in writer.items
    ]
    assert got == [(1, 2, 1, 0.5), (1, 3, 1.5, 0.25), (2, 4, 1.5, 0.5), (3, 4, 1, 1)]


@pytest.mark.parametrize("n", [1, 2, 3, 5])
@pytest.mark.parametrize("length", [1, 2, 3, 4, 7])
def test_items_per_episode(n, length):
    writer = ListWriter()
    adder = NStepTransitionAdder(writer, n, 0.99)
    for episode in range(2):
        run_episode(adder, [(1, 1)] * (length - 1) + [(1, 0)], first_label=100 * episode)
    per_episode = length + n - 1 if length >= n else 2 * length - 1
    assert len(writer.items) == 2 * per_episode
    # Episode start: o0 starts min(n, T) items (start-state oversampling, algorithm.md §1).
    assert sum(float(i.observation) == 0 for i in writer.items) == min(n, length)


def slow_reference(rewards, discounts, gamma, n):
    """Expected (first, last, R, D) for every item, straight from the spec's formulas."""
    T = len(rewards)
    windows = [(max(0, last - n), last) for last in range(1, T + 1)]
    windows += [(first, T) for first in range(max(0, T - n) + 1, T)]
    out = []
    for f, last in windows:
        k = last - f
        R = sum(gamma**i * math.prod(discounts[f : f + i]) * rewards[f + i] for i in range(k))
        D = gamma ** (k - 1) * math.prod(discounts[f:last])
        out.append((f, last, R, D))
    return out


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(1, 6),
    gamma=st.floats(0.0, 1.0),
    steps=st.lists(st.tuples(st.floats(-10, 10), st.floats(0.0, 1.0)), min_size=1, max_size=14),
    final_discount=st.sampled_from([0.0, 1.0]),
    dtype=st.sampled_from([np.float32, np.float64]),
)
def test_matches_slow_reference(n, gamma, steps, final_discount, dtype):
    rewards = [float(dtype(r)) for r, _ in steps]
    discounts = [float(dtype(d)) for _, d in steps[:-1]] + [final_discount]
    writer = ListWriter()
    adder = NStepTransitionAdder(writer, n, gamma)
    run_episode(adder, list(zip(rewards, discounts, strict=True)), dtype=dtype, first_label=0)
    # γ is stored as float32 (algorithm.md §1), so the reference uses the same γ.
    expected = slow_reference(rewards, discounts, float(np.float32(gamma)), n)
    assert len(writer.items) == len(expected)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for item, (f, last, R, D) in zip(writer.items, expected, strict=True):
        labels = (float(item.observation), float(item.next_observation), float(item.action))
        assert labels == (f, last, 10 * f)
        assert item.reward.dtype == dtype and item.discount.dtype == dtype
        np.testing.assert_allclose(float(item.reward), R, rtol=tol, atol=tol * 10)
        np.testing.assert_allclose(float(item.discount), D, rtol=tol, atol=tol)


def test_dtypes_follow_reward_and_discount():
    writer = ListWriter()
    adder = NStepTransitionAdder(writer, 3, 0.9)
    adder.add_first(dm_env.restart(f32(0)))
    adder.add(f32(0), dm_env.transition(np.float64(1.0), f32(1), np.float32(0.5)))
    adder.add(f32(0), last_step(np.float64(1.0), f32(2)))
    for item in writer.items:
        assert item.reward.dtype == np.float64  # result_type(float64 reward, float32 discount)
        assert item.discount.dtype == np.float32  # γ is float32, so it does not promote D
    np.testing.assert_allclose(writer.items[1].reward, 1 + np.float32(0.9) * np.float32(0.5), rtol=1e-7)


def test_reward_broadcast_against_discount():
    writer = ListWriter()
    adder = NStepTransitionAdder(writer, 2, 0.5)
    adder.add_first(dm_env.restart(f32(0)))
    adder.add(f32(0), dm_env.transition(f32([1, 2]), f32(1), f32(1)))
    adder.add(f32(0), last_step(f32([3, 4]), f32(2), 0.5))
    item = writer.items[1]  # window [0, 2)
    assert item.reward.shape == (2,) and item.discount.shape == ()
    np.testing.assert_allclose(item.reward, [1 + 0.5 * 3, 2 + 0.5 * 4])
    np.testing.assert_allclose(item.discount, 0.5 * 0.5)
    # A vector discount against a scalar reward broadcasts the reward.
    writer = ListWriter()
    adder = NStepTransitionAdder(writer, 1, 1.0)
    adder.add_first(dm_env.restart(f32(0)))
    adder.add(f32(0), last_step(f32(2), f32(1), [0, 1, 0.5]))
    assert writer.items[0].reward.shape == (3,) and writer.items[0].discount.shape == (3,)
    np.testing.assert_allclose(writer.items[0].reward, [2, 2, 2])


def test_nested_rewards_share_a_scalar_discount():
    writer = ListWriter()
    adder = NStepTransitionAdder(writer, 2, 0.5)
    adder.add_first(dm_env.restart(f32(0)))
    adder.add(f32(0), dm_env.transition({"a": f32(1), "b": f32(10)}, f32(1), f32(0.5)))
    adder.add(f32(0), last_step({"a": f32(2), "b": f32(20)}, f32(2)))
    item = writer.items[1]
    assert set(item.reward) == {"a", "b"} and set(item.discount) == {"a", "b"}
    np.testing.assert_allclose([item.reward["a"], item.reward["b"]], [1 + 0.25 * 2, 10 + 0.25 * 20])
    np.testing.assert_allclose([item.discount["a"], item.discount["b"]], [0, 0])


def test_errors():
    adder = NStepTransitionAdder(ListWriter(), 2, 0.9)
    with pytest.raises(ValueError, match="before add_first"):
        adder.add(f32(0), dm_env.transition(f32(1), f32(1)))
    with pytest.raises(ValueError, match="FIRST timestep"):
        adder.add_first(dm_env.transition(f32(1), f32(1)))
    adder.add_first(dm_env.restart(f32(0)))
    with pytest.raises(ValueError, match="FIRST timestep"):
        adder.add(f32(0), dm_env.restart(f32(1)))
    adder.add(f32(0), dm_env.transition(f32(1), f32(1), f32(1)))
    with pytest.raises(ValueError, match="unfinished episode"):
        adder.add_first(dm_env.restart(f32(0)))
    adder.reset()
    adder.add_first(dm_env.restart(f32(0)))  # fine after reset
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="n_step"):
            NStepTransitionAdder(ListWriter(), bad, 0.9)
    for bad in (-0.1, 1.1, float("nan"), "0.9"):
        with pytest.raises(ValueError, match="discount"):
            NStepTransitionAdder(ListWriter(), 1, bad)


def test_reset_drops_the_unfinished_tail():
    writer = ListWriter()
    adder = NStepTransitionAdder(writer, 3, 1.0)
    adder.add_first(dm_env.restart(f32(0)))
    for label in (1, 2):
        adder.add(f32(0), dm_env.transition(f32(1), f32(label), f32(1)))
    assert len(writer.items) == 2
    adder.reset()
    run_episode(adder, [(1, 0)], first_label=5)
    assert [(float(i.observation), float(i.next_observation)) for i in writer.items[2:]] == [(5, 6)]


def test_observations_are_copied():
    """An environment that reuses its observation buffer must not corrupt buffered items."""
    writer = ListWriter()
    adder = NStepTransitionAdder(writer, 3, 1.0)
    buffer = np.zeros(2, np.float32)
    adder.add_first(dm_env.restart(buffer))
    for label in (1, 2, 3):
        buffer[:] = label
        adder.add(f32([0]), dm_env.transition(f32(0), buffer, f32(1)))
    assert [i.observation[0] for i in writer.items] == [0, 0, 0]
    assert [i.next_observation[0] for i in writer.items] == [1, 2, 3]


def _env_spec():
    obs = {"position": specs.Array((5,), np.float32), "velocity": specs.Array((3,), np.float32)}
    return EnvironmentSpec(
        observations=obs,
        actions=specs.BoundedArray((2,), np.float32, -1.0, 1.0),
        rewards=specs.Array((), np.float32),
        discounts=specs.BoundedArray((), np.float32, 0.0, 1.0),
    )


@pytest.mark.parametrize("batched", [False, True])
def test_items_fit_the_table_signature(batched):
    env_spec = _env_spec()
    table = Table(transition_signature(env_spec), 100, MinSize(1))
    writer = BatchedWriter(table, 4) if batched else table
    adder = NStepTransitionAdder(writer, 3, 0.99)
    rng = np.random.default_rng(0)

    def obs():
        return {
            "position": rng.normal(size=5).astype(np.float32),
            "velocity": rng.normal(size=3).astype(np.float32),
        }

    adder.add_first(dm_env.restart(obs()))
    for t in range(6):
        ts = dm_env.transition(f32(1), obs(), f32(1)) if t < 5 else last_step(f32(1), obs())
        adder.add(rng.normal(size=2).astype(np.float32), ts)
    if batched:
        writer.flush()
    assert table.stats().inserts == 6 + 3 - 1
