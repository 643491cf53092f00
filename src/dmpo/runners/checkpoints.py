"""Training checkpoints: one folder per checkpoint holding everything a resumed run needs.

    checkpoints/step_000000012345/
        learner/checkpoint_*.ckpt   the whole TrainingState (dmpo.checkpointing: checksummed, no pickle)
        replay.npz                  replay contents, counters and sampler RNG (optional)
        state.json                  counters, agent and actor counts, episode index

A checkpoint folder is written under a hidden temporary name and renamed into place only when every
file in it is complete (a rename is atomic), so a kill at any moment leaves the previous checkpoint
loadable; half-written folders are removed the next time the directory is opened.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from dmpo.checkpointing import Checkpointer, CheckpointError

_NAME = re.compile(r"^step_(\d{12})$")
_TEMP_PREFIX = ".step_"


class TrainingCheckpoints:
    """Writes, lists and reads checkpoint folders under `directory`, keeping the newest `keep`."""

    def __init__(self, directory: str | os.PathLike[str], keep: int = 2) -> None:
        if not isinstance(keep, int) or keep < 1:
            raise ValueError(f"keep must be a positive integer, got {keep!r}")
        self.directory = Path(directory)
        self.keep = keep
        self.directory.mkdir(parents=True, exist_ok=True)
        for stray in self.directory.glob(f"{_TEMP_PREFIX}*"):  # left by a run that was killed mid-save
            shutil.rmtree(stray, ignore_errors=True)

    def steps(self) -> list[int]:
        found = [int(m.group(1)) for p in self.directory.iterdir()
                 if (m := _NAME.match(p.name)) and (p / "state.json").is_file()]
        return sorted(found)

    def latest(self) -> Path | None:
        steps = self.steps()
        return self.directory / f"step_{steps[-1]:012d}" if steps else None

    def save(self, step: int, learner_state: Any, state: dict[str, Any], table: Any = None) -> Path:
        """Writes one checkpoint folder for env step `step`; `table` (if given) is saved with it."""
        final = self.directory / f"step_{step:012d}"
        temp = Path(tempfile.mkdtemp(prefix=_TEMP_PREFIX, dir=self.directory))
        try:
            Checkpointer(temp / "learner", max_to_keep=1).save(int(state.get("learner_steps", 0)),
                                                              learner_state, {"env_steps": step})
            if table is not None:
                table.save(temp / "replay.npz")
            (temp / "state.json").write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
            if final.exists():  # the same step saved twice (e.g. a final save right after a periodic one)
                shutil.rmtree(final)
            os.replace(temp, final)
        except BaseException:
            shutil.rmtree(temp, ignore_errors=True)
            raise
        for old in self.steps()[:-self.keep]:
            shutil.rmtree(self.directory / f"step_{old:012d}", ignore_errors=True)
        return final

    @staticmethod
    def load(path: str | os.PathLike[str], learner_template: Any) -> tuple[Any, dict[str, Any], Path | None]:
        """Returns `(learner_state, state, replay_path or None)` from a checkpoint folder."""
        path = Path(path)
        state_file = path / "state.json"
        if not state_file.is_file():
            raise CheckpointError(f"{path} is not a complete checkpoint (state.json missing)")
        try:
            state = json.loads(state_file.read_text())
        except json.JSONDecodeError as error:
            raise CheckpointError(f"{state_file} is not valid JSON: {error}") from error
        learner_state, _ = Checkpointer(path / "learner").restore(learner_template)
        replay = path / "replay.npz"
        return learner_state, state, replay if replay.is_file() else None
