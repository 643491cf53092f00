"""The frame storage behind `FrameStackTable` (dmpo.replay.frames): each distinct frame of the
stacked pixel observations stored once, in a reference-counted, content-indexed pool.

  * Content addressing. Before the table lock is taken, each incoming stack is split into its S
    frames and each frame gets a CRC-32. Under the lock, a frame whose CRC is indexed and whose
    bytes are equal to an indexed frame (always compared in full, so hash collisions only cost
    a comparison) reuses that frame; otherwise it is copied into a free frame slot. The storage
    keeps, per item and per stack leaf, S frame ids plus a reference count per frame; evicting an
    item releases its references and a frame whose count reaches zero returns to the free list.
    Identical frames from different episodes or actors (a blank screen, a repeated first frame)
    are therefore shared too.
  * Memory. Frames live in chunks of `frames_per_chunk` frames added when the free list is empty
    (so memory follows the frames actually alive, not a worst case); freed slots are reused
    last-in-first-out, which keeps the touched chunks few. An n-step adder over episodes of
    T ≥ n steps needs T + 1 frames for T + n − 1 items, i.e. about one frame per item, against
    2·S for naive storage (see benchmarks/replay.py for measured bytes per transition).
  * Cost. Sampling gathers S frames per stack under the lock and interleaves them into
    [H, W, S·c] after releasing it; the interleave is a strided byte copy, so a pixel batch
    costs a few times the CPU of a naive gather (measured in benchmarks/replay.py). Inserts
    pay a de-interleave, S CRCs and up to S comparisons per stack.
"""

from __future__ import annotations

import zlib

import numpy as np

from dmpo.replay.signature import Signature

_NO_FRAME = -1
_INTERLEAVE_BLOCK = 8  # items per strided copy: keeps the working set in cache


def split_stacks(stacks: np.ndarray, num_stacked: int) -> np.ndarray:
    """[N, H, W, S·c] → contiguous frames [N, S, H, W, c] (frame s = channels s·c..(s+1)·c)."""
    n, h, w, channels = stacks.shape
    c = channels // num_stacked
    frames = np.empty((n, num_stacked, h, w, c), dtype=stacks.dtype)
    src = stacks.reshape(n, h * w, channels).transpose(0, 2, 1)  # [N, S·c, HW] view
    dst = frames.reshape(n, num_stacked, h * w, c)
    for s in range(num_stacked):
        for k in range(c):
            dst[:, s, :, k] = src[:, s * c + k, :]
    return frames


def join_frames(frames: np.ndarray) -> np.ndarray:
    """Inverse of `split_stacks`: frames [N, S, H, W, c] → stacks [N, H, W, S·c]."""
    n, num_stacked, h, w, c = frames.shape
    out = np.empty((n, h, w, num_stacked * c), dtype=frames.dtype)
    dst = out.reshape(n, h * w, num_stacked * c).transpose(0, 2, 1)  # [N, S·c, HW] view
    src = frames.reshape(n, num_stacked, h * w, c)
    for i in range(0, n, _INTERLEAVE_BLOCK):
        block_dst, block_src = dst[i : i + _INTERLEAVE_BLOCK], src[i : i + _INTERLEAVE_BLOCK]
        for s in range(num_stacked):
            for k in range(c):
                block_dst[:, s * c + k, :] = block_src[:, s, :, k]
    return out


