"""The checkpoint file (dmpo.utils.checkpointing): exact round trip of a learner state (the next
update is unchanged), corruption and mismatch errors that name the problem, atomic writes, and the
file header (version-1 files read, newer ones refused). Retention is the checkpoint manager's
(tests/test_training_checkpoints.py, tests/test_run_safety.py)."""

from __future__ import annotations

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
from dmpo.utils.checkpointing import (
    MAGIC,
    CheckpointError,
    checkpoint_file_name,
    find_checkpoint_file,
    read_checkpoint,
    write_checkpoint_file,
)
from old_formats import checkpoint_header, previous_checkpoint, rewrite_checkpoint

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


def write(directory, step, state, metadata=None):
    return write_checkpoint_file(directory / checkpoint_file_name(step), state, metadata, step=step)


def test_learner_state_round_trip_continues_bit_for_bit(tmp_path):
    nets = networks()
    update = make_update_fn(nets, CONFIG)
    state = init_training_state(nets, SPEC, CONFIG, jax.random.PRNGKey(0))
    for step in range(3):
        state, _ = update(state, batch(step))
    counts = {"learner_steps": 3, "learner_walltime": 1.25}
    path = write(tmp_path, 3, jax.device_get(state), {"counts": counts})
    template = init_training_state(nets, SPEC, CONFIG, jax.random.PRNGKey(1))  # other values, same shapes
    restored, metadata = read_checkpoint(path, template)
    assert metadata == {"counts": counts}
    assert_identical(restored, state)  # params, targets, duals, both Adam moments, step, RNG key
    continued, metrics = update(state, batch(3))
    resumed, resumed_metrics = update(jax.device_put(restored), batch(3))
    assert_identical(resumed, continued)
    assert_identical(resumed_metrics, metrics)
    assert path.name == "checkpoint_000000000003.ckpt"


def test_none_and_empty_leaves_round_trip(tmp_path):
    restored, metadata = read_checkpoint(write(tmp_path, 0, SMALL), SMALL)
    assert metadata == {} and restored["b"]["d"] is None and restored["b"]["e"] == {}
    np.testing.assert_array_equal(restored["a"], SMALL["a"])
    assert int(restored["b"]["c"]) == 7


def test_duals_without_penalty_round_trip(tmp_path):
    config = LearnerConfig(num_samples=3, mpo=MPOLossConfig(action_penalization=False))
    state = jax.device_get(init_training_state(networks(), SPEC, config, jax.random.PRNGKey(0)))
    assert state.duals.log_penalty_temperature is None
    restored, _ = read_checkpoint(write(tmp_path, 1, state), state)
    assert_identical(restored, state)


def test_the_file_in_a_folder_is_found_by_its_name(tmp_path):
    assert find_checkpoint_file(tmp_path) is None and find_checkpoint_file(tmp_path / "missing") is None
    for step in (5, 12):
        write(tmp_path, step, SMALL)
    (tmp_path / ".checkpoint_000000000099.ckpt.abc.tmp").write_bytes(b"half")  # a killed writer's
    assert find_checkpoint_file(tmp_path) == tmp_path / "checkpoint_000000000012.ckpt"


def test_a_missing_file_is_a_checkpoint_error(tmp_path):
    with pytest.raises(CheckpointError, match="cannot be read"):
        read_checkpoint(tmp_path / "checkpoint_000000000001.ckpt", SMALL)


def corrupt(path, position: int, bit: int = 0) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 1 << bit
    path.write_bytes(bytes(data))


def test_any_flipped_bit_is_detected(tmp_path):
    path = write(tmp_path, 1, SMALL, {"note": "x"})
    original = path.read_bytes()
    rng = np.random.default_rng(0)
    positions = set(range(len(MAGIC) + 8 + 32 + 4)) | set(rng.integers(0, len(original), 200).tolist())
    for position in sorted(positions):
        path.write_bytes(original)
        corrupt(path, position, bit=int(rng.integers(8)))
        with pytest.raises(CheckpointError, match=re.escape(str(path))):
            read_checkpoint(path, SMALL)


