"""Reads a TensorBoard log folder as TensorBoard shows it (its EventAccumulator applies purge markers)."""

from __future__ import annotations

from pathlib import Path


def shown_scalars(logdir: str | Path) -> list[tuple[str, int, float]]:
    """`(tag, step, value)` of every scalar TensorBoard would draw from `logdir`."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(logdir), size_guidance={"scalars": 0})  # 0: keep every point
    accumulator.Reload()
    return [(tag, event.step, event.value) for tag in accumulator.Tags()["scalars"]
            for event in accumulator.Scalars(tag)]
