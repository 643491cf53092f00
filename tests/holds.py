"""Environments for a `dmpo train` child that holds at a known moment (tests/signal_hold, its docstring)."""

from __future__ import annotations

import os
from pathlib import Path

from test_faults import child_env

HOLD_MODULE = Path(__file__).resolve().parent / "signal_hold"


def holding_env(folder: Path, *, final_save_step: int | None = None,
                pause_after_checkpoint: int | None = None) -> dict[str, str]:
    """`child_env()` plus the hold: at the final save of env step >= `final_save_step` (creates
    `folder/holding`), or at the `pause_after_checkpoint`-th env step after the first checkpoint
    (creates `folder/paused`). `folder/go` releases it."""
    folder.mkdir(parents=True, exist_ok=True)
    extra = {"DMPO_TEST_HOLD_DIR": str(folder)}
    if final_save_step is not None:
        extra["DMPO_TEST_HOLD_STEP"] = str(final_save_step)
    if pause_after_checkpoint is not None:
        extra["DMPO_TEST_PAUSE_AFTER_CHECKPOINT"] = str(pause_after_checkpoint)
    env = child_env(**extra)
    env["PYTHONPATH"] = os.pathsep.join([str(HOLD_MODULE), env["PYTHONPATH"]])
    return env


def interrupt_moment(run: Path, hold: Path | None, pause_after_checkpoint: int):
    """(env, ready) for a `dmpo train` child to be interrupted: without `hold`, ready once its first
    checkpoint exists (looked at without TrainingCheckpoints, which creates the folder); with `hold`
    (one process), ready once it is held mid-episode `pause_after_checkpoint` steps after it."""
    if hold is None:
        checkpoints = run / "checkpoints"
        return child_env(), lambda: checkpoints.is_dir() and any(checkpoints.glob("step_*"))
    return holding_env(hold, pause_after_checkpoint=pause_after_checkpoint), (hold / "paused").is_file
