"""The run lock on a file system without `flock` (Lustre without `-o flock`, NFS without a lock
manager): one line naming the lock file and its mount and the way to run anyway (`DMPO_NO_LOCK=1`),
at the CLI as in Python (dmpo.lifecycle.lock, dmpo.lifecycle.mounts)."""

from __future__ import annotations

import errno
import fcntl

import pytest

from dmpo.cli.main import main
from dmpo.lifecycle import lock
from dmpo.lifecycle.checkpoints import TrainingCheckpoints
from dmpo.lifecycle.lock import RunLockUnsupportedError, is_mine_or_free, run_lock
from dmpo.lifecycle.mounts import mount_of

MOUNTINFO = """\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
90 27 0:50 / /scratch rw,relatime shared:40 - lustre 10.0.0.5@tcp:/scratch rw,localflock
91 90 0:51 / /scratch/my\\040team rw - nfs4 server:/export/team rw
"""


def test_mount_of_finds_the_deepest_mount_above_a_path(tmp_path):
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(MOUNTINFO)
    assert str(mount_of("/scratch/runs/a", str(mountinfo))) == "/scratch (lustre from 10.0.0.5@tcp:/scratch)"
    assert mount_of("/scratch/my team/r", str(mountinfo)).fs_type == "nfs4"  # \\040: a space
    assert mount_of("/scratchy", str(mountinfo)).mount_point == "/"  # not a prefix of a path part
    assert mount_of("/x", str(tmp_path / "missing")) is None


def no_flock(fd, operation):
    raise OSError(errno.ENOLCK, "No locks available")


def test_a_file_system_without_flock_is_one_line_naming_path_and_mount(tmp_path, monkeypatch):
    monkeypatch.setattr(fcntl, "flock", no_flock)
    monkeypatch.delenv(lock.NO_LOCK_ENV, raising=False)
    with pytest.raises(RunLockUnsupportedError) as error:
        with run_lock(tmp_path):
            pass
    message = str(error.value)
    mount = mount_of(tmp_path)
    assert f"cannot lock {tmp_path / '.lock'}: the file system mounted at {mount.mount_point} " in message
    assert "does not support flock (No locks available)" in message and "DMPO_NO_LOCK=1" in message
    assert "\n" not in message
    assert str(tmp_path) not in lock._held  # nothing half-held
    assert is_mine_or_free(tmp_path)  # where nobody can lock, nobody is seen holding it


def test_dmpo_no_lock_runs_without_the_lock_file_and_still_refuses_a_second_run_in_this_process(
        tmp_path, monkeypatch):
    monkeypatch.setattr(fcntl, "flock", no_flock)
    monkeypatch.setenv(lock.NO_LOCK_ENV, "1")
    with run_lock(tmp_path):
        assert is_mine_or_free(tmp_path)
        with pytest.raises(lock.RunLockedError, match="in use by this process"):
            with run_lock(tmp_path):
                pass
    assert not lock._held
    assert not (tmp_path / ".lock").exists()  # no lock file: none was taken


def test_train_on_such_a_file_system_fails_before_it_starts_with_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(fcntl, "flock", no_flock)
    monkeypatch.delenv(lock.NO_LOCK_ENV, raising=False)
    run = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--env", "gym:Pendulum-v1", "--steps", "200", "--eval-every", "0", "--no-progress",
              "--run-dir", str(run)])
    assert exit_info.value.code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("dmpo: error:")]
    assert len(lines) == 1 and "does not support flock" in lines[0] and str(run / ".lock") in lines[0], lines
    assert not (run / "checkpoints").is_dir() or TrainingCheckpoints(run / "checkpoints").latest() is None
