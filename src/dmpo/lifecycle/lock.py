"""One process per run directory: an exclusive `fcntl.flock` on `<run>/.lock`, held for the whole run.

`dmpo train` (fresh or `--resume`) and `run_distributed` take the lock before they read or change
anything in the run directory, and keep it until the run has ended, however it ends; a second
process fails at once with `RunLockedError` naming the holder's pid (written into the lock file).
The kernel drops a flock when its holder exits, even on `kill -9`, so a stale lock never blocks a
resume. Readers (`dmpo eval`, `dmpo plot`) take no lock.

The `Run` (`dmpo.run.run`) takes it once, in `open()`. It is not re-entrant: a second take of the
same run directory in the same process (a run not closed, two runs of a notebook into one folder) is
refused like another process's, naming this process.

File systems without `flock` (Lustre mounted without `-o flock`, NFS without a lock manager) make it
fail with ENOLCK, EOPNOTSUPP or ENOSYS: `RunLockUnsupportedError` then names the lock file and its
mount, and says how to run anyway: `DMPO_NO_LOCK=1` in the environment skips the lock (nothing then
stops two processes from training the same run directory at once: that is the user's to ensure).

`is_mine_or_free(run)` lets shared code (cleaning a killed save's temporary folders) act only where
no other process holds the run.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

__all__ = ["LOCK_NAME", "NO_LOCK_ENV", "RunLockUnsupportedError", "RunLockedError", "is_mine_or_free",
           "run_lock"]

LOCK_NAME = ".lock"
NO_LOCK_ENV = "DMPO_NO_LOCK"
_NO_FLOCK = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS)  # what file systems without flock answer
_held: dict[str, int | None] = {}  # resolved run directory -> its lock file's descriptor (None: no lock)


class RunLockedError(RuntimeError):
    """Another process holds the run directory's lock."""


class RunLockUnsupportedError(RunLockedError):
    """The run directory's file system cannot lock files (`flock`)."""


def _lock_disabled() -> bool:
    return os.environ.get(NO_LOCK_ENV, "").strip().lower() not in ("", "0", "false", "no")


def _unsupported(lock_file: Path, error: OSError) -> RunLockUnsupportedError:
    from dmpo.lifecycle.mounts import mount_of

    mount = mount_of(lock_file)
    where = f"the file system mounted at {mount}" if mount is not None else "its file system"
    return RunLockUnsupportedError(
        f"cannot lock {lock_file}: {where} does not support flock ({os.strerror(error.errno)}); run with "
        f"{NO_LOCK_ENV}=1 to train without the lock (then make sure no other process trains this run "
        "directory at the same time), or use a run directory on a file system with locks")


def _key(run_dir: str | os.PathLike[str]) -> str:
    return str(Path(run_dir).resolve())


def _holder(lock_file: Path) -> str:
    try:
        pid = lock_file.read_text().strip()
    except OSError:
        pid = ""
    return pid or "unknown"


def acquire(run_dir: str | os.PathLike[str]) -> None:
    """Takes the lock of `run_dir` (an existing folder) or raises `RunLockedError`."""
    key = _key(run_dir)
    if key in _held:
        raise RunLockedError(f"run directory {run_dir} is in use by this process ({os.getpid()}): a run "
                             "into it is still open (close it, or use another run directory)")
    if _lock_disabled():
        _held[key] = None
        return
    lock_file = Path(run_dir) / LOCK_NAME
    fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise RunLockedError(f"run directory {run_dir} is in use by process {_holder(lock_file)} "
                             f"(lock {lock_file}); wait for it to end or stop it first") from None
    except OSError as error:
        os.close(fd)
        if error.errno in _NO_FLOCK:
            raise _unsupported(lock_file, error) from None
        raise
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    _held[key] = fd


def release(run_dir: str | os.PathLike[str]) -> None:
    fd = _held.pop(_key(run_dir))
    if fd is None:  # taken with DMPO_NO_LOCK: nothing to release
        return
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
    os.close(fd)  # closing the descriptor releases the flock


@contextlib.contextmanager
def run_lock(run_dir: str | os.PathLike[str]) -> Iterator[None]:
    """Holds the lock of `run_dir` for the block (see the module docstring)."""
    acquire(run_dir)
    try:
        yield
    finally:
        release(run_dir)


def is_mine_or_free(run_dir: str | os.PathLike[str]) -> bool:
    """True unless another process holds the lock of `run_dir` right now."""
    if _key(run_dir) in _held:
        return True
    lock_file = Path(run_dir) / LOCK_NAME
    try:
        fd = os.open(lock_file, os.O_RDONLY)
    except OSError:
        return True  # no lock file: no run has ever held this folder
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError as error:
        if error.errno in _NO_FLOCK:  # no locks on this file system: nobody can be seen holding it
            return True
        raise
    finally:
        os.close(fd)  # also drops the shared lock taken just to look
    return True
