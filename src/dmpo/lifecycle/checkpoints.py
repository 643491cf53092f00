"""Training checkpoints: one folder per checkpoint holding everything a resumed run needs.

    checkpoints/step_000000012345/
        learner/checkpoint_*.ckpt   the whole TrainingState (the file format of dmpo.utils.checkpointing:
                                    checksummed, no pickle)
        replay.npz                  replay contents, counters and sampler RNG (optional)
        state.json                  counters, agent and actor counts, episode index (`dmpo.state` header)

This is dmpo's one checkpoint manager: it names, lists, verifies, writes and prunes checkpoint folders,
with one retention rule (`dmpo.lifecycle.retention`); the learner file inside is the bare file format
of `dmpo.utils.checkpointing`, which keeps nothing and prunes nothing of its own.

A checkpoint folder is written under a hidden temporary name and renamed into place only when every
file in it is complete (`dmpo.utils.files.atomic_directory`; a rename is atomic), so a kill at any
moment leaves the previous checkpoint loadable; half-written folders are removed the next time the
directory is opened.

A complete checkpoint is never replaced: a second save at the same environment step with a different
state (a Ctrl-C in the episode after a periodic checkpoint: actor steps are counted at episode end)
goes to `step_<N>-1`, `step_<N>-2`, ..., which sort after `step_<N>`. Old checkpoints are pruned only
after the new one is in place (`dmpo.lifecycle.retention`: the new one and the newest verified one are
never deleted, an unusable one is moved aside to `.corrupt-step_<N>`).

`CheckpointState` is what state.json holds, in both modes (built by the local trainer and the
learner node, restored by them on resume).

`latest()` verifies the newest checkpoint (state.json parses, the learner file's and the replay
file's checksums hold) and falls back to the previous kept one, with a warning naming the bad folder.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import warnings
import zipfile
from pathlib import Path
from typing import Any

from dmpo.lifecycle.lock import is_mine_or_free
from dmpo.lifecycle.retention import REMOVING_PREFIX, prune
from dmpo.utils.checkpointing import (
    CheckpointError,
    checkpoint_file_name,
    find_checkpoint_file,
    read_checkpoint,
    verify_checkpoint_file,
    write_checkpoint_file,
)
from dmpo.utils.files import atomic_directory, atomic_write_text
from dmpo.utils.formats import STATE, read_header


@dataclasses.dataclass(frozen=True)
class CheckpointState:
    """What a checkpoint's `state.json` holds besides the learner state and replay (both modes).

    Attributes:
      env_steps: actor steps when the checkpoint was taken (names the checkpoint folder).
      learner_steps: learner steps.
      counts: the run's counter totals (`actor_steps`, `learner_steps`, ...).
      num_observations: environment steps the learning schedule has seen.
      learning_starts: observation count from which learning (re)starts; after a resume without
        replay it is that resume's count plus `min_observations`.
      episodes / evaluations: training episodes and evaluation rounds so far.
      num_actions: the behaviour actor's action count (its RNG position); None when distributed.
      pending_sgd_steps: synchronous updates due but not yet run (`sgd_steps_per_call` > 1).
      counters: local counters' exact state (root and children) for bit-exact resume; None when
        distributed (the shared counter is restored from `counts`).
      mid_episode: taken inside an episode (Ctrl-C): a resume starts a new episode.
      distributed: written by the distributed learner node.
      wall_seconds: seconds since the run started when the checkpoint was taken (0 in checkpoints
        older than the field); a resumed run counts on from it, so evaluation rows keep a run-wide
        wall-clock (`benchtools.time_to_score`).
    """

    env_steps: int
    learner_steps: int
    counts: dict[str, Any]
    num_observations: int
    learning_starts: int
    episodes: int = 0
    evaluations: int = 0
    num_actions: int | None = None
    pending_sgd_steps: int = 0
    counters: dict[str, Any] | None = None
    mid_episode: bool = False
    distributed: bool = False
    wall_seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {**STATE.header(), **dataclasses.asdict(self)}

    @classmethod
    def from_json(cls, data: dict[str, Any], *, where: str = "state.json") -> CheckpointState:
        read_header(data, STATE, where, CheckpointError)
        fields = {f.name for f in dataclasses.fields(cls)}
        required = {f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING}
        missing = sorted(required - set(data))
        if missing:
            raise CheckpointError(f"{where} lacks {missing}; it was not written by this version of dmpo")
        return cls(**{key: value for key, value in data.items() if key in fields})


_NAME = re.compile(r"^step_(\d{12})(?:-(\d+))?$")
_TEMP_PREFIX = ".step_"


def _folder_name(step: int, index: int) -> str:
    return f"step_{step:012d}" if index == 0 else f"step_{step:012d}-{index}"


def _complete(directory: Path) -> list[tuple[int, int, Path]]:
    """(env steps, repeat index, folder) of the complete checkpoint folders in `directory`, oldest first."""
    if not directory.is_dir():
        return []
    found = [(int(m.group(1)), int(m.group(2) or 0), p) for p in directory.iterdir()
             if (m := _NAME.match(p.name)) and (p / "state.json").is_file()]
    return sorted(found)


def newest_steps(directory: str | os.PathLike[str]) -> int | None:
    """The env steps the newest complete checkpoint in `directory` holds (None: there is none), read
    from the folder names alone: nothing is created, cleaned or verified."""
    entries = _complete(Path(directory))
    return entries[-1][0] if entries else None


def _read_state(path: Path) -> dict[str, Any]:
    state_file = path / "state.json"
    if not state_file.is_file():
        raise CheckpointError(f"{path} is not a complete checkpoint (state.json missing)")
    try:
        state = json.loads(state_file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{state_file} is not valid JSON: {error}") from error
    if not isinstance(state, dict):
        raise CheckpointError(f"{state_file} does not hold a JSON object")
    return state


def read_state(path: str | os.PathLike[str]) -> CheckpointState:
    """The run state a checkpoint folder holds (its state.json, header checked), without verifying the
    learner and replay files (`verify` does)."""
    path = Path(path)
    return CheckpointState.from_json(_read_state(path), where=str(path / "state.json"))


def _contents(state: dict[str, Any]) -> dict[str, Any]:
    """state.json without its file header: a checkpoint of the previous dmpo (no header) holding the
    same state counts as the same."""
    return {key: value for key, value in state.items() if key not in STATE.header()}


_verified: dict[tuple, dict[str, Any]] = {}  # folder + file stats -> state: verify each version once


def _fingerprint(path: Path) -> tuple:
    files = sorted(p for p in path.rglob("*") if p.is_file())
    return (str(path.resolve()), *((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files))


def verify(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Checks one checkpoint folder without building anything; returns its state, or raises
    `CheckpointError` naming what is wrong (state.json, the learner file's or the replay file's
    checksums). A folder already verified and unchanged since is not read again."""
    path = Path(path)
    key = _fingerprint(path)
    if key in _verified:
        return _verified[key]
    state = _verify(path)
    _verified[key] = state
    return state


