"""Replay table (algorithm.md §2): signatures, FIFO storage, samplers, save/restore, BatchedWriter."""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import tree
from dm_env import specs
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as scipy_stats

from dmpo.replay import (
    BatchedWriter,
    CheckpointError,
    MinSize,
    SampleToInsertRatio,
    SignatureError,
    Table,
    persistence,
    transition_signature,
)
from dmpo.replay.samplers import PrioritizedSampler
from dmpo.replay.signature import Signature
from dmpo.types import EnvironmentSpec, Transition
from old_formats import previous_replay, rewrite_replay

pytestmark = pytest.mark.timeout(120)  # a blocking bug should fail, not hang the suite


def walker_signature(obs=24, act=6):
    return Transition(
        observation=specs.Array((obs,), np.float32),
        action=specs.Array((act,), np.float32),
        reward=specs.Array((), np.float32),
        discount=specs.Array((), np.float32),
        next_observation=specs.Array((obs,), np.float32),
    )


def numbered(keys, obs=24, act=6):
    """A batch of transitions whose every entry equals the item's number (so data reveals identity)."""
    k = np.asarray(keys, dtype=np.float32)
    return Transition(
        observation=np.repeat(k[:, None], obs, 1),
        action=np.repeat(k[:, None], act, 1),
        reward=k.copy(),
        discount=k.copy(),
        next_observation=np.repeat(k[:, None], obs, 1) + 0.5,
    )


def one(key):
    return tree.map_structure(lambda x: x[0], numbered([key]))


def assert_consistent(data, keys=None):
    """Every sampled row is intact (all fields from the same item) and matches its key."""
    ref = data.reward
    for leaf in (data.observation, data.action, data.next_observation - 0.5):
        np.testing.assert_array_equal(leaf, np.broadcast_to(ref[:, None], leaf.shape))
    np.testing.assert_array_equal(data.discount, ref)
    if keys is not None:
        np.testing.assert_array_equal(ref, keys)


# -- construction and signatures --------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_size": 0}, "max_size"),
        ({"max_size": 2.5}, "max_size"),
        ({"rate_limiter": MinSize(11)}, "min_size_to_sample=11 exceeds max_size=10"),
        ({"rate_limiter": "min size"}, "rate_limiter"),
        ({"sampler": "lifo"}, "sampler"),
        ({"priority_exponent": -1.0}, "priority_exponent"),
        ({"name": ""}, "name"),
    ],
)
def test_constructor_errors(kwargs, message):
    args = {"signature": walker_signature(), "max_size": 10, "rate_limiter": MinSize(1), **kwargs}
    with pytest.raises((ValueError, TypeError), match=message):
        Table(**args)


def test_signature_leaf_errors():
    with pytest.raises(TypeError, match="must have .shape"):
        Signature({"a": 1.0})
    with pytest.raises(TypeError, match="dtype object"):
        Signature({"a": specs.Array((), object)})


def test_config_style_max_size():
    assert Table(walker_signature(), 1e3, MinSize(1)).max_size == 1000


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda t: t._replace(action=t.action.astype(np.float64)),
            r"Transition.action: expected float32\[6\], got float64\[6\]",
        ),
        (
            lambda t: t._replace(observation=t.observation[:5]),
            r"Transition.observation: expected float32\[24\], got float32\[5\]",
        ),
        (lambda t: t._replace(reward=1.0), r"Transition.reward: expected float32\[\], got float"),
        (lambda t: tuple(t), "expected Transition, got tuple"),
    ],
)
def test_insert_signature_errors(mutate, message):
    table = Table(walker_signature(), 10, MinSize(1))
    with pytest.raises(SignatureError, match=message):
        table.insert(mutate(one(1)))
    assert table.stats().inserts == 0


