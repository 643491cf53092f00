"""What the Ray executor does with a run folder the `Run` (`dmpo.run.run`) opened: the state and
replay contents of the checkpoint to continue from, and node logs rewound to it (algorithm.md §7).

The resume rules are the `Run`'s (applied once, `dmpo.lifecycle.resume`). A resumed run's node logs are
rewound to its checkpoint (to step 0 when it stopped before its first), so that no row is logged
twice. A checkpoint the single-process trainer wrote is resumed there, not here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dmpo.lifecycle.checkpoints import CheckpointState, read_state
from dmpo.reporting.rewind import rewind_logs
from dmpo.run.distributed.common import NODE_LOG_STEP_KEYS


def restored_state(checkpoint: Path | None) -> CheckpointState | None:
    """The run state `checkpoint` holds (None: none to resume from)."""
    if checkpoint is None:
        return None
    state = read_state(checkpoint)
    if not state.distributed:
        raise ValueError(f"{checkpoint} was written by the single-process trainer; resume it with actors = 0")
    return state


def rewind_node_logs(run_dir: Path, checkpoint: Path | None) -> None:
    """Cuts every node's logs back to `checkpoint`'s steps (None: to step 0)."""
    state = read_state(checkpoint) if checkpoint is not None else None
    steps = {"env_steps": state.env_steps if state else 0,
             "learner_steps": state.learner_steps if state else 0}
    for label, key in NODE_LOG_STEP_KEYS.items():  # rows past the checkpoint would be logged twice
        rewind_logs(run_dir, label, key, steps["learner_steps" if key == "learner_steps" else "env_steps"])


def replay_to_restore(checkpoint: Path | None, config: Any) -> str | None:
    """The replay file the replay node restores (None: an empty table)."""
    if checkpoint is None:
        return None
    replay = checkpoint / "replay.npz"
    return str(replay) if config.save_replay and replay.is_file() else None