@pytest.mark.parametrize(("where", "message"), [
    ("payload", "corrupted payload"),
    ("header", "corrupted header"),
    ("magic", "not a dmpo.checkpoint file"),
])
def test_corruption_messages_say_what_is_wrong(tmp_path, where, message):
    path = write(tmp_path, 1, SMALL)
    size = path.stat().st_size
    corrupt(path, {"payload": size - 3, "header": len(MAGIC) + 8 + 32 + 5, "magic": 0}[where])
    with pytest.raises(CheckpointError, match=message):
        read_checkpoint(path, SMALL)


@pytest.mark.parametrize("fraction", [0.01, 0.2, 0.5, 0.99])
def test_truncated_file_is_detected(tmp_path, fraction):
    path = write(tmp_path, 1, SMALL)
    data = path.read_bytes()
    path.write_bytes(data[:int(fraction * len(data))])
    with pytest.raises(CheckpointError, match="truncated"):
        read_checkpoint(path, SMALL)


def test_mismatched_template_names_first_leaf_and_both_shapes(tmp_path):
    small, large = networks((8,)), networks((16,))
    saved = jax.device_get(init_training_state(small, SPEC, CONFIG, jax.random.PRNGKey(0)))
    template = init_training_state(large, SPEC, CONFIG, jax.random.PRNGKey(0))
    path = write(tmp_path, 1, saved)
    with pytest.raises(CheckpointError, match="first mismatching leaf") as info:
        read_checkpoint(path, template)
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
    path = write(tmp_path, 1, {"a": np.zeros(2)})
    with pytest.raises(CheckpointError, match="'b' .* missing from the checkpoint"):
        read_checkpoint(path, {"a": np.zeros(2), "b": np.zeros(1)})
    path = write(tmp_path, 2, {"a": np.zeros(2), "extra": np.zeros(3)})
    with pytest.raises(CheckpointError, match="'extra' .* in the checkpoint but not in the template"):
        read_checkpoint(path, {"a": np.zeros(2)})


def test_failed_write_keeps_the_previous_file(tmp_path, monkeypatch):
    path = write(tmp_path, 1, SMALL)
    before = path.read_bytes()

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # as if the process were interrupted between write and rename

    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        write(tmp_path, 1, {"a": np.zeros(1)})
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # temp removed
    read_checkpoint(path, SMALL)


def test_bad_arguments(tmp_path):
    with pytest.raises(TypeError, match="metadata must be JSON-serialisable"):
        write(tmp_path, 1, SMALL, {"x": object()})
    with pytest.raises(ValueError, match="step"):
        write_checkpoint_file(tmp_path / "x.ckpt", SMALL, step=-1)
    assert list(tmp_path.iterdir()) == []


def test_header_is_readable_json_with_leaf_summary(tmp_path):
    path = write(tmp_path, 4, SMALL, {"k": 1})
    header, _ = checkpoint_header(path.read_bytes())
    assert header["format"] == "dmpo.checkpoint" and header["format_version"] == 2 and header["step"] == 4
    assert ["a", [2, 3], "float32"] in header["leaves"] and ["b/c", [], "int32"] in header["leaves"]


def test_a_version_one_file_reads_and_a_newer_or_foreign_one_is_refused(tmp_path):
    path = write(tmp_path, 3, SMALL, {"k": 1})
    rewrite_checkpoint(path, previous_checkpoint)
    restored, metadata = read_checkpoint(path, SMALL)
    assert metadata == {"k": 1}
    np.testing.assert_array_equal(restored["a"], SMALL["a"])
    newer = write(tmp_path, 4, SMALL)
    rewrite_checkpoint(newer, lambda header: header.update(format_version=3))
    with pytest.raises(CheckpointError, match=r"checkpoint_000000000004.ckpt has format version 3, .*"
                                              r"dmpo.checkpoint format version 2 at most") as refused:
        read_checkpoint(newer, SMALL)
    assert "\n" not in str(refused.value)
    foreign = write(tmp_path, 5, SMALL)
    rewrite_checkpoint(foreign, lambda header: header.update(format="dmpo.replay"))
    with pytest.raises(CheckpointError, match="is not a dmpo.checkpoint file"):
        read_checkpoint(foreign, SMALL)