def test_nested_signature_paths():
    sig = Transition(
        observation={"position": specs.Array((5,), np.float32), "velocity": specs.Array((2,), np.float32)},
        action=specs.Array((1,), np.float32),
        reward=specs.Array((), np.float32),
        discount=specs.Array((), np.float32),
        next_observation=[specs.Array((3,), np.uint8)],
    )
    table = Table(sig, 4, MinSize(1))
    good = Transition(
        {"position": np.zeros(5, np.float32), "velocity": np.zeros(2, np.float32)},
        np.zeros(1, np.float32),
        np.float32(0),
        np.float32(1),
        [np.zeros(3, np.uint8)],
    )
    table.insert(good)
    bad_pos = good._replace(observation={**good.observation, "position": np.zeros(5)})
    with pytest.raises(
        SignatureError,
        match=r"^Transition.observation\['position'\]: expected float32\[5\], got float64\[5\]$",
    ):
        table.insert(bad_pos)
    with pytest.raises(
        SignatureError, match=r"observation: expected a mapping with keys \['position', 'velocity'\]"
    ):
        table.insert(good._replace(observation={"position": np.zeros(5, np.float32)}))
    with pytest.raises(
        SignatureError, match=r"Transition.next_observation\[0\]: expected uint8\[3\], got uint8\[4\]"
    ):
        table.insert(good._replace(next_observation=[np.zeros(4, np.uint8)]))
    # Flat order matches dm-tree (the very same leaves, in the same order), so flat lists interoperate.
    assert len(table._signature.nest.flatten(good)) == len(tree.flatten(good)) > 1
    assert [id(x) for x in table._signature.nest.flatten(good)] == [id(x) for x in tree.flatten(good)]


def test_batch_signature_errors():
    table = Table(walker_signature(), 10, MinSize(1))
    items = numbered(range(3))
    with pytest.raises(
        SignatureError, match=r"Transition.reward: expected a batch \[3\]\+float32\[\], got float32\[2\]"
    ):
        table.insert_batch(items._replace(reward=items.reward[:2]))
    with pytest.raises(
        SignatureError,
        match=r"observation: expected a batch \[N\]\+float32\[24\], got float32\[24\] \(no batch",
    ):
        table.insert_batch(one(0))
    with pytest.raises(ValueError, match="priorities must have shape"):
        table.insert_batch(items, priorities=[1.0, 2.0])
    with pytest.raises(ValueError, match="finite and >= 0"):
        table.insert_batch(items, priorities=[1.0, -2.0, 1.0])
    assert table.stats().inserts == 0


def test_transition_signature_broadcasts_reward():
    env_spec = EnvironmentSpec(
        observations={"pixels": specs.Array((8, 8, 9), np.uint8)},
        actions=specs.BoundedArray((2,), np.float32, -1.0, 1.0),
        rewards=specs.Array((), np.int32),
        discounts=specs.BoundedArray((3,), np.float32, 0.0, 1.0),
    )
    sig = transition_signature(env_spec)
    assert sig.reward.shape == (3,) and sig.reward.dtype == np.float64  # result_type(int32, float32)
    assert sig.discount is env_spec.discounts and sig.next_observation is env_spec.observations
    nested = transition_signature(
        env_spec._replace(
            rewards={"a": specs.Array((), np.float32), "b": specs.Array((2,), np.float32)},
            discounts=specs.Array((), np.float32),
        )
    )
    assert nested.reward["b"].shape == (2,) and set(nested.discount) == {"a", "b"}


# -- FIFO storage -------------------------------------------------------------------------------


def test_fifo_eviction_and_keys():
    table = Table(walker_signature(), 10, MinSize(1), seed=0)
    for k in range(15):
        table.insert(one(k))
    s = table.stats()
    assert (s.size, s.inserts, s.deletes) == (10, 15, 5)
    batch = table.sample_with_info(2000)
    assert_consistent(batch.data, batch.keys)
    assert set(batch.keys.tolist()) == set(range(5, 15))
    np.testing.assert_allclose(batch.probabilities, 0.1)


