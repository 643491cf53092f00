"""`FrameStackTable`: a replay table that stores stacked pixel observations frame by frame.

Pixel observations are uint8 stacks [H, W, S·c] of S frames (c channels each) along the channel
axis, oldest first; at an episode start the first frame is repeated. Stored naively, every
transition holds two stacks (observation and next observation) = 2·S frames, although
consecutive observations share S − 1 frames and an n-step adder emits every observation in up to
n + 1 items. `FrameStackTable` stores each distinct frame once.

The interface is unchanged: items arrive as ordinary transitions through `insert`/`insert_batch`
(so `NStepTransitionAdder`, `BatchedWriter` and remote proxies work as they are) and `sample`
returns batches identical, byte for byte, to a plain `Table` holding the same items. Nothing about
episodes or actors needs to be known: sharing is found from content. How the frames are stored
(content addressing, memory, cost) is `dmpo.replay.frame_storage`'s docstring.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dmpo.replay.frame_storage import FrameStorage
from dmpo.replay.signature import Signature
from dmpo.replay.table import Table


def _find_stack_leaves(
    signature: Signature, num_stacked: int, stack_paths: Sequence[str] | None
) -> list[int]:
    if stack_paths is None:
        chosen = [
            i
            for i, (shape, dtype) in enumerate(zip(signature.shapes, signature.dtypes, strict=True))
            if dtype == np.uint8 and len(shape) == 3
        ]
        if not chosen:
            raise ValueError("no uint8 [H, W, C] leaf in the signature; pass stack_paths")
    else:
        unknown = [p for p in stack_paths if p not in signature.paths]
        if unknown:
            raise ValueError(f"stack_paths {unknown} are not leaves of the signature {list(signature.paths)}")
        chosen = [signature.paths.index(p) for p in stack_paths]
    shapes = {signature.shapes[i] for i in chosen}
    for i in chosen:
        shape, dtype = signature.shapes[i], signature.dtypes[i]
        if dtype != np.uint8 or len(shape) != 3 or shape[2] % num_stacked:
            raise ValueError(
                f"{signature.paths[i]}: a frame stack must be uint8 [H, W, S·c] with S={num_stacked} "
                f"dividing the channels, got {np.dtype(dtype).name}{list(shape)}"
            )
    if len(shapes) != 1:
        raise ValueError(
            f"all frame stacks must share one shape, got {sorted(shapes)} for "
            f"{[signature.paths[i] for i in chosen]}"
        )
    return chosen


class FrameStackTable(Table):
    """A `Table` that stores pixel frame stacks frame by frame (see the module docstring).

    Args (beyond `Table`'s):
      num_stacked: S, frames per stack (stacked along the last axis, oldest first).
      stack_paths: leaves holding stacks, as rendered paths, e.g.
        ``["Transition.observation['pixels']", "Transition.next_observation['pixels']"]``;
        default: every uint8 [H, W, C] leaf.
      frames_per_chunk: frames allocated at a time when the pool grows.
    """

    _storage_kind = "frames"

    def __init__(
        self,
        signature: Any,
        max_size: int,
        rate_limiter: Any,
        *,
        num_stacked: int = 3,
        stack_paths: Sequence[str] | None = None,
        frames_per_chunk: int = 4096,
        **table_kwargs: Any,
    ):
        for name, value in (("num_stacked", num_stacked), ("frames_per_chunk", frames_per_chunk)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        self._num_stacked = num_stacked
        self._stack_leaves = _find_stack_leaves(Signature(signature), num_stacked, stack_paths)
        self._frames_per_chunk = frames_per_chunk
        super().__init__(signature, max_size, rate_limiter, **table_kwargs)

    def _make_storage(self, signature: Signature, capacity: int) -> FrameStorage:
        return FrameStorage(
            signature, capacity, self._stack_leaves, self._num_stacked, self._frames_per_chunk
        )

    def _storage_config(self) -> dict:
        return {
            "num_stacked": self._num_stacked,
            "stack_paths": [self._signature.paths[i] for i in self._stack_leaves],
            "frames_per_chunk": self._frames_per_chunk,
        }

    @classmethod
    def _init_kwargs_from_header(cls, header: dict) -> dict:
        storage = header["storage"]
        return {key: storage[key] for key in ("num_stacked", "stack_paths", "frames_per_chunk")}

    def frame_stats(self) -> dict[str, float]:
        """Frames alive and allocated, and live frames per stored item."""
        with self._lock:
            pool, size = self._storage.pool, self._storage.size
            return {
                "live_frames": pool.live,
                "allocated_frames": pool.capacity,
                "frames_per_item": pool.live / size if size else 0.0,
                "frame_bytes": pool.frame_bytes,
            }
