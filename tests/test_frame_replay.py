"""FrameStackTable: byte-identical to a plain Table on a fake pixel env, with ~1 frame per item."""

from __future__ import annotations

import dm_env
import numpy as np
import pytest
import tree
from dm_env import specs

from dmpo.replay import BatchedWriter, MinSize, NStepTransitionAdder, Table, transition_signature
from dmpo.replay.frame_storage import join_frames, split_stacks
from dmpo.replay.frames import FrameStackTable
from dmpo.types import EnvironmentSpec

pytestmark = pytest.mark.timeout(120)

H, W, C, S = 6, 5, 3, 3  # small frames keep the test fast; the code path is the same as 84×84


class FakePixelEnv(dm_env.Environment):
    """Random frames stacked S deep along channels (oldest first, first frame repeated at reset).

    Every episode starts from the same 'title screen' frame and sometimes holds a frame for a few
    steps, so identical frames occur within and across episodes. Episodes alternate termination
    (final discount 0) and truncation (final discount 1).
    """

    def __init__(self, lengths, seed=0):
        self._lengths = list(lengths)
        self._rng = np.random.default_rng(seed)
        self._title = self._rng.integers(0, 256, (H, W, C), dtype=np.uint8)
        self._episode = -1

    def _observation(self):
        stack = np.concatenate(self._frames[-S:], axis=-1)
        return {"pixels": stack, "proprio": self._rng.normal(size=2).astype(np.float32)}

    def reset(self):
        self._episode += 1
        self._t = 0
        self._frames = [self._title] * S
        return dm_env.restart(self._observation())

    def step(self, action):
        self._t += 1
        hold = self._rng.random() < 0.2
        frame = self._frames[-1] if hold else self._rng.integers(0, 256, (H, W, C), dtype=np.uint8)
        self._frames.append(frame)
        reward = np.float32(self._rng.normal())
        if self._t == self._lengths[self._episode]:
            final = np.float32(self._episode % 2)
            return dm_env.TimeStep(dm_env.StepType.LAST, reward, final, self._observation())
        return dm_env.TimeStep(dm_env.StepType.MID, reward, np.float32(1), self._observation())

    def observation_spec(self):
        return {"pixels": specs.Array((H, W, C * S), np.uint8), "proprio": specs.Array((2,), np.float32)}

    def action_spec(self):
        return specs.BoundedArray((1,), np.float32, -1.0, 1.0)

    def reward_spec(self):
        return specs.Array((), np.float32)

    def discount_spec(self):
        return specs.BoundedArray((), np.float32, 0.0, 1.0)


def env_spec(env):
    return EnvironmentSpec(env.observation_spec(), env.action_spec(), env.reward_spec(), env.discount_spec())


class Tee:
    def __init__(self, *tables):
        self.tables = tables

    def insert(self, item):
        for table in self.tables:
            table.insert(item)

    def insert_batch(self, items, priorities=None, timeout=None):
        for table in self.tables:
            table.insert_batch(items, priorities=priorities)


def assert_same_contents(naive, frames):
    a, b = naive.stats(), frames.stats()
    assert (a.inserts, a.size, a.deletes) == (b.inserts, b.size, b.deletes)
    keys = np.arange(a.deletes, a.inserts)
    tree.map_structure(lambda x, y: _assert_identical(x, y), naive.get(keys), frames.get(keys))
    frames._storage.check_invariants()


def _assert_identical(x, y):
    assert x.dtype == y.dtype and x.shape == y.shape
    np.testing.assert_array_equal(x, y)


def run(env, adder, episodes, rng, after_episode=None):
    for _ in range(episodes):
        ts = env.reset()
        adder.add_first(ts)
        while not ts.last():
            action = rng.normal(size=1).astype(np.float32)
            ts = env.step(action)
            adder.add(action, ts)
        if after_episode:
            after_episode()


LENGTHS = [1, 2, 5, 3, 8, 1, 4, 6, 2, 7, 3, 9]  # includes episodes shorter than n = 3


@pytest.mark.parametrize("batched", [False, True], ids=["insert", "insert_batch"])
def test_identical_to_naive_storage_across_boundaries_and_wraparound(batched):
    env = FakePixelEnv(LENGTHS)
    signature = transition_signature(env_spec(env))
    naive = Table(signature, 16, MinSize(1), seed=7)
    frames = FrameStackTable(signature, 16, MinSize(1), seed=7, frames_per_chunk=8)  # forces several chunks
    tee = Tee(naive, frames)
    writer = BatchedWriter(tee, 5) if batched else tee
    adder = NStepTransitionAdder(writer, 3, 0.9)

    def compare():
        if batched:
            writer.flush()
        assert_same_contents(naive, frames)
        # Same RNG state and same size ⇒ same slots; the batches must match byte for byte.
        tree.map_structure(_assert_identical, naive.sample_with_info(32), frames.sample_with_info(32))

    run(env, adder, len(LENGTHS), np.random.default_rng(1), after_episode=compare)
    total = sum(t + 3 - 1 if t >= 3 else 2 * t - 1 for t in LENGTHS)
    assert frames.stats().inserts == total and total > 3 * 16  # the ring wrapped around several times
    assert frames.frame_stats()["allocated_frames"] > 8


