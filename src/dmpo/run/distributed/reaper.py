"""What a private Ray cluster leaves when its driver dies outright: nothing.

`ray.init` ties Ray's GCS server and raylet to the driver (they die with it, even on SIGKILL), but not
the processes the raylet starts: its Python agents (`DashboardAgent`, `RuntimeEnvAgent`, which ignore
SIGTERM) and workers outlive a driver killed by a scheduler after its grace period (SLURM, Kubernetes:
SIGKILL to the whole process group), reparented to init, and so does the cluster's `dmpo-ray-*` folder.

A private cluster therefore starts a reaper first (`start`): a small process of its own session (a
signal to the driver's process group does not reach it) that waits on a pipe from the driver. When the
pipe closes (the driver ended, however), it kills the cluster's processes and removes the `dmpo-ray-*`
folder, unless the run keeps it (`--keep-ray-logs`). The cluster's processes are those that carry the
cluster's token in their environment (the token is fresh for each cluster,
`dmpo.run.distributed.cluster`), and the driver's descendants as the reaper last saw them (it looks
once a second): the raylet starts its agents with an environment of their own. A driver that stops
its cluster itself says so (`finish`): the reaper then exits without touching anything (a sweep's
stopped trials, which carry the token too, may still be writing their checkpoints). The reaper is not
the driver's child (it forks once more), so that a third Ctrl-C, which kills the driver's
descendants, leaves it to clean up.

    python -m dmpo.run.distributed.reaper FOLDER DRIVER_PID [--keep-files]
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

__all__ = ["Reaper", "reap", "start"]

_TOKEN = "RAY_AUTH_TOKEN"
_DONE = b"done\n"


class Reaper:
    """The driver's end of a reaper: the pipe whose closing, without a word, sets it off."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.process = process

    def finish(self, timeout: float = 10.0) -> None:
        """The driver stopped its cluster itself: the reaper exits, touching nothing; waits up to
        `timeout` seconds for it (its end closes the other pipe)."""
        import select

        try:
            assert self.process.stdin is not None
            self.process.stdin.write(_DONE)
            self.process.stdin.close()
        except OSError:  # it is gone already
            pass
        if self.process.stdout is not None:
            select.select([self.process.stdout], [], [], timeout)
            self.process.stdout.close()


def start(folder: str, *, keep_files: bool = False) -> Reaper:
    """Starts the reaper of the private cluster whose session files are in `folder` (kept if the driver
    dies, with `keep_files`); this process's environment must already hold the cluster's token (it is
    how the reaper knows the cluster's processes)."""
    keep = ["--keep-files"] if keep_files else []
    process = subprocess.Popen([sys.executable, "-m", "dmpo.run.distributed.reaper", folder, str(os.getpid()),
                                *keep],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True,
                               close_fds=True)
    process.wait()  # it forked the reaper and returned: the reaper holds both pipes
    return Reaper(process)


def cluster_processes(token: str) -> list:
    """This user's live processes whose environment holds `token` (this one left out)."""
    import psutil

    found = []
    for process in psutil.process_iter():
        if process.pid == os.getpid():
            continue
        try:
            if process.environ().get(_TOKEN) == token and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except psutil.Error:  # another user's, or gone
            continue
    return found


def descendants(pid: int) -> list:
    """The live descendants of process `pid` (none once it is gone)."""
    import psutil

    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def reap(token: str, folder: str | None, *, keep_files: bool = False, timeout: float = 10.0,
         seen: Sequence[Any] = ()) -> None:
    """Kills every process of the cluster `token` names, and those of `seen` (`psutil.Process`es, once
    the driver's descendants) still running, and removes `folder` (unless `keep_files`)."""
    import psutil

    deadline = time.monotonic() + timeout
    seen = [process for process in seen if _running(process)]
    while True:  # a dying raylet may still be starting a worker: look again until none is left
        left = [*cluster_processes(token), *seen]
        seen = []
        for process in left:
            try:
                process.send_signal(signal.SIGKILL)
            except psutil.Error:
                continue
        psutil.wait_procs(left, timeout=max(deadline - time.monotonic(), 0.1))
        if not left or time.monotonic() > deadline:
            break
    if folder is not None and not keep_files:
        shutil.rmtree(folder, ignore_errors=True)


def _running(process: Any) -> bool:
    try:
        return process.is_running()  # (false for a reused pid: it compares the start time)
    except Exception:  # noqa: BLE001 - psutil.Error, without importing psutil here
        return False


def main(folder: str, driver: int, keep_files: bool) -> None:
    import select

    if os.fork():  # not the driver's child (module docstring)
        os._exit(0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C in the terminal is the driver's to handle
    token = os.environ.get(_TOKEN)
    said, seen = b"", []
    while True:  # until the driver closes the pipe, or dies
        if select.select([sys.stdin], [], [], 1.0)[0]:
            chunk = os.read(sys.stdin.fileno(), 64)
            if not chunk:
                break
            said += chunk
        else:
            seen = descendants(driver) or seen
    if token and said != _DONE:
        reap(token, folder, keep_files=keep_files, seen=seen)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), keep_files=sys.argv[3:] == ["--keep-files"])
