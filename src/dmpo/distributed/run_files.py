"""A distributed run's directory at its start: checked, resumed, opened (algorithm.md §7).

The same rules as one process (`dmpo.lifecycle.resume`): a fresh run refuses a directory that holds
checkpoints; a resumed one refuses what `dmpo train --resume` refuses, continues from its newest
checkpoint (or from step 0 when it stopped before its first), and its node logs are rewound to that
checkpoint so that no row is logged twice. A checkpoint the single-process trainer wrote is resumed
there, not here.
"""

from __future__ import annotations

import json
from pathlib import Path

from dmpo.config import TrainConfig
from dmpo.distributed.common import NODE_LOG_STEP_KEYS
from dmpo.lifecycle.checkpoints import CheckpointState, TrainingCheckpoints
from dmpo.lifecycle.directory import RunDirectory
from dmpo.lifecycle.resume import apply_resume, plan_resume
from dmpo.reporting.logging import rewind_logs


def checkpoint_to_resume(run_dir: Path, config: TrainConfig, resume: bool) -> Path | None:
    """The checkpoint to resume from (None for a fresh run); raises if the directory disagrees."""
    checkpoints = run_dir / "checkpoints"
    latest = (TrainingCheckpoints(checkpoints).latest(verify_contents=resume)
              if checkpoints.is_dir() else None)
    if not resume:
        if latest is not None:
            raise FileExistsError(f"{run_dir} already holds checkpoints ({latest.name}); pass "
                                  "resume=True to continue that run, or use a new run directory")
        return None
    plan = plan_resume(run_dir, config)  # refuses what `dmpo train --resume` refuses
    apply_resume(plan)
    return plan.checkpoint  # None: stopped before its first checkpoint, so again from step 0


def restored_state(checkpoint: Path | None) -> CheckpointState | None:
    """The run state `checkpoint` holds (None: none to resume from)."""
    if checkpoint is None:
        return None
    state_file = checkpoint / "state.json"
    state = CheckpointState.from_json(json.loads(state_file.read_text()), where=str(state_file))
    if not state.distributed:
        raise ValueError(f"{checkpoint} was written by the single-process trainer; resume it with actors = 0")
    return state


def open_run_directory(run_dir: Path, config: TrainConfig, resume: bool,
                       checkpoint: Path | None) -> tuple[RunDirectory, str | None]:
    """Creates or opens the run directory (a resume is recorded in it and its logs rewound to
    `checkpoint`); returns it and the replay file to restore, if any."""
    if run_dir.joinpath("run.json").is_file():
        run = RunDirectory.open(run_dir)
    else:
        run = RunDirectory.create(run_dir, config, seed=config.seed, exist_ok=True)
    if not resume:
        return run, None
    run.mark_resumed()  # status starting again, the resume recorded
    saved = ({"env_steps": 0, "learner_steps": 0} if checkpoint is None  # from step 0
             else json.loads((checkpoint / "state.json").read_text()))
    for label, key in NODE_LOG_STEP_KEYS.items():  # rows past the checkpoint would be logged twice
        step = saved["learner_steps" if key == "learner_steps" else "env_steps"]
        rewind_logs(run_dir, label, key, int(step))
    if checkpoint is None:
        return run, None
    replay = checkpoint / "replay.npz"
    return run, (str(replay) if config.save_replay and replay.is_file() else None)