def _verify(path: Path) -> dict[str, Any]:
    state = _read_state(path)
    learner_file = find_checkpoint_file(path / "learner")
    if learner_file is None:
        raise CheckpointError(f"{path}: no learner checkpoint file in {path / 'learner'}")
    verify_checkpoint_file(learner_file)
    replay = path / "replay.npz"
    if replay.is_file():
        try:
            with zipfile.ZipFile(replay) as archive:
                bad = archive.testzip()  # reads every member and checks its CRC
        except (OSError, zipfile.BadZipFile, EOFError) as error:
            raise CheckpointError(f"{replay}: replay file is truncated or corrupt ({error})") from error
        if bad is not None:
            raise CheckpointError(f"{replay}: replay file member {bad!r} is corrupt (CRC mismatch)")
    return state


class TrainingCheckpoints:
    """Writes, lists and reads checkpoint folders under `directory`, keeping the newest `keep`."""

    def __init__(self, directory: str | os.PathLike[str], keep: int = 2) -> None:
        if not isinstance(keep, int) or keep < 1:
            raise ValueError(f"keep must be a positive integer, got {keep!r}")
        self.directory = Path(directory)
        self.keep = keep
        self.directory.mkdir(parents=True, exist_ok=True)
        # Folders left by a run killed mid-save; while another process holds the run (`dmpo.lifecycle.lock`)
        # they may be its save in progress, so only a run's lock holder (or nobody) removes them.
        if is_mine_or_free(self.directory.parent):
            for prefix in (_TEMP_PREFIX, REMOVING_PREFIX):  # and folders a kill left half-deleted
                for stray in self.directory.glob(f"{prefix}*"):
                    shutil.rmtree(stray, ignore_errors=True)

    def _entries(self) -> list[tuple[int, int, Path]]:
        return _complete(self.directory)

    def paths(self) -> list[Path]:
        """Complete checkpoint folders, oldest first."""
        return [path for _, _, path in self._entries()]

    def steps(self) -> list[int]:
        """Environment steps of the complete checkpoints, oldest first (a step repeats if it was saved
        twice with different states)."""
        return [step for step, _, _ in self._entries()]

    def latest(self, verify_contents: bool = True) -> Path | None:
        """The newest checkpoint that verifies (see `verify`); an unusable newer one is skipped with a
        warning. None if there is none; `CheckpointError` if there are some but none is usable."""
        paths = self.paths()
        if not verify_contents:
            return paths[-1] if paths else None
        problems = []
        for path in reversed(paths):
            try:
                verify(path)
            except CheckpointError as error:
                problems.append(str(error))
                warnings.warn(f"skipping unusable checkpoint {path}: {error}", RuntimeWarning, stacklevel=2)
                continue
            return path
        if problems:
            raise CheckpointError(f"no usable checkpoint in {self.directory}: " + "; ".join(problems))
        return None

    def latest_state(self) -> dict[str, Any] | None:
        """state.json of `latest()` (e.g. the steps a resumed run's logs are cut back to)."""
        path = self.latest()
        return None if path is None else verify(path)

    def save(self, step: int, learner_state: Any, state: dict[str, Any], table: Any = None) -> Path:
        """Writes one checkpoint folder for env step `step`; `table` (if given) is saved with it.

        If the newest folder of this step already holds exactly `state` (a final save right after a
        periodic one), it is returned as is; otherwise the new folder gets the next free name.
        """
        state = {**STATE.header(), **state}  # every state.json written carries the file header
        same_step = [(index, path) for s, index, path in self._entries() if s == step]
        if same_step:
            index, path = same_step[-1]
            try:
                if _contents(_read_state(path)) == _contents(json.loads(json.dumps(state))):
                    return path
            except CheckpointError:
                pass
            index += 1
        else:
            index = 0
        while (self.directory / _folder_name(step, index)).exists():  # e.g. a folder without state.json
            index += 1
        final = self.directory / _folder_name(step, index)
        with atomic_directory(final, temp_prefix=_TEMP_PREFIX) as temp:  # never replaces `final`
            learner_steps = int(state.get("learner_steps", 0))
            (temp / "learner").mkdir()
            write_checkpoint_file(temp / "learner" / checkpoint_file_name(learner_steps), learner_state,
                                  {"env_steps": step}, step=learner_steps)
            if table is not None:
                table.save(temp / "replay.npz")
            atomic_write_text(temp / "state.json", json.dumps(state, indent=2, sort_keys=True) + "\n")
        prune(self.paths(), final, self.keep, verify)  # see dmpo.lifecycle.retention
        return final

    @staticmethod
    def load(path: str | os.PathLike[str], learner_template: Any) -> tuple[Any, dict[str, Any], Path | None]:
        """Returns `(learner_state, state, replay_path or None)` from a checkpoint folder."""
        path = Path(path)
        state = _read_state(path)
        learner_file = find_checkpoint_file(path / "learner")
        if learner_file is None:
            raise CheckpointError(f"{path}: no learner checkpoint file in {path / 'learner'}")
        learner_state, _ = read_checkpoint(learner_file, learner_template)
        replay = path / "replay.npz"
        return learner_state, state, replay if replay.is_file() else None
