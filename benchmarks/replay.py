"""Replay table throughput against a bare numpy ring buffer, and frame vs naive pixel storage.

Item: a walker-sized transition (observation 24 float32 as one array, action 6, reward,
discount, next observation 24) = 224 bytes. The floor is a ring buffer with no lock, no
signature check, no rate limiter and no Python nest handling; the ratio column says what the
table's safety costs. Each figure is the best of `--repeats` interleaved rounds (the machine is
shared; compare ratios, not absolute numbers across runs).

Pixels: 84×84 RGB frames stacked 3 deep ([84, 84, 9] uint8), episodes of `--episode-length`
steps through a 5-step adder; the same items go into a plain `Table` and a `FrameStackTable`,
and the table reports bytes per stored transition.

    .venv/bin/python benchmarks/replay.py            # ~1–2 min
    .venv/bin/python benchmarks/replay.py --quick    # smaller counts, for a smoke run
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import dm_env
import numpy as np
import tree
from dm_env import specs

from dmpo.replay import MinSize, NStepTransitionAdder, PrefetchingIterator, Table, transition_signature
from dmpo.replay.frames import FrameStackTable
from dmpo.types import EnvironmentSpec, Transition

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


def pixel_items(
    num_items: int, episode_length: int, rng: np.random.Generator
) -> tuple[EnvironmentSpec, list]:
    """Transitions from episodes of random 84×84×3 frames stacked 3 deep, via a 5-step adder."""
    spec = EnvironmentSpec(
        observations=specs.Array((84, 84, 9), np.uint8),
        actions=specs.BoundedArray((6,), np.float32, -1.0, 1.0),
        rewards=specs.Array((), np.float32),
        discounts=specs.BoundedArray((), np.float32, 0.0, 1.0),
    )

    class Collect(list):
        insert = list.append

    items = Collect()
    adder = NStepTransitionAdder(items, 5, 0.99)
    while len(items) < num_items:
        frames = [rng.integers(0, 256, (84, 84, 3), dtype=np.uint8)] * 3
        adder.add_first(dm_env.restart(np.concatenate(frames, axis=-1)))
        for t in range(episode_length):
            frames = [*frames[1:], rng.integers(0, 256, (84, 84, 3), dtype=np.uint8)]
            step = dm_env.StepType.LAST if t == episode_length - 1 else dm_env.StepType.MID
            obs = np.concatenate(frames, axis=-1)
            adder.add(np.zeros(6, np.float32), dm_env.TimeStep(step, np.float32(1), np.float32(1), obs))
    return spec, items[:num_items]


def bench_pixels(args: argparse.Namespace, rng: np.random.Generator) -> None:
    spec, items = pixel_items(args.pixel_items, args.episode_length, rng)
    batches = [
        tree.map_structure(lambda *leaves: np.stack(leaves), *items[i : i + 64])
        for i in range(0, len(items), 64)
    ]
    signature = transition_signature(spec)
    rows = []
    for label, cls in (("naive Table", Table), ("FrameStackTable", FrameStackTable)):
        table = cls(signature, args.pixel_max_size, MinSize(1), seed=0)

        def insert(table=table):
            for batch in batches:
                table.insert_batch(batch)

        insert_rate = rate(insert, len(items), 1)

        def sample(table=table):
            for _ in range(args.pixel_samples):
                table.sample(256)

        sample_rate = rate(sample, args.pixel_samples, args.repeats)
        stats = table.stats()
        rows.append((label, stats.bytes_per_item, insert_rate, sample_rate, stats.size))
    frame_bytes = 84 * 84 * 3
    print(
        f"\nPixels: [84, 84, 9] uint8 stacks, episodes of {args.episode_length} steps, n=5, "
        f"max_size={args.pixel_max_size:,} ({args.pixel_items:,} items inserted, batches of 64)\n"
    )
    print(
        "| storage | bytes / transition | frames / transition | insert_batch (items/s) "
        "| sample B=256 (batches/s) |"
    )
    print("|---|---:|---:|---:|---:|")
    for label, bytes_per_item, insert_rate, sample_rate, _ in rows:
        print(
            f"| {label} | {bytes_per_item:,.0f} | {bytes_per_item / frame_bytes:.2f} | {insert_rate:,.0f} | "
            f"{sample_rate:,.1f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-size", type=int, default=1_000_000)
    parser.add_argument("--singles", type=int, default=50_000)
    parser.add_argument("--batched-items", type=int, default=500_000)
    parser.add_argument("--samples", type=int, default=4_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--pixel-max-size", type=int, default=2_000)
    parser.add_argument("--pixel-items", type=int, default=3_000)
    parser.add_argument("--pixel-samples", type=int, default=20)
    parser.add_argument("--episode-length", type=int, default=250)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.max_size, args.singles, args.batched_items = 100_000, 5_000, 50_000
        args.samples, args.repeats = 400, 1
        args.pixel_max_size, args.pixel_items, args.pixel_samples = 500, 800, 3
    rng = np.random.default_rng(0)
    rows = bench_uniform(args, rng) + bench_prioritized(args, rng)
    print(f"max_size={args.max_size:,}, item = walker transition (224 bytes), best of {args.repeats}\n")
    print("| operation | dmpo Table | numpy floor | Table / floor | target |")
    print("|---|---:|---:|---:|---|")
    for name, table_rate, floor_rate, target in rows:
        floor = f"{floor_rate:,.0f}" if floor_rate else "–"
        ratio = f"{table_rate / floor_rate:.2f}" if floor_rate else "–"
        print(f"| {name} | {table_rate:,.0f} | {floor} | {ratio} | {target} |")
    bench_pixels(args, rng)


if __name__ == "__main__":
    main()
