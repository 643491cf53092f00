"""Rate limiters (algorithm.md §2): config validation, Reverb's admission rules, batches as single
items, stress."""

from __future__ import annotations

import random
import threading
import time

import numpy as np
import pytest
from dm_env import specs
from hypothesis import given, settings
from hypothesis import strategies as st

from dmpo.replay import (
    MinSize,
    RateLimiterTimeout,
    SampleToInsertRatio,
    Table,
    TableClosedError,
)
from dmpo.replay.rate_limiters import admissible_prefix, rate_limiter_from_config

pytestmark = pytest.mark.timeout(120)  # a blocking bug should fail, not hang the suite

SIGNATURE = {"x": specs.Array((), np.int64)}


def batch(values):
    return {"x": np.asarray(values, dtype=np.int64)}


# -- configuration ------------------------------------------------------------------------------


def test_window_from_float_and_pair():
    limiter = SampleToInsertRatio(samples_per_insert=32.0, min_size_to_sample=1000, error_buffer=3200.0)
    assert (limiter.min_diff, limiter.max_diff) == (28800.0, 35200.0)  # algorithm.md §2 defaults
    limiter = SampleToInsertRatio(2.0, 10, (-5.0, 7.0))
    assert (limiter.min_diff, limiter.max_diff) == (-5.0, 7.0)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"samples_per_insert": 0.0}, "samples_per_insert"),
        ({"samples_per_insert": float("inf")}, "samples_per_insert"),
        ({"min_size_to_sample": 0}, "min_size_to_sample"),
        ({"min_size_to_sample": 2.5}, "min_size_to_sample"),
        ({"error_buffer": -1.0}, "error_buffer"),
        ({"error_buffer": (1.0,)}, "error_buffer"),
        ({"error_buffer": 3.9}, "error_buffer"),  # window 7.8 < 2·max(1, 4)
        ({"error_buffer": (0.0, 7.5)}, "error_buffer"),
    ],
)
def test_ratio_config_errors_name_the_parameter(kwargs, field):
    args = {"samples_per_insert": 4.0, "min_size_to_sample": 10, "error_buffer": 100.0, **kwargs}
    with pytest.raises(ValueError, match=field):
        SampleToInsertRatio(**args)


def test_reverb_window_rule_boundary():
    SampleToInsertRatio(4.0, 10, 4.0)  # width exactly 8 = 2·max(1, 4): accepted
    SampleToInsertRatio(0.5, 10, 1.0)  # width 2 = 2·max(1, 0.5)
    with pytest.raises(ValueError, match="2\\*max"):
        SampleToInsertRatio(0.5, 10, 0.99)
    with pytest.raises(ValueError, match="min_size"):
        MinSize(0)


@pytest.mark.parametrize(
    ("spi", "min_size", "buffer"),
    [(32.0, 1000, 3200.0), (32.0, 10, 64.0), (8.0, 100, 80.0), (1.0, 5, 2.0), (0.25, 10, 1.0)],
)
def test_agent_defaults(spi, min_size, buffer):
    limiter = SampleToInsertRatio.from_agent_defaults(spi, min_size)
    assert limiter.error_buffer == buffer
    assert limiter.samples_per_insert == spi and limiter.min_size_to_sample == min_size


def test_config_round_trip():
    for limiter in (MinSize(7), SampleToInsertRatio(2.0, 5, 4.0), SampleToInsertRatio(2.0, 5, (1.0, 9.0))):
        assert rate_limiter_from_config(limiter.to_config()) == limiter


# -- single-item rules ----------------------------------------------------------------------------


def test_ratio_rules_by_hand():
    # spi 2, min size 3, buffer 4: offset 6, window [2, 10].
    limiter = SampleToInsertRatio(2.0, 3, 4.0)
    assert not limiter.can_sample(inserts=2, samples=0, deletes=0)  # below min size
    assert [limiter.can_sample(3, s, 0) for s in range(6)] == [True] * 4 + [False] * 2  # 6 - s - 1 >= 2
    assert not limiter.can_sample(4, 0, 2)  # size 2 < 3 even with credit
    # Inserts: free up to min size, then (ins + 1)·2 − samples ≤ 10.
    assert [limiter.can_insert(i, 0, 0) for i in range(7)] == [True] * 5 + [False] * 2
    assert limiter.can_insert(5, 2, 0)  # 12 - 2 = 10 ≤ 10
    assert not limiter.can_insert(5, 1, 0)
    assert limiter.can_insert(100, 0, 98)  # size 2 → 3 ≤ min size: free regardless of the ratio


