"""Checkpoints: exact round trip of a learner state (the next update is unchanged), retention,
corruption and mismatch errors that name the problem, and atomic writes."""

from __future__ import annotations

import json
import os
import re

import flax.serialization
import jax
import numpy as np
import pytest
from dm_env import specs

from dmpo.agent.learning import init_training_state, make_update_fn
from dmpo.agent.networks import make_networks
from dmpo.config import LearnerConfig, MPOLossConfig, NetworkConfig
from dmpo.types import EnvironmentSpec, Transition
from dmpo.utils.checkpointing import MAGIC, Checkpointer, CheckpointError

B, D, OBS = 4, 2, 3
SPEC = EnvironmentSpec(
    observations=specs.Array((OBS,), np.float32),
    actions=specs.BoundedArray((D,), np.float32, -1.0, 1.0),
    rewards=specs.Array((), np.float32),
    discounts=specs.BoundedArray((), np.float32, 0.0, 1.0),
)
CONFIG = LearnerConfig(num_samples=3, target_policy_update_period=2)


def networks(critic_sizes=(8,)):
    return make_networks(SPEC, NetworkConfig(policy_layer_sizes=(8,), critic_layer_sizes=critic_sizes,
                                             num_atoms=5, vmin=-2.0, vmax=2.0))


def batch(seed: int) -> Transition:
    rng = np.random.default_rng(seed)
    def normal(*shape):
        return rng.normal(size=shape).astype(np.float32)

    return Transition(normal(B, OBS), normal(B, D), normal(B), np.ones(B, np.float32), normal(B, OBS))


def leaves(tree):
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(tree)]


