"""Replay table throughput against a bare numpy ring buffer, measured in the same run.

Item: a walker-sized transition (observation 24 float32 as one array, action 6, reward,
discount, next observation 24) = 224 bytes. The floor is a ring buffer with no lock, no
signature check, no rate limiter and no Python nest handling; the ratio column says what the
table's safety costs. Each figure is the best of `--repeats` interleaved rounds (the machine is
shared; compare ratios, not absolute numbers across runs).

    .venv/bin/python benchmarks/replay.py            # ~1 min
    .venv/bin/python benchmarks/replay.py --quick    # smaller counts, for a smoke run
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
from dm_env import specs

from dmpo.replay import MinSize, PrefetchingIterator, Table
from dmpo.types import Transition

OBS, ACT = 24, 6


def signature() -> Transition:
    return Transition(
        observation=specs.Array((OBS,), np.float32),
        action=specs.Array((ACT,), np.float32),
        reward=specs.Array((), np.float32),
        discount=specs.Array((), np.float32),
        next_observation=specs.Array((OBS,), np.float32),
    )


def make_batch(n: int, rng: np.random.Generator) -> Transition:
    return Transition(
        observation=rng.normal(size=(n, OBS)).astype(np.float32),
        action=rng.normal(size=(n, ACT)).astype(np.float32),
        reward=rng.normal(size=n).astype(np.float32),
        discount=np.ones(n, np.float32),
        next_observation=rng.normal(size=(n, OBS)).astype(np.float32),
    )


class NumpyRing:
    """The floor: preallocated arrays, a cursor, uniform integer sampling. Nothing else."""

    def __init__(self, capacity: int, rng: np.random.Generator):
        self.capacity = capacity
        self.arrays = [np.zeros((capacity, *s.shape), s.dtype) for s in signature()]
        self.cursor = 0
        self.size = 0
        self.rng = rng

    def insert(self, item: Transition) -> None:
        c = self.cursor
        for array, leaf in zip(self.arrays, item, strict=True):
            array[c] = leaf
        self.cursor = (c + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def insert_batch(self, items: Transition) -> None:
        n = len(items.reward)
        c = self.cursor
        first = min(n, self.capacity - c)
        for array, leaf in zip(self.arrays, items, strict=True):
            array[c : c + first] = leaf[:first]
            array[: n - first] = leaf[first:]
        self.cursor = (c + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def sample(self, batch_size: int) -> Transition:
        idx = self.rng.integers(0, self.size, batch_size)
        return Transition(*[array.take(idx, axis=0) for array in self.arrays])


def rate(fn: Callable[[], None], units: int, repeats: int) -> float:
    """Best units/second over `repeats` runs of fn (fn performs `units` units of work)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return units / best


def bench_uniform(
    args: argparse.Namespace, rng: np.random.Generator
) -> list[tuple[str, float, float | None, str]]:
    table = Table(signature(), args.max_size, MinSize(1), seed=0)
    ring = NumpyRing(args.max_size, np.random.default_rng(0))
    prefill = make_batch(10_000, rng)
    for _ in range(args.max_size // 10_000):
        table.insert_batch(prefill)
        ring.insert_batch(prefill)
    source = make_batch(args.singles, rng)
    single = [Transition(*(leaf[i] for leaf in source)) for i in range(args.singles)]
    rows = []

    def singles(target):
        def run():
            for item in single:
                target.insert(item)

        return run

    rows.append(("insert, one item per call (items/s)", singles(table), singles(ring), args.singles, ""))
    for b in (256, 1000):
        batch = make_batch(b, rng)
        calls = max(1, args.batched_items // b)

        def batched(target, batch=batch, calls=calls):
            def run():
                for _ in range(calls):
                    target.insert_batch(batch)

            return run

        rows.append((f"insert_batch B={b} (items/s)", batched(table), batched(ring), calls * b, "≥ 200k"))

    def sampling(target):
        def run():
            for _ in range(args.samples):
                target.sample(256)

        return run

    rows.append(("sample B=256 (batches/s)", sampling(table), sampling(ring), args.samples, "≥ 2,000"))

    def prefetched():
        with PrefetchingIterator(table, 256, 4) as iterator:
            for _ in range(args.samples):
                next(iterator)

    rows.append(("sample B=256 via PrefetchingIterator(4) (batches/s)", prefetched, None, args.samples, ""))
    out = []
    for name, fn_table, fn_floor, units, target in rows:
        table_rate = rate(fn_table, units, args.repeats)
        floor_rate = rate(fn_floor, units, args.repeats) if fn_floor else None
        out.append((name, table_rate, floor_rate, target))
    return out


def bench_prioritized(
    args: argparse.Namespace, rng: np.random.Generator
) -> list[tuple[str, float, float | None, str]]:
    """Sum tree vs recomputing a cumulative sum per batch (the simple alternative)."""
    table = Table(signature(), args.max_size, MinSize(1), sampler="prioritized", seed=0)
    prefill = make_batch(10_000, rng)
    for _ in range(args.max_size // 10_000):
        table.insert_batch(prefill, priorities=rng.uniform(0.1, 2.0, 10_000))
    priorities = rng.uniform(0.1, 2.0, args.max_size)
    keys = np.arange(256)
    new = rng.uniform(0.1, 2.0, 256)

    def tree_sample():
        for _ in range(args.samples // 4):
            batch = table.sample_with_info(256)
            table.update_priorities(batch.keys, new)

    def cumsum_sample():
        for _ in range(args.samples // 4):
            priorities[keys] = new  # an update invalidates the cumulative sum...
            cumsum = np.cumsum(priorities)  # ...so each batch pays O(max_size)
            np.searchsorted(cumsum, rng.uniform(0, cumsum[-1], 256), side="right")

    name = "prioritized sample B=256 + update 256 (batches/s; floor: np.cumsum per batch)"
    return [
        (
            name,
            rate(tree_sample, args.samples // 4, args.repeats),
            rate(cumsum_sample, args.samples // 4, args.repeats),
            "",
        )
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-size", type=int, default=1_000_000)
    parser.add_argument("--singles", type=int, default=50_000)
    parser.add_argument("--batched-items", type=int, default=500_000)
    parser.add_argument("--samples", type=int, default=4_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.max_size, args.singles, args.batched_items, args.samples, args.repeats = (
            100_000,
            5_000,
            50_000,
            400,
            1,
        )
    rng = np.random.default_rng(0)
    rows = bench_uniform(args, rng) + bench_prioritized(args, rng)
    print(f"max_size={args.max_size:,}, item = walker transition (224 bytes), best of {args.repeats}\n")
    print("| operation | dmpo Table | numpy floor | Table / floor | target |")
    print("|---|---:|---:|---:|---|")
    for name, table_rate, floor_rate, target in rows:
        floor = f"{floor_rate:,.0f}" if floor_rate else "–"
        ratio = f"{table_rate / floor_rate:.2f}" if floor_rate else "–"
        print(f"| {name} | {table_rate:,.0f} | {floor} | {ratio} | {target} |")


if __name__ == "__main__":
    main()
