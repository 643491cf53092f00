"""Item selection for a table: uniform (algorithm.md §2) or proportional to priority^exponent.

Samplers work on physical slots 0..size-1 of the table's ring storage (a FIFO table that has
never been full occupies exactly the first `size` slots; a full one occupies all of them), draw
with replacement, and return each draw's probability.

The prioritized sampler keeps a sum tree in one float64 array and walks it for the whole batch at
once (one vectorised step per tree level), so a batch of B draws costs O(log capacity) numpy calls
instead of B Python descents or an O(capacity) cumulative sum per batch. Every parent is always
recomputed as fl(left + right) from its children (never updated by deltas), so the tree carries no
drift and rebuilding it from saved priorities reproduces it bit for bit.
"""

from __future__ import annotations

import numpy as np


class UniformSampler:
    """Uniform with replacement over the `size` current items; priorities are accepted and ignored."""

    kind = "uniform"

    def __init__(self, capacity: int, rng: np.random.Generator):
        self.capacity = capacity
        self.rng = rng

    def set_priority(self, slot: int, priority: float) -> None:
        pass

    def set_priorities(self, slots: np.ndarray, priorities: np.ndarray) -> None:
        pass

    def set_priority_range(self, start: int, priorities: np.ndarray) -> None:
        pass

    def sample(self, size: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        slots = self.rng.integers(0, size, count)
        return slots, np.full(count, 1.0 / size)

    def state_arrays(self, size: int) -> dict[str, np.ndarray]:
        return {}

    def check_state_arrays(self, arrays: dict[str, np.ndarray], size: int) -> None:
        pass

    def load_state_arrays(self, arrays: dict[str, np.ndarray], size: int) -> None:
        pass


class PrioritizedSampler:
    """P(slot) = p_slot^exponent / Σ p^exponent over current items, via a vectorised sum tree.

    If every current weight is zero the draw falls back to uniform (so a table of zero-priority
    items still serves samples).
    """

    kind = "prioritized"

    def __init__(self, capacity: int, rng: np.random.Generator, exponent: float):
        self.capacity = capacity
        self.rng = rng
        self.exponent = float(exponent)
        self._leaf0 = 1 << max(0, (capacity - 1).bit_length())  # leaves live at [leaf0, leaf0 + capacity)
        self._depth = self._leaf0.bit_length() - 1
        self._tree = np.zeros(2 * self._leaf0, dtype=np.float64)
        self._priorities = np.zeros(capacity, dtype=np.float64)

    def _weights(self, priorities: np.ndarray | float) -> np.ndarray | float:
        return np.power(priorities, self.exponent)

    def set_priority(self, slot: int, priority: float) -> None:
        tree = self._tree
        self._priorities[slot] = priority
        node = slot + self._leaf0
        tree[node] = self._weights(float(priority))
        node >>= 1
        while node:
            tree[node] = tree[2 * node] + tree[2 * node + 1]
            node >>= 1

    def set_priorities(self, slots: np.ndarray, priorities: np.ndarray) -> None:
        """Set many priorities; for a slot listed twice the last value wins."""
        slots = np.asarray(slots, dtype=np.int64)
        priorities = np.asarray(priorities, dtype=np.float64)
        if slots.size == 0:
            return
        # Keep the last occurrence of each slot so duplicate keys have a defined outcome.
        rev_unique, rev_index = np.unique(slots[::-1], return_index=True)
        last = slots.size - 1 - rev_index
        slots, priorities = rev_unique, priorities[last]
        self._priorities[slots] = priorities
        nodes = slots + self._leaf0
        self._tree[nodes] = self._weights(priorities)
        tree = self._tree
        for _ in range(self._depth):
            # Repeated parents get the same value (computed from finished children), so the
            # duplicate fancy-index writes are well defined and no np.unique is needed.
            nodes >>= 1
            tree[nodes] = tree[2 * nodes] + tree[2 * nodes + 1]

    def set_priority_range(self, start: int, priorities: np.ndarray) -> None:
        """Priorities for slots start, start+1, ... (mod capacity), as a batch insert writes them."""
        self.set_priorities((start + np.arange(len(priorities))) % self.capacity, priorities)

    def sample(self, size: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        tree = self._tree
        total = tree[1]
        if not total > 0:
            return self.rng.integers(0, size, count), np.full(count, 1.0 / size)
        target = self.rng.random(count) * total
        node = np.ones(count, dtype=np.int64)
        for _ in range(self._depth):
            left = 2 * node
            left_sum = tree.take(left)
            # Rounding can leave target ≥ left_sum under a parent whose right subtree is empty;
            # never step into a zero-weight subtree, so every draw ends on a positive leaf.
            go_right = (target >= left_sum) & (tree.take(left + 1) > 0)
            target -= left_sum * go_right
            node = left + go_right
        return node - self._leaf0, tree[node] / total

    def priorities(self, slots: np.ndarray) -> np.ndarray:
        return self._priorities[slots]

    def state_arrays(self, size: int) -> dict[str, np.ndarray]:
        return {"priorities": self._priorities[:size].copy()}

    def check_state_arrays(self, arrays: dict[str, np.ndarray], size: int) -> None:
        priorities = arrays["priorities"]
        if priorities.shape != (size,) or priorities.dtype != np.float64:
            raise ValueError(
                f"priorities: expected float64[{size}], got {priorities.dtype}{list(priorities.shape)}"
            )
        if not np.all(np.isfinite(priorities) & (priorities >= 0)):
            raise ValueError("priorities: saved values must be finite and >= 0")

    def load_state_arrays(self, arrays: dict[str, np.ndarray], size: int) -> None:
        priorities = arrays["priorities"]
        self._priorities[:] = 0.0
        self._priorities[:size] = priorities
        self._tree[:] = 0.0
        self._tree[self._leaf0 : self._leaf0 + self.capacity] = self._weights(self._priorities)
        self._tree[self._leaf0 : self._leaf0 + self.capacity][size:] = 0.0
        level = self._leaf0 >> 1
        while level:
            self._tree[level : 2 * level] = (
                self._tree[2 * level : 4 * level : 2] + self._tree[2 * level + 1 : 4 * level : 2]
            )
            level >>= 1


def make_sampler(kind: str, capacity: int, rng: np.random.Generator, exponent: float):
    if kind == "uniform":
        return UniformSampler(capacity, rng)
    if kind == "prioritized":
        return PrioritizedSampler(capacity, rng, exponent)
    raise ValueError(f"sampler must be 'uniform' or 'prioritized', got {kind!r}")
