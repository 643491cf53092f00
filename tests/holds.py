"""Environments for a `dmpo train` child that holds at a known moment (tests/signal_hold, its docstring)."""

from __future__ import annotations

import os
from pathlib import Path

from test_faults import child_env

HOLD_MODULE = Path(__file__).resolve().parent / "signal_hold"
PAUSE_AFTER_CHECKPOINT = 100
"""Env steps after the first checkpoint at which `interrupt_moment` holds a run: mid-episode in
Pendulum's 200-step episodes, so the interrupt-time checkpoint is at 200 + 99 env steps."""


def has_checkpoint(run: Path) -> bool:
    """A checkpoint of `run` exists (looked at without TrainingCheckpoints, which creates the folder)."""
    checkpoints = run / "checkpoints"
    return checkpoints.is_dir() and any(checkpoints.glob("step_*"))


def holding_env(folder: Path, *, final_save_step: int | None = None,
                pause_after_checkpoint: int | None = None, start: str | None = None) -> dict[str, str]:
    """`child_env()` plus the hold: at the final save of env step >= `final_save_step` (creates
    `folder/holding`), or at the `pause_after_checkpoint`-th env step after the first checkpoint
    (creates `folder/paused`). `folder/go` releases it."""
    folder.mkdir(parents=True, exist_ok=True)
    extra = {"DMPO_TEST_HOLD_DIR": str(folder)}
    if final_save_step is not None:
        extra["DMPO_TEST_HOLD_STEP"] = str(final_save_step)
    if pause_after_checkpoint is not None:
        extra["DMPO_TEST_PAUSE_AFTER_CHECKPOINT"] = str(pause_after_checkpoint)
    if start is not None:  # "raylet", "nodes" or "recovery": a start held (signal_hold's docstring)
        extra["DMPO_TEST_HOLD_START"] = start
    env = child_env(**extra)
    env["PYTHONPATH"] = os.pathsep.join([str(HOLD_MODULE), env["PYTHONPATH"]])
    return env


def interrupt_moment(run: Path, hold: Path | None):
    """(env, ready) for a `dmpo train` child to be interrupted: without `hold`, ready once its first
    checkpoint exists; with `hold` (one process), ready once it is held mid-episode
    `PAUSE_AFTER_CHECKPOINT` env steps after it."""
    if hold is None:
        return child_env(), lambda: has_checkpoint(run)
    return holding_env(hold, pause_after_checkpoint=PAUSE_AFTER_CHECKPOINT), (hold / "paused").is_file
