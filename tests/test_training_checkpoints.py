"""Checkpoint folders (dmpo.lifecycle.checkpoints): a complete checkpoint is never replaced or deleted
before its successor is in place, and `latest()` skips a corrupt newest checkpoint with a warning."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dmpo.lifecycle import checkpoints as checkpoints_module
from dmpo.lifecycle.checkpoints import TrainingCheckpoints
from dmpo.replay import CheckpointError as ReplayCheckpointError
from dmpo.utils.checkpointing import CheckpointError


def learner_state(value: float) -> dict:
    return {"w": np.full((3, 2), value, np.float32), "step": np.asarray(int(value), np.int32)}


TEMPLATE = learner_state(0.0)


def state(step: int, mid_episode: bool = False, **extra) -> dict:
    return {"env_steps": step, "learner_steps": step // 2, "mid_episode": mid_episode, **extra}


def folder_bytes(path) -> dict:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def test_a_second_save_at_the_same_step_never_replaces_the_first(tmp_path):
    checkpoints = TrainingCheckpoints(tmp_path, keep=5)
    periodic = checkpoints.save(100, learner_state(1.0), state(100))
    before = folder_bytes(periodic)
    # A Ctrl-C during the next episode: same actor step count (counted at episode end), new state.
    final = checkpoints.save(100, learner_state(2.0), state(100, mid_episode=True))
    assert final != periodic and final.name > periodic.name
    assert folder_bytes(periodic) == before  # the exact checkpoint is untouched
    assert checkpoints.latest() == final
    restored, saved, _ = TrainingCheckpoints.load(final, TEMPLATE)
    assert saved["mid_episode"] is True and float(restored["w"][0, 0]) == 2.0
    assert checkpoints.steps() == [100, 100]
    # A third save at that step sorts after both; a later step sorts after all of them.
    third = checkpoints.save(100, learner_state(3.0), state(100, mid_episode=True, episodes=1))
    assert [p.name for p in checkpoints.paths()] == [periodic.name, final.name, third.name]
    later = checkpoints.save(150, learner_state(4.0), state(150))
    assert checkpoints.latest() == later


def test_saving_an_unchanged_state_again_writes_nothing(tmp_path):
    checkpoints = TrainingCheckpoints(tmp_path, keep=2)
    older = checkpoints.save(50, learner_state(0.5), state(50))
    first = checkpoints.save(100, learner_state(1.0), state(100))
    again = checkpoints.save(100, learner_state(1.0), state(100))  # the end-of-run save after a periodic one
    assert again == first and checkpoints.paths() == [older, first]  # the older one is still kept


def test_a_save_that_fails_before_its_rename_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    checkpoints = TrainingCheckpoints(tmp_path, keep=1)
    periodic = checkpoints.save(100, learner_state(1.0), state(100))
    before = folder_bytes(periodic)

    def killed(*args):
        raise OSError("killed before the rename")

    monkeypatch.setattr(checkpoints_module.os, "rename", killed)
    with pytest.raises(OSError, match="killed"):
        checkpoints.save(100, learner_state(2.0), state(100, mid_episode=True))
    assert checkpoints.paths() == [periodic] and folder_bytes(periodic) == before
    assert not list(tmp_path.glob(".step_*"))


def test_pruning_keeps_the_newest_complete_checkpoints(tmp_path):
    checkpoints = TrainingCheckpoints(tmp_path, keep=2)
    checkpoints.save(100, learner_state(1.0), state(100))
    b = checkpoints.save(100, learner_state(2.0), state(100, mid_episode=True))
    c = checkpoints.save(200, learner_state(3.0), state(200))
    assert checkpoints.paths() == [b, c]


def corrupt_learner(path):
    (learner_file,) = (path / "learner").glob("checkpoint_*.ckpt")
    data = bytearray(learner_file.read_bytes())
    data[-3] ^= 0xFF
    learner_file.write_bytes(bytes(data))


def corrupt_state(path):
    (path / "state.json").write_text('{"env_steps": 3')


def corrupt_replay(path):
    from dm_env import specs

    from dmpo.replay import MinSize, Table

    table = Table({"x": specs.Array((4,), np.float32)}, 64, MinSize(1))
    for i in range(32):
        table.insert({"x": np.full((4,), i, np.float32)})
    table.save(path / "replay.npz")
    data = bytearray((path / "replay.npz").read_bytes())
    data[len(data) // 3] ^= 0xFF  # inside the first array's bytes
    (path / "replay.npz").write_bytes(bytes(data))


@pytest.mark.parametrize("corrupt", [corrupt_learner, corrupt_state, corrupt_replay])
def test_latest_falls_back_from_a_corrupt_newest_checkpoint_and_says_so(tmp_path, corrupt):
    checkpoints = TrainingCheckpoints(tmp_path, keep=3)
    checkpoints.save(100, learner_state(1.0), state(100))
    previous = checkpoints.save(200, learner_state(2.0), state(200))
    newest = checkpoints.save(300, learner_state(3.0), state(300))
    corrupt(newest)
    with pytest.warns(RuntimeWarning, match=newest.name):
        assert checkpoints.latest() == previous
    restored, saved, _ = TrainingCheckpoints.load(previous, TEMPLATE)
    assert saved["env_steps"] == 200 and float(restored["w"][0, 0]) == 2.0


def test_latest_raises_one_clear_error_when_no_checkpoint_is_usable(tmp_path):
    checkpoints = TrainingCheckpoints(tmp_path, keep=2)
    only = checkpoints.save(100, learner_state(1.0), state(100))
    corrupt_learner(only)
    with pytest.warns(RuntimeWarning), pytest.raises(CheckpointError, match="no usable checkpoint"):
        checkpoints.latest()
    assert checkpoints.latest(verify_contents=False) == only


def test_one_checkpoint_error_type():
    assert ReplayCheckpointError is CheckpointError
    assert issubclass(CheckpointError, ValueError) and issubclass(CheckpointError, RuntimeError)


def test_state_json_round_trips(tmp_path):
    checkpoints = TrainingCheckpoints(tmp_path)
    path = checkpoints.save(7, learner_state(1.0), state(7, counters={"a": 1}))
    assert json.loads((path / "state.json").read_text())["counters"] == {"a": 1}