def test_about_one_frame_per_item_for_ordinary_episodes():
    lengths = [40, 25, 60, 33, 50, 45]
    env = FakePixelEnv(lengths, seed=3)
    signature = transition_signature(env_spec(env))
    table = FrameStackTable(signature, 150, MinSize(1))
    run(env, NStepTransitionAdder(table, 5, 0.99), len(lengths), np.random.default_rng(0))
    stats = table.frame_stats()
    assert table.stats().size == 150
    assert stats["frames_per_item"] <= 1.2
    naive_bytes = Table(signature, 1, MinSize(1)).stats().bytes_per_item
    frame_bytes = H * W * C
    assert naive_bytes == 2 * S * frame_bytes + 4 * (2 + 2 + 1 + 1 + 1)
    assert table.stats().bytes_per_item < naive_bytes / 3
    table._storage.check_invariants()


def test_unrelated_stacks_cost_two_s_frames_and_stay_correct():
    signature = {"obs": specs.Array((H, W, C * S), np.uint8), "next": specs.Array((H, W, C * S), np.uint8)}
    table = FrameStackTable(signature, 10, MinSize(1), frames_per_chunk=7)
    rng = np.random.default_rng(0)
    items = {k: rng.integers(0, 256, (25, H, W, C * S), dtype=np.uint8) for k in ("obs", "next")}
    table.insert_batch(items)
    got = table.get(np.arange(15, 25))
    for k in items:
        np.testing.assert_array_equal(got[k], items[k][15:])
    assert table.frame_stats()["live_frames"] == 10 * 2 * S
    table._storage.check_invariants()


@pytest.mark.parametrize("full", [False, True])
def test_save_restore_round_trip(tmp_path, full):
    env = FakePixelEnv(LENGTHS, seed=5)
    table = FrameStackTable(transition_signature(env_spec(env)), 16, MinSize(1), seed=2, frames_per_chunk=8)
    run(env, NStepTransitionAdder(table, 3, 0.9), len(LENGTHS) if full else 2, np.random.default_rng(0))
    table.sample(5)
    table.save(tmp_path / "frames.npz")
    restored = FrameStackTable.restore(tmp_path / "frames.npz")
    assert restored.stats() == table.stats()
    keys = np.arange(table.stats().deletes, table.stats().inserts)
    tree.map_structure(_assert_identical, table.get(keys), restored.get(keys))
    tree.map_structure(_assert_identical, table.sample_with_info(20), restored.sample_with_info(20))
    restored._storage.check_invariants()
    assert restored.frame_stats()["live_frames"] == table.frame_stats()["live_frames"]


def test_split_and_join_are_inverse_and_match_concatenation():
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (11, S, H, W, C), dtype=np.uint8)
    stacks = join_frames(frames)
    np.testing.assert_array_equal(stacks, np.concatenate([frames[:, s] for s in range(S)], axis=-1))
    np.testing.assert_array_equal(split_stacks(stacks, S), frames)


def test_configuration_errors():
    good = {"pixels": specs.Array((H, W, C * S), np.uint8), "x": specs.Array((2,), np.float32)}
    FrameStackTable(good, 4, MinSize(1), stack_paths=["item['pixels']"])
    with pytest.raises(ValueError, match="not leaves of the signature"):
        FrameStackTable(good, 4, MinSize(1), stack_paths=["item['pix']"])
    with pytest.raises(ValueError, match="frame stack must be uint8"):
        FrameStackTable(good, 4, MinSize(1), stack_paths=["item['x']"])
    with pytest.raises(ValueError, match="dividing"):
        FrameStackTable(good, 4, MinSize(1), num_stacked=4)
    with pytest.raises(ValueError, match="no uint8"):
        FrameStackTable({"x": specs.Array((2,), np.float32)}, 4, MinSize(1))
    with pytest.raises(ValueError, match="share one shape"):
        FrameStackTable(
            {"a": specs.Array((H, W, 9), np.uint8), "b": specs.Array((H, H, 9), np.uint8)}, 4, MinSize(1)
        )


def test_hash_collisions_only_cost_comparisons(monkeypatch):
    """With every frame hashing alike, full comparisons must still keep distinct frames apart."""
    import dmpo.replay.frame_storage as storage_module

    monkeypatch.setattr(storage_module, "_crcs", lambda frames: [0] * (frames.size // (H * W * C)))
    env = FakePixelEnv(LENGTHS[:6], seed=9)
    signature = transition_signature(env_spec(env))
    naive, frames = Table(signature, 12, MinSize(1)), FrameStackTable(signature, 12, MinSize(1))
    run(env, NStepTransitionAdder(Tee(naive, frames), 3, 0.9), 6, np.random.default_rng(0))
    assert_same_contents(naive, frames)
    assert len(frames._storage.pool.index) == 1  # one bucket held every live frame