def test_get_by_key_without_sampling():
    table = Table(walker_signature(), 5, MinSize(1))
    table.insert_batch(numbered(range(8)))  # keys 3..7 live
    items = table.get(np.array([7, 3, 3]))
    assert_consistent(items, np.array([7, 3, 3]))
    assert table.stats().samples == 0
    with pytest.raises(KeyError, match=r"\[2, 8\] are not in the table \(live: 3..7\)"):
        table.get(np.array([2, 4, 8]))


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(1, 23), min_size=1, max_size=12), max_size=st.integers(1, 9))
def test_batched_inserts_wrap_like_single_inserts(sizes, max_size):
    table = Table(walker_signature(), max_size, MinSize(1), seed=0)
    start = 0
    for k in sizes:
        table.insert_batch(numbered(range(start, start + k)))
        start += k
    s = table.stats()
    assert (s.inserts, s.size, s.deletes) == (start, min(start, max_size), max(0, start - max_size))
    batch = table.sample_with_info(64)
    assert_consistent(batch.data, batch.keys)
    assert batch.keys.min() >= start - min(start, max_size) and batch.keys.max() < start


def test_stats_fields():
    table = Table(walker_signature(), 100, MinSize(1))
    table.insert_batch(numbered(range(8)))
    table.sample(20)
    s = table.stats()
    assert s.bytes_per_item == 4 * (24 + 6 + 1 + 1 + 24)
    assert s.samples_per_insert == 20 / 8 and s.name == "priority_table" and not s.closed
    assert "MinSize" in s.rate_limiter


# -- samplers -----------------------------------------------------------------------------------