def assert_identical(a, b):
    assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
    for x, y in zip(leaves(a), leaves(b), strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(x, y)


SMALL = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": {"c": np.int32(7), "d": None, "e": {}}}


def test_learner_state_round_trip_continues_bit_for_bit(tmp_path):
    nets = networks()
    update = make_update_fn(nets, CONFIG)
    state = init_training_state(nets, SPEC, CONFIG, jax.random.PRNGKey(0))
    for step in range(3):
        state, _ = update(state, batch(step))
    counts = {"learner_steps": 3, "learner_walltime": 1.25}
    path = Checkpointer(tmp_path).save(3, jax.device_get(state), {"counts": counts})
    template = init_training_state(nets, SPEC, CONFIG, jax.random.PRNGKey(1))  # other values, same shapes
    restored, metadata = Checkpointer(tmp_path).restore(template)
    assert metadata == {"counts": counts}
    assert_identical(restored, state)  # params, targets, duals, both Adam moments, step, RNG key
    continued, metrics = update(state, batch(3))
    resumed, resumed_metrics = update(jax.device_put(restored), batch(3))
    assert_identical(resumed, continued)
    assert_identical(resumed_metrics, metrics)
    assert path.name == "checkpoint_000000000003.ckpt"


def test_none_and_empty_leaves_round_trip(tmp_path):
    checkpointer = Checkpointer(tmp_path)
    checkpointer.save(0, SMALL)
    restored, metadata = checkpointer.restore(SMALL)
    assert metadata == {} and restored["b"]["d"] is None and restored["b"]["e"] == {}
    np.testing.assert_array_equal(restored["a"], SMALL["a"])
    assert int(restored["b"]["c"]) == 7


def test_duals_without_penalty_round_trip(tmp_path):
    config = LearnerConfig(num_samples=3, mpo=MPOLossConfig(action_penalization=False))
    state = jax.device_get(init_training_state(networks(), SPEC, config, jax.random.PRNGKey(0)))
    assert state.duals.log_penalty_temperature is None
    Checkpointer(tmp_path).save(1, state)
    restored, _ = Checkpointer(tmp_path).restore(state)
    assert_identical(restored, state)


def test_keeps_the_newest_k(tmp_path):
    checkpointer = Checkpointer(tmp_path, max_to_keep=2)
    assert checkpointer.latest() is None
    for step in (5, 1, 7, 3):
        checkpointer.save(step, {"x": np.full(2, step, np.float32)})
    assert checkpointer.all_steps() == [5, 7]
    assert checkpointer.latest() == checkpointer.path_for(7)
    state, _ = checkpointer.restore({"x": np.zeros(2, np.float32)})
    np.testing.assert_array_equal(state["x"], [7, 7])
    state, _ = checkpointer.restore({"x": np.zeros(2, np.float32)}, path=checkpointer.path_for(5))
    np.testing.assert_array_equal(state["x"], [5, 5])


def test_restore_without_checkpoint_is_an_error(tmp_path):
    with pytest.raises(CheckpointError, match="no checkpoint"):
        Checkpointer(tmp_path).restore(SMALL)


def corrupt(path, position: int, bit: int = 0) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 1 << bit
    path.write_bytes(bytes(data))


def test_any_flipped_bit_is_detected(tmp_path):
    checkpointer = Checkpointer(tmp_path)
    path = checkpointer.save(1, SMALL, {"note": "x"})
    original = path.read_bytes()
    rng = np.random.default_rng(0)
    positions = set(range(len(MAGIC) + 8 + 32 + 4)) | set(rng.integers(0, len(original), 200).tolist())
    for position in sorted(positions):
        path.write_bytes(original)
        corrupt(path, position, bit=int(rng.integers(8)))
        with pytest.raises(CheckpointError, match=re.escape(str(path))):
            checkpointer.restore(SMALL)


@pytest.mark.parametrize(("where", "message"), [
    ("payload", "corrupted payload"),
    ("header", "corrupted header"),
    ("magic", "not a dmpo-checkpoint file"),
])
def test_corruption_messages_say_what_is_wrong(tmp_path, where, message):
    path = Checkpointer(tmp_path).save(1, SMALL)
    size = path.stat().st_size
    corrupt(path, {"payload": size - 3, "header": len(MAGIC) + 8 + 32 + 5, "magic": 0}[where])
    with pytest.raises(CheckpointError, match=message):
        Checkpointer(tmp_path).restore(SMALL)


@pytest.mark.parametrize("fraction", [0.01, 0.2, 0.5, 0.99])
def test_truncated_file_is_detected(tmp_path, fraction):
    path = Checkpointer(tmp_path).save(1, SMALL)
    data = path.read_bytes()
    path.write_bytes(data[:int(fraction * len(data))])
    with pytest.raises(CheckpointError, match="truncated"):
        Checkpointer(tmp_path).restore(SMALL)


def test_mismatched_template_names_first_leaf_and_both_shapes(tmp_path):
    small, large = networks((8,)), networks((16,))
    saved = jax.device_get(init_training_state(small, SPEC, CONFIG, jax.random.PRNGKey(0)))
    template = init_training_state(large, SPEC, CONFIG, jax.random.PRNGKey(0))
    Checkpointer(tmp_path).save(1, saved)
    with pytest.raises(CheckpointError, match="first mismatching leaf") as info:
        Checkpointer(tmp_path).restore(template)
    found = re.search(r"leaf '([^']+)': checkpoint has shape (\([^)]*\)) \w+, template has shape (\([^)]*\))",
                      str(info.value))
    assert found, str(info.value)
    path, saved_shape, template_shape = found.groups()

    def lookup(tree):
        node = flax.serialization.to_state_dict(tree)
        for key in path.split("/"):
            node = node[key]
        return str(tuple(np.shape(node)))

    assert saved_shape == lookup(saved) and template_shape == lookup(template)
    assert saved_shape != template_shape


def test_missing_and_extra_leaves_are_named(tmp_path):
    checkpointer = Checkpointer(tmp_path)
    checkpointer.save(1, {"a": np.zeros(2)})
    with pytest.raises(CheckpointError, match="'b' .* missing from the checkpoint"):
        checkpointer.restore({"a": np.zeros(2), "b": np.zeros(1)})
    checkpointer.save(2, {"a": np.zeros(2), "extra": np.zeros(3)})
    with pytest.raises(CheckpointError, match="'extra' .* in the checkpoint but not in the template"):
        checkpointer.restore({"a": np.zeros(2)})


def test_failed_write_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    checkpointer = Checkpointer(tmp_path)
    checkpointer.save(1, SMALL)

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # as if the process were interrupted between write and rename

    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        checkpointer.save(2, SMALL)
    monkeypatch.undo()
    assert checkpointer.latest() == checkpointer.path_for(1)
    assert sorted(p.name for p in tmp_path.iterdir()) == [checkpointer.path_for(1).name]  # temp removed
    checkpointer.restore(SMALL)


def test_stray_partial_temp_file_is_ignored_then_cleaned(tmp_path):
    checkpointer = Checkpointer(tmp_path)
    good = checkpointer.save(1, SMALL)
    stray = tmp_path / ".checkpoint_abc123.tmp"  # what a writer killed mid-write (no cleanup) leaves
    stray.write_bytes(good.read_bytes()[:50])
    assert checkpointer.latest() == good
    checkpointer.restore(SMALL)
    Checkpointer(tmp_path)  # a new writer on the directory removes the leftover
    assert not stray.exists() and good.exists()


def test_bad_arguments(tmp_path):
    checkpointer = Checkpointer(tmp_path)
    with pytest.raises(TypeError, match="metadata must be JSON-serialisable"):
        checkpointer.save(1, SMALL, {"x": object()})
    with pytest.raises(ValueError, match="step"):
        checkpointer.save(-1, SMALL)
    with pytest.raises(ValueError, match="max_to_keep"):
        Checkpointer(tmp_path, max_to_keep=0)
    assert list(tmp_path.iterdir()) == []


def test_header_is_readable_json_with_leaf_summary(tmp_path):
    path = Checkpointer(tmp_path).save(4, SMALL, {"k": 1})
    data = path.read_bytes()
    length = int.from_bytes(data[len(MAGIC):len(MAGIC) + 8], "little")
    header = json.loads(data[len(MAGIC) + 40:len(MAGIC) + 40 + length])
    assert header["format"] == "dmpo-checkpoint" and header["version"] == 1 and header["step"] == 4
    assert ["a", [2, 3], "float32"] in header["leaves"] and ["b/c", [], "int32"] in header["leaves"]