def test_min_size_rules():
    limiter = MinSize(3)
    assert [limiter.can_sample(i, 10**6, 0) for i in range(5)] == [False, False, False, True, True]
    assert not limiter.can_sample(5, 0, 3)
    assert limiter.can_insert(10**9, 0, 0)


@settings(max_examples=200, deadline=None)
@given(
    flags=st.lists(st.booleans(), max_size=40).map(lambda xs: sorted(xs, reverse=True)),
    wanted=st.integers(0, 45),
)
def test_admissible_prefix_matches_linear_scan(flags, wanted):
    calls = []

    def allowed(j):
        calls.append(j)
        return j < len(flags) and flags[j]

    expected = 0
    while expected < wanted and allowed(expected):
        expected += 1
    calls.clear()
    assert admissible_prefix(allowed, wanted) == expected
    assert len(calls) <= 2 + max(1, wanted).bit_length()


# -- batches behave as single items -----------------------------------------------------------


def _try(op, table, k):
    """Run `op` of k items with timeout 0; return how many were admitted."""
    try:
        if op == "insert":
            table.insert_batch(batch(np.arange(k)), timeout=0)
        else:
            table.sample(k, timeout=0)
        return k
    except RateLimiterTimeout as err:
        return err.completed


def _single(op, table, k):
    done = 0
    for _ in range(k):
        try:
            if op == "insert":
                table.insert({"x": np.int64(0)}, timeout=0)
            else:
                table.sample(1, timeout=0)
        except RateLimiterTimeout:
            break
        done += 1
    return done


@settings(max_examples=60, deadline=None)
@given(
    spi=st.sampled_from([0.5, 1.0, 2.0, 3.0]),
    min_size=st.integers(1, 6),
    extra=st.floats(0.0, 6.0),
    max_size=st.integers(6, 12),
    ops=st.lists(
        st.tuples(st.sampled_from(["insert", "sample"]), st.integers(1, 15)), min_size=1, max_size=25
    ),
)
def test_batches_admit_exactly_what_single_items_would(spi, min_size, extra, max_size, ops):
    limiter = SampleToInsertRatio(spi, min_size, max(1.0, spi) + extra)
    batched = Table(SIGNATURE, max_size, limiter, seed=0)
    single = Table(SIGNATURE, max_size, limiter, seed=0)
    for op, k in ops:
        assert _try(op, batched, k) == _single(op, single, k)
        a, b = batched.stats(), single.stats()
        assert (a.inserts, a.samples, a.deletes) == (b.inserts, b.samples, b.deletes)


def test_timeout_reports_operation_state_and_partial_batch():
    table = Table(SIGNATURE, 10, SampleToInsertRatio(1.0, 1, (0.0, 3.0)))
    table.insert_batch(batch([1, 2, 3]))  # each insert allows one sample (s < inserts)
    with pytest.raises(RateLimiterTimeout, match="sample timed out.*3/5.*SampleToInsertRatio") as info:
        table.sample(5, timeout=0.05)
    assert info.value.completed == 3
    assert info.value.partial["x"].shape == (3,)
    assert set(info.value.partial["x"]) <= {1, 2, 3}
    # diff = 3 − 3 = 0; an insert is allowed while (inserts + 1) − samples ≤ 3: three more.
    with pytest.raises(RateLimiterTimeout, match="insert_batch timed out.*3/4") as info:
        table.insert_batch(batch([4, 5, 6, 7]), timeout=0)
    assert info.value.completed == 3 and table.stats().inserts == 6
    empty = Table(SIGNATURE, 10, MinSize(1))
    with pytest.raises(RateLimiterTimeout, match="MinSize"):
        empty.sample(1, timeout=0.01)
    with pytest.raises(ValueError, match="timeout"):
        empty.sample(1, timeout=-1)


def _start(target, *args):
    thread = threading.Thread(target=target, args=args, daemon=True)
    thread.start()
    return thread


def _wait_for(predicate, seconds=30.0):  # a bound for loaded CI machines, not a timing check
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.002)