def test_uniform_sampling_is_uniform():
    n, draws = 20, 200_000
    table = Table(walker_signature(), n, MinSize(1), seed=3)
    table.insert_batch(numbered(range(n)))
    keys = np.concatenate([table.sample_with_info(1000).keys for _ in range(draws // 1000)])
    counts = np.bincount(keys, minlength=n)
    chi2 = ((counts - draws / n) ** 2 / (draws / n)).sum()
    assert chi2 < scipy_stats.chi2.ppf(1 - 1e-6, df=n - 1)  # false-alarm rate 1e-6
    # And no bin strays more than 6 binomial standard deviations.
    assert np.abs(counts - draws / n).max() < 6 * np.sqrt(draws * (1 / n) * (1 - 1 / n))


@pytest.mark.parametrize("exponent", [1.0, 0.5, 0.0])
def test_prioritized_sampling_follows_priorities(exponent):
    n, draws = 12, 120_000
    priorities = np.arange(1, n + 1, dtype=np.float64)
    priorities[3] = 0.0  # never drawn (unless exponent 0: 0**0 = 1)
    table = Table(
        walker_signature(), n, MinSize(1), sampler="prioritized", priority_exponent=exponent, seed=4
    )
    table.insert_batch(numbered(range(n)), priorities=priorities)
    expected = priorities**exponent / (priorities**exponent).sum()
    batches = [table.sample_with_info(1000) for _ in range(draws // 1000)]
    keys = np.concatenate([b.keys for b in batches])
    np.testing.assert_allclose(np.concatenate([b.probabilities for b in batches]), expected[keys], rtol=1e-12)
    counts = np.bincount(keys, minlength=n)
    live = expected > 0
    chi2 = ((counts[live] - draws * expected[live]) ** 2 / (draws * expected[live])).sum()
    assert chi2 < scipy_stats.chi2.ppf(1 - 1e-6, df=live.sum() - 1)
    assert counts[~live].sum() == 0
    assert_consistent(batches[0].data, batches[0].keys)


def test_update_priorities_and_stale_keys():
    table = Table(walker_signature(), 4, MinSize(1), sampler="prioritized", seed=5)
    table.insert_batch(numbered(range(6)))  # keys 2..5 live
    assert (
        table.update_priorities(np.array([0, 1, 2, 3, 4, 5]), np.array([9.0, 9.0, 0.0, 0.0, 0.0, 1.0])) == 4
    )
    assert set(table.sample_with_info(200).keys.tolist()) == {5}
    table.update_priorities(np.array([3, 3]), np.array([5.0, 0.0]))  # duplicates: the last wins
    assert set(table.sample_with_info(200).keys.tolist()) == {5}
    table.update_priorities(np.array([2, 3, 4, 5]), np.zeros(4))  # all zero: falls back to uniform
    assert set(table.sample_with_info(400).keys.tolist()) == {2, 3, 4, 5}
    with pytest.raises(ValueError, match="keys"):
        table.update_priorities(np.array([0.5]), np.array([1.0]))


@settings(max_examples=60, deadline=None)
@given(
    capacity=st.integers(1, 70),
    data=st.data(),
)
def test_sum_tree_descent_matches_cumsum_search(capacity, data):
    """The vectorised descent picks the slot a cumulative-sum search picks, for every target."""
    weights = np.array(
        data.draw(
            st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.25, 7.0]), min_size=capacity, max_size=capacity)
        )
    )
    if weights.sum() == 0:
        weights[0] = 1.0
    targets = np.array(data.draw(st.lists(st.floats(0.0, 0.999), min_size=1, max_size=30)))

    class FixedUniforms:
        def random(self, count):
            return targets[:count]

    sampler = PrioritizedSampler(capacity, FixedUniforms(), exponent=1.0)
    sampler.set_priorities(np.arange(capacity), weights)
    slots, probabilities = sampler.sample(capacity, len(targets))
    cumsum = np.cumsum(weights)
    expected = np.searchsorted(cumsum, targets * weights.sum(), side="right")
    np.testing.assert_array_equal(slots, expected)
    np.testing.assert_allclose(probabilities, weights[slots] / weights.sum())
    assert sampler._tree[1] == pytest.approx(weights.sum())


# -- save / restore -----------------------------------------------------------------------------


def _filled(sampler="uniform", n=37, max_size=16):
    limiter = SampleToInsertRatio(2.0, 4, (-1000.0, 1000.0))  # restored as-is, never blocks here
    table = Table(walker_signature(), max_size, limiter, sampler=sampler, seed=11, name="t")
    for start in range(0, n, 5):
        table.insert_batch(
            numbered(range(start, min(n, start + 5))),
            priorities=np.arange(start, min(n, start + 5)) % 4 + 0.5,
        )
    table.sample(9)
    return table


@pytest.mark.parametrize("sampler", ["uniform", "prioritized"])
@pytest.mark.parametrize("n", [7, 37])  # never full / wrapped around
def test_save_restore_round_trip(tmp_path, sampler, n):
    table = _filled(sampler, n)
    path = tmp_path / "table.npz"
    table.save(path)
    restored = Table.restore(path)
    assert restored.stats() == table.stats()
    assert restored.rate_limiter == table.rate_limiter and restored.name == "t"
    for _ in range(3):  # same RNG state ⇒ same next samples (data, keys, probabilities)
        a, b = table.sample_with_info(25), restored.sample_with_info(25)
        tree.map_structure(np.testing.assert_array_equal, a, b)
    table.insert(one(100), priority=3.0)
    restored.insert(one(100), priority=3.0)
    tree.map_structure(
        np.testing.assert_array_equal, table.sample_with_info(50), restored.sample_with_info(50)
    )
    assert restored.stats() == table.stats()


def test_a_version_one_table_file_restores_and_a_newer_one_is_refused(tmp_path):
    table = _filled("prioritized", 37)
    old = tmp_path / "old.npz"
    table.save(old)
    rewrite_replay(old, previous_replay)  # "format": "dmpo.replay.table", "version": 1
    restored = Table.restore(old)
    assert restored.stats() == table.stats()
    tree.map_structure(np.testing.assert_array_equal, table.sample_with_info(25),
                       restored.sample_with_info(25))
    newer = tmp_path / "newer.npz"
    table.save(newer)
    rewrite_replay(newer, lambda header: header.update(format_version=3))
    with pytest.raises(CheckpointError, match=r"newer.npz has format version 3, .*dmpo.replay format "
                                              r"version 2"):
        Table.restore(newer)
    rewrite_replay(newer, lambda header: header.update(format="dmpo.checkpoint"))
    with pytest.raises(CheckpointError, match="not a dmpo.replay file"):
        Table.restore(newer)


def test_load_into_existing_table(tmp_path):
    table = _filled()
    table.save(tmp_path / "t.npz")
    other = Table(walker_signature(), 16, MinSize(1), seed=0)
    other.load(tmp_path / "t.npz")
    s, o = table.stats(), other.stats()
    assert (s.inserts, s.samples, s.deletes) == (o.inserts, o.samples, o.deletes)
    tree.map_structure(np.testing.assert_array_equal, table.sample_with_info(30), other.sample_with_info(30))
    with pytest.raises(CheckpointError, match="max_size"):
        Table(walker_signature(), 17, MinSize(1)).load(tmp_path / "t.npz")
    with pytest.raises(CheckpointError, match="signature"):
        Table(walker_signature(obs=3), 16, MinSize(1)).load(tmp_path / "t.npz")


def test_failed_load_leaves_the_table_unchanged(tmp_path):
    source = _filled("prioritized")
    source.save(tmp_path / "good.npz")
    header, arrays = persistence.read_archive(tmp_path / "good.npz")
    arrays["sampler_priorities"] = arrays["sampler_priorities"][:-1]  # damaged after the leaves
    header = {k: v for k, v in header.items() if k not in ("format", "version")}
    persistence.write_archive(tmp_path / "bad.npz", header, arrays)
    target = _filled("prioritized", n=5)
    before = target.stats(), target.get(np.arange(5))
    with pytest.raises(CheckpointError, match="priorities"):
        target.load(tmp_path / "bad.npz")
    assert target.stats() == before[0]
    tree.map_structure(np.testing.assert_array_equal, target.get(np.arange(5)), before[1])


def test_restore_with_an_explicit_signature(tmp_path):
    Pair = collections.namedtuple("Pair", ["a", "b"])
    signature = Pair(specs.Array((2,), np.float32), specs.Array((), np.int32))
    table = Table(signature, 4, MinSize(1), seed=0)
    table.insert_batch(Pair(np.ones((3, 2), np.float32), np.arange(3, dtype=np.int32)))
    table.save(tmp_path / "pair.npz")
    with pytest.raises(CheckpointError, match="pass signature="):
        Table.restore(tmp_path / "pair.npz")
    restored = Table.restore(tmp_path / "pair.npz", signature=signature)
    assert restored.get(np.arange(3)).b.tolist() == [0, 1, 2]
    with pytest.raises(CheckpointError, match="signature"):
        Table.restore(tmp_path / "pair.npz", signature=Pair(signature.a, specs.Array((), np.int64)))


def test_corrupt_files_raise_clear_errors(tmp_path):
    path = tmp_path / "t.npz"
    _filled().save(path)
    data = path.read_bytes()
    cases = {
        "truncated": data[: len(data) // 2],
        "empty": b"",
        "garbage": b"not a table at all" * 10,
    }
    # Flip a byte inside the first stored array (after the zip local header): the CRC check catches it.
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo("leaf_0.npy")
    flipped = bytearray(data)
    flipped[info.header_offset + 200] ^= 0xFF
    cases["flipped byte"] = bytes(flipped)
    for name, content in cases.items():
        bad = tmp_path / f"{name}.npz"
        bad.write_bytes(content)
        with pytest.raises(CheckpointError, match="truncated or corrupt|not a replay table"):
            Table.restore(bad)
    with pytest.raises(FileNotFoundError):
        Table.restore(tmp_path / "missing.npz")


def test_save_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "t.npz"
    _filled(n=7).save(path)
    before = path.read_bytes()

    def failing_savez(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez", failing_savez)
    with pytest.raises(OSError, match="disk full"):
        _filled(n=37).save(path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["t.npz"]  # no temporary file left behind


# -- BatchedWriter ------------------------------------------------------------------------------


class RecordingTable:
    def __init__(self, fail_times=0):
        self.calls = []
        self.fail_times = fail_times

    def insert_batch(self, items, priorities=None, timeout=None):
        if self.fail_times:
            self.fail_times -= 1
            raise ConnectionError("replay server unavailable")
        self.calls.append((items, priorities))


def test_batched_writer_sends_full_batches_and_flushes():
    target = RecordingTable()
    writer = BatchedWriter(target, 4)
    for k in range(10):
        writer.insert(one(k), priority=2.0 if k == 9 else 1.0)
    assert [c[0].reward.tolist() for c in target.calls] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert all(c[1] is None for c in target.calls) and writer.pending == 2
    first = target.calls[0][0]
    writer.close()
    assert target.calls[-1][0].reward.tolist() == [8, 9] and target.calls[-1][1].tolist() == [1.0, 2.0]
    assert first.reward.tolist() == [0, 1, 2, 3]  # earlier batches are not overwritten by later ones
    assert_consistent(target.calls[1][0])


def test_batched_writer_checks_items_and_keeps_them_on_failure():
    target = RecordingTable(fail_times=1)
    writer = BatchedWriter(target, 2, signature=walker_signature())
    with pytest.raises(SignatureError, match="Transition.action"):
        writer.insert(one(0)._replace(action=np.zeros(6)))
    writer.insert(one(0))
    with pytest.raises(ConnectionError):
        writer.insert(one(1))
    assert writer.pending == 2
    writer.flush()
    assert target.calls[0][0].reward.tolist() == [0, 1]


def test_batched_writer_into_a_table():
    table = Table(walker_signature(), 100, MinSize(1), seed=0)
    with BatchedWriter(table, 8) as writer:
        for k in range(20):
            writer.insert(one(k))
        assert table.stats().inserts == 16
    assert table.stats().inserts == 20
    batch = table.sample_with_info(100)
    assert_consistent(batch.data, batch.keys)


def test_replay_package_does_not_import_jax():
    """Tables run inside Ray actors that must not initialise an accelerator."""
    code = "import sys, dmpo.replay; print('jax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("sampler", ["uniform", "prioritized"])
def test_save_writes_outside_the_lock_and_keeps_its_snapshot(tmp_path, monkeypatch, sampler):
    """A long save must not stall the table (the distributed health check calls stats()): while the
    writer is held mid-write, stats/insert/sample are answered, and the file holds the table as it
    was when the save began."""
    import threading

    from dmpo.replay import table_files as table_module

    table = _filled(sampler, n=37)
    reference = tmp_path / "reference.npz"
    table.save(reference)  # what the blocked save must write
    writing, release = threading.Event(), threading.Event()
    real_write = table_module.persistence.write_archive

    def held_write(path, header, arrays):
        writing.set()
        assert release.wait(60), "the test never released the writer"
        real_write(path, header, arrays)

    monkeypatch.setattr(table_module.persistence, "write_archive", held_write)
    saver = threading.Thread(target=table.save, args=(tmp_path / "held.npz",))
    saver.start()
    try:
        assert writing.wait(60)
        answered = threading.Event()

        def use_table():
            table.stats()
            table.insert(one(500), priority=2.0)  # overwrites a slot the snapshot holds (max_size 16)
            table.sample(4)
            answered.set()

        user = threading.Thread(target=use_table, daemon=True)
        user.start()
        assert answered.wait(60), "the table was blocked while a save was writing"
    finally:
        release.set()
        saver.join(60)
    assert not saver.is_alive()
    held, ref = Table.restore(tmp_path / "held.npz"), Table.restore(reference)
    assert held.stats() == ref.stats()
    tree.map_structure(np.testing.assert_array_equal, held.sample_with_info(30), ref.sample_with_info(30))
