"""Rate limiters with Reverb's admission rules (algorithm.md §2).

A limiter is a frozen config plus two predicates over the table's lifetime counters
(`inserts`, `samples`, `deletes`). Each predicate admits ONE item; the table admits a batch as
that many single items, in order, so batched and unbatched traffic obey the same rules.

With `spi` samples per insert, `min_size = min_size_to_sample` and a window [min_diff, max_diff]:
  sample allowed iff  inserts − deletes ≥ min_size  and  inserts·spi − samples − 1 ≥ min_diff
  insert allowed iff  inserts + 1 − deletes ≤ min_size  or  (inserts + 1)·spi − samples ≤ max_diff
`MinSize(m)` is the first sample clause alone; inserts are never throttled.

Guarantees a table built on these rules keeps (tested in tests/test_replay_table.py): once any
sample has happened, ``inserts·spi − samples ≥ min_diff``; and always
``inserts·spi − samples ≤ max(max_diff, min_size·spi)`` (the second term covers the free inserts
before sampling starts). Reverb rejects windows narrower than 2·max(1, spi); narrower ones can
leave a writer and a reader each waiting for the other.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any


class RateLimiterTimeout(TimeoutError):
    """A blocked insert or sample did not get admitted in time.

    Attributes:
      completed: items of the call already admitted (they stay inserted / counted as sampled).
      partial: for a sample, the admitted items as a nest of [completed, ...] arrays (or None), so
        a caller that retries loses nothing.
    """

    def __init__(self, message: str, completed: int = 0, partial: Any = None):
        super().__init__(message)
        self.completed = completed
        self.partial = partial


def _check_min_size(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return value


@dataclasses.dataclass(frozen=True)
class MinSize:
    """Samples wait until the table holds `min_size` items; inserts are never throttled."""

    min_size: int

    def __post_init__(self) -> None:
        _check_min_size("MinSize.min_size", self.min_size)

    @property
    def min_size_to_sample(self) -> int:
        return self.min_size

    def can_sample(self, inserts: int, samples: int, deletes: int) -> bool:
        return inserts - deletes >= self.min_size

    def can_insert(self, inserts: int, samples: int, deletes: int) -> bool:
        return True

    def describe(self, inserts: int, samples: int, deletes: int) -> str:
        return f"MinSize(min_size={self.min_size}): size={inserts - deletes}"

    def to_config(self) -> dict:
        return {"kind": "MinSize", "min_size": self.min_size}


@dataclasses.dataclass(frozen=True)
class SampleToInsertRatio:
    """Keep `inserts·spi − samples` inside a window once `min_size_to_sample` items are in.

    Args:
      samples_per_insert: target average number of times each item is sampled (> 0).
      min_size_to_sample: no sampling before the table holds this many items (≥ 1).
      error_buffer: a number b ≥ 0 gives the window spi·min_size ± b (Reverb's float form); a pair
        gives the absolute window (min_diff, max_diff).
    """

    samples_per_insert: float
    min_size_to_sample: int
    error_buffer: float | tuple[float, float]

    def __post_init__(self) -> None:
        spi = self.samples_per_insert
        if isinstance(spi, bool) or not isinstance(spi, int | float) or not math.isfinite(spi) or spi <= 0:
            raise ValueError(
                f"SampleToInsertRatio.samples_per_insert must be a finite number > 0, got {spi!r}"
            )
        _check_min_size("SampleToInsertRatio.min_size_to_sample", self.min_size_to_sample)
        buf = self.error_buffer
        if isinstance(buf, tuple | list):
            if len(buf) != 2 or not all(isinstance(x, int | float) and math.isfinite(x) for x in buf):
                raise ValueError(
                    f"SampleToInsertRatio.error_buffer pair must be two finite numbers, got {buf!r}"
                )
            object.__setattr__(self, "error_buffer", (float(buf[0]), float(buf[1])))
        elif isinstance(buf, bool) or not isinstance(buf, int | float) or not math.isfinite(buf) or buf < 0:
            raise ValueError(f"SampleToInsertRatio.error_buffer must be a finite number >= 0, got {buf!r}")
        need = 2.0 * max(1.0, float(spi))
        if self.max_diff - self.min_diff < need:
            raise ValueError(
                f"SampleToInsertRatio.error_buffer={buf!r} gives the window "
                f"[{self.min_diff}, {self.max_diff}] of width {self.max_diff - self.min_diff}, but it must "
                f"be at least 2*max(1, samples_per_insert) = {need} (Reverb's rule); a narrower window can "
                "leave inserts and samples waiting for each other forever"
            )

    @classmethod
    def from_agent_defaults(cls, samples_per_insert: float, min_replay_size: int) -> SampleToInsertRatio:
        """The distributed agent's limiter (algorithm.md §2, §8.2 item 25).

        error_buffer = max(0.1·spi·min_replay_size, 2·spi, 1). The JAX agent uses the first two
        terms; the final 1 only matters where their maximum is below 1 — a window Reverb itself
        would reject (width < 2) — so every accepted configuration matches the JAX agent's.
        """
        buf = max(0.1 * samples_per_insert * min_replay_size, 2.0 * samples_per_insert, 1.0)
        return cls(samples_per_insert, min_replay_size, buf)

    @property
    def min_diff(self) -> float:
        if isinstance(self.error_buffer, tuple):
            return self.error_buffer[0]
        return self.samples_per_insert * self.min_size_to_sample - self.error_buffer

    @property
    def max_diff(self) -> float:
        if isinstance(self.error_buffer, tuple):
            return self.error_buffer[1]
        return self.samples_per_insert * self.min_size_to_sample + self.error_buffer

    def can_sample(self, inserts: int, samples: int, deletes: int) -> bool:
        if inserts - deletes < self.min_size_to_sample:
            return False
        return inserts * self.samples_per_insert - samples - 1 >= self.min_diff

    def can_insert(self, inserts: int, samples: int, deletes: int) -> bool:
        if inserts + 1 - deletes <= self.min_size_to_sample:
            return True
        return (inserts + 1) * self.samples_per_insert - samples <= self.max_diff

    def describe(self, inserts: int, samples: int, deletes: int) -> str:
        diff = inserts * self.samples_per_insert - samples
        return (
            f"SampleToInsertRatio(samples_per_insert={self.samples_per_insert}, "
            f"min_size_to_sample={self.min_size_to_sample}): size={inserts - deletes}, "
            f"inserts*spi-samples={diff:g}, window=[{self.min_diff:g}, {self.max_diff:g}]"
        )

    def to_config(self) -> dict:
        buf = list(self.error_buffer) if isinstance(self.error_buffer, tuple) else self.error_buffer
        return {
            "kind": "SampleToInsertRatio",
            "samples_per_insert": self.samples_per_insert,
            "min_size_to_sample": self.min_size_to_sample,
            "error_buffer": buf,
        }


RateLimiter = MinSize | SampleToInsertRatio


def rate_limiter_from_config(config: dict) -> RateLimiter:
    """Inverse of `to_config()` (used when restoring a saved table)."""
    kind = config.get("kind")
    if kind == "MinSize":
        return MinSize(int(config["min_size"]))
    if kind == "SampleToInsertRatio":
        buf = config["error_buffer"]
        return SampleToInsertRatio(
            float(config["samples_per_insert"]),
            int(config["min_size_to_sample"]),
            tuple(buf) if isinstance(buf, list) else buf,
        )
    raise ValueError(f"unknown rate limiter kind {kind!r}")


def admissible_prefix(allowed: Callable[[int], bool], wanted: int) -> int:
    """Largest m ≤ wanted such that allowed(j) holds for every j < m.

    `allowed(j)` says whether the j-th item of a batch (after j earlier ones) is admitted; for the
    limiters above it is true on a prefix of j, so a binary search finds the length exactly with
    O(log wanted) evaluations of the very predicate a single-item call would use.
    """
    if wanted <= 0 or not allowed(0):
        return 0
    if allowed(wanted - 1):  # the common case: everything fits
        return wanted
    lo, hi = 1, wanted - 1  # allowed(lo - 1) holds; answer in [lo, hi]
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if allowed(mid - 1):
            lo = mid
        else:
            hi = mid - 1
    return lo
