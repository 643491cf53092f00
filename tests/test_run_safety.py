"""Runs that survive how clusters keep and share them: retention never drops the checkpoint
just written, formats carry versions, one process per run directory, interrupts wait for a learner
step to end. The real `dmpo train` under SIGTERM is in tests/test_interrupts_cli.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dmpo.config import ConfigError, TrainConfig
from dmpo.lifecycle.callbacks import read_best
from dmpo.lifecycle.checkpoints import CheckpointState, TrainingCheckpoints
from dmpo.lifecycle.directory import RunDirectory, check_run_path, config_from_dict, config_to_dict
from dmpo.lifecycle.interrupts import Interrupted, critical, exit_code, interrupt_on_signals
from dmpo.lifecycle.lock import RunLockedError, is_mine_or_free, run_lock
from dmpo.utils.checkpointing import CheckpointError
from old_formats import (
    previous_checkpoint,
    previous_run_file,
    rewrite_checkpoint,
    rewrite_json,
    unversioned_run_file,
)


def learner_state(value: float) -> dict:
    return {"w": np.full((3, 2), value, np.float32), "step": np.asarray(int(value), np.int32)}


def state(step: int) -> dict:
    return {"env_steps": step, "learner_steps": step // 2}


def flip_one_bit(checkpoint):
    (learner_file,) = (checkpoint / "learner").glob("checkpoint_*.ckpt")
    data = bytearray(learner_file.read_bytes())
    data[-3] ^= 0x01
    learner_file.write_bytes(bytes(data))


# ------------------------------------------------------------------------------------------ retention


@pytest.mark.parametrize("keep", [1, 2])
def test_retention_keeps_the_checkpoint_just_written_and_moves_a_corrupt_one_aside(tmp_path, keep):
    """The reported sequence: save 2000 and 3000, flip one bit in 3000, fall back, save 2500."""
    checkpoints = TrainingCheckpoints(tmp_path, keep=3)
    older = checkpoints.save(2000, learner_state(2.0), state(2000))
    newest = checkpoints.save(3000, learner_state(3.0), state(3000))
    flip_one_bit(newest)
    with pytest.warns(RuntimeWarning, match=newest.name):
        assert checkpoints.latest() == older
    checkpoints = TrainingCheckpoints(tmp_path, keep=keep)
    with pytest.warns(RuntimeWarning, match="moved it aside") as warned:
        written = checkpoints.save(2500, learner_state(2.5), state(2500))
    assert len([w for w in warned if "moved it aside" in str(w.message)]) == 1  # reported once
    assert checkpoints.latest() == written  # no warning: the corrupt folder is out of the way
    # The corrupt folder takes no slot: keep 1 keeps 2500 alone, keep 2 keeps 2000 and 2500.
    assert checkpoints.paths() == ([older, written] if keep == 2 else [written])
    assert (tmp_path / ".corrupt-step_000000003000").is_dir()  # its bytes kept for a post-mortem
    checkpoints.save(2600, learner_state(2.6), state(2600))  # reported once: nothing left to move
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".corrupt")) == [
        ".corrupt-step_000000003000"]


def test_retention_never_deletes_the_newest_verified_checkpoint(tmp_path):
    checkpoints = TrainingCheckpoints(tmp_path, keep=1)
    checkpoints.save(1000, learner_state(1.0), state(1000))
    newer = checkpoints.save(4000, learner_state(4.0), state(4000))
    written = checkpoints.save(2500, learner_state(2.5), state(2500))  # after a fallback, say
    assert checkpoints.paths() == [written, newer]


def test_a_folder_retention_deletes_is_whole_or_gone_for_a_reader_meanwhile(tmp_path, monkeypatch):
    """Another process lists the checkpoints, then reads one while a save prunes it (the driver
    reporting what the learner node wrote): at every moment of the deletion the folder it listed either
    reads or no longer exists, never one whose state.json is already gone."""
    import shutil

    from dmpo.lifecycle import retention
    from dmpo.lifecycle.checkpoints import read_state

    checkpoints = TrainingCheckpoints(tmp_path, keep=1)
    checkpoints.save(1000, learner_state(1.0), state(1000))
    listed = checkpoints.paths()  # the reader's listing, before the next save
    real_rmtree = shutil.rmtree
    seen = []

    def rmtree_file_by_file(path, ignore_errors=False):
        for file in sorted(p for p in Path(path).rglob("*") if p.is_file()):
            file.unlink()  # as rmtree does, one entry after another; the reader looks after each
            for folder in listed:
                seen.append(folder.exists())
                if folder.exists():
                    read_state(folder)  # raises on a half-deleted folder
        real_rmtree(path, ignore_errors=ignore_errors)

    monkeypatch.setattr(retention.shutil, "rmtree", rmtree_file_by_file)
    kept = checkpoints.save(2000, learner_state(2.0), state(2000))
    assert checkpoints.paths() == [kept] and seen and not any(seen)
    assert [p.name for p in tmp_path.iterdir()] == [kept.name]  # nothing left beside it


def test_a_folder_a_kill_left_half_deleted_is_cleared_by_the_next_holder(tmp_path):
    checkpoints = TrainingCheckpoints(tmp_path, keep=1)
    kept = checkpoints.save(1000, learner_state(1.0), state(1000))
    (tmp_path / ".removing-step_000000000500-123" / "learner").mkdir(parents=True)
    TrainingCheckpoints(tmp_path, keep=1)
    assert [p.name for p in tmp_path.iterdir()] == [kept.name]


# ------------------------------------------------------------------------------------ format versions


def test_state_json_carries_a_version_and_a_newer_one_is_refused(tmp_path):
    saved = CheckpointState(env_steps=5, learner_steps=2, counts={}, num_observations=5,
                            learning_starts=1, episodes=1, evaluations=0, num_actions=5).to_json()
    assert saved["format_version"] == 1
    assert CheckpointState.from_json(saved).env_steps == 5
    with pytest.raises(CheckpointError, match=r"state.json has format version 2, .* format version 1"):
        CheckpointState.from_json({**saved, "format_version": 2})


def test_config_and_run_json_carry_versions_and_a_newer_one_is_refused(tmp_path):
    saved = config_to_dict(TrainConfig())
    assert saved["format_version"] == 1
    assert config_from_dict(saved, TrainConfig) == TrainConfig()
    with pytest.raises(ConfigError, match="format version 3, .* format version 1"):
        config_from_dict({**saved, "format_version": 3}, TrainConfig)
    run = RunDirectory.create(tmp_path / "run", TrainConfig(), seed=0)
    assert run.info()["format_version"] == 1
    run.update_info(format_version=2)
    with pytest.raises(ConfigError, match="run.json has format version 2"):
        run.info()


@pytest.mark.parametrize("previous", [previous_run_file, unversioned_run_file])
def test_run_files_of_the_previous_dmpo_read_and_foreign_ones_are_refused(tmp_path, previous):
    run = RunDirectory.create(tmp_path / "run", TrainConfig(steps=123), seed=7)
    rewrite_json(run.config_path, previous)
    rewrite_json(run.info_path, previous)
    assert run.load_config(TrainConfig).steps == 123
    assert run.info()["seed"] == 7
    run.update_info(status="running")  # a rewrite of an old run.json gives it the header
    assert {key: run.info()[key] for key in ("format", "format_version", "status", "seed")} == {
        "format": "dmpo.run", "format_version": 1, "status": "running", "seed": 7}
    saved = CheckpointState(env_steps=5, learner_steps=2, counts={}, num_observations=5,
                            learning_starts=1).to_json()
    assert saved["format"] == "dmpo.state"
    previous(saved)
    assert CheckpointState.from_json(saved).env_steps == 5
    with pytest.raises(CheckpointError, match="state.json is not a dmpo.state file"):
        CheckpointState.from_json({**saved, "format": "dmpo.run"})
    rewrite_json(run.config_path, lambda data: data.update(format="dmpo.agent"))
    with pytest.raises(ConfigError, match="config.json: the saved config is not a dmpo.config file"):
        run.load_config(TrainConfig)


def test_a_best_json_of_the_previous_dmpo_reads_and_a_newer_one_is_refused(tmp_path):
    best = tmp_path / "snapshots" / "best.json"
    best.parent.mkdir()
    best.write_text('{"return_mean": 3.0, "actor_steps": 20, "learner_steps": 1}')  # no header
    assert read_best(tmp_path)["return_mean"] == 3.0
    best.write_text('{"format": "dmpo.best", "format_version": 2, "return_mean": 3.0}')
    with pytest.raises(ValueError, match="best.json has format version 2, .*dmpo.best format version 1"):
        read_best(tmp_path)


def test_an_old_checkpoint_folder_verifies_and_loads(tmp_path):
    checkpoints = TrainingCheckpoints(tmp_path, keep=2)
    path = checkpoints.save(100, learner_state(1.0), state(100))
    (learner_file,) = (path / "learner").glob("checkpoint_*.ckpt")
    rewrite_checkpoint(learner_file, previous_checkpoint)
    rewrite_json(path / "state.json", unversioned_run_file)
    assert checkpoints.latest() == path
    restored, saved, _ = TrainingCheckpoints.load(path, learner_state(0.0))
    assert float(restored["w"][0, 0]) == 1.0 and saved["env_steps"] == 100
    assert checkpoints.save(100, learner_state(1.0), state(100)) == path  # the same state: nothing written


def test_status_carries_a_reason_until_the_next_resume(tmp_path):
    run = RunDirectory.create(tmp_path / "run", TrainConfig(), seed=0)
    run.set_status("failed", reason="OSError: [Errno 28] No space left on device")
    assert run.info()["status"] == "failed" and "No space" in run.info()["status_reason"]
    run.mark_resumed()
    assert run.info()["status"] == "starting" and "status_reason" not in run.info()


# ------------------------------------------------------------------------------ one process per run

_HOLD = """
import sys, time
from dmpo.lifecycle.lock import run_lock
with run_lock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(120)
"""


def test_a_second_process_is_refused_naming_the_holder_and_its_temporary_folders_are_left_alone(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints" / ".step_in_progress").mkdir(parents=True)  # the holder's save in progress
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(run)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert not is_mine_or_free(run)
        with pytest.raises(RunLockedError, match=f"in use by process {holder.pid}"):
            with run_lock(run):
                pass
        TrainingCheckpoints(run / "checkpoints")  # opening the checkpoints must not clean them up
        assert (run / "checkpoints" / ".step_in_progress").is_dir()
    finally:
        holder.kill()
        holder.wait(30)
    assert is_mine_or_free(run)  # the kernel dropped the lock of the killed holder
    with run_lock(run):
        with pytest.raises(RunLockedError, match=f"in use by this process [(]{os.getpid()}[)]"):
            with run_lock(run):  # taken once: a second take in the same process is refused too
                pass
        assert is_mine_or_free(run)
        TrainingCheckpoints(run / "checkpoints")  # the lock holder removes a killed save's leftovers
    assert not (run / "checkpoints" / ".step_in_progress").exists()


def test_run_paths_that_cannot_hold_a_run_are_named(tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(NotADirectoryError, match=f"run directory {a_file} is a file"):
        check_run_path(a_file)
    with pytest.raises(NotADirectoryError, match=f"{a_file} is a file"):
        check_run_path(a_file / "run")
    check_run_path(tmp_path / "new" / "run")  # a folder that can be created is fine
    with pytest.raises(FileExistsError, match=f"dmpo train --resume {tmp_path}"):
        RunDirectory.create(tmp_path, TrainConfig())


# ----------------------------------------------------------------------------------------- interrupts


def test_sigterm_and_sighup_raise_interrupted_with_shell_exit_codes():
    # From a new process's handlers (earlier tests in this process may have left others, e.g. the
    # SIGTERM handler `ray.init` installs and `ray.shutdown` does not take back).
    defaults = {signal.SIGTERM: signal.SIG_DFL, signal.SIGHUP: signal.SIG_DFL,
                signal.SIGINT: signal.default_int_handler}
    before = {signum: signal.signal(signum, handler) for signum, handler in defaults.items()}
    try:
        for signum, code in [(signal.SIGTERM, 143), (signal.SIGHUP, 129), (signal.SIGINT, 130)]:
            with pytest.raises(KeyboardInterrupt) as raised, interrupt_on_signals():
                os.kill(os.getpid(), signum)  # Python runs the handler before the next bytecode
            assert isinstance(raised.value, Interrupted) == (signum != signal.SIGINT)
            assert exit_code(raised.value) == code
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handlers are put back
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)


def test_a_signal_ignored_at_start_stays_ignored():
    """`nohup dmpo train &` ignores SIGHUP: closing the terminal must not stop the run."""
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with interrupt_on_signals():
            os.kill(os.getpid(), signal.SIGHUP)  # nothing happens
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)


def test_an_interrupt_waits_for_the_end_of_a_critical_block():
    finished = []
    with pytest.raises(Interrupted), interrupt_on_signals():
        with critical():
            os.kill(os.getpid(), signal.SIGTERM)
            finished.append("the learner step")  # not cut in half
        finished.append("after")  # never reached: raised at the block's end
    assert finished == ["the learner step"]


# ------------------------------------------------------------------- a failing interrupt-time save


def test_a_failing_interrupt_time_save_leaves_status_failed_with_the_reason(tmp_path, monkeypatch):
    import dataclasses
    import errno

    from dmpo.envs import FakeEnvironment
    from dmpo.run import local
    from dmpo.run.run import train
    from test_agent import reach_config, tiny_config

    def full_disk(self, step, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(self.directory))

    def interrupted_segment(self):
        raise Interrupted(signal.SIGTERM)

    monkeypatch.setattr(TrainingCheckpoints, "save", full_disk)
    monkeypatch.setattr(local.LocalExecutor, "_run_segment", interrupted_segment)
    config = dataclasses.replace(reach_config(100), checkpoint_every=50, agent=tiny_config())
    factory = lambda seed: FakeEnvironment(observation_shape=(2,), action_dim=1, episode_length=10)  # noqa: E731
    with pytest.raises(OSError, match="No space left on device"):
        train(config, tmp_path / "run", env_factory=factory, progress=False, quiet=True)
    info = RunDirectory(tmp_path / "run").info()
    assert info["status"] == "failed", info
    assert info["status_reason"].startswith("OSError: [Errno 28] No space left on device"), info


# ------------------------------------------------------------- a run stopped before its first checkpoint


def test_a_run_interrupted_before_its_first_checkpoint_resumes_from_step_zero(tmp_path, monkeypatch):
    import dataclasses

    from dmpo.envs import FakeEnvironment
    from dmpo.run import local
    from dmpo.run.run import train
    from test_agent import reach_config, tiny_config

    config = dataclasses.replace(reach_config(60), eval_every=30, agent=tiny_config())
    factory = lambda seed: FakeEnvironment(observation_shape=(2,), action_dim=1, episode_length=10)  # noqa: E731
    real_init = local.LocalExecutor.__init__

    def interrupted_while_starting(self, *args, **kwargs):
        raise Interrupted(signal.SIGTERM)  # e.g. while JAX starts: the run folder exists, no checkpoint

    monkeypatch.setattr(local.LocalExecutor, "__init__", interrupted_while_starting)
    with pytest.raises(Interrupted):
        train(config, tmp_path / "run", env_factory=factory, progress=False, quiet=True)
    run = RunDirectory(tmp_path / "run")
    assert run.info()["status"] == "interrupted" and not any(run.checkpoints_dir.iterdir())

    monkeypatch.setattr(local.LocalExecutor, "__init__", real_init)
    summary = train(config, run.path, resume=True, env_factory=factory, progress=False, quiet=True)
    assert summary["env_steps"] == 60
    info = run.info()
    assert info["status"] == "finished" and len(info["resumes"]) == 1
    import csv

    with open(run.logs_dir / "evaluator" / "logs.csv", newline="") as f:
        assert [int(float(row["actor_steps"])) for row in csv.DictReader(f)] == [30, 60]