class FramePool:
    """Reference-counted, content-indexed frame slots in growable chunks."""

    def __init__(self, frame_shape: tuple[int, ...], frames_per_chunk: int, max_frames: int):
        self.frame_shape = frame_shape
        self.chunk = frames_per_chunk
        self.max_frames = max_frames
        self.chunks: list[np.ndarray] = []
        self.refcount = np.zeros(0, dtype=np.int64)
        self.crc = np.zeros(0, dtype=np.uint32)
        self.free = np.zeros(0, dtype=np.int64)  # a stack; free[:free_top] are free ids
        self.free_top = 0
        self.index: dict[int, list[int]] = {}
        self.live = 0

    @property
    def frame_bytes(self) -> int:
        return int(np.prod(self.frame_shape))

    @property
    def capacity(self) -> int:
        return len(self.chunks) * self.chunk

    def _grow(self) -> None:
        if self.capacity >= self.max_frames:
            raise RuntimeError(f"frame pool exhausted at {self.capacity} frames (more than 2·S per item?)")
        first = self.capacity
        self.chunks.append(np.zeros((self.chunk, *self.frame_shape), dtype=np.uint8))
        self.refcount = np.concatenate([self.refcount, np.zeros(self.chunk, np.int64)])
        self.crc = np.concatenate([self.crc, np.zeros(self.chunk, np.uint32)])
        # The free stack can hold every id; new ids go on top, the lowest one last (popped first).
        free = np.empty(self.capacity, dtype=np.int64)
        free[: self.free_top] = self.free[: self.free_top]
        free[self.free_top : self.free_top + self.chunk] = np.arange(first + self.chunk - 1, first - 1, -1)
        self.free = free
        self.free_top += self.chunk

    def frame(self, fid: int) -> np.ndarray:
        return self.chunks[fid // self.chunk][fid % self.chunk]

    def acquire(self, frame: np.ndarray, crc: int) -> int:
        """Id of a frame equal to `frame`, adding it if absent; takes one reference."""
        bucket = self.index.get(crc)
        if bucket is not None:
            for fid in bucket:
                if np.array_equal(self.frame(fid), frame):
                    self.refcount[fid] += 1
                    return fid
        if self.free_top == 0:
            self._grow()
        self.free_top -= 1
        fid = int(self.free[self.free_top])
        self.chunks[fid // self.chunk][fid % self.chunk] = frame
        self.refcount[fid] = 1
        self.crc[fid] = crc
        self.index.setdefault(crc, []).append(fid)
        self.live += 1
        return fid

    def release(self, fids: np.ndarray) -> None:
        for fid in fids.tolist():
            self.refcount[fid] -= 1
            if self.refcount[fid] == 0:
                crc = int(self.crc[fid])
                bucket = self.index[crc]
                bucket.remove(fid)
                if not bucket:
                    del self.index[crc]
                self.free[self.free_top] = fid
                self.free_top += 1
                self.live -= 1

    def gather(self, fids: np.ndarray) -> np.ndarray:
        """Copies of frames `fids` (any shape) as [*fids.shape, *frame_shape]."""
        flat = fids.reshape(-1)
        if len(self.chunks) == 1:
            out = self.chunks[0].take(flat, axis=0)
        else:
            out = np.empty((flat.size, *self.frame_shape), dtype=np.uint8)
            which = flat // self.chunk
            for c in np.unique(which).tolist():
                mask = which == c
                out[mask] = self.chunks[c].take(flat[mask] % self.chunk, axis=0)
        return out.reshape(*fids.shape, *self.frame_shape)


def _crcs(frames: np.ndarray) -> list[int]:
    """CRC-32 of each frame of contiguous frames [..., H, W, c]."""
    flat = frames.reshape(-1, int(np.prod(frames.shape[-3:])))
    return [zlib.crc32(row) for row in flat]


class FrameStorage:
    """Table storage: stack leaves as frame ids into a shared `FramePool`, other leaves as arrays."""

    kind = "frames"

    def __init__(
        self,
        signature: Signature,
        capacity: int,
        stack_leaves: list[int],
        num_stacked: int,
        frames_per_chunk: int,
    ):
        self.signature = signature
        self.capacity = capacity
        self.stack_leaves = stack_leaves
        self.num_stacked = num_stacked
        self._is_stack = [i in stack_leaves for i in range(signature.num_leaves)]
        h, w, channels = signature.shapes[stack_leaves[0]]
        frame_shape = (h, w, channels // num_stacked)
        max_frames = (capacity + 1) * len(stack_leaves) * num_stacked
        self.pool = FramePool(frame_shape, min(frames_per_chunk, max_frames), max_frames)
        self.arrays = [
            None if is_stack else np.zeros((capacity, *shape), dtype)
            for is_stack, shape, dtype in zip(self._is_stack, signature.shapes, signature.dtypes, strict=True)
        ]
        self.frame_ids = np.full((capacity, len(stack_leaves), num_stacked), _NO_FRAME, dtype=np.int64)
        self.size = 0

    @property
    def bytes_per_item(self) -> float:
        """Measured: fixed per-item bytes plus the live frames shared out over the items."""
        fixed = sum(
            int(np.prod(shape)) * dtype.itemsize
            for is_stack, shape, dtype in zip(
                self._is_stack, self.signature.shapes, self.signature.dtypes, strict=True
            )
            if not is_stack
        )
        fixed += self.frame_ids[0].nbytes
        return fixed + self.pool.live * self.pool.frame_bytes / max(self.size, 1)

    # -- writing -------------------------------------------------------------------------------

    def prepare_batch(self, leaves: list, count: int) -> tuple[list, list, list]:
        """Split stack leaves into frames and checksum them (no shared state: runs unlocked)."""
        frames, crcs = [], []
        for i in self.stack_leaves:
            split = split_stacks(np.asarray(leaves[i]), self.num_stacked)  # [N, S, H, W, c]
            frames.append(split)
            crcs.append(np.asarray(_crcs(split), dtype=np.int64).reshape(count, self.num_stacked))
        return leaves, frames, crcs

    def prepare_one(self, leaves: list) -> tuple[list, list, list]:
        batched = [np.asarray(leaf)[None] if self._is_stack[i] else leaf for i, leaf in enumerate(leaves)]
        return self.prepare_batch(batched, 1)

    def _store_item(self, slot: int, frames: list, crcs: list, row: int) -> None:
        old = self.frame_ids[slot].copy()
        for j in range(len(self.stack_leaves)):
            for s in range(self.num_stacked):
                self.frame_ids[slot, j, s] = self.pool.acquire(frames[j][row, s], int(crcs[j][row, s]))
        if old[0, 0] != _NO_FRAME:  # release after acquiring, so frames shared with the new item stay
            self.pool.release(old.reshape(-1))
        else:
            self.size += 1

    def write_one(self, slot: int, prepared: tuple) -> None:
        leaves, frames, crcs = prepared
        for array, leaf in zip(self.arrays, leaves, strict=True):
            if array is not None:
                array[slot] = leaf
        self._store_item(slot, frames, crcs, 0)

    def write_batch(self, start: int, prepared: tuple, begin: int, count: int) -> None:
        leaves, frames, crcs = prepared
        slots = (start + np.arange(count)) % self.capacity
        for array, leaf in zip(self.arrays, leaves, strict=True):
            if array is not None:
                array[slots] = leaf[begin : begin + count]
        for offset, slot in enumerate(slots.tolist()):
            self._store_item(slot, frames, crcs, begin + offset)

    # -- reading ---------------------------------------------------------------------------------

    def read(self, slots: np.ndarray) -> list:
        """Leaves for `slots`; stack leaves as gathered frames [N, S, H, W, c] until `finalize`."""
        out = [None if array is None else array.take(slots, axis=0) for array in self.arrays]
        gathered = self.pool.gather(self.frame_ids[slots])  # [N, L, S, H, W, c]
        for j, i in enumerate(self.stack_leaves):
            out[i] = gathered[:, j]
        return out

    def finalize(self, leaves: list) -> list:
        """Interleave gathered frames back into stacks (runs after the table lock is released)."""
        out = list(leaves)
        for i in self.stack_leaves:
            out[i] = join_frames(leaves[i])
        return out

    # -- persistence -----------------------------------------------------------------------------

    def state_arrays(self, size: int) -> dict[str, np.ndarray]:
        arrays = {f"leaf_{i}": array[:size] for i, array in enumerate(self.arrays) if array is not None}
        ids = self.frame_ids[:size]
        live, remapped = np.unique(ids.reshape(-1), return_inverse=True)
        arrays["frame_ids"] = remapped.reshape(ids.shape)
        arrays["frames"] = (
            self.pool.gather(live) if live.size else np.zeros((0, *self.pool.frame_shape), np.uint8)
        )
        return arrays

    def check_state_arrays(self, arrays: dict[str, np.ndarray], size: int) -> None:
        """ValueError/KeyError unless `arrays` is what `state_arrays(size)` of such a storage wrote."""
        for i, array in enumerate(self.arrays):
            if array is not None:
                saved = arrays[f"leaf_{i}"]
                if saved.shape != (size, *array.shape[1:]) or saved.dtype != array.dtype:
                    raise ValueError(
                        f"{self.signature.paths[i]}: saved array is {saved.dtype}{list(saved.shape)}"
                    )
        frames, ids = arrays["frames"], arrays["frame_ids"]
        if frames.shape[1:] != self.pool.frame_shape or frames.dtype != np.uint8:
            raise ValueError(f"frames: saved shape {frames.shape}, expected [F, {self.pool.frame_shape}]")
        if ids.shape != (size, *self.frame_ids.shape[1:]) or (
            ids.size and not 0 <= ids.min() <= ids.max() < len(frames)
        ):
            raise ValueError(f"frame_ids: shape {ids.shape} or values out of range for {len(frames)} frames")

    def load_state_arrays(self, arrays: dict[str, np.ndarray], size: int) -> None:
        """Replace the contents with `size` saved items (call check_state_arrays first)."""
        for i, array in enumerate(self.arrays):
            if array is not None:
                array[:size] = arrays[f"leaf_{i}"]
        frames, ids = arrays["frames"], arrays["frame_ids"]
        self.pool = FramePool(self.pool.frame_shape, self.pool.chunk, self.pool.max_frames)
        self.frame_ids[:] = _NO_FRAME
        self.size = 0
        crcs = np.asarray(_crcs(frames), dtype=np.int64)
        for slot in range(size):
            for j in range(ids.shape[1]):
                for s in range(ids.shape[2]):
                    f = int(ids[slot, j, s])
                    self.frame_ids[slot, j, s] = self.pool.acquire(frames[f], int(crcs[f]))
            self.size += 1

    # -- checks ----------------------------------------------------------------------------------

    def check_invariants(self) -> None:
        """Reference counts equal the references held by items; the index lists exactly the live frames."""
        held = self.frame_ids[self.frame_ids[:, 0, 0] != _NO_FRAME].reshape(-1)
        counts = (
            np.bincount(held, minlength=self.pool.capacity) if held.size else np.zeros(self.pool.capacity)
        )
        assert np.array_equal(counts, self.pool.refcount), "reference counts differ from item references"
        live = np.flatnonzero(self.pool.refcount)
        assert self.pool.live == live.size
        indexed = sorted(f for bucket in self.pool.index.values() for f in bucket)
        assert indexed == live.tolist(), "index does not list exactly the live frames"
        free = set(self.pool.free[: self.pool.free_top].tolist())
        assert free.isdisjoint(live.tolist()) and len(free) + live.size == self.pool.capacity