def test_blocked_calls_are_woken_by_the_other_side():
    table = Table(SIGNATURE, 100, SampleToInsertRatio(1.0, 2, (0.0, 4.0)))
    results = []
    sampler = _start(lambda: results.append(table.sample(3)["x"]))
    _wait_for(lambda: table.stats().waiting_samples == 1)
    table.insert_batch(batch([7, 7]))  # min size reached, 2 samples allowed, 1 still missing
    # It took the two and is blocked again, waiting for the third.
    _wait_for(lambda: (s := table.stats()).samples == 2 and s.waiting_samples == 1)
    assert sampler.is_alive() and not results
    table.insert({"x": np.int64(7)})
    sampler.join(5)
    assert not sampler.is_alive() and results[0].shape == (3,)
    # Now diff = 3·1 − 3 = 0: inserts allowed while (ins + 1) − samples ≤ 4.
    table.insert_batch(batch([1, 2, 3, 4]))
    writer = _start(table.insert_batch, batch([5, 6]))
    _wait_for(lambda: table.stats().waiting_inserts == 1)
    table.sample(2)
    writer.join(5)
    assert not writer.is_alive() and table.stats().inserts == 9


def test_close_wakes_blocked_calls():
    # One table per side: on a single table a blocked sample and a blocked insert_batch admit each
    # other's items in turn (partial admission), so both are blocked at once only for a moment, and
    # waiting for that moment is a race. Alone, each stays blocked until close().
    limiter = SampleToInsertRatio(1.0, 1, (0.0, 2.0))
    sampled, inserted = Table(SIGNATURE, 10, limiter), Table(SIGNATURE, 10, limiter)
    for table in (sampled, inserted):
        table.insert_batch(batch([1, 2]))  # diff 2: 2 samples admitted, no insert (3 - 0 > 2)
    errors = []

    def call(fn, *args):
        try:
            fn(*args)
        except TableClosedError as err:
            errors.append(str(err))

    threads = [_start(call, sampled.sample, 5), _start(call, inserted.insert_batch, batch([1, 2, 3, 4, 5]))]
    _wait_for(lambda: sampled.stats().waiting_samples == 1 and inserted.stats().waiting_inserts == 1)
    assert (sampled.stats().samples, inserted.stats().inserts) == (2, 2)  # blocked after what was admitted
    sampled.close()
    inserted.close()
    for thread in threads:
        thread.join(5)
        assert not thread.is_alive()
    assert len(errors) == 2 and all("closed" in e for e in errors)
    table = sampled
    with pytest.raises(TableClosedError):
        table.insert({"x": np.int64(0)})
    assert table.stats().closed


# -- stress -------------------------------------------------------------------------------------


def test_stress_writers_and_samplers_stay_in_window():
    """4 writers and 2 samplers on a ratio table: counters stay inside the guaranteed window."""
    spi, min_size = 2.0, 50
    limiter = SampleToInsertRatio(spi, min_size, 20.0)  # window [80, 120]
    table = Table(SIGNATURE, 300, limiter, seed=1)
    upper = max(limiter.max_diff, min_size * spi)
    violations, batch_sizes = [], []
    per_writer = 2500

    def check():
        s = table.stats()
        diff = s.inserts * spi - s.samples
        if (s.samples and diff < limiter.min_diff) or diff > upper or s.size > 300:
            violations.append(s)

    def writer(seed):
        rng = random.Random(seed)
        written = 0
        while written < per_writer:
            k = min(rng.randint(1, 40), per_writer - written)
            if k == 1:
                table.insert({"x": np.int64(seed)})
            else:
                table.insert_batch(batch(np.full(k, seed)))
            written += k
            check()

    def sampler(seed):
        rng = random.Random(seed)
        try:
            while True:
                k = rng.randint(1, 64)
                batch_sizes.append((k, table.sample(k)["x"].shape[0]))
                check()
        except TableClosedError:
            pass

    def monitor(stop):
        while not stop.is_set():
            check()

    stop = threading.Event()
    writers = [_start(writer, i) for i in range(4)]
    samplers = [_start(sampler, 10 + i) for i in range(2)]
    watcher = _start(monitor, stop)
    for thread in writers:
        thread.join(timeout=20)
    assert not any(t.is_alive() for t in writers), "writers deadlocked"

    def drained():  # both samplers blocked because one more sample would leave the window
        s = table.stats()
        return s.waiting_samples == 2 and s.inserts * spi - s.samples - 1 < limiter.min_diff

    _wait_for(drained, seconds=10)
    final = table.stats()
    table.close()
    stop.set()
    for thread in [*samplers, watcher]:
        thread.join(timeout=10)
        assert not thread.is_alive()
    assert not violations, violations[:3]
    assert final.inserts == 4 * per_writer
    # Samplers stop exactly where one more sample would leave the window.
    assert limiter.min_diff <= final.inserts * spi - final.samples < limiter.min_diff + 1
    assert all(k == got for k, got in batch_sizes)
