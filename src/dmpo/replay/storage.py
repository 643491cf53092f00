"""Ring storage of a table: one preallocated numpy array per signature leaf.

Arrays are `[capacity, *leaf_shape]`, allocated at construction with `np.zeros`, which for large
sizes maps zero pages lazily: resident memory grows as slots are first written, but the address
space (capacity × bytes per item) is reserved up front. For pixel observations this is the
dominant cost (a 1M-item table of two 84×84×9 uint8 stacks is ~127 GB); `FrameStackTable`
(dmpo.replay.frames) stores each frame once instead.

A storage object only moves bytes; the table does the locking and bookkeeping. `prepare_*` runs
before the table lock is taken (per-item work that needs no shared state); `write_*` and `read`
run under the lock; `finalize` turns what `read` returned into item leaves after the lock is
released (a no-op here; frame storage interleaves frames into stacks there).
"""

from __future__ import annotations

import numpy as np

from dmpo.replay.signature import Signature


class ArrayStorage:
    """One `[capacity, ...]` array per leaf; slots are overwritten in place (FIFO by the table)."""

    kind = "array"

    def __init__(self, signature: Signature, capacity: int):
        self.signature = signature
        self.capacity = capacity
        self.arrays = [
            np.zeros((capacity, *shape), dtype)
            for shape, dtype in zip(signature.shapes, signature.dtypes, strict=True)
        ]

    @property
    def bytes_per_item(self) -> float:
        return float(self.signature.bytes_per_item)

    def prepare_one(self, leaves: list) -> list:
        return leaves

    def prepare_batch(self, leaves: list, count: int) -> list:
        return leaves

    def write_one(self, slot: int, prepared: list) -> None:
        for array, leaf in zip(self.arrays, prepared, strict=True):
            array[slot] = leaf

    def write_batch(self, start: int, prepared: list, begin: int, count: int) -> None:
        """Write rows [begin, begin+count) of the batch to slots start, start+1, ... (mod capacity)."""
        first = min(count, self.capacity - start)
        for array, leaf in zip(self.arrays, prepared, strict=True):
            array[start : start + first] = leaf[begin : begin + first]
            if first < count:
                array[: count - first] = leaf[begin + first : begin + count]

    def read(self, slots: np.ndarray) -> list[np.ndarray]:
        return [array.take(slots, axis=0) for array in self.arrays]

    def finalize(self, leaves: list) -> list:
        """Post-processing after the table lock is released (nothing to do for plain arrays)."""
        return leaves

    def state_arrays(self, size: int) -> dict[str, np.ndarray]:
        return {f"leaf_{i}": array[:size] for i, array in enumerate(self.arrays)}

    def check_state_arrays(self, arrays: dict[str, np.ndarray], size: int) -> None:
        """ValueError/KeyError unless `arrays` is what `state_arrays(size)` of such a storage wrote."""
        for i, (shape, dtype) in enumerate(zip(self.signature.shapes, self.signature.dtypes, strict=True)):
            saved = arrays[f"leaf_{i}"]
            if saved.shape != (size, *shape) or saved.dtype != dtype:
                raise ValueError(
                    f"{self.signature.paths[i]}: saved array is {saved.dtype}{list(saved.shape)}, "
                    f"expected {np.dtype(dtype).name}{[size, *shape]}"
                )

    def load_state_arrays(self, arrays: dict[str, np.ndarray], size: int) -> None:
        """Replace the first `size` slots (call check_state_arrays first)."""
        for i, array in enumerate(self.arrays):
            array[:size] = arrays[f"leaf_{i}"]
